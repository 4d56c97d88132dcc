//! Resumable uploads over HTTP, as the tus protocol (1.0.0, core and creation) says: `POST` a
//! folder's uploads with the file's `Upload-Length` to make one (its `Location` is the upload),
//! `HEAD` it for its `Upload-Offset`, `PATCH` bytes from that offset until it is whole. The
//! upload's URL is its capability, as the token of Backend.AI's storage proxy is: the caller
//! who made it was allowed to write the folder, and it dies with [`UPLOAD_LIFETIME`].

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use super::files::{parsed, reached, FilePath, FolderName, Use};
use super::query;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::files;
use crate::model::UploadMade;
use crate::state::AppState;
use crate::uploads::{self, Upload, UploadError, UPLOAD_LIFETIME};

/// The tus version every answer names.
const TUS_VERSION: &str = "1.0.0";
/// The largest upload made, 1 TiB (`Tus-Max-Size`).
pub const MAX_UPLOAD: u64 = 1 << 40;
/// What a `PATCH`'s body is.
const OFFSET_STREAM: &str = "application/offset+octet-stream";

static TUS_RESUMABLE: HeaderName = HeaderName::from_static("tus-resumable");
static UPLOAD_OFFSET: HeaderName = HeaderName::from_static("upload-offset");
static UPLOAD_LENGTH: HeaderName = HeaderName::from_static("upload-length");

impl From<UploadError> for ApiError {
    fn from(e: UploadError) -> Self {
        match e {
            UploadError::Unknown => ApiError::not_found(e.to_string()).field("token"),
            UploadError::OffsetMismatch { .. } => {
                ApiError::new(StatusCode::CONFLICT, "offset_mismatch", e.to_string())
                    .field("Upload-Offset")
            }
            UploadError::TooLong { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_long", e.to_string())
                    .field("body")
            }
            UploadError::Busy => ApiError::new(StatusCode::CONFLICT, "busy", e.to_string()),
            // Heard by nobody when the client went away; a 400, not berth's failure.
            UploadError::Cut { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "body_cut", e.to_string()).field("body")
            }
            UploadError::Files(e) => e.into(),
        }
    }
}

/// An upload named in the path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct UploadToken {
    /// What making it answered.
    #[param(pattern = "^[0-9a-f]{32}$")]
    pub token: String,
}

/// A header's value as a byte count within `0..=most`; 400 naming it otherwise.
fn byte_count(headers: &HeaderMap, name: &HeaderName, most: u64) -> Result<u64, ApiError> {
    let refused = || {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_header",
            format!("`{name}` must be a byte count from 0 to {most}"),
        )
        .field(name.as_str())
    };
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n <= most)
        .ok_or_else(refused)
}

/// The headers every tus answer carries, with the upload's offset.
fn tus_answer(status: StatusCode, offset: u64) -> Response {
    let mut response = status.into_response();
    let headers = response.headers_mut();
    headers.insert(TUS_RESUMABLE.clone(), HeaderValue::from_static(TUS_VERSION));
    headers.insert(UPLOAD_OFFSET.clone(), HeaderValue::from(offset));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Make a resumable upload (tus creation) of a file of `Upload-Length` bytes to `path` in one
/// of my folders (or one shared with me read-write). Its bytes are then sent with `PATCH` to
/// the answer's `Location` (also in the body), from the offset `HEAD` answers, across as many
/// requests as it takes; the last byte moves the whole file into place. An upload unfinished
/// 24 hours after its making is forgotten. Refused (413) when the folder's quota has no room
/// for `Upload-Length` bytes now.
#[utoipa::path(post, path = "/v1/folders/{name}/uploads", tag = "folders",
    params(FolderName, FilePath,
        ("Upload-Length" = u64, Header, description = "the file's bytes (at most 1 TiB)",
            minimum = 0, maximum = 1_099_511_627_776_f64)),
    responses((status = 201, description = "made: send its bytes to `location`", body = UploadMade),
        (status = 413, description = "past the folder's quota")))]
pub async fn make_upload(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(FolderName { name }): Path<FolderName>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let p: FilePath = query::parse(raw.as_deref())?;
    let path = parsed(&p.path)?;
    if path.parent().is_none() {
        return Err(ApiError::invalid(
            "path",
            "names the folder itself, not a file in it",
        ));
    }
    let length = byte_count(&headers, &UPLOAD_LENGTH, MAX_UPLOAD)?;
    let reached = reached(&state, &caller, &name, Use::Write).await?;
    let dir = files::folder_dir(&state.file_roots, &reached.volume, reached.owner, &name)?;
    files::Room::check(dir, path.clone(), reached.quota, length).await?;
    let token = uploads::create(
        &state.file_roots,
        Upload {
            volume: reached.volume,
            owner: reached.owner,
            folder: name,
            path: path.display(),
            length,
            expires_at: chrono::Utc::now() + UPLOAD_LIFETIME,
        },
    )
    .await?;
    let location = format!("/v1/uploads/{token}");
    let mut response = (
        StatusCode::CREATED,
        Json(UploadMade {
            token,
            location: location.clone(),
            length,
        }),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(TUS_RESUMABLE.clone(), HeaderValue::from_static(TUS_VERSION));
    if let Ok(location) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, location);
    }
    Ok(response)
}

/// How far an upload has come (tus `HEAD`): `Upload-Offset`, the bytes it holds, and
/// `Upload-Length`; 404 for an upload finished, expired or never made.
#[utoipa::path(head, path = "/v1/uploads/{token}", tag = "folders",
    params(UploadToken),
    responses((status = 200, description = "`Upload-Offset` and `Upload-Length` say how far it is")))]
pub async fn upload_offset(
    State(state): State<AppState>,
    Path(UploadToken { token }): Path<UploadToken>,
) -> Result<Response, ApiError> {
    let (offset, length) = uploads::offset(&state.file_roots, &token).await?;
    let mut response = tus_answer(StatusCode::OK, offset);
    response
        .headers_mut()
        .insert(UPLOAD_LENGTH.clone(), HeaderValue::from(length));
    Ok(response)
}

/// Send bytes of an upload (tus `PATCH`): the body, of type `application/offset+octet-stream`,
/// goes on from `Upload-Offset`, which must be where the upload is (409 otherwise); answers
/// where it is now. A connection that drops keeps what arrived. The last byte moves the file
/// into its folder.
#[utoipa::path(patch, path = "/v1/uploads/{token}", tag = "folders",
    params(UploadToken,
        ("Upload-Offset" = u64, Header, description = "where these bytes start",
            minimum = 0, maximum = 1_099_511_627_776_f64)),
    request_body(content = Vec<u8>, content_type = "application/offset+octet-stream"),
    responses((status = 204, description = "taken: `Upload-Offset` says where it is now"),
        (status = 415, description = "the body is not `application/offset+octet-stream`")))]
pub async fn send_upload(
    State(state): State<AppState>,
    Path(UploadToken { token }): Path<UploadToken>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if content_type != Some(OFFSET_STREAM) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "bad_content_type",
            format!("an upload's bytes are sent as `{OFFSET_STREAM}`"),
        )
        .field("Content-Type"));
    }
    let from = byte_count(&headers, &UPLOAD_OFFSET, MAX_UPLOAD)?;
    let (offset, _) =
        uploads::append(&state.file_roots, &token, from, body.into_data_stream()).await?;
    Ok(tus_answer(StatusCode::NO_CONTENT, offset))
}
