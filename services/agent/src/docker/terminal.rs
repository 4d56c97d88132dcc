//! The terminal, served by the agent itself: ttyd's protocol over a WebSocket, on a port of
//! the agent's own, relayed to a shell that the engine runs in the session's main kernel
//! (an exec with a TTY, resized as the client's window is). The shell is tmux
//! (`new-session -A -s main`: every tab shares one session, as the seeds describe): berth's
//! own, lent read-only at `/opt/berth` with its loader and libraries (`infra/runtime.sh`,
//! the agent's `runtime`), else the image's, otherwise `bash -l`, otherwise `sh -l`, in
//! `/home/work`: every image with a
//! `/bin/sh` has a terminal, `berth/shell` (busybox alone) and CUDA base images without
//! python3 included, and nothing but the shell runs in the container for it.
//!
//! Why here: berth's terminal used to be a Python script the agent ran with the image's own
//! python3, so an image without one had no terminal. A server lent to the container (a static
//! binary mounted into it) would need a build per architecture and a mount into every
//! container. The engine already does what a terminal needs, a process on a TTY and its
//! resizing, and the agent already speaks to the engine.
//!
//! The door is the one every app has. The agent listens for each interactive session on a
//! port of its publish address (where the engine publishes the other apps' ports), names it
//! in the main kernel's label (`ai.berth.terminal-port`) and reports it as the host port of
//! the terminal's container port (`domain::apps::TERMINAL_PORT`), so berth's proxy reaches it
//! through a circuit as it reaches any published port, and `berth session shell`, the
//! gateway's terminal page and any ttyd client keep working through it. The proxy hands it
//! the session's terminal token (`Authorization: token ...`, see `tty`), which its start
//! reported: the port alone lets nobody in. An agent that adopts the session after a restart
//! listens on the labelled port again, and the token is the same. The listener and every
//! terminal on it end with the session's task (the session's end, or the agent's stop; the
//! proxy closes the session's circuits too). The engine keeps an exec on a TTY running when
//! its client goes, so a terminal whose client leaves hangs its shell up itself (the shell
//! says its pid first): tmux's client detaches and its session stays for the next tab.
//!
//! Protocol (subprotocol `tty`): the client's first message is JSON with `columns` and `rows`
//! (and ttyd's `AuthToken`, unused: the proxy has let the client in); then each message
//! starts with a command byte. Client: `0` input, `1` resize (JSON), `2` pause, `3` resume.
//! Server: `0` output, `1` window title, `2` preferences (JSON). The shell's exit closes the
//! socket normally (1000), as ttyd does. `GET /token` answers as ttyd's does, for its own
//! page.
//!
//! The same door moves files in and out of the main kernel (`transfer`, at `/files`) and runs
//! code in it (`execute`, at `/exec`), for the gateway, behind the same token.
//!
//! A limit: bollard reads an exec's output with a decoder that takes a read beginning with a
//! byte 0, 1 or 2 for the header of a multiplexed frame. With a TTY such bytes come only from
//! binary output (`cat` of a binary file), which can stall that terminal until it is opened
//! again.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use domain::aggregate::SessionState;
use futures::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::{CancellationToken, DropGuard};
use uuid::Uuid;

use super::ctx::Ctx;
use super::spec::{LABEL_TERMINAL_PORT, SCRATCH};
use super::{execute, transfer};

/// What the exec runs: first a line with its pid (read by the relay, never shown), then
/// berth's own tmux (the runtime lent at `/opt/berth`), else the image's tmux, else bash,
/// else sh, each as a login shell, in the same process.
const SHELL: &str = "echo \"berth-terminal $$\"
if [ -x /opt/berth/bin/tmux ]; then exec /opt/berth/bin/tmux -2 new-session -A -s main; fi
if command -v tmux >/dev/null 2>&1; then exec tmux -2 new-session -A -s main; fi
if command -v bash >/dev/null 2>&1; then exec bash -l; fi
exec sh -l";

/// What the shell's first line starts with.
const PID_LINE: &[u8] = b"berth-terminal ";

/// How long keys typed before the program drew anything wait for it (a program that never
/// draws gets them then).
const INPUT_HELD_AT_MOST: Duration = Duration::from_secs(3);

/// How long the shell gets to say its pid.
const PID_WAIT: Duration = Duration::from_secs(15);

/// The window's size until the client says otherwise (ttyd's).
const DEFAULT_SIZE: (u16, u16) = (80, 24);

/// A listener for a session's terminal, on the agent's publish address: on `port`, or on a
/// free one when 0.
pub(super) async fn listen(ctx: &Ctx, port: u16) -> std::io::Result<TcpListener> {
    TcpListener::bind((ctx.config.publish_address.as_str(), port)).await
}

/// Serves `state`'s terminal into its main kernel `container` until the answer is dropped:
/// on `listener` when the session was just created, else (an adopted session) on the port
/// its container's label names. `None` when there is none to serve.
pub(super) async fn serve(
    ctx: &Ctx,
    state: &SessionState,
    container: &str,
    listener: Option<TcpListener>,
) -> Option<Serving> {
    let session_id = state.request.session_id;
    let listener = match listener {
        Some(listener) => listener,
        None => {
            let labelled = ctx
                .docker
                .inspect_container(container, None)
                .await
                .ok()
                .and_then(|c| c.config?.labels?.get(LABEL_TERMINAL_PORT)?.parse().ok())?;
            match listen(ctx, labelled).await {
                Ok(listener) => listener,
                Err(e) => {
                    tracing::warn!(%session_id, port = labelled, error = %e,
                        "the terminal's port could not be listened on again; the session has no terminal");
                    return None;
                }
            }
        }
    };
    let stop = CancellationToken::new();
    let door = Arc::new(Door {
        ctx: ctx.clone(),
        session_id,
        container: container.to_owned(),
        title: state.name.clone(),
        stop: stop.clone(),
    });
    tokio::spawn(accept(door, listener));
    ctx.terminals.set_served(session_id, true);
    Some(Serving {
        _stop: stop.drop_guard(),
        ctx: ctx.clone(),
        session_id,
    })
}

/// A session's terminal being served; dropped, it closes the listener and every terminal.
pub(super) struct Serving {
    _stop: DropGuard,
    ctx: Ctx,
    session_id: Uuid,
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.ctx.terminals.set_served(self.session_id, false);
    }
}

/// One session's terminal: where its shells run, and its stop.
struct Door {
    ctx: Ctx,
    session_id: Uuid,
    container: String,
    title: String,
    stop: CancellationToken,
}

async fn accept(door: Arc<Door>, listener: TcpListener) {
    loop {
        let accepted = tokio::select! {
            _ = door.stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was taken.
                tracing::debug!(error = %e, "the terminal could not accept");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let door = door.clone();
        tokio::spawn(async move {
            let stop = door.stop.clone();
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let door = door.clone();
                async move {
                    let path = request.uri().path().to_owned();
                    let answer = match (path.as_str(), refusal(&door, &request)) {
                        (transfer::FILES_PATH | execute::EXEC_PATH, Some(refused)) => {
                            refused.map(transfer::full)
                        }
                        (transfer::FILES_PATH, None) => {
                            transfer::answer(&door.ctx, &door.container, request).await
                        }
                        (execute::EXEC_PATH, None) => {
                            execute::answer(&door.ctx, &door.container, request).await
                        }
                        _ => answer(door, request).map(transfer::full),
                    };
                    Ok::<_, Infallible>(answer)
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = connection => {}
            }
        });
    }
}

/// The answer to a `request` without the session's terminal token, which berth's proxy and
/// gateway hand the door; `None` when it carries it.
fn refusal(door: &Door, request: &Request<Incoming>) -> Option<Response<String>> {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if door.ctx.terminals.admits(door.session_id, authorization) {
        return None;
    }
    Some(text(
        StatusCode::UNAUTHORIZED,
        "This terminal is reached through berth's proxy: start and open it with `berth \
         session app open SESSION ttyd`, `berth session shell SESSION` or the console.",
    ))
}

fn answer(door: Arc<Door>, mut request: Request<Incoming>) -> Response<String> {
    if let Some(refused) = refusal(&door, &request) {
        return refused;
    }
    match request.uri().path() {
        "/token" => {
            let mut answer = Response::new(r#"{"token": ""}"#.to_owned());
            answer.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return answer;
        }
        "/ws" => {}
        _ => return text(
            StatusCode::NOT_FOUND,
            "berth's terminal speaks ttyd's protocol over a WebSocket at /ws (subprotocol tty).",
        ),
    }
    let headers = request.headers();
    let wants_websocket = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .filter(|_| wants_websocket)
    else {
        return text(
            StatusCode::UPGRADE_REQUIRED,
            "/ws is a WebSocket (subprotocol tty).",
        );
    };
    let accept = derive_accept_key(key.as_bytes());
    let tty = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == "tty");
    let upgrading = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        match upgrading.await {
            Ok(upgraded) => {
                let socket =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                relay(&door, socket).await;
            }
            Err(e) => tracing::debug!(error = %e, "a terminal's upgrade failed"),
        }
    });
    let mut switching = Response::new(String::new());
    *switching.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = switching.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if tty {
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("tty"),
        );
    }
    switching
}

fn text(status: StatusCode, body: &str) -> Response<String> {
    let mut answer = Response::new(format!("{body}\n"));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    answer
}

/// A message of ttyd's protocol, prefixed by its command byte.
fn frame(command: u8, body: &[u8]) -> Message {
    let mut data = Vec::with_capacity(body.len() + 1);
    data.push(command);
    data.extend_from_slice(body);
    Message::binary(data)
}

/// Runs one terminal: the client's hello, a shell in the container sized to it, then keys in
/// and the screen out until the shell exits, the client leaves or the session's terminal
/// stops.
async fn relay<S>(door: &Door, socket: WebSocketStream<S>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client, mut from_client) = socket.split();
    let hello = tokio::select! {
        _ = door.stop.cancelled() => return,
        hello = from_client.next() => hello,
    };
    let Some(Ok(hello)) = hello else { return };
    let (columns, rows) = hello_size(&hello.into_data());
    let (exec, mut output, mut input) = match shell(door).await {
        Ok(shell) => shell,
        Err(reason) => {
            tracing::info!(session = %door.session_id, %reason, "no shell for a terminal");
            let said = format!("berth: {reason}\r\n");
            let _ = client.send(frame(b'0', said.as_bytes())).await;
            let _ = client
                .send(Message::Close(Some(CloseFrame {
                    code: CloseCode::Error,
                    reason: "no shell".into(),
                })))
                .await;
            return;
        }
    };
    resize(door, &exec, columns, rows).await;
    let _ = client.send(frame(b'1', door.title.as_bytes())).await;
    let _ = client.send(frame(b'2', b"{}")).await;
    let (pid, first) = shell_pid(&mut output).await;
    if !first.is_empty() && client.send(frame(b'0', &first)).await.is_err() {
        if let Some(pid) = pid {
            hang_up(door, pid).await;
        }
        return;
    }
    // Whether the shell is still there to hang up when the relay ends.
    let mut running = pid.is_some();
    let mut paused = false;
    // Keys typed before the program has drawn anything are held until it has (or for
    // INPUT_HELD_AT_MOST): tmux flushes the terminal's pending input as it takes it over,
    // so keys sent at once on connecting would be echoed and lost.
    let mut held: Option<Vec<u8>> = first.is_empty().then(Vec::new);
    let release = tokio::time::sleep(INPUT_HELD_AT_MOST);
    tokio::pin!(release);
    loop {
        tokio::select! {
            _ = &mut release, if held.is_some() => {
                let keys = held.take().unwrap_or_default();
                if !keys.is_empty() && (input.write_all(&keys).await.is_err() || input.flush().await.is_err()) {
                    break;
                }
            }
            _ = door.stop.cancelled() => {
                let _ = client.send(Message::Close(Some(CloseFrame {
                    code: CloseCode::Away,
                    reason: "the session ended".into(),
                }))).await;
                break;
            }
            message = from_client.next() => {
                let data = match message {
                    Some(Ok(Message::Binary(data))) => data,
                    Some(Ok(Message::Text(text))) => text.into(),
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                    Some(Ok(_)) => continue,
                };
                match command(&data) {
                    Command::Input(keys) => {
                        if let Some(waiting) = held.as_mut() {
                            waiting.extend_from_slice(keys);
                        } else if input.write_all(keys).await.is_err() || input.flush().await.is_err() {
                            break;
                        }
                    }
                    Command::Resize { columns, rows } => resize(door, &exec, columns, rows).await,
                    Command::Pause => paused = true,
                    Command::Resume => paused = false,
                    Command::Other => {}
                }
            }
            chunk = output.next(), if !paused => match chunk {
                Some(Ok(chunk)) => {
                    if client.send(frame(b'0', &chunk.into_bytes())).await.is_err() {
                        break;
                    }
                    if let Some(keys) = held.take() {
                        if !keys.is_empty() && (input.write_all(&keys).await.is_err() || input.flush().await.is_err()) {
                            break;
                        }
                    }
                }
                // The shell exited: a normal close, as ttyd's.
                _ => {
                    running = false;
                    let _ = client.send(Message::Close(Some(CloseFrame {
                        code: CloseCode::Normal,
                        reason: "".into(),
                    }))).await;
                    break;
                }
            },
        }
    }
    // The engine keeps an exec on a TTY running when its client goes: the shell is hung up
    // as a terminal's closing would, so nothing is left running for a terminal nobody holds.
    let _ = input.shutdown().await;
    let _ = client.close().await;
    if let (true, Some(pid)) = (running, pid) {
        hang_up(door, pid).await;
    }
}

/// Reads the shell's first line, its pid: the pid, and what came besides it (all of it when
/// the line never came, as when the engine could not start the shell and said why).
async fn shell_pid(output: &mut Output) -> (Option<u32>, Vec<u8>) {
    let mut seen = Vec::new();
    let reading = async {
        while let Some(Ok(chunk)) = output.next().await {
            seen.extend_from_slice(&chunk.into_bytes());
            if seen.contains(&b'\n') {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(PID_WAIT, reading).await;
    match first_line_pid(&seen) {
        Some((pid, rest)) => (Some(pid), seen[rest..].to_vec()),
        None => (None, seen),
    }
}

/// The pid in a shell's first line (`berth-terminal 42`, ended by the TTY's `\r\n`) and where
/// the rest begins. Pure.
fn first_line_pid(output: &[u8]) -> Option<(u32, usize)> {
    let end = output.iter().position(|&b| b == b'\n')?;
    let line = output[..end].strip_prefix(PID_LINE)?;
    let pid = std::str::from_utf8(line).ok()?.trim().parse().ok()?;
    Some((pid, end + 1))
}

/// Hangs up shell `pid` of a terminal, as the kernel does when a terminal closes: SIGHUP to
/// its foreground job's process group, then to the shell (bash passes it on to its other
/// jobs; tmux's client detaches, its server and session stay).
async fn hang_up(door: &Door, pid: u32) {
    let line = format!(
        "t=$(sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f6); \
         [ \"${{t:-0}}\" -gt 1 ] && kill -s HUP -\"$t\" 2>/dev/null; kill -s HUP {pid} 2>/dev/null"
    );
    let exec = door
        .ctx
        .docker
        .create_exec(
            &door.container,
            CreateExecOptions {
                cmd: Some(vec!["/bin/sh".to_owned(), "-c".to_owned(), line]),
                ..Default::default()
            },
        )
        .await;
    let started = match exec {
        Ok(exec) => {
            let detached = StartExecOptions {
                detach: true,
                ..Default::default()
            };
            door.ctx
                .docker
                .start_exec(&exec.id, Some(detached))
                .await
                .map(|_| ())
        }
        Err(e) => Err(e),
    };
    if let Err(e) = started {
        tracing::debug!(session = %door.session_id, error = %e, "a terminal's shell was not hung up");
    }
}

type Output = std::pin::Pin<
    Box<
        dyn futures::Stream<Item = Result<bollard::container::LogOutput, bollard::errors::Error>>
            + Send,
    >,
>;
type Input = std::pin::Pin<Box<dyn AsyncWrite + Send>>;

/// A shell on a TTY in the session's main kernel: its exec's id, its screen and its keys.
async fn shell(door: &Door) -> Result<(String, Output, Input), String> {
    let docker = &door.ctx.docker;
    let exec = docker
        .create_exec(
            &door.container,
            CreateExecOptions {
                cmd: Some(vec![
                    "/bin/sh".to_owned(),
                    "-c".to_owned(),
                    SHELL.to_owned(),
                ]),
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(true),
                env: Some(vec!["TERM=xterm-256color".to_owned()]),
                working_dir: Some(SCRATCH.to_owned()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("the session's container does not take a shell: {e}"))?;
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty: true,
                output_capacity: None,
            }),
        )
        .await
        .map_err(|e| format!("the shell did not start: {e}"))?;
    match started {
        StartExecResults::Attached { output, input } => Ok((exec.id, output, input)),
        StartExecResults::Detached => Err("the shell started detached".to_owned()),
    }
}

async fn resize(door: &Door, exec: &str, columns: u16, rows: u16) {
    let size = ResizeExecOptions {
        height: rows,
        width: columns,
    };
    if let Err(e) = door.ctx.docker.resize_exec(exec, size).await {
        tracing::debug!(session = %door.session_id, error = %e, "a terminal was not resized");
    }
}

/// What a client's message asks for.
#[derive(Debug, PartialEq, Eq)]
enum Command<'a> {
    Input(&'a [u8]),
    Resize {
        columns: u16,
        rows: u16,
    },
    Pause,
    Resume,
    /// Empty, or a command this server does not know: ignored, as ttyd does.
    Other,
}

/// Reads a client's message. Pure.
fn command(data: &[u8]) -> Command<'_> {
    let Some((&byte, body)) = data.split_first() else {
        return Command::Other;
    };
    match byte {
        b'0' => Command::Input(body),
        b'1' => {
            let (columns, rows) = hello_size(body);
            Command::Resize { columns, rows }
        }
        b'2' => Command::Pause,
        b'3' => Command::Resume,
        _ => Command::Other,
    }
}

/// The window's size in a hello or a resize (`{"columns": .., "rows": ..}`): each clamped to
/// 1..=65535, and ttyd's default where it is missing or not a number. Pure.
fn hello_size(json: &[u8]) -> (u16, u16) {
    let value: serde_json::Value = serde_json::from_slice(json).unwrap_or_default();
    let read = |name: &str, default: u16| {
        value
            .get(name)
            .and_then(serde_json::Value::as_f64)
            .filter(|n| n.is_finite())
            .map_or(default, |n| n.clamp(1.0, f64::from(u16::MAX)) as u16)
    };
    (
        read("columns", DEFAULT_SIZE.0),
        read("rows", DEFAULT_SIZE.1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_messages_are_read_by_their_command_byte() {
        assert_eq!(command(b"0ls\r"), Command::Input(b"ls\r"));
        assert_eq!(
            command(br#"1{"columns": 100, "rows": 40}"#),
            Command::Resize {
                columns: 100,
                rows: 40
            }
        );
        assert_eq!(command(b"2"), Command::Pause);
        assert_eq!(command(b"3"), Command::Resume);
        assert_eq!(command(b""), Command::Other);
        assert_eq!(command(b"9what"), Command::Other);
    }

    #[test]
    fn the_shells_pid_is_read_from_its_first_line() {
        assert_eq!(
            first_line_pid(b"berth-terminal 42\r\n# "),
            Some((42, 19)),
            "the rest is the prompt"
        );
        assert_eq!(first_line_pid(b"berth-terminal 42"), None, "not whole yet");
        assert_eq!(
            first_line_pid(b"OCI runtime exec failed: no /bin/sh\r\n"),
            None
        );
        assert_eq!(first_line_pid(b"berth-terminal x\r\n"), None);
    }

    #[test]
    fn a_window_size_is_read_with_ttyds_defaults_and_bounds() {
        let hello = br#"{"AuthToken": "", "columns": 120, "rows": 30}"#;
        assert_eq!(hello_size(hello), (120, 30));
        assert_eq!(hello_size(br#"{"columns": 99.6, "rows": 0}"#), (99, 1));
        assert_eq!(hello_size(br#"{"columns": 1e9}"#), (65535, 24));
        assert_eq!(hello_size(b"not json"), DEFAULT_SIZE);
        assert_eq!(hello_size(br#"{"columns": "wide"}"#), DEFAULT_SIZE);
    }
}
