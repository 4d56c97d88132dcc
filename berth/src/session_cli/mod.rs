//! `berth session ...`: the gateway's API from the command line (BERTH_GATEWAY_URL,
//! BERTH_API_KEY). A session is named by its id or by its name (yours, or for a superadmin
//! anyone's: a name that several users' sessions share is refused, listing them). Every read
//! command prints a table, a wider table, or the API's answer as JSON or YAML (`-o`).

mod copy;
mod exec;
mod output;
mod progress;
mod views;
mod wait;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use futures::StreamExt;
use serde_json::{json, Value};

use berth::config::Config;
use gateway::model::{Logs, SessionDetail};
pub use output::{bytes, Output};
use views::View;

#[derive(Subcommand)]
pub enum SessionCommand {
    /// Create sessions (prints their ids).
    Create(Box<CreateArgs>),
    /// List sessions.
    Ls {
        #[arg(long = "type")]
        session_type: Option<String>,
        /// running or finished
        #[arg(long)]
        state: Option<String>,
        /// An owner's email (superadmins).
        #[arg(long)]
        owner: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Keep the list on screen, drawn again whenever a session comes, goes or moves
        /// (until interrupted).
        #[arg(long, short)]
        watch: bool,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Show a session's detail.
    #[command(visible_alias = "show")]
    Info {
        session: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Show a session's scheduling history.
    History {
        session: String,
        #[arg(long)]
        result: Option<String>,
        #[arg(long)]
        phase: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Rename a session (4 to 64 letters and digits, unique among your live sessions).
    Rename { session: String, name: String },
    /// Print each kernel's container output.
    Logs {
        session: String,
        /// Keep printing new output as it comes, until the session ends.
        #[arg(long, short)]
        follow: bool,
        /// `json`: the kept output per kernel as the API answers (not with --follow).
        #[arg(
            short = 'o',
            long,
            value_enum,
            default_value_t,
            conflicts_with = "follow"
        )]
        output: Output,
    },
    /// Wait until a session has ended, and exit as it did: a batch session's exit code, 0 for
    /// a session terminated without one, 1 for one that failed or was cancelled. With
    /// `--for STATUS`, until it is in that status (1 when it ends without reaching it).
    /// Draws the image pull's progress on a terminal.
    Wait {
        session: String,
        /// A status to wait for (e.g. running) instead of the end.
        #[arg(long = "for")]
        wanted: Option<String>,
        /// Give up after this many seconds (exit 124, as timeout(1) does).
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Run a command in a batch session of IMAGE: its output is printed as it comes, and
    /// this exits as the command did (its exit code; 1 when the session failed or was
    /// cancelled). Interrupted, it terminates the session. `berth session run berth/shell:latest
    /// -- sh -c 'echo hi; exit 3'` prints `hi` and exits 3.
    Run(Box<RunArgs>),
    /// Terminate a session (--force ends it at once).
    Rm {
        session: String,
        #[arg(long)]
        force: bool,
    },
    /// Follow the events of your sessions (all events for superadmins).
    Events,
    /// Commit a RUNNING interactive session to a customized image of its owner's (4 to 32
    /// letters, digits, `-` and `_`); folders and /home/work are left out.
    Commit {
        session: String,
        name: String,
        /// Print the commit's steps as they happen, until it is done or failed.
        #[arg(long, short)]
        follow: bool,
    },
    /// List your customized images, or remove one (`--rm NAME`).
    Images {
        #[arg(long)]
        rm: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// A session's apps: list them, start one, open one through berth's proxy (prints its
    /// URL), close one.
    #[command(subcommand)]
    App(AppCommand),
    /// Print the private half of the SSH key berth installed in an interactive session, to
    /// log in over its `sshd` app: `berth session ssh-key S > id_container; chmod 600
    /// id_container`.
    SshKey { session: String },
    /// Open the session's terminal (tmux inside) in this terminal, through berth's proxy;
    /// it ends when the shell inside exits.
    Shell { session: String },
    /// Copy files between here and a running interactive session's main kernel, as `docker
    /// cp` does: `berth session cp data.csv job1:/home/work/`, `berth session cp
    /// job1:results ./out` (a path in the session is absolute, or relative to /home/work; a
    /// directory is copied whole).
    Cp { from: String, to: String },
    /// Run a command in a running interactive session's main kernel, as `docker exec` does:
    /// its output is printed as it comes and this exits as it did. `berth session exec job1
    /// -- ls -la /home/work`.
    Exec {
        session: String,
        /// The command and its arguments, after `--` (each kept whole).
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// The environments (images and their versions) the agents of my groups offer, my
    /// customized images among them.
    Environments {
        #[arg(long)]
        group: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// The resource groups open to me, with what each holds and has free.
    Groups {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// The agents of my groups and what each has free (superadmins: every agent, how long
    /// since it was heard, its sessions).
    Agents {
        #[arg(long)]
        group: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// My recent launches (the five newest and the pinned), each with the request it sent.
    Launches {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Rename (`--label`, empty for none) or pin (`--pinned true|false`) one of my launches.
    Launch {
        id: String,
        #[arg(long)]
        label: Option<String>,
        #[arg(long)]
        pinned: Option<bool>,
    },
    /// Set my password, with which I sign in to the web console: the new one from
    /// BERTH_NEW_PASSWORD or the first line of standard input, the current one (when I have
    /// one) from BERTH_CURRENT_PASSWORD; never a flag, which the process list would show.
    Password,
    /// My notifications (a session of mine ended, failed, was reaped...), newest first.
    Notifications {
        /// Only those not read yet.
        #[arg(long)]
        unread: bool,
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Every resource group's pending sessions in the order the scheduler tries them, with
    /// why each waits (superadmins).
    Queue {
        #[arg(long)]
        group: Option<String>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
}

#[derive(Subcommand)]
pub enum AppCommand {
    /// The session's apps (the terminal, its image's apps, its preopen ports) and the
    /// circuits open to them.
    List {
        session: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Start an app in the session (from its image's definition); returns once it listens.
    Start {
        session: String,
        app: String,
        /// One of the app's container ports (its first by default).
        #[arg(long)]
        port: Option<u16>,
    },
    /// Open an app through berth's proxy, starting it first when the image defines how, and
    /// print the URL to point a browser at (for a private app a link that works once, within
    /// a minute).
    Open {
        session: String,
        app: String,
        /// Let anyone who reaches the proxy's port in, not only you.
        #[arg(long)]
        public: bool,
        /// Only clients from these IPv4 addresses or ranges (repeatable).
        #[arg(long = "allow")]
        allowed_ips: Vec<String>,
        /// The proxy port you would like (another is given, and said, when it is taken).
        #[arg(long)]
        preferred_port: Option<u16>,
        /// One of the app's container ports (its first by default).
        #[arg(long)]
        port: Option<u16>,
    },
    /// Close an app's circuits: their ports stop serving.
    Close { session: String, app: String },
    /// Reach a raw TCP app (the SSH server `sshd`, VNC, ...) from this machine: starts it,
    /// opens it privately, and carries each connection to a local port through the proxy
    /// (e.g. `ssh -i id_container -p PORT work@127.0.0.1`).
    Tunnel {
        session: String,
        app: String,
        /// The local address to listen on.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Carry one connection on standard input and output instead, and end with it (for
        /// `ssh -o ProxyCommand="berth session app tunnel SESSION sshd --stdio"`).
        #[arg(long, conflicts_with = "listen")]
        stdio: bool,
    },
}

/// What `berth session create` takes.
#[derive(clap::Args)]
pub struct CreateArgs {
    /// An image the agents offer, e.g. berth/python:latest.
    #[arg(long)]
    image: String,
    /// 4 to 64 letters and digits (random words and digits when absent).
    #[arg(long)]
    name: Option<String>,
    /// interactive, batch, inference or system
    #[arg(long = "type", default_value = "interactive")]
    session_type: String,
    /// Cores, e.g. 0.5
    #[arg(long)]
    cpu: Option<f64>,
    /// Bytes or a size such as 512m, 4g
    #[arg(long)]
    memory: Option<String>,
    /// /dev/shm size, not above the memory (default 64m).
    #[arg(long)]
    shared_memory: Option<String>,
    /// GPUs, fractions allowed, e.g. 0.5.
    #[arg(long)]
    gpu: Option<f64>,
    /// A saved resource preset; the resource options given override it.
    #[arg(long)]
    preset: Option<String>,
    /// The resource group (default: `default`).
    #[arg(long)]
    group: Option<String>,
    /// The project it belongs to (one you are a member of).
    #[arg(long)]
    project: Option<String>,
    /// NAME=VALUE (repeatable)
    #[arg(long = "env")]
    environment: Vec<String>,
    /// A container port (1024-65535) to publish on the host (repeatable).
    #[arg(long = "port")]
    ports: Vec<u32>,
    /// One of your folders, mounted at /home/work/<name> (repeatable).
    #[arg(long = "mount")]
    mounts: Vec<String>,
    /// The startup command of a batch session.
    #[arg(long)]
    command: Option<String>,
    /// RFC 3339 time a batch session starts at the earliest.
    #[arg(long)]
    starts_at: Option<String>,
    /// Seconds a batch session may run.
    #[arg(long)]
    timeout: Option<u64>,
    /// Run it on this agent (chosen by hand).
    #[arg(long)]
    agent: Option<String>,
    /// Create it for this user (admins).
    #[arg(long)]
    owner: Option<String>,
    /// Containers (kernels) in the session, 1 to 32.
    #[arg(long)]
    cluster_size: Option<u32>,
    /// single-node or multi-node
    #[arg(long)]
    cluster_mode: Option<String>,
    /// How many sessions.
    #[arg(long, default_value_t = 1)]
    count: u32,
}

/// An HTTP client for the gateway: `https://` checked against the system's roots and, with
/// `BERTH_GATEWAY_CA`, that CA (a gateway with a private or self-signed certificate).
pub fn gateway_client(config: &Config) -> anyhow::Result<reqwest::Client> {
    events::tls::use_ring();
    let mut builder = reqwest::Client::builder();
    if let Some(ca) = &config.gateway_ca {
        let pem =
            std::fs::read(ca).with_context(|| format!("BERTH_GATEWAY_CA `{}`", ca.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("BERTH_GATEWAY_CA `{}`", ca.display()))?;
        builder = builder.tls_certs_merge(certs);
    }
    Ok(builder.build()?)
}

#[derive(Clone)]
pub(crate) struct Client {
    pub(crate) http: reqwest::Client,
    base: String,
    key: String,
}

impl Client {
    pub(crate) fn new(config: &Config) -> anyhow::Result<Client> {
        let key = config
            .api_key
            .clone()
            .context("set BERTH_API_KEY to your API key (berth admin create-user prints one)")?;
        Ok(Client {
            http: gateway_client(config)?,
            base: config.gateway_url.trim_end_matches('/').to_owned(),
            key,
        })
    }

    pub(crate) async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<Result<Value, Value>> {
        let response = request
            .header("x-api-key", &self.key)
            .send()
            .await
            .with_context(|| {
                format!(
                    "reach the gateway at {} (is `berth up` running?)",
                    self.base
                )
            })?;
        let ok = response.status().is_success();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        Ok(if ok { Ok(body) } else { Err(body) })
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request to the gateway's `path` with the caller's key, for answers that are not
    /// JSON (files), sent by [`Client::send_raw`].
    pub(crate) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, self.url(path))
            .header("x-api-key", &self.key)
    }

    /// Sends `request` (from [`Client::request`]): the answer when it succeeded, else its
    /// error printed and the exit code that says so.
    pub(crate) async fn send_raw(
        &self,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<Result<reqwest::Response, ExitCode>> {
        let response = request.send().await.with_context(|| {
            format!(
                "reach the gateway at {} (is `berth up` running?)",
                self.base
            )
        })?;
        if response.status().is_success() {
            return Ok(Ok(response));
        }
        let body: Value = response.json().await.unwrap_or(Value::Null);
        Ok(Err(print_error(&body)))
    }

    /// The id of `session`: itself when it is one, else the session of that name (the live
    /// one, else the newest). A name that several users' sessions share (only a superadmin
    /// sees others' sessions) is refused, listing them, rather than guessed at: among the live
    /// sessions of that name when there are any, else among all.
    async fn resolve(&self, session: &str) -> anyhow::Result<String> {
        if uuid::Uuid::parse_str(session).is_ok() {
            return Ok(session.to_owned());
        }
        let found = self
            .send(
                self.http
                    .get(self.url("/v1/sessions"))
                    .query(&[("name", session), ("limit", "500")]),
            )
            .await?
            .map_err(|e| anyhow::anyhow!("{}", e["error"]["message"]))?;
        let namesakes = found["sessions"].as_array().cloned().unwrap_or_default();
        let live: Vec<Value> = namesakes
            .iter()
            .filter(|s| !wait::has_ended(s))
            .cloned()
            .collect();
        let candidates = if live.is_empty() { namesakes } else { live };
        let owners: std::collections::BTreeSet<&str> = candidates
            .iter()
            .filter_map(|s| s["owner"]["email"].as_str())
            .collect();
        if owners.len() > 1 {
            let listed =
                views::NAMESAKES.render(&json!({ "sessions": candidates }), Output::Table, false);
            anyhow::bail!(
                "{} users' sessions are named `{session}`; name the one you mean by its id:\n{}",
                owners.len(),
                listed.trim_end()
            );
        }
        // Newest first, as the list answers.
        candidates
            .first()
            .and_then(|s| s["session_id"].as_str())
            .map(str::to_owned)
            .with_context(|| format!("no session of yours is named `{session}`"))
    }
}

pub(crate) fn print_error(body: &Value) -> ExitCode {
    let e = &body["error"];
    match e["field"].as_str() {
        Some(field) => eprintln!(
            "berth: {field}: {}",
            e["message"].as_str().unwrap_or_default()
        ),
        None => eprintln!(
            "berth: {}",
            e["message"].as_str().unwrap_or("request failed")
        ),
    }
    ExitCode::from(1)
}

/// Prints `v` as `output` asks: JSON or YAML as the API answered, else `view`'s table.
fn emit(output: Output, v: &Value, view: &View) {
    match output::machine(output, v) {
        Some(text) => print!("{text}"),
        None => print!("{}", view.render(v, output, output::colour())),
    }
}

/// Prints `v` as JSON or YAML, or, for a person, through `human` once it reads as `T` (a
/// body that does not is printed as JSON, with a note).
pub(crate) fn show<T: serde::de::DeserializeOwned>(
    output: Output,
    v: Value,
    human: impl FnOnce(T),
) {
    if let Some(text) = output::machine(output, &v) {
        return print!("{text}");
    }
    match serde_json::from_value::<T>(v.clone()) {
        Ok(body) => human(body),
        Err(e) => {
            eprintln!("berth: the answer is not in the form this berth knows ({e}); as sent:");
            println!("{}", pretty(&v));
        }
    }
}

/// What `-o wide` adds to a session's detail: its request.
fn request_lines(v: &Value) -> String {
    let r = &v["request"];
    let environment: Vec<String> = r["environment"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .collect();
    [
        ("project", output::text(v, "/project")),
        ("command", output::text(r, "/startup_command")),
        ("starts at", output::text(r, "/starts_at")),
        ("timeout", output::text(r, "/batch_timeout_secs")),
        ("env", environment.join(",")),
        ("mounts", output::joined(r, "/mounts")),
        ("ports", output::joined(r, "/preopen_ports")),
        ("attempts", output::text(v, "/scheduling_attempts")),
        ("priority", output::text(v, "/priority")),
    ]
    .into_iter()
    .map(|(k, v)| format!("{k:<10} {}\n", if v.is_empty() { "-" } else { &v }))
    .collect()
}

/// A session's detail as a person reads it: one line per aspect.
fn summary(d: &SessionDetail) -> String {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let time = |t: Option<chrono::DateTime<chrono::Utc>>| or_dash(t.map(|t| t.to_rfc3339()));
    let mib = |b: i64| format!("{} MiB", b >> 20);
    let r = d.resources;
    let mut lines = vec![
        ("id", d.session_id.to_string()),
        ("name", d.name.clone()),
        ("owner", d.owner.email.clone()),
        (
            "status",
            match &d.status_reason {
                Some(reason) => format!("{} ({reason})", d.status),
                None => d.status.clone(),
            },
        ),
        ("type", d.session_type.clone()),
        ("image", d.image.clone()),
        ("group", d.resource_group.clone()),
        ("agent", or_dash(d.agent_id.clone())),
        (
            "resources",
            format!(
                "cpu {}, memory {}, shared memory {}, gpu {}, {} × {}",
                r.cpu_milli as f64 / 1000.0,
                mib(r.memory_bytes as i64),
                mib(d.shared_memory_bytes),
                r.gpu_milli as f64 / 1000.0,
                d.cluster_size,
                d.cluster_mode
            ),
        ),
        ("created", d.created_at.to_rfc3339()),
        ("started", time(d.started_at)),
        ("ended", time(d.ended_at)),
    ];
    if let Some(elapsed) = d.elapsed_secs {
        lines.push(("elapsed", format!("{elapsed:.1} s")));
    }
    if let Some(code) = d.exit_code {
        lines.push(("exit code", code.to_string()));
    }
    for c in &d.containers {
        let ports: Vec<String> = c
            .ports
            .iter()
            .map(|p| format!("{}->{}", p.container, p.host))
            .collect();
        let published = if ports.is_empty() {
            String::new()
        } else {
            format!(", ports {}", ports.join(" "))
        };
        lines.push((
            "kernel",
            format!(
                "{} on {} ({}){published}",
                c.kernel,
                c.agent_id,
                c.hostname.as_deref().unwrap_or("-")
            ),
        ));
    }
    if let Some(u) = &d.usage {
        lines.push((
            "usage",
            format!(
                "{:.2} cpu-seconds, {} memory, {} bytes in, {} bytes out",
                u.cpu_seconds,
                mib(u.memory_bytes),
                u.network_rx_bytes,
                u.network_tx_bytes
            ),
        ));
    }
    lines
        .into_iter()
        .map(|(k, v)| format!("{k:<10} {v}\n"))
        .collect()
}

/// A session list as `output` asks, with how many of how many for a person.
fn print_list(output: Output, v: &Value) {
    emit(output, v, &views::SESSIONS);
    if output.is_table() {
        let shown = v["sessions"].as_array().map_or(0, Vec::len);
        println!("{shown} of {}", v["total"]);
    }
}

/// `berth session ls --watch`: the list again every two seconds, drawn again when a session
/// came, went or moved (on a terminal over the last one; elsewhere after it), until Ctrl-C.
async fn watch_list(
    client: &Client,
    list: impl Fn() -> reqwest::RequestBuilder,
    output: Output,
) -> anyhow::Result<ExitCode> {
    use std::io::{IsTerminal, Write};
    let terminal = std::io::stdout().is_terminal();
    let mut shown = None;
    loop {
        let v = match client.send(list()).await? {
            Ok(v) => v,
            Err(body) => return Ok(print_error(&body)),
        };
        let now = wait::settled(&v);
        if shown.as_ref() != Some(&now) {
            if terminal {
                crossterm::execute!(
                    std::io::stdout(),
                    crossterm::terminal::Clear(crossterm::terminal::ClearType::All),
                    crossterm::cursor::MoveTo(0, 0)
                )?;
            } else if shown.is_some() {
                println!();
            }
            print_list(output, &v);
            std::io::stdout().flush()?;
            shown = Some(now);
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

/// `berth session wait`: the session's detail every half second until [`wait::outcome`]
/// says the wait is over (its status on a spinner, on a terminal), or `timeout` seconds
/// have passed (124).
async fn wait_for(
    client: &Client,
    id: &str,
    wanted: Option<&str>,
    timeout: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + std::time::Duration::from_secs(t));
    let bar = progress::Bar::new();
    // The image pull's progress comes as events of the session's stream.
    let pulls = bar.drawn().then(|| {
        let (client, id, bar) = (client.clone(), id.to_owned(), bar.clone());
        tokio::spawn(async move {
            let followed = follow_events(&client, "/v1/events", |event, data| {
                if event == "SessionPullProgressed" {
                    let recorded: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                    if recorded["payload"]["session_id"] == id.as_str() {
                        bar.pull(&recorded["payload"]);
                    }
                }
                true
            })
            .await;
            // Without the stream the spinner still shows the status.
            drop(followed);
        })
    });
    let _stop_following = pulls.map(AbortOnDrop);
    loop {
        let detail = match client
            .send(client.http.get(client.url(&format!("/v1/sessions/{id}"))))
            .await?
        {
            Ok(detail) => detail,
            Err(body) => {
                bar.clear();
                return Ok(print_error(&body));
            }
        };
        bar.session(&detail);
        if let Some(outcome) = wait::outcome(&detail, wanted) {
            bar.clear();
            if let Some(complaint) = outcome.complaint {
                eprintln!("berth: {complaint}");
            }
            return Ok(ExitCode::from(outcome.code));
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            bar.clear();
            eprintln!(
                "berth: the session is still {} after {} s",
                detail["status"].as_str().unwrap_or("-"),
                timeout.unwrap_or_default()
            );
            return Ok(ExitCode::from(124));
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// A task aborted when this is dropped (however the function holding it returns).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `request`, narrowed to one resource group when one is named.
fn in_group(request: reqwest::RequestBuilder, group: Option<String>) -> reqwest::RequestBuilder {
    match group {
        Some(group) => request.query(&[("resource_group", group)]),
        None => request,
    }
}

/// `berth session run`'s arguments: the image, what it needs, and the command.
#[derive(clap::Args)]
pub struct RunArgs {
    /// An image the agents offer, e.g. berth/shell:latest.
    image: String,
    /// The command and its arguments, after `--` (each kept whole, as a shell would quote it).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
    /// Cores (default: the preset's, or the launcher's default).
    #[arg(long)]
    cpu: Option<f64>,
    /// Memory, e.g. 512m or 2g.
    #[arg(long)]
    memory: Option<String>,
    #[arg(long)]
    gpu: Option<f64>,
    #[arg(long)]
    preset: Option<String>,
    #[arg(long)]
    group: Option<String>,
    /// `NAME=VALUE` (repeatable).
    #[arg(long = "env")]
    environment: Vec<String>,
    /// One of your folders, mounted at /home/work/<name> (repeatable).
    #[arg(long = "mount")]
    mounts: Vec<String>,
    /// Seconds the command may run before the session is ended.
    #[arg(long)]
    timeout: Option<u64>,
}

/// `--env NAME=VALUE` flags as a create request's `environment`.
fn environment(pairs: Vec<String>) -> anyhow::Result<serde_json::Map<String, Value>> {
    pairs
        .into_iter()
        .map(|pair| {
            let (k, v) = pair
                .split_once('=')
                .with_context(|| format!("--env {pair}: use NAME=VALUE"))?;
            Ok((k.to_owned(), Value::String(v.to_owned())))
        })
        .collect()
}

/// The fields given, as an object (those left out are absent, for the server's default).
fn present(
    fields: impl IntoIterator<Item = (&'static str, Option<Value>)>,
) -> serde_json::Map<String, Value> {
    fields
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_owned(), v?)))
        .collect()
}

/// The create request of `berth session run`: a batch session whose startup command is the
/// command line, each argument quoted for the shell that runs it.
fn run_request(args: RunArgs) -> anyhow::Result<Value> {
    let command = shlex::try_join(args.command.iter().map(String::as_str))
        .context("a command argument holds a NUL byte")?;
    let env = environment(args.environment)?;
    let resources = present([
        ("cpu", args.cpu.map(Value::from)),
        ("memory", args.memory.map(Value::from)),
        ("gpu", args.gpu.map(Value::from)),
    ]);
    let mut body = json!({
        "image": args.image, "type": "batch", "startup_command": command,
        "environment": env, "resources": resources, "mounts": args.mounts,
    });
    for (k, v) in [
        ("preset", args.preset.map(Value::from)),
        ("resource_group", args.group.map(Value::from)),
        ("batch_timeout", args.timeout.map(Value::from)),
    ] {
        if let Some(v) = v {
            body[k] = v;
        }
    }
    Ok(body)
}

/// `berth session run`: creates the batch session, prints its output as it comes, and exits
/// as it ended; interrupted (Ctrl-C), it terminates the session first.
async fn run_command(client: &Client, args: RunArgs) -> anyhow::Result<ExitCode> {
    let body = run_request(args)?;
    let created = match client
        .send(client.http.post(client.url("/v1/sessions")).json(&body))
        .await?
    {
        Ok(created) => created,
        Err(body) => return Ok(print_error(&body)),
    };
    let id = created["sessions"][0]["session_id"]
        .as_str()
        .context("the gateway named no session")?
        .to_owned();
    let path = format!("/v1/sessions/{id}/logs?follow=true");
    let printed = follow_events(client, &path, |event, data| {
        if event == "end" {
            return false;
        }
        if event == "log" {
            let log: Value = serde_json::from_str(data).unwrap_or(Value::Null);
            print!("{}", log["text"].as_str().unwrap_or_default());
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
        true
    });
    tokio::select! {
        followed = printed => {
            if let Err(body) = followed? {
                return Ok(print_error(&body));
            }
        }
        _ = tokio::signal::ctrl_c() => {
            eprintln!("berth: interrupted; terminating session {id}");
            let ended = client.http.delete(client.url(&format!("/v1/sessions/{id}")));
            client.send(ended).await?.ok();
            return Ok(ExitCode::from(130));
        }
    }
    wait_for(client, &id, None, None).await
}

/// `text` as one segment of a path, or a query's value: every byte but letters, digits and
/// `-._~@` percent-encoded.
pub(crate) fn path_part(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'@' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

pub async fn run(config: &Config, command: SessionCommand) -> anyhow::Result<ExitCode> {
    let client = Client::new(config)?;
    let result = match command {
        SessionCommand::Create(args) => {
            let CreateArgs {
                image,
                name,
                session_type,
                cpu,
                memory,
                shared_memory,
                gpu,
                preset,
                group,
                project,
                environment: environment_pairs,
                ports,
                mounts,
                command,
                starts_at,
                timeout,
                agent,
                owner,
                cluster_size,
                cluster_mode,
                count,
            } = *args;
            let env = environment(environment_pairs)?;
            let resources = present([
                ("cpu", cpu.map(Value::from)),
                ("memory", memory.map(Value::from)),
                ("shared_memory", shared_memory.map(Value::from)),
                ("gpu", gpu.map(Value::from)),
            ]);
            let mut body = json!({
                "image": image, "type": session_type, "environment": env, "resources": resources,
                "preopen_ports": ports, "mounts": mounts, "count": count,
            });
            let optional = [
                ("name", name.map(Value::from)),
                ("preset", preset.map(Value::from)),
                ("resource_group", group.map(Value::from)),
                ("project", project.map(Value::from)),
                ("startup_command", command.map(Value::from)),
                ("starts_at", starts_at.map(Value::from)),
                ("batch_timeout", timeout.map(Value::from)),
                ("agent", agent.map(Value::from)),
                ("owner_email", owner.map(Value::from)),
                ("cluster_size", cluster_size.map(Value::from)),
                ("cluster_mode", cluster_mode.map(Value::from)),
            ];
            for (k, v) in optional {
                if let Some(v) = v {
                    body[k] = v;
                }
            }
            client
                .send(client.http.post(client.url("/v1/sessions")).json(&body))
                .await?
                .map(|v| {
                    for s in v["sessions"].as_array().into_iter().flatten() {
                        println!(
                            "{}  {}  {}",
                            s["session_id"].as_str().unwrap_or_default(),
                            s["name"].as_str().unwrap_or_default(),
                            s["status"].as_str().unwrap_or_default()
                        );
                    }
                })
        }
        SessionCommand::Ls {
            session_type,
            state,
            owner,
            limit,
            watch,
            output,
        } => {
            let mut query = vec![("limit", limit.to_string())];
            if let Some(t) = session_type {
                query.push(("type", t));
            }
            if let Some(s) = state {
                query.push(("state", s));
            }
            if let Some(o) = owner {
                query.push(("owner", o));
            }
            let list = || client.http.get(client.url("/v1/sessions")).query(&query);
            if watch {
                return watch_list(&client, list, output).await;
            }
            client.send(list()).await?.map(|v| print_list(output, &v))
        }
        SessionCommand::Info { session, output } => {
            let id = client.resolve(&session).await?;
            client
                .send(client.http.get(client.url(&format!("/v1/sessions/{id}"))))
                .await?
                .map(|v| {
                    let wide = (output == Output::Wide).then(|| request_lines(&v));
                    show(output, v, |d: SessionDetail| {
                        print!("{}{}", summary(&d), wide.unwrap_or_default())
                    })
                })
        }
        SessionCommand::Wait {
            session,
            wanted,
            timeout,
        } => {
            if let Some(w) = wanted.as_deref().filter(|w| !wait::is_status(w)) {
                anyhow::bail!("--for {w}: not a session status (e.g. running, terminated)");
            }
            let id = client.resolve(&session).await?;
            return wait_for(&client, &id, wanted.as_deref(), timeout).await;
        }
        SessionCommand::History {
            session,
            result,
            phase,
            output,
        } => {
            let id = client.resolve(&session).await?;
            let mut query = vec![];
            if let Some(r) = result {
                query.push(("result", r));
            }
            if let Some(p) = phase {
                query.push(("phase", p));
            }
            client
                .send(
                    client
                        .http
                        .get(client.url(&format!("/v1/sessions/{id}/history")))
                        .query(&query),
                )
                .await?
                .map(|v| emit(output, &v, &views::HISTORY))
        }
        SessionCommand::Logs {
            session,
            follow: true,
            ..
        } => {
            let id = client.resolve(&session).await?;
            let path = format!("/v1/sessions/{id}/logs?follow=true");
            follow_events(&client, &path, |event, data| {
                if event == "end" {
                    return false;
                }
                if event == "log" {
                    let log: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                    print!("{}", log["text"].as_str().unwrap_or_default());
                    let _ = std::io::Write::flush(&mut std::io::stdout());
                }
                true
            })
            .await?
        }
        SessionCommand::Logs {
            session, output, ..
        } => {
            let id = client.resolve(&session).await?;
            client
                .send(
                    client
                        .http
                        .get(client.url(&format!("/v1/sessions/{id}/logs"))),
                )
                .await?
                .map(|v| {
                    show(output, v, |logs: Logs| {
                        for k in &logs.kernels {
                            if output == Output::Wide {
                                println!("==> kernel {} ({}) <==", k.kernel, logs.status);
                            }
                            print!("{}", k.content);
                        }
                    })
                })
        }
        SessionCommand::Rename { session, name } => {
            let id = client.resolve(&session).await?;
            client
                .send(
                    client
                        .http
                        .patch(client.url(&format!("/v1/sessions/{id}")))
                        .json(&json!({"name": name})),
                )
                .await?
                .map(|v| println!("{}", pretty(&v)))
        }
        SessionCommand::Run(args) => return run_command(&client, *args).await,
        SessionCommand::SshKey { session } => {
            let id = client.resolve(&session).await?;
            let asked = client.request(reqwest::Method::GET, &format!("/v1/sessions/{id}/ssh-key"));
            let response = match client.send_raw(asked).await? {
                Ok(response) => response,
                Err(code) => return Ok(code),
            };
            print!("{}", response.text().await.context("read the key")?);
            Ok(())
        }
        SessionCommand::Rm { session, force } => {
            let id = client.resolve(&session).await?;
            client
                .send(
                    client
                        .http
                        .delete(client.url(&format!("/v1/sessions/{id}")))
                        .query(&[("force", force.to_string())]),
                )
                .await?
                .map(|v| println!("{}", pretty(&v)))
        }
        SessionCommand::Commit {
            session,
            name,
            follow,
        } => {
            let id = client.resolve(&session).await?;
            commit(&client, id, &name, follow).await?
        }
        SessionCommand::Images {
            rm: Some(name),
            output: _,
        } => client
            .send(
                client
                    .http
                    .delete(client.url(&format!("/v1/images/{name}"))),
            )
            .await?
            .map(|_| println!("image {name} removed")),
        SessionCommand::Images { rm: None, output } => client
            .send(client.http.get(client.url("/v1/images")))
            .await?
            .map(|v| emit(output, &v, &views::IMAGES)),
        SessionCommand::Environments { group, output } => client
            .send(in_group(
                client.http.get(client.url("/v1/environments")),
                group,
            ))
            .await?
            .map(|v| emit(output, &v, &views::ENVIRONMENTS)),
        SessionCommand::Groups { output } => client
            .send(client.http.get(client.url("/v1/resource-groups")))
            .await?
            .map(|v| emit(output, &v, &views::GROUPS)),
        SessionCommand::Agents { group, output } => client
            .send(in_group(client.http.get(client.url("/v1/agents")), group))
            .await?
            .map(|v| emit(output, &v, &views::AGENTS)),
        SessionCommand::Launches { output } => client
            .send(client.http.get(client.url("/v1/launches")))
            .await?
            .map(|v| emit(output, &v, &views::LAUNCHES)),
        SessionCommand::Notifications {
            unread,
            limit,
            output,
        } => {
            let mut query = vec![("limit", limit.to_string())];
            if unread {
                query.push(("unread", "true".into()));
            }
            client
                .send(
                    client
                        .http
                        .get(client.url("/v1/notifications"))
                        .query(&query),
                )
                .await?
                .map(|v| {
                    emit(output, &v, &views::NOTIFICATIONS);
                    if output.is_table() {
                        println!("{} unread", v["unread"]);
                    }
                })
        }
        SessionCommand::Launch { id, label, pinned } => {
            let mut change = serde_json::Map::new();
            if let Some(label) = label {
                change.insert("label".into(), Value::String(label));
            }
            if let Some(pinned) = pinned {
                change.insert("pinned".into(), Value::Bool(pinned));
            }
            client
                .send(
                    client
                        .http
                        .patch(client.url(&format!("/v1/launches/{id}")))
                        .json(&Value::Object(change)),
                )
                .await?
                .map(|v| println!("{}", pretty(&v)))
        }
        SessionCommand::Password => {
            let mut body = serde_json::json!({ "new": crate::admin::new_password("you")? });
            if let Ok(current) = std::env::var("BERTH_CURRENT_PASSWORD") {
                body["current"] = Value::String(current);
            }
            client
                .send(
                    client
                        .http
                        .put(client.url("/v1/whoami/password"))
                        .json(&body),
                )
                .await?
                .map(|_| println!("your password is set"))
        }
        SessionCommand::Queue { group, output } => client
            .send(in_group(client.http.get(client.url("/v1/queue")), group))
            .await?
            .map(|v| emit(output, &v, &views::QUEUE)),
        SessionCommand::App(command) => app(&client, command).await?,
        SessionCommand::Shell { session } => return shell(&client, &session).await,
        SessionCommand::Cp { from, to } => return copy::copy(&client, &from, &to).await,
        SessionCommand::Exec { session, command } => {
            return exec::exec(&client, &session, &command).await
        }
        SessionCommand::Events => {
            follow_events(&client, "/v1/events", |_, data| {
                println!("{data}");
                true
            })
            .await?
        }
    };
    Ok(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(body) => print_error(&body),
    })
}

/// `berth session app ...`.
async fn app(client: &Client, command: AppCommand) -> anyhow::Result<Result<(), Value>> {
    let post = |id: &str, app: &str, verb: &str, body: Value| {
        client
            .http
            .post(client.url(&format!("/v1/sessions/{id}/apps/{app}/{verb}")))
            .json(&body)
    };
    Ok(match command {
        AppCommand::List { session, output } => {
            let id = client.resolve(&session).await?;
            let listed = client
                .send(
                    client
                        .http
                        .get(client.url(&format!("/v1/sessions/{id}/apps"))),
                )
                .await?;
            listed.map(|v| match output::machine(output, &v) {
                Some(text) => print!("{text}"),
                None => print_apps(output, &v),
            })
        }
        AppCommand::Start { session, app, port } => {
            let id = client.resolve(&session).await?;
            client
                .send(post(&id, &app, "start", json!({"port": port})))
                .await?
                .map(|v| println!("{}", pretty(&v)))
        }
        AppCommand::Open {
            session,
            app,
            public,
            allowed_ips,
            preferred_port,
            port,
        } => {
            let id = client.resolve(&session).await?;
            // A preopen port or an app already listening answers at once.
            if let Err(body) = client
                .send(post(&id, &app, "start", json!({"port": port})))
                .await?
            {
                return Ok(Err(body));
            }
            let body = json!({"public": public, "allowed_ips": allowed_ips,
                              "preferred_port": preferred_port, "port": port});
            client.send(post(&id, &app, "open", body)).await?.map(|v| {
                if v["preferred_port_honoured"] == false && preferred_port.is_some() {
                    eprintln!(
                        "port {} was taken; the proxy serves the app on {}",
                        preferred_port.unwrap_or_default(),
                        v["port"]
                    );
                }
                println!("{}", v["url"].as_str().unwrap_or_default());
            })
        }
        AppCommand::Tunnel {
            session,
            app,
            listen,
            stdio,
        } => {
            let id = client.resolve(&session).await?;
            let door = match enter(client, &id, &app).await? {
                Ok(door) => door,
                Err(body) => return Ok(Err(body)),
            };
            if stdio {
                let mut remote = berth::console::tunnel(&door).await?;
                let mut local = tokio::io::join(tokio::io::stdin(), tokio::io::stdout());
                tokio::io::copy_bidirectional(&mut local, &mut remote).await?;
                // Standard input's reader thread would hold the runtime open.
                std::process::exit(0);
            }
            let listener = tokio::net::TcpListener::bind(&listen)
                .await
                .with_context(|| format!("listen on {listen}"))?;
            let local = listener.local_addr()?;
            println!("{local}");
            eprintln!(
                "app `{app}` of session {id} answers on {local} until you stop this (Ctrl-C){}",
                if app == domain::apps::SSH {
                    format!(
                        ": ssh -i id_container -p {} work@{}",
                        local.port(),
                        local.ip()
                    )
                } else {
                    String::new()
                }
            );
            tokio::select! {
                served = berth::console::serve_tunnels(door, listener) => served?,
                _ = tokio::signal::ctrl_c() => {}
            }
            Ok(())
        }
        AppCommand::Close { session, app } => {
            let id = client.resolve(&session).await?;
            client
                .send(post(&id, &app, "close", json!({})))
                .await?
                .map(|v| println!("{} circuit(s) closed", v["closed"]))
        }
    })
}

/// Starts `app` of session `id` and opens it privately: the door its link gives.
async fn enter(
    client: &Client,
    id: &str,
    app: &str,
) -> anyhow::Result<Result<berth::console::Door, Value>> {
    let post = |verb: &str| {
        client
            .http
            .post(client.url(&format!("/v1/sessions/{id}/apps/{app}/{verb}")))
            .json(&json!({}))
    };
    if let Err(body) = client.send(post("start")).await? {
        return Ok(Err(body));
    }
    let opened = match client.send(post("open")).await? {
        Ok(opened) => opened,
        Err(body) => return Ok(Err(body)),
    };
    let url = opened["url"].as_str().unwrap_or_default();
    Ok(Ok(berth::console::redeem(url).await?))
}

/// `berth session shell`: the terminal in this terminal, raw while it runs.
async fn shell(client: &Client, session: &str) -> anyhow::Result<ExitCode> {
    use crossterm::terminal;
    use std::io::IsTerminal;
    let id = client.resolve(session).await?;
    let door = match enter(client, &id, domain::apps::TERMINAL).await? {
        Ok(door) => door,
        Err(body) => return Ok(print_error(&body)),
    };
    let interactive = std::io::stdin().is_terminal();
    let size = terminal::size().unwrap_or((80, 24));
    let (resize, resizes) = tokio::sync::mpsc::channel(4);
    if interactive {
        terminal::enable_raw_mode().context("put the terminal in raw mode")?;
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut changes) = signal(SignalKind::window_change()) else {
                return;
            };
            while changes.recv().await.is_some() {
                if let Ok(size) = terminal::size() {
                    if resize.send(size).await.is_err() {
                        return;
                    }
                }
            }
        });
    } else {
        drop(resize);
    }
    let ran = berth::console::shell(
        &door,
        tokio::io::stdin(),
        tokio::io::stdout(),
        size,
        resizes,
    )
    .await;
    if interactive {
        let _ = terminal::disable_raw_mode();
    }
    if let Err(e) = ran {
        eprintln!("{e:#}");
        std::process::exit(1);
    }
    // Standard input's reader thread would hold the runtime open.
    std::process::exit(0);
}

/// A session's apps, and the circuits open to them, as tables.
fn print_apps(output: Output, listed: &Value) {
    let colour = output::colour();
    print!("{}", views::APPS.render(listed, output, colour));
    if listed["circuits"].as_array().is_some_and(|c| !c.is_empty()) {
        print!("\n{}", views::CIRCUITS.render(listed, output, colour));
    }
}

/// Commits session `id` to image `name`; with `follow`, prints its steps from the event
/// stream (opened before the request, so none is missed) until it ends.
async fn commit(
    client: &Client,
    id: String,
    name: &str,
    follow: bool,
) -> anyhow::Result<Result<(), Value>> {
    let stream = if follow {
        let response = client
            .http
            .get(client.url("/v1/events"))
            .header("x-api-key", &client.key)
            .send()
            .await
            .context("reach the gateway")?;
        if !response.status().is_success() {
            return Ok(Err(response.json().await.unwrap_or(Value::Null)));
        }
        Some(berth::event_stream_client::events_of(response))
    } else {
        None
    };
    let started = match client
        .send(
            client
                .http
                .post(client.url(&format!("/v1/sessions/{id}/commit")))
                .json(&json!({"name": name})),
        )
        .await?
    {
        Ok(started) => started,
        Err(body) => return Ok(Err(body)),
    };
    println!("{}", pretty(&started));
    let Some(mut events) = stream else {
        return Ok(Ok(()));
    };
    let commit_id = started["commit_id"].as_str().unwrap_or_default().to_owned();
    let bar = progress::Bar::new();
    while let Some(event) = events.next().await {
        let event = event.context("read the event stream")?;
        let recorded: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        let payload = &recorded["payload"];
        if payload["commit_id"] != commit_id.as_str() {
            continue;
        }
        match event.event.as_str() {
            "SessionCommitProgressed" => bar.step(payload),
            "SessionCommitEnded" => {
                bar.clear();
                println!("{}", pretty(&payload["outcome"]));
                break;
            }
            _ => {}
        }
    }
    Ok(Ok(()))
}

/// Reads the gateway's server-sent events at `path`, handing each (event name, data) to `on`
/// until it returns false or the stream ends; the gateway's error body when it refuses.
async fn follow_events(
    client: &Client,
    path: &str,
    mut on: impl FnMut(&str, &str) -> bool,
) -> anyhow::Result<Result<(), Value>> {
    let response = client
        .http
        .get(client.url(path))
        .header("x-api-key", &client.key)
        .send()
        .await
        .context("reach the gateway")?;
    if !response.status().is_success() {
        return Ok(Err(response.json().await.unwrap_or(Value::Null)));
    }
    let mut events = berth::event_stream_client::events_of(response);
    while let Some(event) = events.next().await {
        let event = event.context("read the event stream")?;
        if !on(&event.event, &event.data) {
            break;
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: SessionCommand,
    }

    #[test]
    fn run_keeps_each_argument_whole_for_the_shell_that_runs_it() {
        let cli = Cli::try_parse_from([
            "berth",
            "run",
            "berth/shell:latest",
            "--cpu",
            "0.5",
            "--",
            "sh",
            "-c",
            "echo 'hi there'; exit 3",
        ])
        .unwrap();
        let SessionCommand::Run(args) = cli.command else {
            panic!("not run")
        };
        let body = run_request(*args).unwrap();
        assert_eq!(body["type"], "batch");
        assert_eq!(body["image"], "berth/shell:latest");
        assert_eq!(body["resources"]["cpu"], 0.5);
        assert_eq!(
            body["startup_command"],
            r#"sh -c "echo 'hi there'; exit 3""#
        );
        assert!(Cli::try_parse_from(["berth", "run", "berth/shell:latest"]).is_err());
    }
}
