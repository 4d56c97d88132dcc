//! The harness the end-to-end tests share: a fresh database and JetStream stream, and the
//! whole control plane started through `berth::app::start`, exactly as `berth up` starts it
//! (relay and sealer, projections, scheduler, reconciler, gateway).
#![allow(dead_code)]

use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use berth::app::{self, App, Parts};
use berth::config::{Config, Timings};
use deadpool_postgres::Pool;
use events::payloads::*;
use events::relay::Topology;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

pub const GIB: u64 = 1 << 30;

/// A request body of `chunks` pieces of `size` bytes of `byte`, streamed: sent with no
/// length said (chunked), as a client that does not know its size sends it.
pub fn streamed_body(chunks: usize, size: usize, byte: u8) -> reqwest::Body {
    let pieces =
        (0..chunks).map(move |_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![byte; size])));
    reqwest::Body::wrap_stream(futures::stream::iter(pieces))
}

pub fn base_url() -> String {
    std::env::var("BERTH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://berth@127.0.0.1:55432/berth".into())
}

pub fn nats_url() -> String {
    std::env::var("BERTH_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:54222".into())
}

pub struct Harness {
    pub pool: Pool,
    pub base: String,
    pub admin_key: String,
    pub http: reqwest::Client,
    pub topology: Topology,
    /// Where the test's agents meet its control plane.
    pub agent_bus: bus::Subjects,
    /// The control plane; dropping the harness drops it, which aborts its parts.
    app: std::sync::Mutex<Option<App>>,
    /// The test's own database, dropped with the harness unless the test failed.
    database_url: String,
}

/// The configuration of a test's control plane: a database and a JetStream stream of its
/// own, any free port, a scheduler pass at least every second. Agents driven by hand send no
/// heartbeats, so the reconciler gives them 5 minutes before it calls them lost, and the
/// scheduler as long before it passes them over.
pub fn test_config() -> Config {
    let base = base_url();
    let (prefix, _) = base.rsplit_once('/').expect("url has a database");
    let id = Uuid::new_v4().simple().to_string();
    let mut config = Config::defaults();
    config.database_url = format!("{prefix}/test_{id}");
    config.nats_url = nats_url();
    config.topology = Topology {
        stream: format!("T_{id}"),
        prefix: format!("t{id}.evt"),
    };
    config.agent_bus = bus::Subjects {
        root: format!("t{id}"),
        commands_stream: format!("TC_{id}"),
        telemetry_stream: format!("TT_{id}"),
    };
    config.gateway_listen = "127.0.0.1:0".into();
    // Backend.AI's API, with a master key of the test's own (never a file in the tree).
    config.backendai = Some(berth::config::MasterKey::Given(
        format!("test master key {id}").into_bytes(),
    ));
    // The shared server's authorization, which the test's control plane keeps in step with
    // the agents it admits (a test with a server of its own sets this to none).
    config.nats_authorization = std::env::var_os("BERTH_NATS_AUTHORIZATION_DIR")
        .filter(|dir| !dir.is_empty())
        .map(Into::into);
    config.timings = Timings {
        // The events that change a decision wake the scheduler; the interval is its safety
        // net. Every 100 ms, an idle control plane took half a core (15.7% in PostgreSQL,
        // 31.4% in the test's process), two tests at a time most of the run; at 1 s, 13.6%.
        scheduler_interval: Duration::from_secs(1),
        heartbeat_timeout: Duration::from_secs(300),
        agent_silent_after: Duration::from_secs(300),
        // Longer than a test waits for an event's effect (10 s, `wait_session_within`), so a
        // detail made fresh that soon was evicted by the event, not expired; shorter than the
        // 20 s waits for usage, which changes without events.
        detail_cache_ttl: Duration::from_secs(15),
        ..Timings::default()
    };
    config
}

pub async fn start() -> Harness {
    start_with(test_config()).await
}

/// [`start`] with a configuration of the test's own (from [`test_config`]).
pub async fn start_with(config: Config) -> Harness {
    start_parts(config, Parts::ALL).await
}

/// [`start_with`] running only `parts` (the gateway among them), for a test that runs the
/// others itself.
pub async fn start_parts(config: Config, parts: Parts) -> Harness {
    let app = app::start(&config, parts)
        .await
        .expect("the control plane starts");
    let (_, admin_key) = app.first_superadmin.clone().expect("a fresh install");
    harness(config, app, admin_key)
}

/// The whole control plane on a database that holds an install already (a restored one),
/// whose superadmin's key is `admin_key`.
pub async fn start_existing(config: Config, admin_key: String) -> Harness {
    let app = app::start(&config, Parts::ALL)
        .await
        .expect("the control plane starts");
    assert!(app.first_superadmin.is_none(), "not a fresh install");
    harness(config, app, admin_key)
}

fn harness(config: Config, app: app::App, admin_key: String) -> Harness {
    let address = app.gateway.expect("the gateway listens");
    Harness {
        pool: app.pool.clone(),
        // A gateway with a certificate serves HTTPS, checked against the CA the CLI is given.
        base: match config.gateway_tls_cert {
            Some(_) => format!("https://localhost:{}", address.port()),
            None => format!("http://{address}"),
        },
        admin_key,
        http: {
            events::tls::use_ring();
            let builder = reqwest::Client::builder().timeout(Duration::from_secs(30));
            match &config.gateway_ca {
                Some(ca) => builder.tls_certs_merge(
                    reqwest::Certificate::from_pem_bundle(&std::fs::read(ca).unwrap()).unwrap(),
                ),
                None => builder,
            }
            .build()
            .unwrap()
        },
        topology: config.topology,
        agent_bus: config.agent_bus,
        app: std::sync::Mutex::new(Some(app)),
        database_url: config.database_url,
    }
}

impl Harness {
    pub async fn call(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("gateway answers");
        let status = response.status();
        let text = response.text().await.expect("the body is read");
        // An empty body is Null; anything else must be JSON, so a check on a field of a
        // body that is not JSON fails instead of passing on Null.
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{status}: the body is not JSON ({e}): {text}"))
        };
        (status, body)
    }

    /// Panics with the error of a part of the control plane that has stopped: the parts run
    /// until the harness is dropped, so one that ended failed.
    pub fn assert_running(&self) {
        let ended = self
            .app
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .and_then(App::ended);
        if let Some(e) = ended {
            panic!("a part of berth stopped: {e:#}");
        }
    }

    pub async fn create(&self, key: &str, body: Value) -> (StatusCode, Value) {
        self.call(key, reqwest::Method::POST, "/v1/sessions", Some(body))
            .await
    }

    pub async fn get(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.call(key, reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(key, reqwest::Method::POST, path, Some(body))
            .await
    }

    pub async fn put(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(key, reqwest::Method::PUT, path, Some(body)).await
    }

    pub async fn patch(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(key, reqwest::Method::PATCH, path, Some(body))
            .await
    }

    /// The idle-reaper's checks of the resource group `group`, set as a superadmin sets them
    /// (`PUT /v1/admin/idle-checks`).
    pub async fn set_group_idle_checks(&self, group: &str, checks: events::idleness::IdleChecks) {
        let body = json!({ "resource_group": group, "checks": checks });
        let (status, answer) = self
            .put(&self.admin_key, "/v1/admin/idle-checks", body)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "set idle checks: {answer}");
    }

    pub async fn delete(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.call(key, reqwest::Method::DELETE, path, None).await
    }

    pub async fn agent(&self, id: &str, group: &str, cpu: u64) {
        let offer = bus::protocol::Offer {
            unlabelled_images: Vec::new(),
            resource_group: group.into(),
            capacity: ResourceSlots {
                cpu_milli: cpu * 1000,
                memory_bytes: 64 * GIB,
                gpu_milli: 0,
            },
            images: vec!["berth/shell:latest".into()],
            address: None,
            image_apps: Default::default(),
            network_scope: None,
            volumes: Default::default(),
        };
        admit(self, id, group).await;
        recorder::record::register(&self.pool, id, &offer)
            .await
            .unwrap();
    }

    /// Waits until the ledger knows agent `id` (it has registered).
    pub async fn wait_registered(&self, id: &str) {
        wait_for(|| async {
            let client = self.pool.get().await.unwrap();
            client
                .query_opt("SELECT 1 FROM ledger.agents WHERE agent_id = $1", &[&id])
                .await
                .unwrap()
        })
        .await;
    }

    /// Starts a simulated agent `id` (4 cores, 8 GiB, `berth/shell`) on this control plane's
    /// bus over `nats`, its outbox under `dir`; it has registered when this returns.
    pub async fn simulated_agent(
        &self,
        nats: &async_nats::Client,
        id: &str,
        dir: &std::path::Path,
        batch_runs_for: Duration,
    ) -> SimulatedAgent {
        self.simulated_agent_in(nats, id, "default", dir, batch_runs_for)
            .await
    }

    /// [`Harness::simulated_agent`] in resource group `group`.
    pub async fn simulated_agent_in(
        &self,
        nats: &async_nats::Client,
        id: &str,
        group: &str,
        dir: &std::path::Path,
        batch_runs_for: Duration,
    ) -> SimulatedAgent {
        let capacity = ResourceSlots {
            cpu_milli: 4000,
            memory_bytes: 8 * GIB,
            gpu_milli: 0,
        };
        let images = agent::docker::HostImages {
            names: vec!["berth/shell:latest".into()],
            ..Default::default()
        };
        let config = agent::host::HostConfig {
            agent_id: id.into(),
            resource_group: group.into(),
            offer: agent::host::Offered::fixed(capacity, images),
            nats: agent::host::Nats::Client(nats.clone()),
            subjects: self.agent_bus.clone(),
            outbox: dir.to_owned(),
            runtime: agent::host::Runtime::Simulated { batch_runs_for },
        };
        let host = agent::host::start(config, Default::default())
            .await
            .expect("the agent starts");
        self.wait_registered(id).await;
        SimulatedAgent { host }
    }

    /// A user made as a superadmin makes one, through the API (`POST /v1/admin/users`): their
    /// first API key.
    pub async fn user(&self, email: &str) -> String {
        let (status, answer) = self
            .post(
                &self.admin_key,
                "/v1/admin/users",
                json!({ "email": email }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "make user {email}: {answer}");
        answer["api_key"].as_str().expect("a key").to_owned()
    }

    /// A resource group made as a superadmin makes one (`POST /v1/admin/resource-groups`
    /// with `group`, the request's body), granted to the project `default` when `granted`.
    pub async fn resource_group(&self, group: Value, granted: bool) {
        let (status, answer) = self
            .post(&self.admin_key, "/v1/admin/resource-groups", group.clone())
            .await;
        assert!(status.is_success(), "make group {group}: {status} {answer}");
        if granted {
            let name = group["name"].as_str().expect("the group's name");
            let path = format!("/v1/admin/resource-groups/{name}/grants");
            let (status, answer) = self
                .post(&self.admin_key, &path, json!({ "project": "default" }))
                .await;
            assert!(status.is_success(), "grant {name} to default: {answer}");
        }
    }

    /// A Backend.AI keypair issued to `email` through the API (`POST
    /// /v1/admin/backendai-keypairs`): its access key and the secret key the gateway derives
    /// for it.
    pub async fn backendai_keypair(&self, email: &str) -> (String, String) {
        let (status, answer) = self
            .post(
                &self.admin_key,
                "/v1/admin/backendai-keypairs",
                json!({ "email": email }),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "issue a keypair to {email}: {answer}"
        );
        let field = |name: &str| answer[name].as_str().expect(name).to_owned();
        (field("access_key"), field("secret_key"))
    }

    /// Polls the session's detail until `done` holds (or fails after 20 s).
    /// Polls the session's detail until `done` holds; after 20 s fails with the last detail
    /// seen (and with the error of any part of berth that stopped meanwhile).
    pub async fn wait_session(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        self.wait_session_within(id, Duration::from_secs(20), done)
            .await
    }

    /// [`Harness::wait_session`] for at most `limit`.
    pub async fn wait_session_within(
        &self,
        id: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            self.assert_running();
            let (status, body) = self
                .get(&self.admin_key, &format!("/v1/sessions/{id}"))
                .await;
            if status == StatusCode::OK && done(&body) {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "session {id} not as awaited within {limit:?}; last seen ({status}): {body:#}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Reads the session's detail until it is served from memory (the cache is live), for
    /// at most 20 s.
    pub async fn cached_detail(&self, id: &str) -> Value {
        wait_for(|| async {
            let response = self
                .http
                .get(format!("{}/v1/sessions/{id}", self.base))
                .header("x-api-key", &self.admin_key)
                .send()
                .await
                .expect("gateway answers");
            let hit = response
                .headers()
                .get(gateway::api::sessions::CACHE_HEADER)
                .is_some_and(|v| v == "hit");
            let body: Value = response.json().await.expect("a JSON detail");
            hit.then_some(body)
        })
        .await
    }

    pub async fn history(&self, id: &str) -> Vec<Value> {
        let (status, body) = self
            .get(&self.admin_key, &format!("/v1/sessions/{id}/history"))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["history"].as_array().cloned().expect("a history list")
    }

    /// `seconds` from now by the database's clock, the one the log and the scheduler read.
    pub async fn database_time_in(&self, seconds: i32) -> chrono::DateTime<chrono::Utc> {
        self.pool
            .get()
            .await
            .unwrap()
            .query_one(
                "SELECT now() + make_interval(secs => $1)",
                &[&f64::from(seconds)],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// The test's own database.
    pub fn database_url(&self) -> &str {
        &self.database_url
    }

    /// Stops the control plane, keeping its database and streams (dropped with the harness).
    pub fn stop(&self) {
        drop(self.app.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    pub async fn count_events(&self, event_type: &str) -> i64 {
        let client = self.pool.get().await.unwrap();
        client
            .query_one(
                "SELECT count(*) FROM events WHERE event_type = $1",
                &[&event_type],
            )
            .await
            .unwrap()
            .get(0)
    }
}

/// A passing test leaves nothing behind: its control plane stops, then its database and its
/// JetStream stream are dropped (a test suite run made hundreds of them before). A failing
/// test keeps both, to be looked at. Before its database goes, every test's log is searched
/// for secrets ([`secrets_in_the_log`]): a test whose events hold one fails, and keeps its
/// database, so that a run of the whole suite greps every event it wrote.
impl Drop for Harness {
    fn drop(&mut self) {
        drop(self.app.lock().unwrap_or_else(|e| e.into_inner()).take());
        if std::thread::panicking() {
            eprintln!(
                "kept for a look: database {}, stream {}",
                self.database_url, self.topology.stream
            );
            return;
        }
        let url = self.database_url.clone();
        let admin_key = self.admin_key.clone();
        let streams = [
            self.topology.stream.clone(),
            self.agent_bus.commands_stream.clone(),
            self.agent_bus.telemetry_stream.clone(),
        ];
        // Drop runs inside the test's runtime, which cannot be blocked on: a runtime of its own
        // on a thread of its own does the cleaning.
        let cleaned = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the cleaning");
            runtime.block_on(async move {
                let (prefix, name) = url.rsplit_once('/').expect("url has a database");
                let (client, connection) = deadpool_postgres::tokio_postgres::connect(
                    &format!("{prefix}/postgres"),
                    deadpool_postgres::tokio_postgres::NoTls,
                )
                .await?;
                tokio::spawn(connection);
                let found = secrets_in_the_log(&url, &admin_key).await?;
                if !found.is_empty() {
                    return Ok(found);
                }
                // The containers of the test's agents go too: a batch session's exited
                // container, one an agent stopped with the test had not removed yet.
                let agents = agents_of(&url).await.unwrap_or_default();
                remove_containers_of(&agents);
                client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .await?;
                let js =
                    async_nats::jetstream::new(bus::link::connect_as_url_says(&nats_url()).await?);
                for stream in streams {
                    // The agents' streams exist only once the recorder has started.
                    let _ = js.delete_stream(&stream).await;
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Vec::new())
            })
        })
        .join();
        match cleaned {
            Ok(Ok(found)) if !found.is_empty() => panic!(
                "secrets in the log (rule 14) of database {}: {found:?}",
                self.database_url
            ),
            Ok(Err(e)) => eprintln!("the test's database or stream was not dropped: {e}"),
            _ => {}
        }
    }
}

/// The events of the test's log whose payload holds a secret (rule 14): a password's Argon2
/// hash or any Argon2 PHC string, an app's token, a webhook's signing secret in the form it
/// is shown (`whsec_`), or the superadmin's API key. Each as `type #seq`.
async fn secrets_in_the_log(
    url: &str,
    admin_key: &str,
) -> Result<Vec<String>, deadpool_postgres::tokio_postgres::Error> {
    let (client, connection) =
        deadpool_postgres::tokio_postgres::connect(url, deadpool_postgres::tokio_postgres::NoTls)
            .await?;
    tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT e.event_type || ' #' || e.seq FROM events e
              WHERE strpos(e.payload::text, '$argon2') > 0
                 OR strpos(e.payload::text, 'whsec_') > 0
                 OR strpos(e.payload::text, $1) > 0
                 OR EXISTS (SELECT 1 FROM secrets.app_tokens t
                             WHERE strpos(e.payload::text, t.token) > 0)
                 OR EXISTS (SELECT 1 FROM secrets.password_hashes p
                             WHERE strpos(e.payload::text, p.password_hash) > 0)",
            &[&admin_key],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The agents the test's ledger knows.
async fn agents_of(url: &str) -> Result<Vec<String>, deadpool_postgres::tokio_postgres::Error> {
    let (client, connection) =
        deadpool_postgres::tokio_postgres::connect(url, deadpool_postgres::tokio_postgres::NoTls)
            .await?;
    tokio::spawn(connection);
    Ok(client
        .query("SELECT agent_id FROM ledger.agents", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Removes every container the Docker agents `agents` made (by their label), if any: one
/// listing of berth's containers, one removal; then their sessions' networks.
pub(crate) fn remove_containers_of(agents: &[String]) {
    remove_made_by(agents, &["ps", "-a"], &["rm", "-f"]);
    // Each session's own network, once its containers are gone.
    remove_made_by(agents, &["network", "ls"], &["network", "rm"]);
}

/// Removes, with `docker <remove>`, what `docker <list>` shows that one of `agents` made (by
/// its label): one listing, one removal.
fn remove_made_by(agents: &[String], list: &[&str], remove: &[&str]) {
    let listed = std::process::Command::new("docker")
        .args(list)
        .args([
            "--filter",
            "label=ai.berth.agent",
            "--format",
            "{{.ID}} {{.Label \"ai.berth.agent\"}}",
        ])
        .output();
    let Ok(listed) = listed else { return };
    let ids: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, agent)| agents.iter().any(|a| a == agent))
        .map(|(id, _)| id.to_owned())
        .collect();
    if !ids.is_empty() {
        let _ = std::process::Command::new("docker")
            .args(remove)
            .args(&ids)
            .output();
    }
}

/// A simulated agent started by [`Harness::simulated_agent`].
pub struct SimulatedAgent {
    host: agent::host::AgentHost,
}

impl SimulatedAgent {
    /// Stops the agent, which must have run without failing until then.
    pub async fn stop(self) {
        self.host
            .stop()
            .await
            .expect("the agent ran without failing");
    }

    /// The agent leaves as a stopped process does (SIGTERM): it says it departs, with
    /// `reason`, and ends within 10 s; its sessions are left running, for its return.
    pub async fn depart(self, reason: &str) {
        let how = agent::Leave {
            reason: reason.into(),
            end_sessions: false,
        };
        let left = self
            .host
            .leave(how, Duration::from_secs(10))
            .await
            .expect("the agent left without failing");
        assert!(
            matches!(left, agent::host::Left::InTime),
            "the agent left in time"
        );
    }

    /// Ends the agent at once, as a killed process ends (no heartbeat, no report, nothing
    /// taken from its commands), which must have been running until then.
    pub async fn kill(self) {
        if let Some(ended) = self.host.kill().await {
            panic!("the agent had ended before it was killed: {ended:?}");
        }
    }
}

/// Admits agent `id` into `group` with room for any capacity a test offers; its credential.
/// Admits agent `id` to `group` as a superadmin does (`POST /v1/admin/agents`), with room
/// for whatever a test's agent offers: its credential (an nkey seed).
pub async fn admit(h: &Harness, id: &str, group: &str) -> String {
    let body = json!({
        "agent_id": id,
        "resource_group": group,
        "max_capacity": {"cpu": 1_000_000, "memory_bytes": 1u64 << 46, "gpu": 1_000_000},
    });
    let (status, answer) = h.post(&h.admin_key, "/v1/admin/agents", body).await;
    assert_eq!(status, StatusCode::CREATED, "admit {id}: {answer}");
    answer["credential"]
        .as_str()
        .expect("a credential")
        .to_owned()
}

/// A nats-server process, killed when dropped.
pub struct NatsServer {
    child: Child,
    dir: std::path::PathBuf,
}

impl NatsServer {
    /// Runs a nats-server with the configuration `file`, its log in `dir`.
    pub fn spawn(file: &std::path::Path, dir: &std::path::Path) -> NatsServer {
        let child = Command::new(nats_server_binary())
            .arg("-c")
            .arg(file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("nats.log")).unwrap())
            .spawn()
            .expect("nats-server starts (BERTH_NATS_SERVER, or on PATH)");
        NatsServer {
            child,
            dir: dir.to_owned(),
        }
    }

    /// Kills the server (SIGKILL), keeping what it stored.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.dir = std::path::PathBuf::new();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn nats_server_binary() -> String {
    std::env::var("BERTH_NATS_SERVER").unwrap_or_else(|_| "nats-server".into())
}

/// Starts a nats-server of the test's own on `port`, with JetStream kept in `dir` (the same
/// `dir` again: the server restarted with what it stored) and, when given, `authorization`
/// (a JSON block).
pub async fn start_server(
    port: u16,
    dir: &std::path::Path,
    authorization: Option<&serde_json::Value>,
) -> NatsServer {
    let dir = dir.to_path_buf();
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = format!(
        "host: 127.0.0.1\nport: {port}\njetstream: {{store_dir: \"{}\"}}\n",
        dir.join("js").display()
    );
    if let Some(authorization) = authorization {
        config.push_str(&format!("authorization: {authorization}\n"));
    }
    let file = dir.join("nats.conf");
    std::fs::write(&file, config).unwrap();
    let server = NatsServer::spawn(&file, &dir);
    wait_for(|| async { std::net::TcpStream::connect(("127.0.0.1", port)).ok() }).await;
    server
}

pub async fn wait_for<T, F, Fut>(probe: F) -> T
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn shell(cpu: f64) -> Value {
    json!({"image": "berth/shell:latest", "resources": {"cpu": cpu, "memory": "1g"}})
}

pub fn ids(created: &Value) -> Vec<String> {
    created["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Builds `image` from berth/shell with `label` (`key=value`), as a server's image carries
/// one; removed when dropped.
pub(crate) struct LabelledImage(String);

impl LabelledImage {
    pub(crate) fn build(image: &str, label: &str) -> LabelledImage {
        use std::io::Write;
        let mut build = std::process::Command::new("docker")
            .args(["build", "-q", "-t", image, "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("docker runs");
        let dockerfile = format!("FROM berth/shell:latest\nLABEL {label}\n");
        build
            .stdin
            .take()
            .unwrap()
            .write_all(dockerfile.as_bytes())
            .unwrap();
        assert!(build.wait().unwrap().success(), "docker build {image}");
        LabelledImage(image.to_owned())
    }
}

impl Drop for LabelledImage {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rmi", "-f", &self.0])
            .output();
    }
}
