//! Backend.AI's `vfolder` calls that change a folder or its files: `delete` (to berth's trash,
//! where `berth folder restore` brings it back, rather than Backend.AI's irreversible
//! removal), `rename`, `mv`, `rename-file`, `rm` and `share`/`unshare` with users. Each calls
//! what `/v1/folders` calls (`api::folders::folder_step`, the launcher's shares, the files
//! module); only the shapes are Backend.AI's.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, post};
use axum::{Json, Router};
use domain::sharing::FolderPermission;
use launcher::launch::{self, FolderStep, ShareWith};
use serde::Deserialize;
use serde_json::{json, Value};

use super::folders::{body, folder_dir, path_of};
use super::{BackendAiCaller, Problem};
use crate::api::files::Use;
use crate::api::folders::folder_step;
use crate::error::ApiError;
use crate::files;
use crate::state::AppState;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/folders/{name}/rename", post(rename))
        .route("/folders/{name}/move-file", post(move_file))
        .route("/folders/{name}/rename-file", post(rename_file))
        .route("/folders/{name}/delete-files", delete(delete_files))
        .route("/folders/{name}/share", post(share))
        .route("/folders/{name}/unshare", delete(unshare))
}

/// `DELETE /folders/{name}` (routed with the folder's info in `folders`): to the trash; 204.
pub(super) async fn trash(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
) -> Result<StatusCode, Problem> {
    folder_step(&state, &caller.owner, &name, FolderStep::Trash).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct NewName {
    new_name: String,
}

/// `POST /folders/{name}/rename` (`new_name`): renamed, files and shares with it; 201.
async fn rename(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, Problem> {
    let NewName { new_name } = body(&bytes)?;
    folder_step(
        &state,
        &caller.owner,
        &name,
        FolderStep::Rename { to: new_name },
    )
    .await?;
    Ok(StatusCode::CREATED)
}

#[derive(Deserialize)]
struct FileMove {
    src: String,
    dst: String,
}

/// `POST /folders/{name}/move-file` (`src`, `dst`): moved inside the folder; `{}`.
async fn move_file(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, Problem> {
    let FileMove { src, dst } = body(&bytes)?;
    move_inside(&state, &caller, &name, path_of(&src)?, path_of(&dst)?).await
}

/// `from` moved to `to` inside the folder `name` the caller may write; `{}`.
async fn move_inside(
    state: &AppState,
    caller: &BackendAiCaller,
    name: &str,
    from: domain::files::FolderPath,
    to: domain::files::FolderPath,
) -> Result<Json<Value>, Problem> {
    let (dir, _) = folder_dir(state, caller, name, Use::Write).await?;
    files::move_entry(dir, from, to)
        .await
        .map_err(ApiError::from)?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
struct FileRename {
    target_path: String,
    new_name: String,
}

/// `POST /folders/{name}/rename-file` (`target_path`, `new_name`): renamed where it is; `{}`.
async fn rename_file(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, Problem> {
    let FileRename {
        target_path,
        new_name,
    } = body(&bytes)?;
    let from = path_of(&target_path)?;
    if new_name.contains('/') {
        return Err(Problem::invalid("new_name", "a name, without `/`"));
    }
    let to = match from.parent() {
        Some(parent) if !parent.is_root() => path_of(&format!("{}/{new_name}", parent.display()))?,
        _ => path_of(&new_name)?,
    };
    move_inside(&state, &caller, &name, from, to).await
}

#[derive(Deserialize)]
struct Removal {
    files: Vec<String>,
    #[serde(default)]
    recursive: bool,
}

/// `DELETE /folders/{name}/delete-files` (`files`, `recursive`): each removed (a directory
/// only when `recursive`); `{}`.
async fn delete_files(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, Problem> {
    let Removal {
        files: paths,
        recursive,
    } = body(&bytes)?;
    let (dir, _) = folder_dir(&state, &caller, &name, Use::Write).await?;
    for path in paths {
        let path = path_of(&path)?;
        if !recursive {
            let listed = files::list(dir.clone(), path.clone()).await;
            if listed.is_ok() {
                return Err(Problem::invalid(
                    "recursive",
                    format!(
                        "`{}` is a directory: remove it with --recursive",
                        path.display()
                    ),
                ));
            }
        }
        files::remove(dir.clone(), path)
            .await
            .map_err(ApiError::from)?;
    }
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
struct Sharing {
    #[serde(default = "read_write")]
    permission: String,
    emails: Vec<String>,
}

fn read_write() -> String {
    "rw".into()
}

/// `POST /folders/{name}/share` (`permission`, `emails`): shared with each user (`wd`, write
/// and delete, is berth's `rw`); `{"shared_emails": [...]}`.
async fn share(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, Problem> {
    let Sharing { permission, emails } = body(&bytes)?;
    let permission = match permission.as_str() {
        "wd" => FolderPermission::ReadWrite,
        other => FolderPermission::parse(other)
            .ok_or_else(|| Problem::invalid("permission", "ro, rw or wd"))?,
    };
    for email in &emails {
        launch::share_folder(
            &state.pool,
            &caller.owner,
            &name,
            &ShareWith::User(email.clone()),
            permission,
        )
        .await
        .map_err(ApiError::from)?;
    }
    Ok(Json(json!({ "shared_emails": emails })))
}

#[derive(Deserialize)]
struct Unsharing {
    emails: Vec<String>,
}

/// `DELETE /folders/{name}/unshare` (`emails`): each share taken back;
/// `{"unshared_emails": [...]}`.
async fn unshare(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, Problem> {
    let Unsharing { emails } = body(&bytes)?;
    for email in &emails {
        launch::unshare_folder(
            &state.pool,
            &caller.owner,
            &name,
            &ShareWith::User(email.clone()),
        )
        .await
        .map_err(ApiError::from)?;
    }
    Ok(Json(json!({ "unshared_emails": emails })))
}
