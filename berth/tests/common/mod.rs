//! What the binary's tests share: a fresh database of their own, and `berth` run as a person
//! would run it.
#![allow(dead_code)] // each test file uses its own part

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use deadpool_postgres::Pool;
use events::store;
use uuid::Uuid;

pub fn base_url() -> String {
    std::env::var("BERTH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://berth@127.0.0.1:55432/berth".into())
}

/// A new, migrated database beside the configured one: its pool and URL.
pub async fn fresh_database() -> (Pool, String) {
    let base = base_url();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    let url = format!("{prefix}/test_{}", Uuid::new_v4().simple());
    store::ensure_database(&url).await.unwrap();
    let pool = store::pool(&url, 4).unwrap();
    berth::app::migrate(&pool).await.unwrap();
    (pool, url)
}

/// Runs `berth ARGS` against the database at `url`: whether it succeeded, and what it printed.
pub fn berth(url: &str, args: &[&str]) -> (bool, String) {
    berth_with(args, &[("BERTH_DATABASE_URL".into(), url.into())])
}

/// Runs `berth ARGS` with `env` and no input, waiting at most 60 s (a hang fails the test
/// with the command's name): whether it succeeded, and what it printed.
pub fn berth_with(args: &[&str], env: &[(String, String)]) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run berth");
    // Read the pipes while waiting, so a command that prints a lot never blocks on them.
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let (out, err) = (read(Box::new(stdout)), read(Box::new(stderr)));
    let mut polls = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        polls += 1;
        if polls > 3_000 {
            let _ = child.kill();
            panic!("`berth {}` did not end within 60 s", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = out.join().unwrap() + &err.join().unwrap();
    (status.success(), text)
}

/// `berth` with its arguments written as one line (none of them holding a space).
pub fn berth_line(url: &str, line: &str) -> (bool, String) {
    berth(url, &line.split_whitespace().collect::<Vec<_>>())
}

/// Sets up a fresh install with `berth admin init`; its first superadmin, as a key's owner.
pub async fn first_superadmin(pool: &Pool, url: &str) -> events::ledger::KeyOwner {
    let key = init_install(url);
    let client = pool.get().await.unwrap();
    events::ledger::key_owner(&client, &key)
        .await
        .unwrap()
        .expect("the printed key has an owner")
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A new directory under the temporary one, named `<prefix>-<uuid>`.
pub fn tempdir(prefix: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Where nothing listens: an agent that tried the database would fail to reach it.
pub const NO_DATABASE: &str = "postgres://denied@127.0.0.1:1/none";

pub fn nats_url() -> String {
    std::env::var("BERTH_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:54222".into())
}

/// The NATS address an agent is given: the server's, without the control plane's user and
/// password (an agent has its own credential).
pub fn without_user(url: &str) -> String {
    bus::link::without_user(url).expect("a NATS URL")
}

/// Where berth keeps the shared NATS server's authorization (`infra/services.sh` sets it):
/// a control plane of a test's own follows its admissions there, so its agents get in.
pub fn nats_authorization() -> Option<std::path::PathBuf> {
    std::env::var_os("BERTH_NATS_AUTHORIZATION_DIR")
        .filter(|dir| !dir.is_empty())
        .map(Into::into)
}

/// The NATS variables of a control plane of the test's own: the server, and the streams and
/// subjects named after `tag` and `id` (`<TAG>_<id>` for events, `<TAG>C_`/`<TAG>T_` for the
/// agents' commands and telemetry).
pub fn bus_env(tag: &str, id: &str) -> Vec<(String, String)> {
    let upper = tag.to_uppercase();
    [
        ("BERTH_NATS_URL", nats_url()),
        ("BERTH_NATS_STREAM", format!("{upper}_{id}")),
        ("BERTH_NATS_PREFIX", format!("{tag}{id}.evt")),
        ("BERTH_NATS_AGENT_ROOT", format!("{tag}{id}")),
        ("BERTH_NATS_COMMANDS_STREAM", format!("{upper}C_{id}")),
        ("BERTH_NATS_TELEMETRY_STREAM", format!("{upper}T_{id}")),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .into()
}

/// Deletes the JetStream streams `env` names (from [`bus_env`]).
pub async fn delete_streams(env: &[(String, String)]) {
    let js = async_nats::jetstream::new(bus::link::connect_as_url_says(&nats_url()).await.unwrap());
    for (name, value) in env {
        if name.ends_with("STREAM") {
            let _ = js.delete_stream(value).await;
        }
    }
}

/// Admits agent `id` (`berth admin agent admit` through `admin`'s gateway, with `extra`
/// arguments), its credential written to `credential`.
pub fn admit_agent(admin: &AdminGateway, id: &str, credential: &std::path::Path, extra: &[&str]) {
    let mut args = vec!["agent", "admit", id, "--credential-out"];
    args.push(credential.to_str().unwrap());
    args.extend(extra);
    let (ok, text) = admin.admin(&args);
    assert!(ok, "{text}");
}

/// A gateway of the test's own over one database (`berth gateway`, killed when dropped) and a
/// superadmin's key: what `berth admin` goes through, as an operator's does.
pub struct AdminGateway {
    pub url: String,
    pub key: String,
    _process: BerthProcess,
}

impl AdminGateway {
    /// A gateway over the initialised database at `database`, with a new key of the first
    /// superadmin's (`berth admin issue-key` without a key: the way back in).
    pub fn start(database: &str) -> AdminGateway {
        let (ok, text) = berth(
            database,
            &["admin", "issue-key", "--email", "admin@berth.local"],
        );
        assert!(ok, "{text}");
        let key = text
            .split_whitespace()
            .find(|w| w.starts_with("berth_"))
            .expect("a key is printed")
            .to_owned();
        AdminGateway::with_key(database, &key)
    }

    /// A gateway over the database at `database`, used with the superadmin's `key`.
    pub fn with_key(database: &str, key: &str) -> AdminGateway {
        let listen = format!("127.0.0.1:{}", free_port());
        let env: Vec<(String, String)> = [
            ("BERTH_DATABASE_URL", database),
            ("BERTH_GATEWAY_LISTEN", &listen),
            ("BERTH_PROXY_PORTS", "off"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        let log = tempdir("berth-admin-gateway").join("gateway.log");
        let mut process = BerthProcess::start(&["gateway"], &env, &log);
        // Bound before it serves: a connection accepted now is answered once it does.
        for _ in 0..600 {
            assert!(
                process.still_running(),
                "berth gateway exited: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            if std::net::TcpStream::connect(&listen).is_ok() {
                return AdminGateway {
                    url: format!("http://{listen}"),
                    key: key.to_owned(),
                    _process: process,
                };
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("berth gateway did not listen on {listen}");
    }

    /// The environment of a `berth` that goes through this gateway with its key.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("BERTH_GATEWAY_URL".into(), self.url.clone()),
            ("BERTH_API_KEY".into(), self.key.clone()),
        ]
    }

    /// Runs `berth admin ARGS` through this gateway: whether it succeeded, and what it
    /// printed.
    pub fn admin(&self, args: &[&str]) -> (bool, String) {
        let args: Vec<&str> = ["admin"].into_iter().chain(args.iter().copied()).collect();
        berth_with(&args, &self.env())
    }

    /// `berth admin` with its arguments written as one line (none of them holding a space).
    pub fn admin_line(&self, line: &str) -> (bool, String) {
        self.admin(&line.split_whitespace().collect::<Vec<_>>())
    }
}

/// A `berth` process started by a test, its output appended to a log; killed (SIGKILL) when
/// dropped, so a failing test leaves none behind.
pub struct BerthProcess(std::process::Child);

impl BerthProcess {
    pub fn start(args: &[&str], env: &[(String, String)], log: &std::path::Path) -> BerthProcess {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start berth");
        BerthProcess(child)
    }

    /// Whether the process has not exited.
    pub fn still_running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }

    /// SIGKILL: the process gets no chance to clean up.
    pub fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }

    /// Sends SIGTERM, as systemd or `docker stop` would.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -TERM {}", self.0.id());
    }

    /// Waits for the process to exit, at most `bound`: its exit status, or `None` when it
    /// was still running then.
    pub async fn exit_within(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let deadline = tokio::time::Instant::now() + bound;
        while tokio::time::Instant::now() < deadline {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.0.try_wait().unwrap()
    }
}

impl Drop for BerthProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Removes every container of its agent when dropped, also when the test fails: a test that
/// kills its agent process leaves the agent's containers behind otherwise (a run once left a
/// session container running after the suite).
pub struct RemovesContainersOf(pub String);

impl Drop for RemovesContainersOf {
    fn drop(&mut self) {
        let containers = containers_of_agent(&self.0);
        if !containers.is_empty() {
            let _ = Command::new("docker")
                .args(["rm", "-f"])
                .args(&containers)
                .stdout(std::process::Stdio::null())
                .status();
        }
        // Then the networks its sessions had (one each), by the agent's label.
        let label = format!("label=ai.berth.agent={}", self.0);
        if let Ok(listed) = Command::new("docker")
            .args(["network", "ls", "-q", "--filter", &label])
            .output()
        {
            let networks = String::from_utf8_lossy(&listed.stdout).into_owned();
            let networks: Vec<&str> = networks.split_whitespace().collect();
            if !networks.is_empty() {
                let _ = Command::new("docker")
                    .args(["network", "rm"])
                    .args(&networks)
                    .output();
            }
        }
    }
}

/// The containers of `agent` on this machine's engine (by label), stopped ones too.
pub fn containers_of_agent(agent: &str) -> Vec<String> {
    let output = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=ai.berth.agent={agent}"))
        .output()
        .expect("docker answers");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits (a few minutes at most) until each of `sessions` has ended and its output ends with
/// `done`, then checks that each ended TERMINATED with exit code 0, printed `begin` and
/// `done`, ran in exactly one container and reached RUNNING, and that `agent` left no
/// container behind. `logs` says what the processes printed, for a failure.
pub async fn assert_every_batch_ended_whole(
    pool: &Pool,
    sessions: &[Uuid],
    agent: &str,
    logs: impl Fn() -> String,
) {
    let client = pool.get().await.unwrap();
    let count = |sql: &'static str| {
        let client = &client;
        async move {
            client
                .query_one(sql, &[&sessions])
                .await
                .unwrap()
                .get::<_, i64>(0) as usize
        }
    };
    for _ in 0..900 {
        let ended = "SELECT count(*) FROM ledger.sessions WHERE session_id = ANY($1)
                       AND status IN ('TERMINATED', 'ERROR', 'CANCELLED')";
        if count(ended).await == sessions.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Output travels as telemetry, beside the reports that end a session: the sink may keep
    // a session's last chunk a moment after it ends (more so just after a restart).
    for _ in 0..150 {
        let complete = "SELECT count(DISTINCT session_id) FROM recorder.session_log_chunks
                        WHERE session_id = ANY($1) AND kernel = 0 AND content LIKE '%done%'";
        if count(complete).await == sessions.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rows = client
        .query(
            "SELECT s.session_id, s.status, s.status_reason,
                    (SELECT (e.payload->>'exit_code')::int FROM events e
                     WHERE e.stream_id = 'session-' || replace(s.session_id::text, '-', '')
                       AND e.event_type = 'SessionStatusChanged' AND e.payload->>'to' = 'TERMINATED'),
                    coalesce((SELECT string_agg(c.content, '' ORDER BY c.start)
                              FROM recorder.session_log_chunks c
                              WHERE c.session_id = s.session_id AND c.kernel = 0), ''),
                    (SELECT count(*) FROM events e WHERE e.stream_id = 'session-' || replace(s.session_id::text, '-', '')
                       AND e.event_type = 'KernelStarted'),
                    (SELECT count(*) FROM events e WHERE e.stream_id = 'session-' || replace(s.session_id::text, '-', '')
                       AND e.event_type = 'SessionStatusChanged' AND e.payload->>'to' = 'RUNNING')
             FROM ledger.sessions s
             WHERE s.session_id = ANY($1)",
            &[&sessions],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), sessions.len());
    for row in &rows {
        let session: Uuid = row.get(0);
        let status: String = row.get(1);
        let reason: Option<String> = row.get(2);
        let exit_code: Option<i32> = row.get(3);
        let output: String = row.get(4);
        let (started, running): (i64, i64) = (row.get(5), row.get(6));
        assert_eq!(
            status,
            "TERMINATED",
            "{session}: {status} ({reason:?})\n{}",
            logs()
        );
        assert_eq!(exit_code, Some(0), "{session}: {reason:?}\n{}", logs());
        assert!(
            output.contains("begin") && output.contains("done"),
            "{session}: output {output:?}\n{}",
            logs()
        );
        assert_eq!(started, 1, "{session} ran in {started} containers");
        assert!(running >= 1, "{session} ended without reaching RUNNING");
    }
    for _ in 0..100 {
        if containers_of_agent(agent).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(containers_of_agent(agent), Vec::<String>::new());
}

/// `berth admin init` on the database at `url`: the first superadmin's API key.
pub fn init_install(url: &str) -> String {
    let (ok, text) = berth(url, &["admin", "init"]);
    assert!(ok, "{text}");
    text.split_whitespace()
        .find(|w| w.starts_with("berth_"))
        .expect("the first key is printed")
        .to_owned()
}

/// A missing prerequisite: fails the test under CI (`CI=true`), says `SKIPPED` elsewhere
/// (as `berth_tests::missing_prerequisite`, which this crate cannot depend on).
pub fn missing_prerequisite(what: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "missing prerequisite under CI: {what}"
    );
    println!("SKIPPED: {what}");
}

/// How many events of `event_type` the log holds.
pub async fn count_events(pool: &Pool, event_type: &str) -> i64 {
    let client = pool.get().await.unwrap();
    client
        .query_one(
            "SELECT count(*) FROM events WHERE event_type = $1",
            &[&event_type],
        )
        .await
        .unwrap()
        .get(0)
}

/// The default policy, through `berth admin`: `sessions` at once, 64 cores and 64 GiB.
pub fn allow_sessions(admin: &AdminGateway, sessions: u32) {
    let (ok, text) = admin.admin_line(&format!(
        "set-policy default --max-sessions {sessions} --max-cpu 64 --max-memory-gib 64"
    ));
    assert!(ok, "{text}");
}
