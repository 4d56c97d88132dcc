//! Files in and out of a running session's main kernel, as `docker cp` moves them (`berth
//! session cp`): `PUT /v1/sessions/{id}/files?path=` writes the body to a file there,
//! `GET /v1/sessions/{id}/files?path=` answers a file or a directory as a tar archive. A path
//! is absolute in the container, or relative to `/home/work`; the session is the caller's own
//! (or they are a superadmin) and its files are theirs, so any path inside it may be asked.
//!
//! Both go through the agent's door into the kernel (`proxy::through_kernel_door`, the
//! terminal's listener behind the terminal's token; the terminal is started first when it is
//! not): the bytes stream through the gateway a chunk at a time. Only an interactive
//! session has the door.

use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use axum::Json;
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use super::{check_may_act, parse_id, query};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::model::FileWritten;
use crate::proxy::{self, KernelDoorError};
use crate::state::AppState;
use events::ledger::KeyOwner;

/// Where a relative path starts in the container.
pub const WORK_DIR: &str = "/home/work";

/// A session named in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SessionId {
    /// The session's id.
    #[param(value_type = Uuid)]
    pub id: String,
}

/// A path in the session's main kernel.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct KernelPath {
    /// Absolute in the container, or relative to `/home/work`; no NUL.
    #[param(min_length = 1, max_length = 4096, pattern = r"^[^\u0000]+$")]
    pub path: String,
}

/// `path` as the container reads it: relative ones under [`WORK_DIR`]; `/`-runs and a
/// trailing `/` dropped. An empty one, or one with a NUL, is refused naming `path`.
pub fn in_container(path: &str) -> Result<String, ApiError> {
    if path.is_empty() || path.contains('\0') {
        return Err(ApiError::invalid(
            "path",
            "a path in the container: absolute, or relative to /home/work, with no NUL",
        ));
    }
    let joined = match path.starts_with('/') {
        true => path.to_owned(),
        false => format!("{WORK_DIR}/{path}"),
    };
    let parts: Vec<&str> = joined.split('/').filter(|p| !p.is_empty()).collect();
    Ok(format!("/{}", parts.join("/")))
}

/// `text` percent-encoded for a query (all but letters, digits and `-._~/`).
fn encoded(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, QUERY).to_string()
}

const QUERY: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// Download a file or a directory from a running session's main kernel, as a tar archive
/// (the engine's, as `docker cp` receives it), streamed.
#[utoipa::path(get, path = "/v1/sessions/{id}/files", tag = "sessions",
    params(SessionId, KernelPath),
    responses((status = 200, description = "the tar archive of what the path names",
        content_type = "application/x-tar")))]
pub async fn download_session_files(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let KernelPath { path } = query::parse(raw.as_deref())?;
    let path = in_container(&path)?;
    let id = parse_id(&id)?;
    let answer = to_kernel(
        &state,
        &caller,
        id,
        Method::GET,
        &path,
        HeaderMap::new(),
        Body::empty(),
    )
    .await?;
    let mut response = Response::new(Body::new(answer.into_body()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    Ok(response)
}

/// Upload a file into a running session's main kernel at `path` (its directory must exist;
/// a file there is replaced), streamed: the body is the file's bytes, its length given
/// (`Content-Length`). With `Content-Type: application/x-tar` the body is a tar archive,
/// unpacked into the directory `path` (how a directory is copied in). A refusal before the
/// body is read (the path, the length) reads it first, up to a limit, so the client gets the
/// answer and not a cut connection.
#[utoipa::path(put, path = "/v1/sessions/{id}/files", tag = "sessions",
    params(SessionId, KernelPath),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, description = "written", body = FileWritten)))]
pub async fn upload_session_file(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
    RawQuery(raw): RawQuery,
    mut request: Request,
) -> Result<(StatusCode, Json<FileWritten>), ApiError> {
    let is_archive = request
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/x-tar"));
    let admitted = (|| {
        let KernelPath { path } = query::parse(raw.as_deref())?;
        let path = in_container(&path)?;
        let id = parse_id(&id)?;
        // `in_container` ends no path but the root with a `/`.
        if path == "/" && !is_archive {
            return Err(ApiError::invalid("path", "names a file, not `/`"));
        }
        let size = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::LENGTH_REQUIRED,
                    "length_required",
                    "the file's length (Content-Length) is needed before its bytes",
                )
                .field("Content-Length")
            })?;
        Ok((path, id, size))
    })();
    let (path, id, size) = super::body_drained_if_refused(admitted, request.body_mut()).await?;
    let (directory, name) = path.rsplit_once('/').unwrap_or(("", &path));
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    if is_archive {
        let body = request.into_body();
        to_kernel(&state, &caller, id, Method::PUT, &path, headers, body).await?;
        return Ok((StatusCode::CREATED, Json(FileWritten { path, size })));
    }
    let archive = single_file_archive(name, size, request.into_body())?;
    let directory = if directory.is_empty() { "/" } else { directory };
    to_kernel(
        &state,
        &caller,
        id,
        Method::PUT,
        directory,
        headers,
        archive,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(FileWritten { path, size })))
}

/// A tar archive of one file `name` of `size` bytes whose bytes are `body`: its header (the
/// `tar` crate's, a long name included), the body as it streams, the padding and the end.
/// A body that ends short or long breaks the archive, which the engine then refuses.
pub(crate) fn single_file_archive(name: &str, size: u64, body: Body) -> Result<Body, ApiError> {
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o644);
    header.set_mtime(chrono::Utc::now().timestamp().max(0) as u64);
    header.set_entry_type(tar::EntryType::Regular);
    let mut builder = tar::Builder::new(Vec::new());
    builder
        .append_data(&mut header, name, std::io::empty())
        .map_err(|e| ApiError::invalid("path", format!("not a name a tar archive holds: {e}")))?;
    // `append_data` wrote the header blocks, and no data: the body follows them.
    let head = Bytes::from(builder.get_ref().clone());
    let padding = (512 - size % 512) % 512;
    let tail = Bytes::from(vec![0u8; padding as usize + 1024]);
    let stream = futures::stream::once(async move { Ok::<_, axum::Error>(head) })
        .chain(body.into_data_stream())
        .chain(futures::stream::once(async move { Ok(tail) }));
    Ok(Body::from_stream(stream))
}

/// Asks the agent's door into session `id`'s main kernel `method` on `path`'s files, once
/// the caller may act on the session; its refusal answered as this API's error.
pub(crate) async fn to_kernel(
    state: &AppState,
    caller: &KeyOwner,
    id: Uuid,
    method: Method,
    path: &str,
    headers: HeaderMap,
    body: Body,
) -> Result<axum::http::Response<hyper::body::Incoming>, ApiError> {
    let door_path = format!("/files?path={}", encoded(path));
    let answer = through_door(state, caller, id, method, &door_path, headers, body).await?;
    let status = answer.status();
    if status.is_success() {
        return Ok(answer);
    }
    let said = refusal_text(answer).await;
    Err(match status {
        StatusCode::NOT_FOUND => ApiError::not_found(format!("`{path}`: {said}")).field("path"),
        StatusCode::BAD_REQUEST | StatusCode::CONFLICT | StatusCode::FORBIDDEN => ApiError::new(
            StatusCode::CONFLICT,
            "path_conflict",
            format!("`{path}`: {said}"),
        )
        .field("path"),
        _ => ApiError::new(StatusCode::BAD_GATEWAY, "agent_refused", said),
    })
}

/// Asks the agent's door into session `id`'s main kernel `method` at `door_path`, once the
/// caller may act on the session: its answer as it comes, whatever its status. Refused (not
/// the caller's, not running), `body` is read and dropped first.
pub(crate) async fn through_door(
    state: &AppState,
    caller: &KeyOwner,
    id: Uuid,
    method: Method,
    door_path: &str,
    headers: HeaderMap,
    mut body: Body,
) -> Result<axum::http::Response<hyper::body::Incoming>, ApiError> {
    let admitted = async {
        check_may_act(state, caller, id).await?;
        super::apps::kernel_door(state, caller, id).await
    };
    let (detail, token) = super::body_drained_if_refused(admitted.await, &mut body).await?;
    state.touched(id).await;
    proxy::through_kernel_door(&detail, &token, method, door_path, headers, body)
        .await
        .map_err(|e| match e {
            KernelDoorError::NotServed(e) => ApiError::from(e),
            KernelDoorError::Unreachable(why) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "agent_unreachable", why)
            }
        })
}

/// The text of the door's refusal (a line: small).
pub(crate) async fn refusal_text(answer: axum::http::Response<hyper::body::Incoming>) -> String {
    axum::body::to_bytes(Body::new(answer.into_body()), 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_read_absolute_or_under_home_work() {
        assert_eq!(in_container("a/b.txt").unwrap(), "/home/work/a/b.txt");
        assert_eq!(in_container("/etc//hosts/").unwrap(), "/etc/hosts");
        assert_eq!(in_container("/").unwrap(), "/");
        assert!(in_container("").is_err());
        assert!(in_container("a\0b").is_err());
    }

    #[tokio::test]
    async fn a_single_file_archive_reads_back_as_that_file() {
        let long = "n".repeat(150);
        for (name, bytes) in [
            ("hi.txt", b"hello\n".to_vec()),
            (long.as_str(), vec![7u8; 1500]),
        ] {
            let body = Body::from(bytes.clone());
            let archive = single_file_archive(name, bytes.len() as u64, body).unwrap();
            let archive = axum::body::to_bytes(archive, 1 << 20).await.unwrap();
            assert_eq!(archive.len() % 512, 0);
            let mut read = tar::Archive::new(&archive[..]);
            let mut entries = read.entries().unwrap();
            let mut entry = entries.next().unwrap().unwrap();
            assert_eq!(entry.path().unwrap().to_str().unwrap(), name);
            let mut got = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut got).unwrap();
            assert_eq!(got, bytes);
            drop(entry);
            assert!(entries.next().is_none(), "one file, then the end");
        }
    }
}
