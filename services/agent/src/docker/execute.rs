//! Code and commands run in a session's main kernel for the gateway (Backend.AI's execute
//! API, which `backend.ai run` speaks), on the terminal's door (`terminal`) behind the same
//! token: `POST /exec` with `{"query": CODE}` runs the code with the language runtime the
//! image declares (Backend.AI's label `ai.backend.runtime-path`, e.g. `/usr/bin/python3`, run
//! as `RUNTIME -c CODE`), with `{"shell": COMMAND}` a command with `/bin/sh -c`, both in
//! `/home/work`. The answer streams as the output comes: a JSON object a line,
//! `{"stdout": TEXT}` or `{"stderr": TEXT}`, and last `{"exit_code": N}`.

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::ctx::Ctx;
use super::transfer::{text, DoorBody};

/// The path the door runs code on.
pub(super) const EXEC_PATH: &str = "/exec";

/// The label an image declares its language runtime's program with (Backend.AI's).
pub const RUNTIME_PATH_LABEL: &str = "ai.backend.runtime-path";

/// The most a request to run holds (the code).
const CODE_AT_MOST: usize = 1 << 20;

/// What to run.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
enum Run {
    /// Code, for the image's language runtime.
    Query(String),
    /// A command line, for `/bin/sh -c`.
    Shell(String),
}

/// The program and arguments that run `run` in an image whose runtime is `runtime`; `None`
/// for code in an image that declares none.
fn argv(run: &Run, runtime: Option<&str>) -> Option<Vec<String>> {
    match run {
        Run::Shell(line) => Some(vec!["/bin/sh".into(), "-c".into(), line.clone()]),
        Run::Query(code) => Some(vec![runtime?.to_owned(), "-c".into(), code.clone()]),
    }
}

/// Answers a request to [`EXEC_PATH`] for the main kernel `container`.
pub(super) async fn answer(
    ctx: &Ctx,
    container: &str,
    request: Request<Incoming>,
) -> Response<DoorBody> {
    if request.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "POST");
    }
    let body = match http_body_util::Limited::new(request.into_body(), CODE_AT_MOST)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) => return text(StatusCode::PAYLOAD_TOO_LARGE, &e.to_string()),
    };
    let run: Run = match serde_json::from_slice(&body) {
        Ok(run) => run,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                &format!("{{\"query\"}} or {{\"shell\"}}: {e}"),
            )
        }
    };
    let runtime = match &run {
        Run::Query(_) => runtime_of(ctx, container).await,
        Run::Shell(_) => None,
    };
    let Some(argv) = argv(&run, runtime.as_deref()) else {
        return text(
            StatusCode::CONFLICT,
            &format!(
                "the session's image declares no language runtime (label {RUNTIME_PATH_LABEL}) \
                 to run code with: run a command instead (batch mode)"
            ),
        );
    };
    let exec = ctx
        .docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(argv),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                working_dir: Some(super::spec::SCRATCH.to_owned()),
                ..Default::default()
            },
        )
        .await;
    let exec = match exec {
        Ok(exec) => exec,
        Err(e) => return text(StatusCode::BAD_GATEWAY, &e.to_string()),
    };
    let output = match ctx
        .docker
        .start_exec(&exec.id, None::<StartExecOptions>)
        .await
    {
        Ok(StartExecResults::Attached { output, .. }) => output,
        Ok(StartExecResults::Detached) => {
            return text(StatusCode::BAD_GATEWAY, "the engine did not attach the run")
        }
        Err(e) => return text(StatusCode::BAD_GATEWAY, &e.to_string()),
    };
    let lines = output.filter_map(|chunk| async move {
        let line = match chunk.ok()? {
            LogOutput::StdOut { message } => json!({ "stdout": String::from_utf8_lossy(&message) }),
            LogOutput::StdErr { message } => json!({ "stderr": String::from_utf8_lossy(&message) }),
            _ => return None,
        };
        Some(line)
    });
    let (docker, exec_id) = (ctx.docker.clone(), exec.id);
    let end = futures::stream::once(async move {
        let code = docker
            .inspect_exec(&exec_id)
            .await
            .ok()
            .and_then(|e| e.exit_code)
            .unwrap_or(-1);
        json!({ "exit_code": code })
    });
    let frames = lines
        .chain(end)
        .map(|line| Ok::<_, std::io::Error>(Frame::data(Bytes::from(format!("{line}\n")))));
    let mut answer = Response::new(BodyExt::boxed_unsync(StreamBody::new(frames)));
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    answer
}

/// The language runtime the image of `container` declares, if any.
async fn runtime_of(ctx: &Ctx, container: &str) -> Option<String> {
    let inspected = ctx.docker.inspect_container(container, None).await.ok()?;
    inspected
        .config?
        .labels?
        .get(RUNTIME_PATH_LABEL)
        .filter(|path| path.starts_with('/'))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_runs_with_the_images_runtime_and_a_command_with_the_shell() {
        let query: Run = serde_json::from_str(r#"{"query": "print(6*7)"}"#).unwrap();
        assert_eq!(
            argv(&query, Some("/usr/bin/python3")).unwrap(),
            ["/usr/bin/python3", "-c", "print(6*7)"]
        );
        assert_eq!(argv(&query, None), None, "no runtime declared: no code run");
        let shell: Run = serde_json::from_str(r#"{"shell": "make"}"#).unwrap();
        assert_eq!(argv(&shell, None).unwrap(), ["/bin/sh", "-c", "make"]);
        assert!(serde_json::from_str::<Run>(r#"{"query": "x", "shell": "y"}"#).is_err());
    }
}
