//! Starting a session's app in its main kernel: the image's service definition
//! (`/etc/berth/service-defs/<app>.json`, or Backend.AI's `/etc/backend.ai/service-defs/`)
//! run as a detached exec with a fresh secret, then the container port watched (the kernel's
//! own `/proc/net/tcp*`, since the engine's proxy accepts on the host side whether or not
//! anything listens inside) until it listens, or the definition's time is up and the process
//! is killed. An app whose port already listens is reported started without a second
//! process. Starts of one session take turns. The terminal is the agent's own (`terminal`):
//! its start checks that the container has a shell and reports the terminal's token.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bus::protocol::{Answer, Fact, Request, SshKey};
use domain::payloads::AppStartOutcome;
use futures::StreamExt;
use rand::Rng;
use serde::Deserialize;
use uuid::Uuid;

use super::ctx::Ctx;
use super::spec::container_name;

/// Where images keep their apps' definitions, berth's first.
const SERVICE_DEFS: [&str; 2] = ["/etc/berth/service-defs", "/etc/backend.ai/service-defs"];

/// How long an app gets to open its port unless its definition says otherwise (Backend.AI's
/// figure; JupyterLab in a small container takes several seconds).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What an image says about starting one of its apps.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ServiceDef {
    /// The server's command line, as argv or as one shell line; `{port}` and `{token}` are
    /// filled in.
    pub command: CommandLine,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub ready_timeout_secs: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum CommandLine {
    Argv(Vec<String>),
    Shell(String),
}

impl ServiceDef {
    /// The argv to exec: the server's command with `port` and `token` filled in, wrapped so
    /// that its pid and output land in `/tmp/berth-app-<app>.{pid,log}`.
    pub fn argv(&self, app: &str, port: u16, token: &str) -> Vec<String> {
        let fill = |s: &str| {
            s.replace("{port}", &port.to_string())
                .replace("{token}", token)
        };
        let server: Vec<String> = match &self.command {
            CommandLine::Argv(argv) => argv.iter().map(|a| fill(a)).collect(),
            CommandLine::Shell(line) => vec!["/bin/sh".into(), "-c".into(), fill(line)],
        };
        let wrapper = format!(
            "echo $$ > /tmp/berth-app-{app}.pid; exec \"$@\" >> /tmp/berth-app-{app}.log 2>&1"
        );
        ["/bin/sh", "-c", &wrapper, "sh"]
            .into_iter()
            .map(String::from)
            .chain(server)
            .collect()
    }
}

/// Whether `/proc/net/tcp` or `tcp6` text shows a socket listening on `port`.
pub fn listens(proc_net_tcp: &str, port: u16) -> bool {
    let wanted = format!("{port:04X}");
    proc_net_tcp.lines().skip(1).any(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1).unwrap_or_default();
        let state = fields.nth(1).unwrap_or_default();
        state == "0A" && local.rsplit(':').next() == Some(wanted.as_str())
    })
}

/// One lock per session, so that two starts of one app never race.
#[derive(Clone, Default)]
pub(super) struct Turns(Arc<Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>>>);

impl Turns {
    fn of(&self, session_id: Uuid) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.0.lock().unwrap_or_else(|e| e.into_inner());
        turns.retain(|_, t| Arc::strong_count(t) > 1);
        turns.entry(session_id).or_default().clone()
    }
}

/// Starts `app` of `session_id` and reports how it went.
pub(super) async fn start(
    ctx: Ctx,
    turns: Turns,
    session_id: Uuid,
    start_id: Uuid,
    app: String,
    port: u16,
) {
    let turn = turns.of(session_id);
    let outcome = {
        let _turn = turn.lock().await;
        run(&ctx, session_id, &app, port)
            .await
            .unwrap_or_else(|reason| AppStartOutcome::Failed { reason })
    };
    tracing::info!(%session_id, %app, ?outcome, "app start ended");
    let fact = Fact::AppStartEnded {
        start_id,
        app,
        outcome,
    };
    if let Err(e) = ctx.link.report(session_id, fact, &ctx.stop).await {
        tracing::warn!(%session_id, error = %e, "an app's start was not reported");
    }
}

async fn run(ctx: &Ctx, session_id: Uuid, app: &str, port: u16) -> Result<AppStartOutcome, String> {
    let container = container_name(session_id, 0);
    if app == domain::apps::TERMINAL {
        return terminal(ctx, session_id, &container).await;
    }
    if listening(ctx, &container, port).await? {
        return Ok(AppStartOutcome::Started { token: None });
    }
    let def = match app {
        domain::apps::SSH => Some(ssh_def()),
        _ => service_def(ctx, &container, app).await?,
    };
    let def = def.ok_or_else(|| {
        format!(
            "the image has no service definition for `{app}` (in {}); start its server inside \
             the session",
            SERVICE_DEFS.join(" or ")
        )
    })?;
    let token = hex::encode(rand::rng().random::<[u8; 24]>());
    let env: Vec<String> = def
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .chain([format!("BERTH_APP_TOKEN={token}")])
        .collect();
    let exec = ctx
        .docker
        .create_exec(
            &container,
            CreateExecOptions {
                cmd: Some(def.argv(app, port, &token)),
                env: Some(env),
                working_dir: Some(super::spec::SCRATCH.to_owned()),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("the app's command could not be set up: {e}"))?;
    ctx.docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: true,
                ..Default::default()
            }),
        )
        .await
        .map_err(|e| format!("the app's command did not start: {e}"))?;
    let timeout = def
        .ready_timeout_secs
        .map_or(READY_TIMEOUT, Duration::from_secs);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if listening(ctx, &container, port).await? {
            return Ok(AppStartOutcome::Started { token: Some(token) });
        }
        let alive = output(
            ctx,
            &container,
            &format!("kill -0 \"$(cat /tmp/berth-app-{app}.pid)\" 2>/dev/null && echo alive"),
        )
        .await?;
        if !alive.contains("alive") {
            let log = output(
                ctx,
                &container,
                &format!("tail -c 400 /tmp/berth-app-{app}.log"),
            )
            .await
            .unwrap_or_default();
            return Err(format!(
                "the app exited before it opened port {port}: {}",
                log.trim()
            ));
        }
        if tokio::time::Instant::now() >= deadline {
            let _ = output(
                ctx,
                &container,
                &format!("kill \"$(cat /tmp/berth-app-{app}.pid)\""),
            )
            .await;
            return Err(format!(
                "the app did not open port {port} within {} s; it was stopped",
                timeout.as_secs()
            ));
        }
    }
}

/// The terminal, which the agent serves while the session runs: started once the container
/// answers with a shell, its token the session's.
async fn terminal(ctx: &Ctx, session_id: Uuid, container: &str) -> Result<AppStartOutcome, String> {
    if !ctx.terminals.serves(session_id) {
        return Err(
            "this agent serves no terminal for the session (only an interactive session \
             running here has one)"
                .to_owned(),
        );
    }
    let answered = output(ctx, container, "echo shell-$((6*7))").await?;
    if !answered.contains("shell-42") {
        return Err(format!(
            "the terminal needs /bin/sh in the image: {}",
            answered.trim()
        ));
    }
    Ok(AppStartOutcome::Started {
        token: Some(ctx.terminals.token(session_id)),
    })
}

/// What starts the SSH server: Debian's dropbear, when the image has it (berth cannot lend
/// an image a binary, as Backend.AI's agent does), keys only, with a host key made once per
/// session in its scratch. It logs in whoever `authorized_keys` lets in, as the account the
/// client names (`work` in berth's images).
const SSH_SERVER: &str = r#"PATH="$PATH:/usr/sbin:/sbin"
if ! command -v dropbear >/dev/null; then
  echo "the image has no SSH server; install Debian's dropbear-bin in it"; exit 127
fi
mkdir -p /home/work/.ssh && chmod 700 /home/work/.ssh
key=/home/work/.ssh/berth_host_ed25519
[ -f "$key" ] || dropbearkey -t ed25519 -f "$key" >/dev/null
exec dropbear -F -E -s -p {port} -r "$key" -K 15"#;

fn ssh_def() -> ServiceDef {
    ServiceDef {
        command: CommandLine::Shell(SSH_SERVER.to_owned()),
        env: BTreeMap::new(),
        ready_timeout_secs: Some(15),
    }
}

/// Gives an interactive session its SSH key, as Backend.AI's users expect: a new ed25519 pair,
/// the private half at `/home/work/id_container` and the public half in
/// `/home/work/.ssh/authorized_keys` (both 0600, the directory 0700), unless the session's
/// scratch already has an `authorized_keys`; the private half is also handed to the control
/// plane, which keeps it apart from the log for the owner to download. The start waits for
/// it (one exec, beside the reading of the started containers), so a running session has its
/// key; a failure is logged and the session runs without one.
pub(super) async fn install_ssh_key(ctx: &Ctx, session_id: Uuid) {
    use ssh_key::rand_core::OsRng;
    let key =
        ssh_key::PrivateKey::random(&mut OsRng, ssh_key::Algorithm::Ed25519).and_then(|mut key| {
            key.set_comment(format!("berth-session-{}", session_id.simple()));
            let private = key.to_openssh(ssh_key::LineEnding::LF)?;
            Ok((private.to_string(), key.public_key().to_openssh()?))
        });
    let (private, public) = match key {
        Ok(pair) => pair,
        Err(e) => {
            tracing::warn!(%session_id, error = %e, "no SSH key was made");
            return;
        }
    };
    let exec = ctx
        .docker
        .create_exec(
            &container_name(session_id, 0),
            CreateExecOptions {
                cmd: Some(vec![
                    "/bin/sh".to_owned(),
                    "-c".to_owned(),
                    "umask 077; cd /home/work && [ ! -e .ssh/authorized_keys ] && mkdir -p .ssh \
                     && printf '%s\n' \"$BERTH_SSH_PUBLIC\" > .ssh/authorized_keys \
                     && printf '%s' \"$BERTH_SSH_PRIVATE\" > id_container"
                        .to_owned(),
                ]),
                env: Some(vec![
                    format!("BERTH_SSH_PUBLIC={public}"),
                    format!("BERTH_SSH_PRIVATE={private}"),
                ]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await;
    let exec = match exec {
        Ok(exec) => exec,
        Err(e) => {
            tracing::warn!(%session_id, error = %e, "the SSH key was not written");
            return;
        }
    };
    match ctx
        .docker
        .start_exec(&exec.id, None::<StartExecOptions>)
        .await
    {
        Ok(StartExecResults::Attached { mut output, .. }) => while output.next().await.is_some() {},
        Ok(StartExecResults::Detached) => {}
        Err(e) => {
            tracing::warn!(%session_id, error = %e, "the SSH key was not written");
            return;
        }
    }
    // Written (a scratch that had its own authorized_keys keeps it, and this key is not
    // used): the control plane keeps its private half for the owner to download.
    let written = ctx
        .docker
        .inspect_exec(&exec.id)
        .await
        .is_ok_and(|inspected| inspected.exit_code == Some(0));
    if written {
        let key = SshKey {
            session_id,
            private_key: private,
        };
        match ctx.link.ask(&Request::KeepSshKey(key), &ctx.stop).await {
            Ok(Answer::Done) => {}
            other => tracing::info!(%session_id, answer = ?other, "the SSH key was not kept"),
        }
    }
}

async fn listening(ctx: &Ctx, container: &str, port: u16) -> Result<bool, String> {
    let table = output(
        ctx,
        container,
        "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null",
    )
    .await?;
    Ok(listens(&table, port))
}

async fn service_def(ctx: &Ctx, container: &str, app: &str) -> Result<Option<ServiceDef>, String> {
    for dir in SERVICE_DEFS {
        let text = output(ctx, container, &format!("cat {dir}/{app}.json 2>/dev/null")).await?;
        if text.trim().is_empty() {
            continue;
        }
        return serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{dir}/{app}.json is not a service definition: {e}"));
    }
    Ok(None)
}

/// What a shell line prints in the container (stdout and stderr).
async fn output(ctx: &Ctx, container: &str, line: &str) -> Result<String, String> {
    let exec = ctx
        .docker
        .create_exec(
            container,
            CreateExecOptions {
                cmd: Some(vec!["/bin/sh", "-c", line]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("the session's container does not answer: {e}"))?;
    let started = ctx
        .docker
        .start_exec(&exec.id, None::<StartExecOptions>)
        .await
        .map_err(|e| format!("the session's container does not answer: {e}"))?;
    let mut text = String::new();
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(Ok(chunk)) = output.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_port_is_read_from_proc_net_tcp() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:22B8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D4C2 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1";
        assert!(listens(table, 8888), "0x22B8 listening");
        assert!(!listens(table, 8080), "0x1F90 only connected");
    }

    #[test]
    fn a_definition_fills_in_its_port_and_token_and_keeps_its_pid() {
        let def: ServiceDef = serde_json::from_str(
            r#"{"command": ["jupyter", "lab", "--port={port}", "--token={token}"]}"#,
        )
        .unwrap();
        let argv = def.argv("jupyter", 8888, "s3cr3t");
        assert_eq!(&argv[..2], ["/bin/sh", "-c"]);
        assert!(argv[2].contains("/tmp/berth-app-jupyter.pid"));
        assert_eq!(
            &argv[4..],
            ["jupyter", "lab", "--port=8888", "--token=s3cr3t"]
        );
        let shell: ServiceDef = serde_json::from_str(
            r#"{"command": "python3 -m http.server {port}", "ready_timeout_secs": 5}"#,
        )
        .unwrap();
        assert_eq!(
            shell.argv("web", 9000, "t").last().unwrap(),
            "python3 -m http.server 9000"
        );
    }
}
