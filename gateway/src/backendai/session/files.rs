//! Backend.AI's `session upload` and `session download`: files into and out of a running
//! session's main kernel, through what `berth session cp` uses
//! (`api::session_files::to_kernel`, the agent's door). Upload (`POST /session/{ref}/upload`)
//! takes the client's multipart form, each part a file under `/home/work` at its name
//! (directories made as needed), at most [`UPLOAD_AT_MOST`] in all: Backend.AI meant this
//! call for source files before a batch run (its own limit is 1 MiB a file), and folders for
//! data. Download (`GET /session/{ref}/download`, `{"files": [...]}` in the body) answers
//! `multipart/mixed`, each part the engine's tar archive of one path, as Backend.AI's
//! manager answers and its client unpacks.

use std::collections::HashMap;
use std::path::{Component, Path as FsPath};

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Multipart, Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use events::authorization::Action;
use futures::StreamExt;
use serde_json::Value;

use super::super::{BackendAiCaller, Problem};
use super::{query, reference, target};
use crate::api::session_files::{in_container, to_kernel, WORK_DIR};
use crate::state::AppState;

/// The most an upload's files hold together.
pub const UPLOAD_AT_MOST: usize = 64 << 20;

/// `POST /session/{ref}/upload`: each part of the form (`src`, its file name the path under
/// `/home/work`) written there; 204.
pub(super) async fn upload(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
    mut form: Multipart,
) -> Result<StatusCode, Problem> {
    let reference = reference(path)?;
    let params = query(raw.as_deref(), &[])?;
    let (owner, id) = target(&state, &caller, &params, &reference, false, Action::Act).await?;
    let mut builder = tar::Builder::new(Vec::new());
    let mut held = 0;
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| Problem::invalid("src", e.body_text()))?
    {
        // aiohttp, the client's HTTP library, percent-encodes the name's `/`s.
        let name = field
            .file_name()
            .and_then(|name| {
                percent_encoding::percent_decode_str(name)
                    .decode_utf8()
                    .ok()
            })
            .ok_or_else(|| Problem::invalid("src", "each part names its file (UTF-8)"))?
            .into_owned();
        let relative = FsPath::new(&name);
        if !relative
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(Problem::invalid(
                "src",
                format!("`{name}`: files go under /home/work, by a relative path without `..`"),
            ));
        }
        let bytes = field
            .bytes()
            .await
            .map_err(|e| Problem::invalid("src", e.body_text()))?;
        held += bytes.len();
        if held > UPLOAD_AT_MOST {
            return Err(Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "file-too-large",
                "Too large files.",
            )
            .msg(format!(
                "an upload holds at most {} MiB in all: copy larger files with `berth session \
                 cp` or through a folder",
                UPLOAD_AT_MOST >> 20
            )));
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(chrono::Utc::now().timestamp().max(0) as u64);
        builder
            .append_data(&mut header, relative, &bytes[..])
            .map_err(|e| Problem::invalid("src", format!("`{name}`: {e}")))?;
    }
    let archive = builder
        .into_inner()
        .map_err(|e| Problem::invalid("src", e.to_string()))?;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    to_kernel(
        &state,
        &owner,
        id,
        Method::PUT,
        WORK_DIR,
        headers,
        Body::from(archive),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /session/{ref}/download` with `{"files": [...]}`: `multipart/mixed`, a part for each
/// path (relative ones under `/home/work`), the tar archive of it, streamed. A path that is
/// not there is refused before any part is sent.
pub(super) async fn download(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Result<Response, Problem> {
    let reference = reference(path)?;
    let params = query(raw.as_deref(), &[])?;
    let (owner, id) = target(&state, &caller, &params, &reference, false, Action::Act).await?;
    let asked: HashMap<String, Value> = serde_json::from_slice(&body)
        .map_err(|e| Problem::invalid("files", format!("the body is JSON with `files`: {e}")))?;
    let files: Vec<String> = asked
        .get("files")
        .and_then(|f| serde_json::from_value(f.clone()).ok())
        .filter(|f: &Vec<String>| !f.is_empty())
        .ok_or_else(|| Problem::invalid("files", "a list of the paths to download"))?;
    let mut archives = Vec::with_capacity(files.len());
    for file in &files {
        let path = in_container(file)?;
        let answer = to_kernel(
            &state,
            &owner,
            id,
            Method::GET,
            &path,
            HeaderMap::new(),
            Body::empty(),
        )
        .await?;
        archives.push(Body::new(answer.into_body()));
    }
    let boundary = format!("berth-{}", uuid::Uuid::new_v4().simple());
    let (each, end) = (boundary.clone(), format!("--{boundary}--\r\n"));
    let parts = futures::stream::iter(archives).flat_map(move |archive| {
        let head = format!(
            "--{each}\r\nContent-Type: application/x-tar\r\nContent-Transfer-Encoding: binary\r\n\r\n"
        );
        futures::stream::once(async move { Ok(Bytes::from(head)) })
            .chain(archive.into_data_stream())
            .chain(futures::stream::once(async { Ok(Bytes::from_static(b"\r\n")) }))
    });
    let stream = parts.chain(futures::stream::once(async move {
        Ok::<_, axum::Error>(Bytes::from(end))
    }));
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&format!("multipart/mixed; boundary={boundary}"))
            .map_err(|e| Problem::invalid("files", e.to_string()))?,
    );
    Ok(response)
}
