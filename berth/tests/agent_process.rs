//! The agent as a real process (`berth agent`, Docker runtime) that speaks only NATS: its
//! database URL points where nothing listens, and it runs sessions all the same. Killed with
//! SIGKILL while its sessions run, then started again: no orphan container is left and no
//! session is stuck. The control plane (relay, scheduler, recorder) runs in the test through
//! `berth::app::start`; PostgreSQL, NATS and the Docker engine are real.

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
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(["agent", "--id", id, "--cpu", "2", "--memory-gib", "2"])
            .arg("--data-dir")
            .arg(data_dir)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("BERTH_DATABASE_URL", NO_DATABASE)
            .env("BERTH_NATS_URL", &config.nats_url)
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
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start berth agent");
        AgentProcess(child)
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
    let agent_id = format!("proc{}", &Uuid::new_v4().simple().to_string()[..8]);
    let dir = std::env::temp_dir().join(format!("berth-{agent_id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("agent.log");
    let id = Uuid::new_v4().simple().to_string();
    let mut config = Config::from_source(|_| None);
    config.database_url = url.clone();
    config.nats_url = nats_url();
    config.topology = events::relay::Topology {
        stream: format!("A_{id}"),
        prefix: format!("a{id}.evt"),
    };
    config.agent_bus = bus::Subjects {
        root: format!("a{id}"),
        commands_stream: format!("AC_{id}"),
        telemetry_stream: format!("AT_{id}"),
    };
    config.timings.scheduler_interval = Duration::from_millis(200);
    let parts = Parts {
        relay: true,
        scheduler: true,
        recorder: true,
        ..Parts::default()
    };
    let control_plane = app::start(&config, parts).await.unwrap();
    let credential = dir.join("credential");
    admit_agent(
        &url,
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
    let js = async_nats::jetstream::new(async_nats::connect(&config.nats_url).await.unwrap());
    for stream in [
        &config.topology.stream,
        &config.agent_bus.commands_stream,
        &config.agent_bus.telemetry_stream,
    ] {
        let _ = js.delete_stream(stream).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
