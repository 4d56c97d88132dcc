//! Backend.AI's execute API, which `backend.ai run` speaks: `GET
//! /stream/session/{ref}/execute` (a WebSocket: the client's first message asks, each answer
//! is a result as Backend.AI's manager sends them) and `POST /session/{ref}` (the SDK's
//! `execute`, one result for the whole run). Two modes: `query` runs `code` with the language
//! runtime the image declares; `batch` runs the `clean`, `build` and `exec` commands of its
//! options in turn with `/bin/sh`, each ending with its own status (`clean-finished`,
//! `build-finished`, `finished`), a failing one ending the run. All through
//! `api::session_exec::exec`, the agent's door into the main kernel. berth runs each request
//! to its end: there is no `continue` of a run left waiting, nor input asked mid-run.

use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use events::authorization::Action;
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use uuid::Uuid;

use super::super::{BackendAiCaller, Problem};
use super::{query, reference, target};
use crate::api::session_exec::{exec, Run, RunOutput};
use crate::state::AppState;
use events::ledger::KeyOwner;

/// What a client asks: a mode, the code, its run's id and the batch mode's commands.
#[derive(Debug, Default, Deserialize)]
struct Asked {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default, rename = "runId")]
    run_id: Option<String>,
    #[serde(default)]
    options: Option<Value>,
}

/// One step of a run: what runs, and the status its end is reported with.
#[derive(Debug, PartialEq)]
struct Step {
    run: Run,
    ends: &'static str,
}

/// The steps `asked` takes; a mode berth does not run is refused naming `mode`.
fn steps(asked: &Asked) -> Result<Vec<Step>, Problem> {
    match asked.mode.as_deref().unwrap_or("query") {
        "query" => Ok(vec![Step {
            run: Run::Query(asked.code.clone().unwrap_or_default()),
            ends: "finished",
        }]),
        "batch" => {
            let option = |name: &str| {
                asked
                    .options
                    .as_ref()
                    .and_then(|o| o.get(name))
                    .and_then(Value::as_str)
                    .map(str::trim)
                    // `*`: Backend.AI's "the image's default", which berth's images have none of.
                    .filter(|c| !c.is_empty() && *c != "*")
                    .map(str::to_owned)
            };
            let mut steps: Vec<Step> = [("clean", "clean-finished"), ("build", "build-finished")]
                .into_iter()
                .filter_map(|(name, ends)| {
                    option(name).map(|c| Step {
                        run: Run::Shell(c),
                        ends,
                    })
                })
                .collect();
            steps.push(Step {
                run: Run::Shell(option("exec").unwrap_or_else(|| "true".into())),
                ends: "finished",
            });
            Ok(steps)
        }
        other => Err(Problem::invalid(
            "mode",
            format!("`{other}`: berth runs `query` and `batch` (each to its end)"),
        )),
    }
}

/// A result as Backend.AI's manager sends one.
fn result(run_id: &str, status: &str, console: Vec<Value>, exit_code: Option<i64>) -> Value {
    json!({
        "runId": run_id,
        "status": status,
        "console": console,
        "exitCode": exit_code,
        "options": {},
        "files": [],
    })
}

fn console(output: &RunOutput) -> Option<Value> {
    match output {
        RunOutput::Stdout(text) => Some(json!(["stdout", text])),
        RunOutput::Stderr(text) => Some(json!(["stderr", text])),
        RunOutput::ExitCode(_) => None,
    }
}

/// Runs `steps` in session `id`, handing each result to `send` as it comes: output as
/// `continued`, each step's end with its status and exit code. A step that fails ends the
/// run as `finished`.
async fn run_steps<F, Fut>(
    state: &AppState,
    owner: &KeyOwner,
    id: Uuid,
    run_id: &str,
    steps: Vec<Step>,
    mut send: F,
) -> Result<(), Problem>
where
    F: FnMut(Value) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let last = steps.len().saturating_sub(1);
    for (i, step) in steps.into_iter().enumerate() {
        let output = exec(state, owner, id, &step.run).await?;
        futures::pin_mut!(output);
        let mut code = None;
        while let Some(out) = output.next().await {
            match console(&out) {
                Some(line) => {
                    if !send(result(run_id, "continued", vec![line], None)).await {
                        return Ok(());
                    }
                }
                None => {
                    if let RunOutput::ExitCode(c) = out {
                        code = Some(c);
                    }
                }
            }
        }
        let failed = code != Some(0);
        let ends = if failed || i == last {
            "finished"
        } else {
            step.ends
        };
        if !send(result(run_id, ends, Vec::new(), code)).await || ends == "finished" {
            return Ok(());
        }
    }
    Ok(())
}

/// `POST /session/{ref}`: the run whole, its output gathered into one `finished` result.
pub(super) async fn execute(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
    body: Bytes,
) -> Result<Json<Value>, Problem> {
    let reference = reference(path)?;
    let params = query(raw.as_deref(), &[])?;
    let asked: Asked = serde_json::from_slice(if body.is_empty() { b"{}" } else { &body })
        .map_err(|e| Problem::invalid("code", format!("the body is JSON: {e}")))?;
    let steps = steps(&asked)?;
    let (owner, id) = target(&state, &caller, &params, &reference, false, Action::Act).await?;
    let run_id = asked
        .run_id
        .clone()
        .unwrap_or_else(|| Uuid::new_v4().simple().to_string());
    let (mut gathered, mut last) = (Vec::new(), Value::Null);
    run_steps(&state, &owner, id, &run_id, steps, |result| {
        if let Some(lines) = result["console"].as_array() {
            gathered.extend(lines.iter().cloned());
        }
        last = result;
        async { true }
    })
    .await?;
    last["console"] = Value::Array(gathered);
    last["status"] = json!("finished");
    Ok(Json(json!({ "result": last })))
}

/// `GET /stream/session/{ref}/execute`: a WebSocket whose first message asks (`code`,
/// `mode`, `options`), each result sent as it comes; the socket closes after `finished`.
pub(super) async fn stream_execute(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
    mut request: Request,
) -> Result<Response, Problem> {
    let reference = reference(path)?;
    let params = query(raw.as_deref(), &[])?;
    let (owner, id) = target(&state, &caller, &params, &reference, false, Action::Act).await?;
    let headers = request.headers();
    let wants_websocket = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|_| wants_websocket)
    else {
        return Err(Problem::new(
            StatusCode::UPGRADE_REQUIRED,
            "invalid-api-params",
            "A WebSocket is required.",
        ));
    };
    let accept = derive_accept_key(key.as_bytes());
    let upgrading = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrading.await else {
            return;
        };
        let socket =
            WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        serve(state, owner, id, socket).await;
    });
    let mut switching = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = switching.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    Ok(switching)
}

/// One run on a socket: the ask, the results, the close.
async fn serve<S>(state: AppState, owner: KeyOwner, id: Uuid, socket: WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sink, mut from_client) = socket.split();
    let sink = std::sync::Arc::new(tokio::sync::Mutex::new(sink));
    let asked = loop {
        match from_client.next().await {
            Some(Ok(Message::Text(text))) => break serde_json::from_str::<Asked>(&text),
            Some(Ok(Message::Binary(bytes))) => break serde_json::from_slice::<Asked>(&bytes),
            Some(Ok(_)) => continue,
            _ => return,
        }
    };
    let run_id = Uuid::new_v4().simple().to_string();
    let send = |value: Value| {
        let sink = sink.clone();
        async move {
            let text = value.to_string();
            sink.lock().await.send(Message::text(text)).await.is_ok()
        }
    };
    let outcome = match asked {
        Ok(asked) => match steps(&asked) {
            Ok(steps) => run_steps(&state, &owner, id, &run_id, steps, send).await,
            Err(refused) => Err(refused),
        },
        Err(e) => Err(Problem::invalid(
            "code",
            format!("the first message is JSON: {e}"),
        )),
    };
    if let Err(refused) = outcome {
        let said = match refused.msg {
            Some(msg) => format!("{}: {msg}\n", refused.title),
            None => format!("{}\n", refused.title),
        };
        let said = json!(["stderr", said]);
        let _ = send(result(&run_id, "finished", vec![said], Some(1))).await;
    }
    let _ = sink.lock().await.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(body: Value) -> Asked {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn a_query_runs_its_code_and_a_batch_its_commands_in_turn() {
        assert_eq!(
            steps(&asked(json!({"mode": "query", "code": "print(1)"}))).unwrap(),
            [Step {
                run: Run::Query("print(1)".into()),
                ends: "finished"
            }]
        );
        let batch = asked(json!({"mode": "batch", "code": "", "options":
            {"clean": null, "build": "make", "buildLog": false, "exec": "./a.out"}}));
        assert_eq!(
            steps(&batch).unwrap(),
            [
                Step {
                    run: Run::Shell("make".into()),
                    ends: "build-finished"
                },
                Step {
                    run: Run::Shell("./a.out".into()),
                    ends: "finished"
                }
            ]
        );
        assert!(steps(&asked(json!({"mode": "continue", "code": ""}))).is_err());
    }
}
