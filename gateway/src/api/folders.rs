//! The caller's data folders: mounted into sessions, they outlive them.

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use launcher::launch;

use super::{parse_body, Caller};
use crate::db;
use crate::error::ApiError;
use crate::model::{FolderCreated, Folders};
use crate::AppState;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewFolder {
    name: String,
}

pub async fn create_folder(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<FolderCreated>), ApiError> {
    let NewFolder { name } = parse_body(body)?;
    launch::create_folder(&state.pool, &caller, &name).await?;
    Ok((StatusCode::CREATED, Json(FolderCreated { name })))
}

pub async fn list_folders(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Folders>, ApiError> {
    let folders = db::folders(&state.pool, caller.user_id).await?;
    Ok(Json(Folders { folders }))
}
