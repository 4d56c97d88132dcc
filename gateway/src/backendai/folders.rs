//! Backend.AI's `vfolder` calls: create (`POST /folders`), list (`GET /folders`), info, the
//! files of a directory, a directory made, and its client's transfers: `request-upload`
//! answers a resumable upload (`crate::uploads`) that the client sends over tus to `/upload`,
//! and `request-download` a signed token that `/download` serves the file for (ranges
//! honoured, as the client resumes by them). Each calls what `/v1/folders` calls; only the
//! shapes are Backend.AI's. `/upload` and `/download` are its storage proxy's paths: they
//! take no signature, the token being the capability (an upload's for 24 hours, a download's
//! for [`DOWNLOAD_LIFETIME`]), and they answer as the storage proxy does.

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use domain::files::FolderPath;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tower::ServiceExt;
use uuid::Uuid;

use super::{BackendAiCaller, Problem};
use crate::api::files::{reached, Use};
use crate::api::uploads as tus;
use crate::files;
use crate::state::AppState;
use crate::uploads::{self, Upload, UPLOAD_LIFETIME};

/// How long a download's token is honoured.
pub const DOWNLOAD_LIFETIME: chrono::Duration = chrono::Duration::minutes(30);

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/folders", post(create).get(list))
        .route(
            "/folders/{name}",
            get(info).delete(super::folder_changes::trash),
        )
        .route("/folders/{name}/files", get(list_files))
        .route("/folders/{name}/mkdir", post(mkdir))
        .route("/folders/{name}/request-upload", post(request_upload))
        .route("/folders/{name}/request-download", post(request_download))
        .route("/upload", get(upload_offset).patch(upload_send))
        .route("/download", get(download))
}

pub(super) fn body<T: serde::de::DeserializeOwned>(bytes: &Bytes) -> Result<T, Problem> {
    let bytes: &[u8] = if bytes.is_empty() { b"{}" } else { bytes };
    serde_json::from_slice(bytes).map_err(|e| Problem::invalid("body", e.to_string()))
}

/// A folder's id as Backend.AI shows one: a UUID of its owner and name, the same every time.
pub(super) fn folder_id(owner: Uuid, name: &str) -> Uuid {
    Uuid::new_v5(&owner, name.as_bytes())
}

/// A folder in Backend.AI's shape.
fn vfolder(f: &crate::model::Folder, user: Uuid) -> Value {
    let is_owner = f.permission == "owner";
    json!({
        "id": folder_id(user, &f.name).simple().to_string(),
        "name": f.name,
        "host": f.volume,
        "usage_mode": f.usage_mode,
        "permission": if is_owner { "rw" } else { f.permission.as_str() },
        "is_owner": is_owner,
        "type": "user",
        "ownership_type": "user",
        "user": user.to_string(),
        "user_email": f.owner,
        "group": null,
        "group_name": null,
        "creator": f.owner,
        "status": if f.trashed_at.is_some() { "delete-pending" } else { "ready" },
        "cloneable": false,
        "max_size": 0,
        "max_files": 0,
        "numFiles": f.usage.as_ref().map_or(0, |u| u.files),
        "cur_size": f.usage.as_ref().map_or(0, |u| u.bytes),
        "created_at": f.created_at.to_rfc3339(),
    })
}

#[derive(Deserialize)]
struct NewVFolder {
    name: String,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    unmanaged_path: Option<String>,
    #[serde(default)]
    usage_mode: Option<String>,
}

/// `POST /folders`: a folder of the caller's (on `host`, else the gateway's default volume).
/// Project folders and unmanaged paths are not berth's.
async fn create(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    bytes: Bytes,
) -> Result<(StatusCode, Json<Value>), Problem> {
    let new: NewVFolder = body(&bytes)?;
    if new.group.is_some() {
        return Err(Problem::not_implemented("project folders (`group`)"));
    }
    if new.unmanaged_path.is_some() {
        return Err(Problem::not_implemented(
            "unmanaged folders (`unmanaged_path`)",
        ));
    }
    let volume = new.host.unwrap_or_else(|| state.default_volume.clone());
    let usage_mode = match new.usage_mode.as_deref() {
        None => domain::folders::UsageMode::General,
        Some(word) => domain::folders::UsageMode::parse(word)
            .ok_or_else(|| Problem::invalid("usage_mode", "must be general, model or data"))?,
    };
    launcher::launch::create_folder(&state.pool, &caller.owner, &new.name, &volume, usage_mode)
        .await
        .map_err(crate::error::ApiError::from)?;
    let folders = crate::db::folders::folders(&state.pool, caller.owner.user_id).await?;
    let made = folders
        .iter()
        .find(|f| f.name == new.name && f.permission == "owner")
        .ok_or_else(|| Problem::invalid("name", "the folder made is not listed"))?;
    Ok((
        StatusCode::CREATED,
        Json(vfolder(made, caller.owner.user_id)),
    ))
}

/// `GET /folders`: the caller's folders and those shared with them.
async fn list(
    State(state): State<AppState>,
    caller: BackendAiCaller,
) -> Result<Json<Value>, Problem> {
    let folders = crate::db::folders::folders(&state.pool, caller.owner.user_id).await?;
    Ok(Json(Value::Array(
        folders
            .iter()
            .map(|f| vfolder(f, caller.owner.user_id))
            .collect(),
    )))
}

/// `GET /folders/{name}`.
async fn info(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
) -> Result<Json<Value>, Problem> {
    let folders = crate::db::folders::folders(&state.pool, caller.owner.user_id).await?;
    let found = folders
        .iter()
        .find(|f| f.name == name)
        .ok_or_else(|| no_such_folder(&name))?;
    Ok(Json(vfolder(found, caller.owner.user_id)))
}

fn no_such_folder(name: &str) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "vfolder-not-found",
        "Virtual folder not found.",
    )
    .msg(format!("no folder named `{name}`"))
}

/// A path as Backend.AI's client sends one (`.`, or relative with `./` allowed).
pub(super) fn path_of(path: &str) -> Result<FolderPath, Problem> {
    FolderPath::parse(path.trim_start_matches("./"))
        .map_err(|e| Problem::invalid("path", e.to_string()))
}

/// The directory of the folder `name` as the caller reaches it, for `what`.
pub(super) async fn folder_dir(
    state: &AppState,
    caller: &BackendAiCaller,
    name: &str,
    what: Use,
) -> Result<(std::path::PathBuf, crate::db::folders::Reachable), Problem> {
    let folder = reached(state, &caller.owner, name, what).await?;
    let dir = files::folder_dir(&state.file_roots, &folder.volume, folder.owner, name)
        .map_err(crate::error::ApiError::from)?;
    Ok((dir, folder))
}

#[derive(Deserialize)]
struct AtPath {
    #[serde(default = "dot")]
    path: String,
}

fn dot() -> String {
    ".".into()
}

/// `ls`'s mode column, as `stat.filemode` writes one.
fn file_mode(kind: files::EntryKind, mode: u32) -> String {
    let kind = match kind {
        files::EntryKind::Directory => 'd',
        files::EntryKind::Link => 'l',
        files::EntryKind::File => '-',
        files::EntryKind::Other => '?',
    };
    let bits: String = (0..9)
        .map(|i| {
            let set = mode & (0o400 >> i) != 0;
            match (set, i % 3) {
                (false, _) => '-',
                (true, 0) => 'r',
                (true, 1) => 'w',
                (true, _) => 'x',
            }
        })
        .collect();
    format!("{kind}{bits}")
}

/// `GET /folders/{name}/files` (its body names `path`): the directory's entries, as the
/// client's `ls` reads them (`files`, a JSON text of `filename`, `size`, `mtime`, `mode`).
async fn list_files(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<Json<Value>, Problem> {
    let at: AtPath = body(&bytes)?;
    let path = path_of(&at.path)?;
    let (dir, _) = folder_dir(&state, &caller, &name, Use::Read).await?;
    let entries = files::list(dir, path.clone())
        .await
        .map_err(crate::error::ApiError::from)?;
    let listed: Vec<Value> = entries
        .iter()
        .map(|e| {
            json!({
                "filename": e.name,
                "size": e.size,
                "mtime": e.modified.map_or(0.0, |m| m.timestamp_millis() as f64 / 1000.0),
                "mode": file_mode(e.kind, e.mode),
            })
        })
        .collect();
    Ok(Json(json!({
        "files": Value::Array(listed).to_string(),
        "folder_path": path.display(),
    })))
}

#[derive(Deserialize)]
struct NewDirectory {
    path: String,
    #[serde(default)]
    exist_ok: bool,
}

/// `POST /folders/{name}/mkdir`: a directory made (with those above it).
async fn mkdir(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
    bytes: Bytes,
) -> Result<StatusCode, Problem> {
    let new: NewDirectory = body(&bytes)?;
    let path = path_of(&new.path)?;
    let (dir, _) = folder_dir(&state, &caller, &name, Use::Write).await?;
    match files::make_directory(dir, path).await {
        Ok(()) => Ok(StatusCode::CREATED),
        Err(files::FilesError::Exists(_)) if new.exist_ok => Ok(StatusCode::CREATED),
        Err(e) => Err(crate::error::ApiError::from(e).into()),
    }
}

/// Where this gateway is reached, as the request named it: the storage proxy's URL the client
/// is sent to (`/upload`, `/download` on this same gateway).
fn this_gateway(state: &AppState, headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = if state.tls { "https" } else { "http" };
    format!("{scheme}://{host}")
}

#[derive(Deserialize)]
struct UploadAsked {
    path: String,
    size: serde_json::Number,
}

/// `POST /folders/{name}/request-upload`: a resumable upload of `size` bytes to `path`; the
/// client sends it over tus to `url` with `token`.
async fn request_upload(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Json<Value>, Problem> {
    let asked: UploadAsked = body(&bytes)?;
    let length = asked
        .size
        .as_u64()
        .filter(|s| *s <= tus::MAX_UPLOAD)
        .ok_or_else(|| Problem::invalid("size", "a byte count up to 1 TiB"))?;
    let path = path_of(&asked.path)?;
    if path.parent().is_none() {
        return Err(Problem::invalid("path", "names the folder itself"));
    }
    let (dir, folder) = folder_dir(&state, &caller, &name, Use::Write).await?;
    files::Room::check(dir, path.clone(), folder.quota, length)
        .await
        .map_err(crate::error::ApiError::from)?;
    let token = uploads::create(
        &state.file_roots,
        Upload {
            volume: folder.volume,
            owner: folder.owner,
            folder: name,
            path: path.display(),
            length,
            expires_at: chrono::Utc::now() + UPLOAD_LIFETIME,
        },
    )
    .await
    .map_err(crate::error::ApiError::from)?;
    Ok(Json(json!({
        "token": token,
        "url": format!("{}/upload", this_gateway(&state, &headers)),
    })))
}

/// A token's query.
#[derive(Deserialize)]
struct Token {
    token: String,
    /// Where the client asks the file to go (ignored: the upload's path says).
    #[serde(default, rename = "dst_dir")]
    _dst_dir: Option<String>,
}

/// `HEAD /upload?token=` (axum answers a `HEAD` by its `GET` route, without the body).
async fn upload_offset(
    state: State<AppState>,
    Query(Token { token, .. }): Query<Token>,
) -> Result<Response, Problem> {
    Ok(tus::upload_offset(state, Path(tus::UploadToken { token })).await?)
}

/// `PATCH /upload?token=`: tus bytes.
async fn upload_send(
    state: State<AppState>,
    Query(Token { token, .. }): Query<Token>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    Ok(tus::send_upload(state, Path(tus::UploadToken { token }), headers, body).await?)
}

/// What a download's token grants: one file, until `expires`.
#[derive(Serialize, Deserialize)]
struct Granted {
    volume: String,
    owner: Uuid,
    folder: String,
    path: String,
    expires: i64,
}

const DOWNLOAD_PURPOSE: &str = "berth download";

fn sign(state: &AppState, granted: &Granted) -> Result<String, Problem> {
    let keys = state
        .backendai
        .as_ref()
        .ok_or_else(|| Problem::not_implemented("Backend.AI's API (it is switched off)"))?;
    let claims =
        serde_json::to_vec(granted).map_err(|e| Problem::invalid("body", e.to_string()))?;
    let mac = keys.sign(DOWNLOAD_PURPOSE, &claims);
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    Ok(format!("{}.{}", b64.encode(claims), b64.encode(mac)))
}

fn verified(state: &AppState, token: &str) -> Option<Granted> {
    let keys = state.backendai.as_ref()?;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let (claims, mac) = token.split_once('.')?;
    let claims = b64.decode(claims).ok()?;
    let mac = b64.decode(mac).ok()?;
    if !keys.verify(DOWNLOAD_PURPOSE, &claims, &mac) {
        return None;
    }
    let granted: Granted = serde_json::from_slice(&claims).ok()?;
    (granted.expires > chrono::Utc::now().timestamp()).then_some(granted)
}

#[derive(Deserialize)]
struct DownloadAsked {
    path: String,
}

/// `POST /folders/{name}/request-download`: a token, signed by this gateway and honoured by any
/// gateway of the install for [`DOWNLOAD_LIFETIME`], for the file at `path`.
async fn request_download(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(name): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Json<Value>, Problem> {
    let asked: DownloadAsked = body(&bytes)?;
    let path = path_of(&asked.path)?;
    let (dir, folder) = folder_dir(&state, &caller, &name, Use::Read).await?;
    files::readable(dir, path.clone())
        .await
        .map_err(crate::error::ApiError::from)?;
    let token = sign(
        &state,
        &Granted {
            volume: folder.volume,
            owner: folder.owner,
            folder: name,
            path: path.display(),
            expires: (chrono::Utc::now() + DOWNLOAD_LIFETIME).timestamp(),
        },
    )?;
    Ok(Json(json!({
        "token": token,
        "url": format!("{}/download", this_gateway(&state, &headers)),
    })))
}

/// `GET /download?token=`: the file the token grants, streamed, ranges honoured.
async fn download(
    State(state): State<AppState>,
    Query(Token { token, .. }): Query<Token>,
    request: Request,
) -> Result<Response, Problem> {
    let granted = verified(&state, &token).ok_or_else(|| {
        Problem::new(StatusCode::NOT_FOUND, "object-not-found", "No such object.")
            .msg("the token is not one of this install's, or it expired")
    })?;
    let path = path_of(&granted.path)?;
    let dir = files::folder_dir(
        &state.file_roots,
        &granted.volume,
        granted.owner,
        &granted.folder,
    )
    .map_err(crate::error::ApiError::from)?;
    let file = files::readable(dir, path)
        .await
        .map_err(crate::error::ApiError::from)?;
    let served = tower_http::services::ServeFile::new(file)
        .oneshot(request)
        .await
        .map_err(|e| Problem::from(crate::error::ApiError::internal(e)))?;
    Ok(served.map(Body::new).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_ls_writes_them() {
        assert_eq!(file_mode(files::EntryKind::File, 0o644), "-rw-r--r--");
        assert_eq!(file_mode(files::EntryKind::Directory, 0o755), "drwxr-xr-x");
        assert_eq!(file_mode(files::EntryKind::Link, 0o777), "lrwxrwxrwx");
    }

    #[test]
    fn a_folder_keeps_one_id() {
        let owner = Uuid::now_v7();
        assert_eq!(folder_id(owner, "data"), folder_id(owner, "data"));
        assert_ne!(folder_id(owner, "data"), folder_id(owner, "other"));
    }
}
