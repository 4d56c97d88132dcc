//! Code and commands run in a running session's main kernel: `POST /v1/sessions/{id}/exec`
//! with `{"query": CODE}` (run by the language runtime the image declares, Backend.AI's label
//! `ai.backend.runtime-path`) or `{"shell": COMMAND}` (`/bin/sh -c`), in `/home/work`. The
//! answer streams as the output comes, a JSON object a line (`application/x-ndjson`):
//! `{"stdout": TEXT}`, `{"stderr": TEXT}`, and last `{"exit_code": N}`. Through the agent's
//! door into the kernel, as `session_files`; Backend.AI's execute API is built on [`exec`].

use axum::body::Body;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::session_files::{refusal_text, through_door, SessionId};
use super::{parse_body, parse_id};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use events::ledger::KeyOwner;

/// `POST /v1/sessions/{id}/exec`'s body: code or a command, one of the two.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(max_properties = 1)]
pub struct RunRequest {
    /// Code for the image's language runtime (`RUNTIME -c CODE`).
    #[serde(default)]
    #[schema(nullable = false, pattern = r"^[^\u0000]*$")]
    query: Option<String>,
    /// A command line for `/bin/sh -c`.
    #[serde(default)]
    #[schema(nullable = false, pattern = r"^[^\u0000]*$")]
    shell: Option<String>,
}

/// What to run: code or a command.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum Run {
    /// Code for the image's language runtime (`RUNTIME -c CODE`).
    Query(String),
    /// A command line for `/bin/sh -c`.
    Shell(String),
}

/// A line of a run's output, or its end.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunOutput {
    Stdout(String),
    Stderr(String),
    ExitCode(i64),
}

/// Run code or a command in a running interactive session's main kernel; its output streams
/// back as it comes, a JSON object a line, its exit code last. An image that declares no
/// language runtime is a 409 for code (a command still runs).
#[utoipa::path(post, path = "/v1/sessions/{id}/exec", tag = "sessions",
    params(SessionId), request_body = RunRequest,
    responses((status = 200, description = "the output, a `RunOutput` a line",
        content_type = "application/x-ndjson")))]
pub async fn exec_in_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = match parse_body(body)? {
        RunRequest {
            query: Some(code),
            shell: None,
        } => Run::Query(code),
        RunRequest {
            query: None,
            shell: Some(line),
        } => Run::Shell(line),
        _ => {
            return Err(ApiError::invalid(
                "query",
                "give `query` or `shell`, one of the two",
            ))
        }
    };
    let id = parse_id(&id)?;
    let answer = door(&state, &caller, id, &run).await?;
    let mut response = Response::new(Body::new(answer.into_body()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(response)
}

/// Runs `run` in session `id`'s main kernel: its output and then its exit code, as they come.
pub(crate) async fn exec(
    state: &AppState,
    caller: &KeyOwner,
    id: Uuid,
    run: &Run,
) -> Result<impl Stream<Item = RunOutput> + Send + 'static, ApiError> {
    let answer = door(state, caller, id, run).await?;
    let mut held = Vec::new();
    let chunks = Body::new(answer.into_body()).into_data_stream();
    Ok(chunks
        .map(move |chunk| {
            // Whole lines only: a chunk may end inside one.
            held.extend_from_slice(&chunk.unwrap_or_default());
            let end = held.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let lines: Vec<u8> = held.drain(..end).collect();
            futures::stream::iter(
                lines
                    .split(|b| *b == b'\n')
                    .filter_map(|line| serde_json::from_slice::<RunOutput>(line).ok())
                    .collect::<Vec<_>>(),
            )
        })
        .flatten())
}

async fn door(
    state: &AppState,
    caller: &KeyOwner,
    id: Uuid,
    run: &Run,
) -> Result<axum::http::Response<hyper::body::Incoming>, ApiError> {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = Body::from(serde_json::to_vec(run).map_err(ApiError::internal)?);
    let answer = through_door(state, caller, id, Method::POST, "/exec", headers, body).await?;
    let status = answer.status();
    if status.is_success() {
        return Ok(answer);
    }
    let said = refusal_text(answer).await;
    Err(match status {
        StatusCode::CONFLICT => {
            ApiError::new(StatusCode::CONFLICT, "no_runtime", said).field("query")
        }
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::invalid("query", said),
        _ => ApiError::new(StatusCode::BAD_GATEWAY, "agent_refused", said),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_and_its_output_read_as_the_agent_writes_them() {
        assert_eq!(
            serde_json::to_string(&Run::Query("print(1)".into())).unwrap(),
            r#"{"query":"print(1)"}"#
        );
        for (line, output) in [
            (r#"{"stdout":"hi\n"}"#, RunOutput::Stdout("hi\n".into())),
            (r#"{"stderr":"oops"}"#, RunOutput::Stderr("oops".into())),
            (r#"{"exit_code":3}"#, RunOutput::ExitCode(3)),
        ] {
            assert_eq!(serde_json::from_str::<RunOutput>(line).unwrap(), output);
        }
    }
}
