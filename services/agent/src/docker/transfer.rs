//! Files in and out of a session's main kernel, served on the terminal's door (`terminal`)
//! behind the same token, so only berth's gateway reaches it: `GET /files?path=P` answers the
//! engine's tar archive of `P` (a file or a directory), `PUT /files?path=D` extracts the tar
//! archive of the body into directory `D`. The archive is the engine's own format both ways
//! (what `docker cp` speaks), streamed through as it comes: nothing is held whole here, so a
//! file of gigabytes moves as easily as a small one. The gateway speaks it for `berth session
//! cp` and Backend.AI's session upload and download.
//!
//! Why the door and not the bus: the bytes go once, over one HTTP connection from the gateway
//! to the agent, as the app proxy's already do; NATS would cut them into messages and keep a
//! copy in a stream.

use bollard::container::{DownloadFromContainerOptions, UploadToContainerOptions};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, BodyStream, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::ctx::Ctx;

/// What the door answers with: a short text, or an archive streamed from the engine.
pub(super) type DoorBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// The path the door serves files on.
pub(super) const FILES_PATH: &str = "/files";

/// A short answer of the door.
pub(super) fn full(text: String) -> DoorBody {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Answers a request to [`FILES_PATH`] for the main kernel `container`.
pub(super) async fn answer(
    ctx: &Ctx,
    container: &str,
    request: Request<Incoming>,
) -> Response<DoorBody> {
    let Some(path) = path_of(request.uri().query()) else {
        return text(
            StatusCode::BAD_REQUEST,
            "`path` (percent-encoded, absolute in the container) is required",
        );
    };
    match *request.method() {
        Method::GET => download(ctx, container, &path).await,
        Method::PUT => upload(ctx, container, &path, request.into_body()).await,
        _ => text(StatusCode::METHOD_NOT_ALLOWED, "GET or PUT"),
    }
}

/// The engine's archive of `path`, streamed; the engine's refusal (nothing there: 404) is
/// answered before a byte of it.
async fn download(ctx: &Ctx, container: &str, path: &str) -> Response<DoorBody> {
    let mut archive = ctx.docker.download_from_container(
        container,
        Some(DownloadFromContainerOptions {
            path: path.to_owned(),
        }),
    );
    let first = match archive.next().await {
        Some(Ok(first)) => first,
        Some(Err(e)) => return refused(e),
        None => Bytes::new(),
    };
    let rest = archive.map_err(std::io::Error::other);
    let body = futures::stream::once(async move { Ok(first) })
        .chain(rest)
        .map_ok(Frame::data);
    let mut answer = Response::new(BodyExt::boxed_unsync(StreamBody::new(body)));
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    answer
}

/// The body's tar archive extracted into directory `path`, streamed to the engine.
async fn upload(ctx: &Ctx, container: &str, path: &str, body: Incoming) -> Response<DoorBody> {
    // A body that breaks off ends the archive short, which the engine refuses.
    let archive = BodyStream::new(body)
        .take_while(|frame| std::future::ready(frame.is_ok()))
        .filter_map(|frame| async move { frame.ok()?.into_data().ok() });
    match ctx
        .docker
        .upload_to_container_streaming(
            container,
            Some(UploadToContainerOptions {
                path: path.to_owned(),
                ..Default::default()
            }),
            archive,
        )
        .await
    {
        Ok(()) => text(StatusCode::NO_CONTENT, ""),
        Err(e) => refused(e),
    }
}

/// The engine's refusal as the door answers it: its status (404 for a path that is not
/// there, 400 for a destination that is no directory) and message.
fn refused(e: bollard::errors::Error) -> Response<DoorBody> {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => text(
            StatusCode::from_u16(status_code).unwrap_or(StatusCode::BAD_GATEWAY),
            &message,
        ),
        other => text(StatusCode::BAD_GATEWAY, &other.to_string()),
    }
}

pub(super) fn text(status: StatusCode, body: &str) -> Response<DoorBody> {
    let mut answer = Response::new(full(format!("{body}\n")));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    answer
}

/// The `path` parameter of a query, percent-decoded; `None` when absent, empty or not UTF-8.
fn path_of(query: Option<&str>) -> Option<String> {
    query?
        .split('&')
        .filter_map(|pair| pair.strip_prefix("path="))
        .map(|value| percent_encoding::percent_decode_str(value).decode_utf8())
        .next()?
        .ok()
        .map(|path| path.into_owned())
        .filter(|path| !path.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_is_read_percent_decoded_from_the_query() {
        assert_eq!(
            path_of(Some("path=%2Fhome%2Fwork%2Fa%20b.txt")).as_deref(),
            Some("/home/work/a b.txt")
        );
        assert_eq!(
            path_of(Some("x=1&path=/tmp/%C3%A9")).as_deref(),
            Some("/tmp/é")
        );
        assert_eq!(path_of(Some("path=")), None);
        assert_eq!(path_of(Some("other=1")), None);
        assert_eq!(path_of(None), None);
        assert_eq!(path_of(Some("path=%FF")), None, "not UTF-8");
    }
}
