//! The caller's data folders: mounted into sessions, they outlive them.

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use launcher::launch;

use super::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{FolderCreated, Folders};
use crate::state::AppState;

/// `POST /v1/folders`'s body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewFolder {
    /// 1 to 64 letters, digits, `_`, `-` or `.`, not starting with `.`.
    #[schema(pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")]
    name: String,
    /// The volume its files live on: `host-local` (the data directory of whichever agent
    /// runs a session of it) or a shared volume some agent mounts; the gateway's default
    /// (`BERTH_DEFAULT_VOLUME`) when left out.
    #[serde(default)]
    #[schema(pattern = "^[a-z0-9][a-z0-9_-]{0,63}$")]
    volume: Option<String>,
}

/// Create a data folder (mounted into sessions, it outlives them).
#[utoipa::path(post, path = "/v1/folders", tag = "folders", request_body = NewFolder,
    responses((status = 201, description = "created", body = FolderCreated)))]
pub async fn create_folder(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<FolderCreated>), ApiError> {
    let NewFolder { name, volume } = parse_body(body)?;
    let volume = volume.unwrap_or_else(|| state.default_volume.clone());
    launch::create_folder(&state.pool, &caller, &name, &volume).await?;
    Ok((StatusCode::CREATED, Json(FolderCreated { name, volume })))
}

/// My data folders.
#[utoipa::path(get, path = "/v1/folders", tag = "folders",
    responses((status = 200, description = "the caller's folders", body = Folders)))]
pub async fn list_folders(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Folders>, ApiError> {
    let folders = db::folders::folders(&state.pool, caller.user_id).await?;
    Ok(Json(Folders { folders }))
}
