//! berth rides through its dependencies' outages. `berth up` and `berth agent` run as
//! processes on a PostgreSQL cluster, a nats-server and a door to the Docker engine of the
//! test's own; with batch sessions in flight the test stops PostgreSQL (`pg_ctl stop -m
//! fast`), kills nats-server and shuts the engine's socket, each for longer than the agents'
//! heartbeat timeout, and gives each back, never touching berth's processes. During the
//! PostgreSQL outage a create answers 503 with `Retry-After` and writes nothing, and
//! `/readyz` names PostgreSQL; once it is back the same create succeeds. Afterwards both
//! processes still run, no agent was marked lost, every session ended TERMINATED with exit
//! code 0 and its whole output in exactly one container, none is left, every replay is
//! equal and the audit chain verifies. Both processes also start while PostgreSQL and NATS
//! are away, and wait for them; a login PostgreSQL refuses stops `berth up` with the reason.

mod common;

use std::time::Duration;

use common::*;
use deadpool_postgres::Pool;
use serde_json::{json, Value};
use testkit::scratch::{EngineDoor, Nats, Postgres};

/// How long each outage lasts: longer than the heartbeat timeout the processes are given,
/// so an agent marked lost for the outage's silence would show.
const OUTAGE: Duration = Duration::from_secs(12);
const HEARTBEAT_TIMEOUT_SECS: &str = "8";

fn batch(count: u32) -> Value {
    json!({"type": "batch", "image": "berth/shell:latest",
           "startup_command": "echo begin; sleep 5; echo done",
           "resources": {"cpu": 0.25, "memory": "64m"}, "count": count})
}

struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Api {
    async fn create(&self, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/sessions", self.base))
            .header("X-API-Key", &self.key)
            .json(body)
            .send()
            .await
            .expect("the gateway answers")
    }

    /// Creates `count` sessions; their ids.
    async fn launch(&self, count: u32) -> Vec<uuid::Uuid> {
        let response = self.create(&batch(count)).await;
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 201, "{body}");
        body["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session_id"].as_str().unwrap().parse().unwrap())
            .collect()
    }

    async fn readyz(&self) -> (u16, Value) {
        let response = self
            .http
            .get(format!("{}/readyz", self.base))
            .send()
            .await
            .expect("the gateway answers");
        (response.status().as_u16(), response.json().await.unwrap())
    }
}

/// How many of `sessions` the ledger has in one of `statuses`.
async fn count_in(pool: &Pool, sessions: &[uuid::Uuid], statuses: &[&str]) -> usize {
    let client = pool.get().await.unwrap();
    let statuses: Vec<String> = statuses.iter().map(|s| s.to_string()).collect();
    client
        .query_one(
            "SELECT count(*) FROM ledger.sessions WHERE session_id = ANY($1) AND status = ANY($2)",
            &[&sessions, &statuses],
        )
        .await
        .unwrap()
        .get::<_, i64>(0) as usize
}

/// Waits (up to `within`) until every one of `sessions` is in one of `statuses`.
async fn wait_all(pool: &Pool, sessions: &[uuid::Uuid], statuses: &[&str], within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while count_in(pool, sessions, statuses).await < sessions.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every session reached {statuses:?} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A fault that waiting does not mend stops the process, saying what it is: here a role
/// PostgreSQL does not know.
#[test]
fn a_login_postgresql_refuses_stops_berth_with_the_reason() {
    let base = base_url();
    let (_, rest) = base.split_once('@').unwrap();
    let url = format!("postgres://nobody_{}@{rest}", uuid::Uuid::new_v4().simple());
    let (ok, text) = berth_with(
        &["up"],
        &[
            ("BERTH_DATABASE_URL".into(), url),
            ("BERTH_GATEWAY_LISTEN".into(), "127.0.0.1:0".into()),
        ],
    );
    assert!(
        !ok,
        "berth up went on with a login PostgreSQL refuses: {text}"
    );
    assert!(
        text.contains("reach PostgreSQL") && text.contains("does not exist"),
        "{text}"
    );
}

/// So does a NATS login refused: a control plane with a wrong password says so and stops.
#[tokio::test(flavor = "multi_thread")]
async fn a_login_nats_refuses_stops_berth_with_the_reason() {
    if nats_authorization().is_none() {
        missing_prerequisite("BERTH_NATS_AUTHORIZATION_DIR is unset: the NATS server takes anyone");
        return;
    }
    let (_pool, url) = fresh_database().await;
    let server = without_user(&nats_url());
    let wrong = server.replacen("nats://", "nats://control:not-the-password@", 1);
    let (ok, text) = berth_with(
        &["up"],
        &[
            ("BERTH_DATABASE_URL".into(), url),
            ("BERTH_NATS_URL".into(), wrong),
            ("BERTH_GATEWAY_LISTEN".into(), "127.0.0.1:0".into()),
        ],
    );
    assert!(!ok, "berth up went on with a login NATS refuses: {text}");
    assert!(
        text.contains("connect to NATS") && text.contains("authorization violation"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn berth_rides_through_postgresql_nats_and_docker_engine_outages() {
    let postgres = Postgres::start().unwrap();
    let mut nats = Nats::start().unwrap();
    let door = EngineDoor::open().unwrap();
    let url = postgres.url("berth");
    events::store::ensure_database(&url).await.unwrap();
    let pool = events::store::pool(&url, 4).unwrap();
    berth::app::migrate(&pool).await.unwrap();
    let key = init_install(&url);
    let admin = AdminGateway::with_key(&url, &key);
    allow_sessions(&admin, 100);
    let dir = tempdir("berth-outages");
    let agent_id = format!("out{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let credential = dir.join("credential");
    admit_agent(&admin, &agent_id, &credential, &[]);
    // The admin's gateway is done: the outages below are the control plane's to ride.
    drop(admin);

    let port = testkit::scratch::free_port();
    let up_env: Vec<(String, String)> = [
        ("BERTH_DATABASE_URL", url.clone()),
        ("BERTH_NATS_URL", nats.url()),
        // A server of the test's own, without authorization: nothing to keep in step.
        ("BERTH_NATS_AUTHORIZATION_DIR", String::new()),
        ("BERTH_GATEWAY_LISTEN", format!("127.0.0.1:{port}")),
        ("BERTH_PROXY_PORTS", "off".into()),
        ("BERTH_SCHEDULER_INTERVAL_MS", "500".into()),
        ("BERTH_RECONCILE_EVERY_MS", "1000".into()),
        (
            "BERTH_HEARTBEAT_TIMEOUT_SECS",
            HEARTBEAT_TIMEOUT_SECS.into(),
        ),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .into();
    let agent_env: Vec<(String, String)> = [
        ("BERTH_DATABASE_URL", NO_DATABASE.to_owned()),
        ("BERTH_NATS_URL", nats.url()),
        ("BERTH_AGENT_CREDENTIAL", credential.display().to_string()),
        ("DOCKER_HOST", door.docker_host()),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .into();
    let data = dir.join("data");
    let agent_args = [
        "agent",
        "--id",
        &agent_id,
        "--cpu",
        "4",
        "--memory-gib",
        "4",
        "--image",
        "berth/shell:latest",
        "--data-dir",
        data.to_str().unwrap(),
    ];
    let (up_log, agent_log) = (dir.join("up.log"), dir.join("agent.log"));
    // berth starts while PostgreSQL and NATS are both away: it waits for each, saying so.
    postgres.stop().unwrap();
    nats.kill();
    let mut up = BerthProcess::start(&["up"], &up_env, &up_log);
    let mut agent = BerthProcess::start(&agent_args, &agent_env, &agent_log);
    let said = |log: &std::path::Path, line: &str| {
        std::fs::read_to_string(log).is_ok_and(|text| text.contains(line))
    };
    for waited_for in ["waiting for PostgreSQL", "waiting for NATS"] {
        for _ in 0..100 {
            if said(&up_log, waited_for) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            said(&up_log, waited_for),
            "berth up never said `{waited_for}`"
        );
        assert!(up.still_running(), "berth up exited instead of waiting");
        if waited_for.ends_with("PostgreSQL") {
            postgres.start_again().unwrap();
        }
    }
    assert!(
        agent.still_running(),
        "berth agent exited instead of waiting"
    );
    nats.start_again().unwrap();
    let logs = || {
        let tail = |path: &std::path::Path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(60)..].join("\n")
        };
        format!(
            "up (tail):\n{}\nagent (tail):\n{}",
            tail(&up_log),
            tail(&agent_log)
        )
    };
    let api = Api {
        http: {
            events::tls::use_ring();
            reqwest::Client::new()
        },
        base: format!("http://127.0.0.1:{port}"),
        key,
    };
    let registered = || async {
        let client = pool.get().await.unwrap();
        client
            .query_opt(
                "SELECT 1 FROM ledger.agents WHERE agent_id = $1",
                &[&agent_id],
            )
            .await
            .unwrap()
            .is_some()
    };
    for _ in 0..600 {
        if registered().await && api.http.get(&api.base).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(registered().await, "the agent never registered\n{}", logs());
    let mut sessions = Vec::new();

    // PostgreSQL goes away while sessions run.
    let running = api.launch(4).await;
    wait_all(&pool, &running, &["RUNNING"], Duration::from_secs(90)).await;
    sessions.extend(&running);
    drop(pool);
    postgres.stop().unwrap();
    let refused = api.create(&batch(1)).await;
    assert_eq!(refused.status(), 503);
    assert!(
        refused.headers().contains_key("retry-after"),
        "{:?}",
        refused.headers()
    );
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "database_unavailable", "{body}");
    // The refused write has told the readiness report already, whether or not a check ran.
    let (status, named) = api.readyz().await;
    assert_eq!(status, 503, "/readyz: {named}");
    assert_eq!(named["postgres"]["up"], false, "/readyz: {named}");
    assert!(named["postgres"]["error"].is_string(), "{named}");
    tokio::time::sleep(OUTAGE).await;
    postgres.start_again().unwrap();
    // The same create, retried as its Retry-After says, succeeds once PostgreSQL is back.
    let mut created = None;
    for _ in 0..60 {
        let response = api.create(&batch(1)).await;
        if response.status() == 201 {
            created = Some(response.json::<Value>().await.unwrap());
            break;
        }
        assert_eq!(response.status(), 503);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let created = created.expect("a create succeeds once PostgreSQL is back");
    let pool = events::store::pool(&url, 4).unwrap();
    sessions.push(
        created["sessions"][0]["session_id"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
    );
    // The refused create wrote nothing: one request per session created so far.
    assert_eq!(
        count_events(&pool, "SessionRequested").await,
        sessions.len() as i64
    );

    // NATS goes away while sessions run; creates are taken meanwhile.
    let running = api.launch(3).await;
    wait_all(&pool, &running, &["RUNNING"], Duration::from_secs(90)).await;
    sessions.extend(&running);
    nats.kill();
    sessions.extend(api.launch(2).await);
    tokio::time::sleep(OUTAGE).await;
    nats.start_again().unwrap();

    // The Docker engine goes out of reach while sessions run (and end).
    let running = api.launch(3).await;
    wait_all(&pool, &running, &["RUNNING"], Duration::from_secs(90)).await;
    sessions.extend(&running);
    door.shut();
    tokio::time::sleep(OUTAGE).await;
    door.reopen().unwrap();

    // Every session ends TERMINATED, with its exit code and its whole output, in one
    // container, and none is left behind.
    assert_every_batch_ended_whole(&pool, &sessions, &agent_id, logs).await;
    assert_eq!(
        count_events(&pool, "AgentLost").await,
        0,
        "an agent was marked lost for an outage's silence\n{}",
        logs()
    );
    // Neither process exited, though every dependency went away under it.
    assert!(up.still_running(), "berth up exited\n{}", logs());
    assert!(agent.still_running(), "berth agent exited\n{}", logs());
    let replay = events::ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    for projection in ["sessions", "streams"] {
        let (ok, text) = berth(&url, &["replay", projection]);
        assert!(ok, "replay {projection}: {text}");
    }
    let (ok, text) = berth(&url, &["audit", "verify"]);
    assert!(ok, "audit verify: {text}");
    drop((up, agent));
    let _ = std::fs::remove_dir_all(&dir);
}
