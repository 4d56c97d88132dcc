//! The caller's data folders (mounted into sessions, they outlive them): made, renamed, moved
//! to the trash, restored and purged (`domain::folders`' moves), and shared with other users
//! and projects.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use domain::folders::UsageMode;
use domain::sharing::FolderPermission;
use events::ledger::KeyOwner;
use launcher::launch::{self, FolderStep, ShareWith};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::admin::{checked_email, checked_name};
use super::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::files;
use crate::model::{Folder, FolderCreated, FolderShare, FolderUsage, Folders};
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
    /// What it is for: `general` (the default), `model` or `data`.
    #[serde(default)]
    #[schema(pattern = "^(general|model|data)$")]
    usage_mode: Option<String>,
}

/// Create a data folder (mounted into sessions, it outlives them).
#[utoipa::path(post, path = "/v1/folders", tag = "folders", request_body = NewFolder,
    responses((status = 201, description = "created", body = FolderCreated)))]
pub async fn create_folder(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<FolderCreated>), ApiError> {
    let NewFolder {
        name,
        volume,
        usage_mode,
    } = parse_body(body)?;
    let volume = volume.unwrap_or_else(|| state.default_volume.clone());
    let usage_mode = match usage_mode {
        None => UsageMode::General,
        Some(word) => UsageMode::parse(&word).ok_or_else(|| {
            ApiError::invalid("usage_mode", "must be `general`, `model` or `data`")
        })?,
    };
    launch::create_folder(&state.pool, &caller, &name, &volume, usage_mode).await?;
    Ok((StatusCode::CREATED, Json(FolderCreated { name, volume })))
}

/// My data folders, each with whom I shared it, then the folders shared with me.
#[utoipa::path(get, path = "/v1/folders", tag = "folders",
    responses((status = 200, description = "the caller's folders", body = Folders)))]
pub async fn list_folders(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Folders>, ApiError> {
    let listed = db::folders::listed(&state.pool, caller.user_id).await?;
    let folders = futures::future::join_all(
        listed
            .into_iter()
            .map(|l| measured_here(&state, l.owner, l.folder)),
    )
    .await;
    Ok(Json(Folders { folders }))
}

/// Most entries a folder's walk counts when it is listed: past them, what an agent measured
/// last stands (a list stays quick however large a folder grows).
const LISTED_WALK_ENTRIES: u64 = 100_000;

/// `folder` with what it holds measured now, where its volume is mounted on this gateway's
/// host, its directory is there, and the walk fits [`LISTED_WALK_ENTRIES`]: uploads and
/// sessions' writes show at once, not only after a session that mounted it ended.
async fn measured_here(state: &AppState, owner: uuid::Uuid, mut folder: Folder) -> Folder {
    let Ok(dir) = files::folder_dir(&state.file_roots, &folder.volume, owner, &folder.name) else {
        return folder;
    };
    if let Some(m) = files::measure_within(dir, LISTED_WALK_ENTRIES).await {
        folder.usage = Some(FolderUsage {
            bytes: m.bytes,
            files: m.files,
            measured_at: chrono::Utc::now(),
            agent_id: FolderUsage::BY_GATEWAY.into(),
        });
    }
    folder
}

/// `POST /v1/folders/{name}/clone`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FolderClone {
    /// The new folder's name (rules as a new folder's).
    #[schema(pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")]
    name: String,
}

/// Clone a folder I reach (mine, or shared with me) into a new folder of mine on the same
/// volume, with the same usage mode: its files copied (links as links, never followed)
/// where the volume is mounted on this gateway's host, then the new folder recorded
/// (`FolderCreated`, naming what it was cloned from). A name I already have is a 409.
#[utoipa::path(post, path = "/v1/folders/{name}/clone", tag = "folders",
    params(crate::api::files::FolderName), request_body = FolderClone,
    responses((status = 201, description = "cloned", body = FolderCreated)))]
pub async fn clone_folder(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(crate::api::files::FolderName { name }): Path<crate::api::files::FolderName>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<FolderCreated>), ApiError> {
    let FolderClone { name: to } = parse_body(body)?;
    let source =
        crate::api::files::reached(&state, &caller, &name, crate::api::files::Use::Read).await?;
    let mode = db::folders::usage_mode(&state.pool, source.owner, &name).await?;
    if db::folders::reachable(&state.pool, caller.user_id, &to)
        .await?
        .is_some()
    {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "name_taken",
            format!("you already have a folder named `{to}`"),
        )
        .field("name"));
    }
    let from = files::folder_dir(&state.file_roots, &source.volume, source.owner, &name)?;
    let target = files::folder_dir(&state.file_roots, &source.volume, caller.user_id, &to)?;
    // The copy is the caller's: it must fit their own policy's quota.
    let quota = db::folders::quota_of(&state.pool, caller.user_id).await?;
    if let Some(quota) = quota {
        let bytes = files::usage(from.clone()).await?;
        quota.admits(0, 0, bytes).map_err(files::FilesError::from)?;
    }
    files::copy_folder_dir(from, target.clone()).await?;
    let cloned_from = format!("{}/{name}", source.owner.simple());
    let made =
        launch::clone_folder(&state.pool, &caller, &to, &source.volume, mode, cloned_from).await;
    if let Err(e) = made {
        let _ = files::remove_folder_dir(target).await;
        return Err(e.into());
    }
    Ok((
        StatusCode::CREATED,
        Json(FolderCreated {
            name: to,
            volume: source.volume,
        }),
    ))
}

/// `POST /v1/upload-sessions`' body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewUploadSession {
    /// The folders it mounts (the caller's, or shared with them), 1 to 16.
    #[schema(schema_with = folder_names)]
    folders: Vec<String>,
    /// It ends once this many seconds pass without a byte in or out, 10 to 86400 (default
    /// 600).
    #[serde(default)]
    #[schema(minimum = 10, maximum = 86400)]
    idle_timeout_secs: Option<u64>,
}

/// 1 to 16 folder names, as a new folder's.
fn folder_names() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")),
        )
        .min_items(Some(1))
        .max_items(Some(16))
        .description(Some(
            "The folders it mounts (the caller's, or shared with them), 1 to 16.",
        ))
        .build()
}

/// Start an upload session: a system session of berth's SFTP image mounting the folders,
/// whose SSH server (`sshd`) its owner reaches through the proxy's tunnel (`berth session app
/// tunnel ID sshd`) with the session's key (`GET /v1/sessions/{id}/ssh-key`). It is listed
/// among the caller's sessions as type `system` (the console's "Upload Sessions"), and ends
/// once idle (nobody reaching it) for `idle_timeout_secs`.
#[utoipa::path(post, path = "/v1/upload-sessions", tag = "folders",
    request_body = NewUploadSession,
    responses((status = 201, description = "requested", body = launcher::launch::Launched)))]
pub async fn start_upload_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<launcher::launch::Launched>), ApiError> {
    let NewUploadSession {
        folders,
        idle_timeout_secs,
    } = parse_body(body)?;
    let upload = launch::UploadSession {
        idle_timeout_secs: idle_timeout_secs.unwrap_or(launch::UploadSession::IDLE_TIMEOUT_SECS),
    };
    let launched = launch::launch_upload_session(&state.pool, &caller, folders, upload).await?;
    Ok((StatusCode::CREATED, Json(launched)))
}

/// One of the caller's own folders, named in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct OwnFolder {
    /// One of the caller's folders.
    #[param(pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")]
    name: String,
}

/// `PATCH /v1/folders/{name}`'s body.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FolderChange {
    /// Its new name (rules as a new folder's).
    #[schema(pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")]
    name: String,
}

/// Rename one of the caller's folders (`FolderRenamed`): its files move with it (where its
/// volume is mounted on this gateway's host) and its shares follow. Sessions running with it
/// keep their mount.
#[utoipa::path(patch, path = "/v1/folders/{name}", tag = "folders",
    params(OwnFolder), request_body = FolderChange,
    responses((status = 204, description = "renamed")))]
pub async fn rename_folder(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(OwnFolder { name }): Path<OwnFolder>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let FolderChange { name: to } = parse_body(body)?;
    folder_step(&state, &caller, &name, FolderStep::Rename { to }).await
}

/// Move one of the caller's folders to the trash (`FolderTrashed`): its files and shares stay,
/// but nobody mounts it or reaches its files until it is restored.
#[utoipa::path(delete, path = "/v1/folders/{name}", tag = "folders", params(OwnFolder),
    responses((status = 204, description = "in the trash")))]
pub async fn trash_folder(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(OwnFolder { name }): Path<OwnFolder>,
) -> Result<StatusCode, ApiError> {
    folder_step(&state, &caller, &name, FolderStep::Trash).await
}

/// Bring one of the caller's folders back from the trash as it was (`FolderRestored`).
#[utoipa::path(post, path = "/v1/folders/{name}/restore", tag = "folders", params(OwnFolder),
    responses((status = 204, description = "restored")))]
pub async fn restore_folder(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(OwnFolder { name }): Path<OwnFolder>,
) -> Result<StatusCode, ApiError> {
    folder_step(&state, &caller, &name, FolderStep::Restore).await
}

/// Purge one of the caller's folders from the trash (`FolderPurged`): its files are removed
/// for good, and its shares with it.
#[utoipa::path(post, path = "/v1/folders/{name}/purge", tag = "folders", params(OwnFolder),
    responses((status = 204, description = "purged")))]
pub async fn purge_folder(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(OwnFolder { name }): Path<OwnFolder>,
) -> Result<StatusCode, ApiError> {
    folder_step(&state, &caller, &name, FolderStep::Purge).await
}

/// Makes `step` on the caller's folder `name`: checked, its part on disk made (a rename moves
/// the folder's directory, a purge removes it, both where its volume is mounted on this host),
/// then recorded. A rename whose record fails moves the directory back; a purge whose record
/// fails leaves the folder in the trash, emptied, to be purged again.
pub(crate) async fn folder_step(
    state: &AppState,
    caller: &KeyOwner,
    name: &str,
    step: FolderStep,
) -> Result<StatusCode, ApiError> {
    let volume = launch::check_folder_step(&state.pool, caller, name, &step).await?;
    let dir = |name: &str| files::folder_dir(&state.file_roots, &volume, caller.user_id, name);
    match &step {
        FolderStep::Rename { to } => {
            let (from, target) = (dir(name)?, dir(to)?);
            files::rename_folder_dir(from.clone(), target.clone()).await?;
            if let Err(e) = launch::record_folder_step(&state.pool, caller, name, &step).await {
                if let Err(back) = files::rename_folder_dir(target, from).await {
                    tracing::error!(folder = name, error = %back, "a refused rename's directory was not moved back");
                }
                return Err(e.into());
            }
        }
        FolderStep::Purge => {
            files::remove_folder_dir(dir(name)?).await?;
            launch::record_folder_step(&state.pool, caller, name, &step).await?;
        }
        FolderStep::Trash | FolderStep::Restore => {
            launch::record_folder_step(&state.pool, caller, name, &step).await?;
        }
    }
    Ok(StatusCode::NO_CONTENT)
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
