//! The caller's data folders (mounted into sessions, they outlive them) and their shares with
//! other users and projects.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use domain::sharing::FolderPermission;
use events::ledger::KeyOwner;
use launcher::launch::{self, ShareWith};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::admin::{checked_email, checked_name};
use super::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{FolderCreated, FolderShare, Folders};
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

/// My data folders, each with whom I shared it, then the folders shared with me.
#[utoipa::path(get, path = "/v1/folders", tag = "folders",
    responses((status = 200, description = "the caller's folders", body = Folders)))]
pub async fn list_folders(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Folders>, ApiError> {
    let folders = db::folders::folders(&state.pool, caller.user_id).await?;
    Ok(Json(Folders { folders }))
}

/// A user a folder is shared with, named in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct UserShare {
    /// One of the caller's folders.
    #[param(pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")]
    name: String,
    /// The user's email.
    #[param(max_length = 254, pattern = "^[!-?A-~]+@[!-?A-~]+$")]
    email: String,
}

/// A project a folder is shared with, named in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ProjectShare {
    /// One of the caller's folders.
    #[param(pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")]
    name: String,
    /// The project's name.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    project: String,
}

impl UserShare {
    pub fn new(name: String, email: String) -> Self {
        UserShare { name, email }
    }
}

impl ProjectShare {
    pub fn new(name: String, project: String) -> Self {
        ProjectShare { name, project }
    }
}

/// `PUT .../shares/...`'s body.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SharePermission {
    /// `ro` (read only; mounted read-only) or `rw` (read and write).
    #[schema(value_type = String, pattern = "^(ro|rw)$")]
    permission: FolderPermission,
}

/// Share one of the caller's folders with a user (`FolderShared`), or change what the share
/// allows. They see it in their folders, mount it by its name (read-only for `ro`) and reach
/// its files as the share allows.
#[utoipa::path(put, path = "/v1/folders/{name}/shares/users/{email}", tag = "folders",
    params(UserShare), request_body = SharePermission,
    responses((status = 200, description = "shared", body = FolderShare)))]
pub async fn share_with_user(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(UserShare { name, email }): Path<UserShare>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<FolderShare>, ApiError> {
    checked_email("email", &email)?;
    share(&state, &caller, &name, ShareWith::User(email), body).await
}

/// Share one of the caller's folders with every member of a project (`FolderShared`), or
/// change what the share allows.
#[utoipa::path(put, path = "/v1/folders/{name}/shares/projects/{project}", tag = "folders",
    params(ProjectShare), request_body = SharePermission,
    responses((status = 200, description = "shared", body = FolderShare)))]
pub async fn share_with_project(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ProjectShare { name, project }): Path<ProjectShare>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<FolderShare>, ApiError> {
    checked_name("project", &project)?;
    share(&state, &caller, &name, ShareWith::Project(project), body).await
}

async fn share(
    state: &AppState,
    caller: &KeyOwner,
    name: &str,
    with: ShareWith,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<FolderShare>, ApiError> {
    let SharePermission { permission } = parse_body(body)?;
    launch::share_folder(&state.pool, caller, name, &with, permission).await?;
    let (kind, with) = match with {
        ShareWith::User(email) => ("user", email),
        ShareWith::Project(project) => ("project", project),
    };
    Ok(Json(FolderShare {
        kind: kind.into(),
        with,
        permission: permission.as_str().into(),
    }))
}

/// Take back the share of one of the caller's folders with a user (`FolderUnshared`); their
/// sessions already running keep their mount. None there: nothing changes.
#[utoipa::path(delete, path = "/v1/folders/{name}/shares/users/{email}", tag = "folders",
    params(UserShare),
    responses((status = 204, description = "no longer shared with them")))]
pub async fn unshare_with_user(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(UserShare { name, email }): Path<UserShare>,
) -> Result<StatusCode, ApiError> {
    checked_email("email", &email)?;
    launch::unshare_folder(&state.pool, &caller, &name, &ShareWith::User(email)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Take back the share of one of the caller's folders with a project (`FolderUnshared`).
#[utoipa::path(delete, path = "/v1/folders/{name}/shares/projects/{project}", tag = "folders",
    params(ProjectShare),
    responses((status = 204, description = "no longer shared with its members")))]
pub async fn unshare_with_project(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ProjectShare { name, project }): Path<ProjectShare>,
) -> Result<StatusCode, ApiError> {
    checked_name("project", &project)?;
    launch::unshare_folder(&state.pool, &caller, &name, &ShareWith::Project(project)).await?;
    Ok(StatusCode::NO_CONTENT)
}
