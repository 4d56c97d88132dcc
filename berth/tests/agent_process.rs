//! The agent as a real process (`berth agent`, Docker runtime) that speaks only NATS: its
//! database URL points where nothing listens, and it runs sessions all the same. Killed with
//! SIGKILL while its sessions run, then started again: no orphan container is left and no
//! session is stuck. The control plane (relay, scheduler, recorder) runs in the test through
//! `berth::app::start`; PostgreSQL, NATS and the Docker engine are real.
//!
//! The agent also runs on a host of its own: a network namespace joined to this machine by a
//! veth pair, from which only NATS is reachable (through a relay of the test's on the pair's
//! far end); it runs a batch session created through the gateway to its end, exit code and
//! output included.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use berth::app::{self, Parts};
use berth::config::Config;
use common::*;
use deadpool_postgres::Pool;
use events::lifecycle;
use uuid::Uuid;

/// A `berth agent` process, killed when dropped so a failing test leaves none behind.
struct AgentProcess(Child);

impl AgentProcess {
    fn start(
        config: &Config,
        id: &str,
        credential: &Path,
        data_dir: &Path,
        log: &Path,
    ) -> AgentProcess {
        Self::start_in(None, config, id, credential, data_dir, log)
    }

    /// [`AgentProcess::start`] inside `host` when given.
    fn start_in(
        host: Option<&Netns>,
        config: &Config,
        id: &str,
        credential: &Path,
        data_dir: &Path,
        log: &Path,
    ) -> AgentProcess {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let berth = env!("CARGO_BIN_EXE_berth");
        let mut command = match host {
            Some(host) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", &host.name, berth]);
                command
            }
            None => Command::new(berth),
        };
        let child = command
            .args(["agent", "--id", id, "--cpu", "2", "--memory-gib", "2"])
            .arg("--data-dir")
            .arg(data_dir)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("BERTH_DATABASE_URL", NO_DATABASE)
            .env("BERTH_NATS_URL", without_user(&config.nats_url))
            .env("BERTH_AGENT_CREDENTIAL", credential)
            .env("BERTH_NATS_AGENT_ROOT", &config.agent_bus.root)
            .env(
                "BERTH_NATS_COMMANDS_STREAM",
                &config.agent_bus.commands_stream,
            )
            .env(
                "BERTH_NATS_TELEMETRY_STREAM",
                &config.agent_bus.telemetry_stream,
            )
            .env("RUST_LOG", "info")
            // On a host of its own, its engine is still this machine's, whose network
            // namespace (and Docker's chains) it cannot reach: the sessions' firewall is the
            // engine host's to keep.
            .env(
                "BERTH_SESSION_FIREWALL",
                if host.is_some() { "off" } else { "on" },
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start berth agent");
        AgentProcess(child)
    }

    /// Waits up to `within` for the process to end by itself: its exit status, or `None`.
    fn ended_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let step = Duration::from_millis(100);
        for _ in 0..(within.as_millis() / step.as_millis()) {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(step);
        }
        None
    }

    /// SIGKILL: the process gets no chance to clean up.
    fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The ids of a session's containers, running or not, from the engine.
fn containers_of(session: Uuid) -> Vec<String> {
    let output = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter"])
        .arg(format!("label=ai.berth.session={session}"))
        .output()
        .expect("docker answers");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn status_of(pool: &Pool, session: Uuid) -> String {
    let client = pool.get().await.unwrap();
    client
        .query_one(
            "SELECT status FROM ledger.sessions WHERE session_id = $1",
            &[&session],
        )
        .await
        .unwrap()
        .get(0)
}

/// Polls `probe` every 100 ms until it yields, for at most 60 s.
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..600 {
        if let Some(v) = probe().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("gave up waiting: {what}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_agent_process_started_again_leaves_no_orphan_and_no_session_stuck() {
    let (pool, url) = fresh_database().await;
    let owner = first_superadmin(&pool, &url).await;
    let admin = AdminGateway::start(&url);
    let agent_id = format!("proc{}", &Uuid::new_v4().simple().to_string()[..8]);
    let dir = std::env::temp_dir().join(format!("berth-{agent_id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("agent.log");
    let config = config_for(&url, "a");
    let parts = Parts {
        relay: true,
        scheduler: true,
        recorder: true,
        ..Parts::default()
    };
    let control_plane = app::start(&config, parts).await.unwrap();
    let credential = dir.join("credential");
    admit_agent(
        &admin,
        &agent_id,
        &credential,
        &["--group", "default", "--max-cpu", "2"],
    );
    let agent = AgentProcess::start(&config, &agent_id, &credential, &dir.join("data"), &log);
    eventually("the agent registers with its images", || async {
        let client = pool.get().await.unwrap();
        client
            .query_opt(
                "SELECT 1 FROM ledger.agents WHERE agent_id = $1 AND 'berth/shell:latest' = ANY(images)",
                &[&agent_id],
            )
            .await
            .unwrap()
    })
    .await;

    let request = serde_json::from_value(serde_json::json!({
        "image": "berth/shell:latest", "resources": {"cpu": 0.5, "memory": "64m"}, "count": 2}))
    .unwrap();
    let launched = launcher::launch::launch(&pool, &owner, request)
        .await
        .unwrap();
    let (orphaned, survivor) = (launched[0].session_id, launched[1].session_id);
    for id in [orphaned, survivor] {
        eventually("both sessions run", || async {
            (status_of(&pool, id).await == "RUNNING").then_some(())
        })
        .await;
    }
    let survivor_container = containers_of(survivor);
    assert_eq!(survivor_container.len(), 1);

    agent.kill();
    // While the agent is dead, one session is force-terminated: its container is an orphan.
    let metadata = events::trace::metadata("agent-process-test", None);
    lifecycle::command(&pool, orphaned, &metadata, |s| {
        s.terminate(true, "force-terminated by the test".into())
    })
    .await
    .unwrap();
    assert_eq!(status_of(&pool, orphaned).await, "TERMINATED");
    assert_eq!(
        containers_of(orphaned).len(),
        1,
        "the orphan is still there"
    );

    let agent = AgentProcess::start(&config, &agent_id, &credential, &dir.join("data"), &log);
    eventually("the orphan is removed", || async {
        containers_of(orphaned).is_empty().then_some(())
    })
    .await;
    // The survivor's container was adopted, not replaced, and the session still runs.
    assert_eq!(containers_of(survivor), survivor_container);
    assert_eq!(status_of(&pool, survivor).await, "RUNNING");

    // The restarted agent still ends it on request.
    lifecycle::command(&pool, survivor, &metadata, |s| {
        s.terminate(false, "terminated by the test".into())
    })
    .await
    .unwrap();
    eventually("the survivor ends and its container goes", || async {
        (status_of(&pool, survivor).await == "TERMINATED" && containers_of(survivor).is_empty())
            .then_some(())
    })
    .await;
    let stuck: i64 = pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT count(*) FROM ledger.sessions WHERE status NOT IN ('TERMINATED', 'ERROR', 'CANCELLED')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stuck, 0);
    let replay = events::ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    // The agent never reached the database, and said nothing of one.
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(!said.contains("127.0.0.1:1/"), "{said}");
    control_plane.stop().await.unwrap();
    agent.kill();
    delete_streams_of(&config).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Deletes the JetStream streams `config` names (from [`config_for`]).
async fn delete_streams_of(config: &Config) {
    let js = async_nats::jetstream::new(
        bus::link::connect_as_url_says(&config.nats_url)
            .await
            .unwrap(),
    );
    for stream in [
        &config.topology.stream,
        &config.agent_bus.commands_stream,
        &config.agent_bus.telemetry_stream,
    ] {
        let _ = js.delete_stream(stream).await;
    }
}

/// A control plane's configuration of the test's own: its database, and NATS streams and
/// subjects named after `tag` and a fresh id; the scheduler's safety net at 200 ms.
fn config_for(url: &str, tag: &str) -> Config {
    let id = Uuid::new_v4().simple().to_string();
    let upper = tag.to_uppercase();
    let mut config = Config::defaults();
    config.database_url = url.to_owned();
    config.nats_url = nats_url();
    config.topology = events::relay::Topology {
        stream: format!("{upper}_{id}"),
        prefix: format!("{tag}{id}.evt"),
    };
    config.agent_bus = bus::Subjects {
        root: format!("{tag}{id}"),
        commands_stream: format!("{upper}C_{id}"),
        telemetry_stream: format!("{upper}T_{id}"),
    };
    config.timings.scheduler_interval = Duration::from_millis(200);
    config.nats_authorization = nats_authorization();
    config
}

/// A host of the test's own: a network namespace joined to this machine by a veth pair
/// (`ip netns`, root only), whose only way out is the pair's far end. Removed when dropped.
struct Netns {
    name: String,
    /// This machine's address on the pair.
    near: String,
    /// The namespace's address on the pair.
    far: String,
}

impl Netns {
    /// A new namespace, or `None` where namespaces cannot be made (a failure under CI).
    fn create() -> Option<Netns> {
        let tag = &Uuid::new_v4().simple().to_string()[..8];
        let name = format!("berth{tag}");
        if !run("ip", &["netns", "add", &name]) {
            common::missing_prerequisite("`ip netns add` failed (it needs root and iproute2)");
            return None;
        }
        let (near_link, far_link) = (format!("vb{tag}"), format!("vn{tag}"));
        let octet = u8::from_str_radix(&tag[..2], 16).unwrap();
        let (near, far) = (format!("10.213.{octet}.1"), format!("10.213.{octet}.2"));
        let netns = Netns { name, near, far };
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &netns.name, "ip"];
            all.extend(args);
            run("ip", &all)
        };
        let made = run(
            "ip",
            &[
                "link", "add", &near_link, "type", "veth", "peer", "name", &far_link,
            ],
        ) && run("ip", &["link", "set", &far_link, "netns", &netns.name])
            && run(
                "ip",
                &[
                    "addr",
                    "add",
                    &format!("{}/30", netns.near),
                    "dev",
                    &near_link,
                ],
            )
            && run("ip", &["link", "set", &near_link, "up"])
            && inside(&[
                "addr",
                "add",
                &format!("{}/30", netns.far),
                "dev",
                &far_link,
            ])
            && inside(&["link", "set", &far_link, "up"])
            && inside(&["link", "set", "lo", "up"]);
        assert!(made, "the namespace's link could not be made");
        Some(netns)
    }

    /// Whether a TCP connection from inside the namespace to `address:port` opens.
    fn reaches(&self, address: &str, port: u16) -> bool {
        let probe = format!("exec 3<>/dev/tcp/{address}/{port}");
        Command::new("ip")
            .args([
                "netns", "exec", &self.name, "timeout", "3", "bash", "-c", &probe,
            ])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The pair goes with the namespace.
        run("ip", &["netns", "del", &self.name]);
    }
}

fn run(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Carries every connection to `listen` on to `upstream`, until dropped: the namespace's one
/// way to the NATS server, which listens on this machine's loopback. Keeps each client's
/// address.
async fn relay_tcp(
    listen: &str,
    upstream: String,
) -> (
    tokio::task::JoinHandle<()>,
    std::sync::Arc<std::sync::Mutex<Vec<std::net::IpAddr>>>,
) {
    let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
    let clients = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = clients.clone();
    let relay = tokio::spawn(async move {
        while let Ok((mut client, peer)) = listener.accept().await {
            seen.lock().unwrap().push(peer.ip());
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (relay, clients)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_on_a_host_of_its_own_reaches_nats_alone_and_runs_a_session() {
    let Some(host) = Netns::create() else {
        return;
    };
    let (pool, url) = fresh_database().await;
    let agent_id = format!("ns{}", &Uuid::new_v4().simple().to_string()[..8]);
    let dir = std::env::temp_dir().join(format!("berth-{agent_id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("agent.log");
    let mut config = config_for(&url, "n");
    config.gateway_listen = "127.0.0.1:0".into();
    config.proxy_ports = None;
    let control_plane = app::start(&config, Parts::ALL).await.unwrap();
    let (_, key) = control_plane
        .first_superadmin
        .clone()
        .expect("a fresh install");
    let gateway = format!("http://{}", control_plane.gateway.unwrap());
    let admin = AdminGateway::with_key(&url, &key);

    // The host's one way out leads to NATS; PostgreSQL is out of its reach.
    let server = without_user(&nats_url());
    let server = server.trim_start_matches("nats://").to_owned();
    let nats_port = free_port_on(&host.near);
    let (_relay, clients) = relay_tcp(&format!("{}:{nats_port}", host.near), server).await;
    assert!(host.reaches(&host.near, nats_port), "NATS, from the host");
    let database_port = url
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next()?.parse::<u16>().ok())
        .expect("the database URL names a port");
    assert!(
        !host.reaches(&host.near, database_port),
        "PostgreSQL on the pair"
    );
    assert!(
        !host.reaches("127.0.0.1", database_port),
        "PostgreSQL on its loopback"
    );
    // Whoever speaks to NATS through the pair from now on is the agent.
    clients.lock().unwrap().clear();

    let credential = dir.join("credential");
    admit_agent(
        &admin,
        &agent_id,
        &credential,
        &["--group", "default", "--max-cpu", "2"],
    );
    let mut inside = config.clone();
    inside.nats_url = format!("nats://{}:{nats_port}", host.near);
    let agent = AgentProcess::start_in(
        Some(&host),
        &inside,
        &agent_id,
        &credential,
        &dir.join("data"),
        &log,
    );

    events::tls::use_ring();
    let http = reqwest::Client::new();
    let get = |path: String| {
        let request = http
            .get(format!("{gateway}{path}"))
            .header("x-api-key", &key);
        async move {
            let answer = request.send().await.ok()?;
            answer.status().is_success().then_some(())?;
            answer.json::<serde_json::Value>().await.ok()
        }
    };
    eventually("the agent registers from its own host", || async {
        let resources = get("/v1/resources".into()).await?;
        (resources["group"]["agents"].as_i64() == Some(1)).then_some(())
    })
    .await;
    let created: serde_json::Value = http
        .post(format!("{gateway}/v1/sessions"))
        .header("x-api-key", &key)
        .json(
            &serde_json::json!({"type": "batch", "image": "berth/shell:latest",
            "startup_command": "echo hello from a host of its own; exit 3",
            "resources": {"cpu": 1, "memory": "128m"}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session = created["sessions"][0]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("created: {created}"))
        .to_owned();
    let detail = eventually("the session ends", || async {
        let detail = get(format!("/v1/sessions/{session}")).await?;
        (detail["status"] == "TERMINATED").then_some(detail)
    })
    .await;
    assert_eq!(detail["exit_code"], 3, "{detail:#}");
    let logs = eventually("its output is kept", || async {
        let logs = get(format!("/v1/sessions/{session}/logs")).await?;
        let text = logs["kernels"][0]["content"].as_str()?.to_owned();
        text.contains("hello from a host of its own")
            .then_some(text)
    })
    .await;
    assert!(logs.contains("hello"), "{logs}");
    let far: std::net::IpAddr = host.far.parse().unwrap();
    assert!(
        clients.lock().unwrap().contains(&far),
        "the agent spoke from the namespace's address"
    );
    let replay = events::ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);

    agent.kill();
    control_plane.stop().await.unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(!said.contains("127.0.0.1:1/"), "{said}");
    delete_streams_of(&config).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A port nothing listens on at `address`.
fn free_port_on(address: &str) -> u16 {
    std::net::TcpListener::bind((address, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A credential NATS refuses is an answer, not a wait: an agent connected when it is revoked
/// is cut off by the server's new authorization and ends non-zero naming the refusal, and so
/// does one started with a credential revoked before it ever connected; the revoked agent is
/// offered to the scheduler no more.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_whose_credential_is_refused_or_revoked_ends_naming_the_refusal() {
    if nats_authorization().is_none() {
        missing_prerequisite(
            "BERTH_NATS_AUTHORIZATION_DIR is unset: berth keeps no server's authorization here",
        );
        return;
    }
    let (pool, url) = fresh_database().await;
    let config = config_for(&url, "r");
    let parts = Parts {
        relay: true,
        scheduler: true,
        recorder: true,
        ..Parts::default()
    };
    let _control_plane = app::start(&config, parts).await.unwrap();
    init_install(&url);
    let admin = AdminGateway::start(&url);
    let tag = &Uuid::new_v4().simple().to_string()[..8];
    let dir = std::env::temp_dir().join(format!("berth-refused-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();

    // Connected, then revoked.
    let connected = format!("rvk{tag}");
    let credential = dir.join("connected");
    admit_agent(
        &admin,
        &connected,
        &credential,
        &["--group", "default", "--max-cpu", "2"],
    );
    let log = dir.join("connected.log");
    let mut agent = AgentProcess::start(&config, &connected, &credential, &dir.join("data1"), &log);
    eventually("the agent registers", || async {
        let client = pool.get().await.unwrap();
        client
            .query_opt(
                "SELECT 1 FROM ledger.agents WHERE agent_id = $1 AND lost IS NULL",
                &[&connected],
            )
            .await
            .unwrap()
    })
    .await;
    let (ok, text) = admin.admin(&["agent", "revoke", &connected]);
    assert!(ok, "{text}");
    let status = agent
        .ended_within(Duration::from_secs(90))
        .expect("the revoked agent ends by itself");
    assert!(!status.success(), "{status:?}");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("refused this agent's credential"), "{said}");
    let client = pool.get().await.unwrap();
    let lost: Option<String> = client
        .query_one(
            "SELECT lost FROM ledger.agents WHERE agent_id = $1",
            &[&connected],
        )
        .await
        .unwrap()
        .get(0);
    assert!(lost.is_some(), "the revoked agent is offered no more");

    // Revoked before it ever connected.
    let never = format!("rvn{tag}");
    let credential = dir.join("never");
    admit_agent(
        &admin,
        &never,
        &credential,
        &["--group", "default", "--max-cpu", "2"],
    );
    let (ok, text) = admin.admin(&["agent", "revoke", &never]);
    assert!(ok, "{text}");
    // Whether it logs in before the server's authorization drops the key or after, it is
    // refused from then on.
    let log = dir.join("never.log");
    let mut agent = AgentProcess::start(&config, &never, &credential, &dir.join("data2"), &log);
    let status = agent
        .ended_within(Duration::from_secs(90))
        .expect("an agent NATS refuses ends by itself");
    assert!(!status.success(), "{status:?}");
    // Refused by NATS once the key is dropped, or, connected just before, by the control
    // plane, which knows the revocation: either way it ends saying why.
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("refused this agent's credential") || said.contains("was revoked"),
        "{said}"
    );
}
