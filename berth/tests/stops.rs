//! Graceful stops, as an operator's process manager makes them: SIGTERM. An agent stopped
//! while its batch sessions run says it departs and exits 0 within its bound; nothing is
//! placed on it meanwhile (what is created goes to another agent), its containers run on,
//! and started again it adopts them, so every session ends TERMINATED with its output. With
//! `--drain` it ends its sessions first. `berth up` stopped under load exits 0 within its
//! bound and, started again, loses nothing: every session ends TERMINATED with its output
//! and the ledger folds again into the live tables. PostgreSQL, NATS and Docker are real.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use deadpool_postgres::Pool;
use uuid::Uuid;

/// The agent's bound on a departure (`BERTH_AGENT_LEAVE_SECS`, as the tests set it), and
/// the control plane's on a stop (`BERTH_STOP_WITHIN_SECS`, its default).
const AGENT_LEAVE: Duration = Duration::from_secs(10);
const STOP_WITHIN: Duration = Duration::from_secs(15);
/// What the process gets beyond its own bound: the abandoned work's last moments and the
/// exit itself.
const EXIT_SLACK: Duration = Duration::from_secs(5);

/// A control plane and agents of the test's own: a fresh database, streams named after the
/// test, a policy that lets every session run.
struct Setup {
    pool: Pool,
    url: String,
    owner: events::ledger::KeyOwner,
    dir: PathBuf,
    shared: Vec<(String, String)>,
    up_env: Vec<(String, String)>,
    admin: AdminGateway,
}

impl Setup {
    async fn new(tag: &str) -> Setup {
        let (pool, url) = fresh_database().await;
        let owner = first_superadmin(&pool, &url).await;
        let admin = AdminGateway::start(&url);
        allow_sessions(&admin, 100);
        let id = Uuid::new_v4().simple().to_string();
        let dir = tempdir(&format!("berth-stops-{tag}"));
        let shared = bus_env(tag, &id);
        let mut up_env = shared.clone();
        up_env.push(("BERTH_DATABASE_URL".into(), url.clone()));
        up_env.push(("BERTH_GATEWAY_LISTEN".into(), "127.0.0.1:0".into()));
        up_env.push(("BERTH_SCHEDULER_INTERVAL_MS".into(), "500".into()));
        up_env.push(("BERTH_PROXY_PORTS".into(), "off".into()));
        Setup {
            pool,
            url,
            owner,
            dir,
            shared,
            up_env,
            admin,
        }
    }

    fn up(&self) -> BerthProcess {
        BerthProcess::start(&["up"], &self.up_env, &self.dir.join("up.log"))
    }

    /// Admits agent `name` (2 cores, 2 GiB) and starts it, `extra` arguments added.
    fn agent(&self, name: &str, extra: &[&str]) -> BerthProcess {
        let credential = self.dir.join(format!("{name}.credential"));
        if !credential.exists() {
            admit_agent(&self.admin, name, &credential, &[]);
        }
        let mut env = self.shared.clone();
        env.push(("BERTH_DATABASE_URL".into(), NO_DATABASE.into()));
        env.push(("BERTH_NATS_URL".into(), without_user(&nats_url())));
        env.push((
            "BERTH_AGENT_CREDENTIAL".into(),
            credential.to_str().unwrap().into(),
        ));
        env.push((
            "BERTH_AGENT_LEAVE_SECS".into(),
            AGENT_LEAVE.as_secs().to_string(),
        ));
        env.push(("BERTH_AGENT_STOP_GRACE_SECS".into(), "2".into()));
        let data = self.dir.join(format!("{name}.data"));
        let mut args = vec!["agent", "--id", name, "--cpu", "2", "--memory-gib", "2"];
        args.extend(["--data-dir", data.to_str().unwrap()]);
        args.extend(extra);
        BerthProcess::start(&args, &env, &self.dir.join(format!("{name}.log")))
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// Every log of the test, for a failure.
    fn logs(&self) -> String {
        let mut text = String::new();
        for entry in std::fs::read_dir(&self.dir).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                let body = std::fs::read_to_string(&path).unwrap_or_default();
                let tail: Vec<&str> = body.lines().rev().take(60).collect();
                text += &format!("--- {} (tail)\n", path.display());
                text += &tail.into_iter().rev().collect::<Vec<_>>().join("\n");
                text += "\n";
            }
        }
        text
    }

    async fn launch(&self, command: &str, count: u32) -> Vec<Uuid> {
        let request = serde_json::from_value(serde_json::json!({
            "type": "batch", "image": "berth/shell:latest", "startup_command": command,
            "resources": {"cpu": 0.25, "memory": "64m"}, "count": count}))
        .unwrap();
        launcher::launch::launch(&self.pool, &self.owner, request)
            .await
            .unwrap()
            .iter()
            .map(|l| l.session_id)
            .collect()
    }

    async fn finish(self) {
        delete_streams(&self.shared).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `probe` every 100 ms until it yields, for at most 90 s.
async fn eventually<T, F, Fut>(what: &str, logs: impl Fn() -> String, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..900 {
        if let Some(v) = probe().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("gave up waiting: {what}\n{}", logs());
}

async fn registered(pool: &Pool, agent: &str) -> bool {
    let client = pool.get().await.unwrap();
    client
        .query_opt(
            "SELECT 1 FROM ledger.agents WHERE agent_id = $1 AND lost IS NULL",
            &[&agent],
        )
        .await
        .unwrap()
        .is_some()
}

/// How many of `sessions` are in `status`.
async fn count_in(pool: &Pool, sessions: &[Uuid], status: &str) -> usize {
    let client = pool.get().await.unwrap();
    client
        .query_one(
            "SELECT count(*) FROM ledger.sessions WHERE session_id = ANY($1) AND status = $2",
            &[&sessions, &status],
        )
        .await
        .unwrap()
        .get::<_, i64>(0) as usize
}

/// The agents `sessions` were ever placed on (their `SessionScheduled` events).
async fn placed_on(pool: &Pool, sessions: &[Uuid]) -> Vec<String> {
    let streams: Vec<String> = sessions
        .iter()
        .map(|s| format!("session-{}", s.simple()))
        .collect();
    let client = pool.get().await.unwrap();
    client
        .query(
            "SELECT DISTINCT payload->>'agent_id' FROM events
             WHERE stream_id = ANY($1) AND event_type = 'SessionScheduled' ORDER BY 1",
            &[&streams],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn lost_of(pool: &Pool, agent: &str) -> Option<String> {
    let client = pool.get().await.unwrap();
    client
        .query_one(
            "SELECT lost FROM ledger.agents WHERE agent_id = $1",
            &[&agent],
        )
        .await
        .unwrap()
        .get(0)
}

fn agent_name(tag: &str) -> String {
    format!("{tag}{}", &Uuid::new_v4().simple().to_string()[..8])
}

/// SIGTERM, then the exit within `bound` (and the slack): it must be a success.
async fn stopped_within(process: &mut BerthProcess, bound: Duration, what: &str, log: &Path) {
    process.terminate();
    let status = process.exit_within(bound + EXIT_SLACK).await;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let status = status.unwrap_or_else(|| panic!("{what} did not exit within {bound:?}\n{text}"));
    assert!(status.success(), "{what} exited with {status}\n{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_stopped_under_load_departs_and_adopts_its_sessions_on_return() {
    let setup = Setup::new("sa").await;
    let pool = setup.pool.clone();
    let logs = || setup.logs();
    let (leaving, staying) = (agent_name("leave"), agent_name("stay"));
    let _up = setup.up();
    let mut agent = setup.agent(&leaving, &[]);
    eventually("the first agent registers", logs, || async {
        registered(&pool, &leaving).await.then_some(())
    })
    .await;
    // Long enough to still run when the agent is back: adoption takes running containers.
    let command = "echo begin; sleep 8; echo done";
    let first = setup.launch(command, 4).await;
    eventually("the first sessions run", logs, || async {
        (count_in(&pool, &first, "RUNNING").await == first.len()).then_some(())
    })
    .await;
    let other = setup.agent(&staying, &[]);
    eventually("the second agent registers", logs, || async {
        registered(&pool, &staying).await.then_some(())
    })
    .await;

    let log = setup.dir.join(format!("{leaving}.log"));
    stopped_within(&mut agent, AGENT_LEAVE, "the agent", &log).await;
    drop(agent);
    assert_eq!(count_events(&pool, "AgentDeparted").await, 1, "{}", logs());
    let lost = lost_of(&pool, &leaving).await.unwrap_or_default();
    assert!(lost.starts_with("departed: stopped (SIGTERM)"), "{lost}");
    // Its containers run on while it is away.
    assert!(!containers_of_agent(&leaving).is_empty());
    assert_eq!(count_in(&pool, &first, "RUNNING").await, first.len());

    // Created right after: they go to the agent that stayed.
    let second = setup.launch(command, 3).await;
    eventually("the new sessions run", logs, || async {
        (count_in(&pool, &second, "RUNNING").await == second.len()).then_some(())
    })
    .await;
    assert_eq!(placed_on(&pool, &second).await, vec![staying.clone()]);

    // Back, it registers and adopts its running containers.
    let _agent = setup.agent(&leaving, &[]);
    eventually("the agent is back", logs, || async {
        registered(&pool, &leaving).await.then_some(())
    })
    .await;
    let every: Vec<Uuid> = first.iter().chain(&second).copied().collect();
    assert_every_batch_ended_whole(&pool, &every, &leaving, logs).await;
    assert!(
        setup
            .log(&format!("{leaving}.log"))
            .contains("adopting a live session's container"),
        "{}",
        logs()
    );
    assert_eq!(count_in(&pool, &every, "ERROR").await, 0);
    assert_eq!(placed_on(&pool, &first).await, vec![leaving.clone()]);
    // Its sessions ended, the staying agent removes their containers a moment after.
    eventually(
        "the staying agent's containers are removed",
        logs,
        || async { containers_of_agent(&staying).is_empty().then_some(()) },
    )
    .await;
    let replay = events::ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    drop(other);
    setup.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drained_agent_ends_its_sessions_before_it_departs() {
    let setup = Setup::new("sd").await;
    let pool = setup.pool.clone();
    let logs = || setup.logs();
    let name = agent_name("drain");
    let _up = setup.up();
    let mut agent = setup.agent(&name, &["--drain"]);
    eventually("the agent registers", logs, || async {
        registered(&pool, &name).await.then_some(())
    })
    .await;
    let sessions = setup.launch("echo begin; sleep 600", 3).await;
    eventually("the sessions run", logs, || async {
        (count_in(&pool, &sessions, "RUNNING").await == sessions.len()).then_some(())
    })
    .await;
    let log = setup.dir.join(format!("{name}.log"));
    // Drained, its sessions' stop grace (2 s here) comes on top of the bound.
    stopped_within(
        &mut agent,
        AGENT_LEAVE + Duration::from_secs(2),
        "the drained agent",
        &log,
    )
    .await;
    let client = pool.get().await.unwrap();
    let rows = client
        .query(
            "SELECT status, status_reason FROM ledger.sessions WHERE session_id = ANY($1)",
            &[&sessions],
        )
        .await
        .unwrap();
    for row in &rows {
        let (status, reason): (String, Option<String>) = (row.get(0), row.get(1));
        assert_eq!(status, "TERMINATED", "{reason:?}\n{}", logs());
        assert!(reason.unwrap_or_default().contains("drained"));
    }
    assert_eq!(rows.len(), sessions.len());
    assert!(containers_of_agent(&name).is_empty(), "{}", logs());
    let lost = lost_of(&pool, &name).await.unwrap_or_default();
    assert!(lost.starts_with("departed: drained (SIGTERM)"), "{lost}");
    let replay = events::ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    setup.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn berth_up_stopped_under_load_exits_in_time_and_loses_nothing() {
    let setup = Setup::new("su").await;
    let pool = setup.pool.clone();
    let logs = || setup.logs();
    let name = agent_name("up");
    let mut up = setup.up();
    let _agent = setup.agent(&name, &[]);
    eventually("the agent registers", logs, || async {
        registered(&pool, &name).await.then_some(())
    })
    .await;
    let command = "echo begin; sleep 3; echo done";
    let mut sessions = setup.launch(command, 6).await;
    eventually("some sessions run", logs, || async {
        (count_in(&pool, &sessions, "RUNNING").await > 0).then_some(())
    })
    .await;
    sessions.extend(setup.launch(command, 6).await);

    let log = setup.dir.join("up.log");
    stopped_within(&mut up, STOP_WITHIN, "berth up", &log).await;
    drop(up);
    // Asked for while the control plane is down, and ending meanwhile: all kept.
    sessions.extend(setup.launch(command, 4).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _up = setup.up();
    assert_every_batch_ended_whole(&pool, &sessions, &name, logs).await;
    let (ok, text) = berth(&setup.url, &["replay", "ledger"]);
    assert!(ok && text.contains("equal"), "{text}");
    setup.finish().await;
}
