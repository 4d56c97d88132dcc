//! The files of the caller's folders: list a directory (paged, by name), download a file
//! (streamed, with HTTP ranges), upload one (streamed), make a directory, move or rename
//! what a path names, remove it. Served by this gateway where the folder's volume is mounted on its host
//! (`crate::files`); a path stays inside its folder (`domain::files`) and no link is followed.

use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use domain::files::{FolderPath, PathError};
use serde::Deserialize;
use tower::ServiceExt;
use utoipa::IntoParams;

use super::query;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::files::{self, FilesError};
use crate::model::{FileWritten, FolderEntry, FolderListing};
use crate::state::AppState;
use events::ledger::KeyOwner;

/// A folder named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct FolderName {
    /// One of the caller's folders, or one shared with them.
    #[param(pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$")]
    pub name: String,
}

/// A path inside the folder.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FilePath {
    /// Relative: components of 1 to 255 characters (no NUL, none `.` or `..`), `/` between
    /// them and one at the end allowed (what `domain::files::FolderPath::parse` takes).
    #[param(
        min_length = 1,
        max_length = 4096,
        pattern = r"^(?!\.\.?(/|$))(?![^\u0000]*/\.\.?(/|$))[^/\u0000]{1,255}(/[^/\u0000]{1,255})*/?$"
    )]
    pub path: String,
}

/// `GET /v1/folders/{name}/files`' parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// The directory (default: the folder itself).
    #[param(
        nullable = false,
        min_length = 1,
        max_length = 4096,
        pattern = r"^(?!\.\.?(/|$))(?![^\u0000]*/\.\.?(/|$))[^/\u0000]{1,255}(/[^/\u0000]{1,255})*/?$"
    )]
    pub path: Option<String>,
    /// At most this many entries (default 1000).
    #[param(nullable = false, minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
    /// Entries skipped first (default 0).
    #[param(nullable = false, minimum = 0, maximum = 100000000)]
    pub offset: Option<u32>,
}

/// `POST /v1/folders/{name}/directories`' body.
#[derive(Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewDirectory {
    /// Relative, `/`-separated; the directories above it are made too.
    #[schema(
        min_length = 1,
        max_length = 4096,
        pattern = r"^(?!\.\.?(/|$))(?![^\u0000]*/\.\.?(/|$))[^/\u0000]{1,255}(/[^/\u0000]{1,255})*/?$"
    )]
    pub path: String,
}

/// Whether a file operation reads a folder or changes it.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Use {
    Read,
    Write,
}

/// The folder `name` the caller reaches (theirs, or one shared with them), once the share
/// allows `what` (403 for a change to a read-only share).
pub(crate) async fn reached(
    state: &AppState,
    caller: &KeyOwner,
    name: &str,
    what: Use,
) -> Result<db::folders::Reachable, ApiError> {
    let folder = db::folders::reachable(&state.pool, caller.user_id, name)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "you have no folder named `{name}`, and none by that name is shared with you"
            ))
            .field("name")
        })?;
    if what == Use::Write && !folder.access.may_write() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "read_only",
            format!("`{name}` is shared with you read-only"),
        )
        .field("name"));
    }
    Ok(folder)
}

/// The directory on this host of the folder `name` the caller reaches, as [`reached`].
pub(super) async fn folder(
    state: &AppState,
    caller: &KeyOwner,
    name: &str,
    what: Use,
) -> Result<std::path::PathBuf, ApiError> {
    Ok(folder_and_quota(state, caller, name, what).await?.0)
}

/// [`folder`]'s directory with the quota of its owner's policy.
async fn folder_and_quota(
    state: &AppState,
    caller: &KeyOwner,
    name: &str,
    what: Use,
) -> Result<(std::path::PathBuf, Option<domain::folders::Quota>), ApiError> {
    let folder = reached(state, caller, name, what).await?;
    let dir = files::folder_dir(&state.file_roots, &folder.volume, folder.owner, name)?;
    Ok((dir, folder.quota))
}

pub(super) fn parsed(path: &str) -> Result<FolderPath, ApiError> {
    FolderPath::parse(path).map_err(|e: PathError| ApiError::invalid("path", e.to_string()))
}

impl From<FilesError> for ApiError {
    fn from(e: FilesError) -> Self {
        let conflict = |code| ApiError::new(StatusCode::CONFLICT, code, e.to_string());
        match &e {
            FilesError::VolumeNotHere(_) => conflict("volume_not_here").field("name"),
            FilesError::Missing(_) => ApiError::not_found(e.to_string()).field("path"),
            FilesError::Link(_) => ApiError::invalid("path", e.to_string()),
            FilesError::IsDirectory(_)
            | FilesError::NotDirectory(_)
            | FilesError::Exists(_)
            | FilesError::Root(_) => conflict("path_conflict").field("path"),
            FilesError::Quota(_) => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "quota_exceeded",
                e.to_string(),
            )
            .field("name"),
            // ENAMETOOLONG: a name the file system's byte limits refuse.
            FilesError::Io(io) if io.raw_os_error() == Some(36) => {
                ApiError::invalid("path", "too long for the file system (255 bytes a name)")
            }
            FilesError::Io(io) => ApiError::internal(io),
        }
    }
}

/// A directory of one of my folders: its entries by name (a link is shown, never followed),
/// a page of them.
#[utoipa::path(get, path = "/v1/folders/{name}/files", tag = "folders",
    params(FolderName, ListParams),
    responses((status = 200, description = "the directory's entries", body = FolderListing)))]
pub async fn list_files(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(FolderName { name }): Path<FolderName>,
    RawQuery(raw): RawQuery,
) -> Result<Json<FolderListing>, ApiError> {
    let p: ListParams = query::parse(raw.as_deref())?;
    let path = parsed(p.path.as_deref().unwrap_or(""))?;
    let dir = folder(&state, &caller, &name, Use::Read).await?;
    let entries = files::list(dir, path.clone()).await?;
    let total = entries.len() as u64;
    let entries = entries
        .into_iter()
        .skip(p.offset.unwrap_or(0) as usize)
        .take(p.limit.unwrap_or(1000) as usize)
        .map(|e| FolderEntry {
            name: e.name,
            kind: e.kind,
            size: e.size,
            modified: e.modified,
        })
        .collect();
    Ok(Json(FolderListing {
        folder: name,
        path: path.display(),
        total,
        entries,
    }))
}

/// A file of one of my folders, streamed (`Range` honoured: 206 with the part asked for), or
/// a directory as a tar archive made as it streams.
#[utoipa::path(get, path = "/v1/folders/{name}/download", tag = "folders",
    params(FolderName, FilePath),
    responses((status = 200, description = "the file's bytes, or a directory's tar archive",
        content_type = "application/octet-stream")))]
pub async fn download_file(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(FolderName { name }): Path<FolderName>,
    RawQuery(raw): RawQuery,
    request: Request,
) -> Result<Response, ApiError> {
    let p: FilePath = query::parse(raw.as_deref())?;
    let path = parsed(&p.path)?;
    let dir = folder(&state, &caller, &name, Use::Read).await?;
    let base = path.file_name().unwrap_or(&name).to_owned();
    let (mut response, file_name) = match files::downloadable(dir, path.clone()).await? {
        files::Download::File(file) => {
            let served = tower_http::services::ServeFile::new(file)
                .oneshot(request)
                .await
                .map_err(ApiError::internal)?;
            (served.map(Body::new).into_response(), base)
        }
        files::Download::Directory(at) => {
            let mut response = Body::from_stream(files::archive(at, base.clone())).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-tar"),
            );
            (response, format!("{base}.tar"))
        }
    };
    let attachment = format!(
        "attachment; filename=\"{}\"",
        file_name.replace(['"', '\\', '\r', '\n'], "_")
    );
    if let Ok(value) = HeaderValue::from_str(&attachment) {
        response
            .headers_mut()
            .insert(header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// Write a file into one of my folders from the request's body, streamed (the directories
/// above it made as needed; a file there replaced once the new one is whole). Refused (413)
/// when the folder's quota has no room for it: before a byte is written when the request says
/// its length, else once the bytes pass the room. A refusal before the body is read reads it
/// first, up to a limit, so the client gets the answer and not a cut connection.
#[utoipa::path(put, path = "/v1/folders/{name}/files", tag = "folders",
    params(FolderName, FilePath),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, description = "written", body = FileWritten),
        (status = 413, description = "past the folder's quota: nothing written")))]
pub async fn upload_file(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(FolderName { name }): Path<FolderName>,
    RawQuery(raw): RawQuery,
    headers: axum::http::HeaderMap,
    mut body: Body,
) -> Result<(StatusCode, Json<FileWritten>), ApiError> {
    let admitted = async {
        let p: FilePath = query::parse(raw.as_deref())?;
        let path = parsed(&p.path)?;
        let (dir, quota) = folder_and_quota(&state, &caller, &name, Use::Write).await?;
        let room = files::Room::measure(dir.clone(), path.clone(), quota).await?;
        let announced = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let (Some(room), Some(length)) = (&room, announced) {
            room.admits(length)?;
        }
        Ok::<_, ApiError>((dir, path, room))
    };
    let (dir, path, room) = super::body_drained_if_refused(admitted.await, &mut body).await?;
    let size = files::write(dir, path.clone(), body.into_data_stream(), room).await?;
    Ok((
        StatusCode::CREATED,
        Json(FileWritten {
            path: path.display(),
            size,
        }),
    ))
}

/// Make a directory in one of my folders (and those above it).
#[utoipa::path(post, path = "/v1/folders/{name}/directories", tag = "folders",
    params(FolderName), request_body = NewDirectory,
    responses((status = 201, description = "made")))]
pub async fn make_directory(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(FolderName { name }): Path<FolderName>,
    body: Result<bytes::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let NewDirectory { path } = super::parse_body(body)?;
    let path = parsed(&path)?;
    let dir = folder(&state, &caller, &name, Use::Write).await?;
    files::make_directory(dir, path).await?;
    Ok(StatusCode::CREATED)
}

/// `POST /v1/folders/{name}/moves`' body.
#[derive(Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileMove {
    /// What moves: a file, link or directory (relative, `/`-separated).
    #[schema(
        min_length = 1,
        max_length = 4096,
        pattern = r"^(?!\.\.?(/|$))(?![^\u0000]*/\.\.?(/|$))[^/\u0000]{1,255}(/[^/\u0000]{1,255})*/?$"
    )]
    pub from: String,
    /// Where it goes (nothing there yet; the directories above it are made).
    #[schema(
        min_length = 1,
        max_length = 4096,
        pattern = r"^(?!\.\.?(/|$))(?![^\u0000]*/\.\.?(/|$))[^/\u0000]{1,255}(/[^/\u0000]{1,255})*/?$"
    )]
    pub to: String,
}

/// Rename or move a file, link or directory inside one of my folders.
#[utoipa::path(post, path = "/v1/folders/{name}/moves", tag = "folders",
    params(FolderName), request_body = FileMove,
    responses((status = 204, description = "moved")))]
pub async fn move_file(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(FolderName { name }): Path<FolderName>,
    body: Result<bytes::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let FileMove { from, to } = super::parse_body(body)?;
    let from = FolderPath::parse(&from).map_err(|e| ApiError::invalid("from", e.to_string()))?;
    let to = FolderPath::parse(&to).map_err(|e| ApiError::invalid("to", e.to_string()))?;
    let dir = folder(&state, &caller, &name, Use::Write).await?;
    files::move_entry(dir, from, to).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Remove a file, link or directory (with all it holds) from one of my folders.
#[utoipa::path(delete, path = "/v1/folders/{name}/files", tag = "folders",
    params(FolderName, FilePath),
    responses((status = 204, description = "removed")))]
pub async fn remove_file(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(FolderName { name }): Path<FolderName>,
    RawQuery(raw): RawQuery,
) -> Result<StatusCode, ApiError> {
    let p: FilePath = query::parse(raw.as_deref())?;
    let path = parsed(&p.path)?;
    let dir = folder(&state, &caller, &name, Use::Write).await?;
    files::remove(dir, path).await?;
    Ok(StatusCode::NO_CONTENT)
}
