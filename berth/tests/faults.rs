//! Nothing is lost to a restart. Short batch sessions run in real containers while the agent
//! (`berth agent`) and the control plane (`berth up`) are each killed with SIGKILL and started
//! again, at different moments. Afterwards every session is TERMINATED with exit code 0 and
//! its whole output, each ran in exactly one container, none is left, and the ledger folds
//! again into exactly the live tables. PostgreSQL, NATS and Docker are real.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use deadpool_postgres::Pool;
use uuid::Uuid;

async fn launch(pool: &Pool, owner: &events::ledger::KeyOwner, count: u32) -> Vec<Uuid> {
    let request = serde_json::from_value(serde_json::json!({
        "type": "batch", "image": "berth/shell:latest",
        "startup_command": "echo begin; sleep 1; echo done",
        "resources": {"cpu": 0.25, "memory": "64m"}, "count": count}))
    .unwrap();
    launcher::launch::launch(pool, owner, request)
        .await
        .unwrap()
        .iter()
        .map(|l| l.session_id)
        .collect()
}

/// A control plane (`berth up`) and one real agent (`berth agent`) of the test's own: its
/// database, its streams, the agent admitted, each process started and killed as the test says.
struct Rig {
    pool: Pool,
    owner: events::ledger::KeyOwner,
    dir: PathBuf,
    agent_id: String,
    shared: Vec<(String, String)>,
    up_env: Vec<(String, String)>,
    agent_env: Vec<(String, String)>,
    agent_cpu: String,
    up_log: PathBuf,
    agent_log: PathBuf,
}

impl Rig {
    /// A fresh install whose policy lets `sessions` sessions run at once, and an agent
    /// admitted that offers `agent_cpu` cores.
    async fn new(tag: &str, sessions: u32, agent_cpu: u32) -> Rig {
        let (pool, url) = fresh_database().await;
        let owner = first_superadmin(&pool, &url).await;
        let admin = AdminGateway::start(&url);
        allow_sessions(&admin, sessions);
        // The queue's patience is not what these tests are about: a hundred sessions wait for
        // an agent's few cores, each start and end making and removing the session's own
        // network, longer than the default five counted attempts last.
        let (ok, text) = admin.admin_line("create-group default --max-attempts 1000");
        assert!(ok, "{text}");
        let id = Uuid::new_v4().simple().to_string();
        let dir: PathBuf = std::env::temp_dir().join(format!("berth-faults-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let agent_id = format!("fault{}", &id[..8]);
        let credential = dir.join("credential");
        admit_agent(&admin, &agent_id, &credential, &[]);
        let shared = bus_env(tag, &id);
        let mut up_env = shared.clone();
        up_env.push(("BERTH_DATABASE_URL".into(), url.clone()));
        up_env.push(("BERTH_GATEWAY_LISTEN".into(), "127.0.0.1:0".into()));
        up_env.push(("BERTH_SCHEDULER_INTERVAL_MS".into(), "500".into()));
        let mut agent_env = shared.clone();
        agent_env.push(("BERTH_DATABASE_URL".into(), NO_DATABASE.into()));
        agent_env.push(("BERTH_NATS_URL".into(), without_user(&nats_url())));
        agent_env.push((
            "BERTH_AGENT_CREDENTIAL".into(),
            credential.to_str().unwrap().into(),
        ));
        let (up_log, agent_log) = (dir.join("up.log"), dir.join("agent.log"));
        Rig {
            pool,
            owner,
            dir,
            agent_id,
            shared,
            up_env,
            agent_env,
            agent_cpu: agent_cpu.to_string(),
            up_log,
            agent_log,
        }
    }

    fn up(&self) -> BerthProcess {
        BerthProcess::start(&["up"], &self.up_env, &self.up_log)
    }

    fn agent(&self) -> BerthProcess {
        let data = self.dir.join("data");
        let args = [
            "agent",
            "--id",
            &self.agent_id,
            "--cpu",
            &self.agent_cpu,
            "--memory-gib",
            "16",
            "--data-dir",
            data.to_str().unwrap(),
        ];
        BerthProcess::start(&args, &self.agent_env, &self.agent_log)
    }

    /// Waits (30 s at most) until the agent has registered.
    async fn registered(&self) {
        for _ in 0..300 {
            let client = self.pool.get().await.unwrap();
            let registered = client
                .query_opt(
                    "SELECT 1 FROM ledger.agents WHERE agent_id = $1",
                    &[&self.agent_id],
                )
                .await
                .unwrap();
            if registered.is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the agent did not register\n{}", self.logs());
    }

    /// What the processes printed, for a failure: the agent's whole log, the tail of up's.
    fn logs(&self) -> String {
        format!(
            "agent log:\n{}\nup log (tail):\n{}",
            std::fs::read_to_string(&self.agent_log).unwrap_or_default(),
            std::fs::read_to_string(&self.up_log)
                .unwrap_or_default()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        )
    }

    async fn finish(self) {
        delete_streams(&self.shared).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_survive_the_agent_and_the_control_plane_killed_and_started_again() {
    let rig = Rig::new("f", 100, 4).await;
    let (pool, owner) = (&rig.pool, &rig.owner);
    let up = rig.up();
    let agent = rig.agent();
    rig.registered().await;
    let mut sessions = launch(pool, owner, 6).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    agent.kill();
    sessions.extend(launch(pool, owner, 6).await);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let agent = rig.agent();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    up.kill();
    sessions.extend(launch(pool, owner, 6).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let up = rig.up();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    agent.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _agent = rig.agent();

    // Every session ends, TERMINATED with its exit code and its whole output, in one
    // container, and none is left behind.
    assert_every_batch_ended_whole(pool, &sessions, &rig.agent_id, || rig.logs()).await;
    let replay = events::ledger::replay(pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    drop(up);
    rig.finish().await;
}

/// How many short batch sessions run under an agent killed twice (the figure).
const SHORT_SESSIONS: usize = 100;

/// Session `n`'s command: it sleeps 2 s, prints its own line and exits with its own code.
fn short_command(n: usize) -> String {
    format!("sleep 2; echo out-{n}; exit {}", n % 3)
}

/// 100 short batch sessions while the agent is killed twice (SIGKILL) and started again,
/// each time staying away longer than a session's command runs, so that containers exit
/// while nobody watches them. The agent that comes back adopts them: every session ends
/// TERMINATED with its own output and its own exit code, ran in one container, and its
/// elapsed time is its container's (no shorter than its command's sleep), not the time
/// between the adoption and its report.
#[tokio::test(flavor = "multi_thread")]
async fn containers_that_exit_while_the_agent_is_away_keep_their_output_exit_code_and_times() {
    let rig = Rig::new("k", SHORT_SESSIONS as u32, 8).await;
    let pool = &rig.pool;
    let _up = rig.up();
    let agent = rig.agent();
    rig.registered().await;
    let mut sessions: Vec<(Uuid, usize)> = Vec::with_capacity(SHORT_SESSIONS);
    for n in 0..SHORT_SESSIONS {
        let request = serde_json::from_value(serde_json::json!({
            "type": "batch", "image": "berth/shell:latest",
            "startup_command": short_command(n),
            "resources": {"cpu": 0.25, "memory": "64m"}}))
        .unwrap();
        let launched = launcher::launch::launch(pool, &rig.owner, request)
            .await
            .unwrap();
        sessions.push((launched[0].session_id, n));
    }
    let ids: Vec<Uuid> = sessions.iter().map(|(id, _)| *id).collect();
    // Twice: killed once sessions run, away longer than their sleep, started again.
    let mut agent = Some(agent);
    for _ in 0..2 {
        running_at_least(pool, &ids, 4).await;
        agent.take().unwrap().kill();
        tokio::time::sleep(Duration::from_millis(3500)).await;
        agent = Some(rig.agent());
    }

    let client = pool.get().await.unwrap();
    // Every session ends, and the gateway's view has its end (it is what users read).
    let ended = "SELECT count(*) FROM proj_sessions.sessions WHERE session_id = ANY($1)
                   AND status IN ('TERMINATED', 'ERROR', 'CANCELLED')";
    for _ in 0..900 {
        let n: i64 = client.query_one(ended, &[&ids]).await.unwrap().get(0);
        if n as usize == ids.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Output travels as telemetry, beside the reports: the last chunk may be kept a moment
    // after the session ended.
    let complete = "SELECT count(*) FROM recorder.session_logs
                    WHERE session_id = ANY($1) AND kernel = 0 AND complete";
    for _ in 0..150 {
        let n: i64 = client.query_one(complete, &[&ids]).await.unwrap().get(0);
        if n as usize == ids.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rows = client
        .query(
            "SELECT s.session_id, s.status, s.status_reason, s.exit_code,
                    extract(epoch FROM s.ended_at - s.started_at)::float8,
                    coalesce((SELECT string_agg(c.content, '' ORDER BY c.start)
                              FROM recorder.session_log_chunks c
                              WHERE c.session_id = s.session_id AND c.kernel = 0), ''),
                    (SELECT count(*) FROM events e
                     WHERE e.stream_id = 'session-' || replace(s.session_id::text, '-', '')
                       AND e.event_type = 'KernelStarted')
             FROM proj_sessions.sessions s
             WHERE s.session_id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), ids.len());
    let number: std::collections::HashMap<Uuid, usize> = sessions.iter().copied().collect();
    // Every session is checked, and every one that is wrong is named.
    let mut wrong = Vec::new();
    for row in &rows {
        let session: Uuid = row.get(0);
        let n = number[&session];
        let status: String = row.get(1);
        let reason: Option<String> = row.get(2);
        let exit_code: Option<i32> = row.get(3);
        let elapsed: Option<f64> = row.get(4);
        let output: String = row.get(5);
        let containers: i64 = row.get(6);
        let whole = status == "TERMINATED"
            && exit_code == Some((n % 3) as i32)
            && output.trim_end() == format!("out-{n}")
            && elapsed.is_some_and(|e| e >= 2.0)
            && containers == 1;
        if !whole {
            wrong.push(format!(
                "session {n} ({session}): {status} ({reason:?}), exit code {exit_code:?}, \
                 output {output:?}, elapsed {elapsed:?} s, {containers} containers"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} sessions did not end whole:\n{}\n{}",
        wrong.len(),
        rows.len(),
        wrong.join("\n"),
        rig.logs()
    );
    // Some containers did exit while the agent was away (else this test proved nothing).
    let agent_log = std::fs::read_to_string(&rig.agent_log).unwrap_or_default();
    let exited_away = agent_log
        .matches("adopting a container that exited")
        .count();
    eprintln!("{exited_away} containers exited while the agent was away");
    assert!(
        exited_away > 0,
        "no container exited while the agent was away\n{}",
        rig.logs()
    );
    for _ in 0..100 {
        if containers_of_agent(&rig.agent_id).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(containers_of_agent(&rig.agent_id), Vec::<String>::new());
    let replay = events::ledger::replay(pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    drop(agent);
    rig.finish().await;
}

/// Waits (a minute at most) until at least `count` of `sessions` are RUNNING.
async fn running_at_least(pool: &Pool, sessions: &[Uuid], count: i64) {
    let client = pool.get().await.unwrap();
    for _ in 0..600 {
        let running: i64 = client
            .query_one(
                "SELECT count(*) FROM ledger.sessions
                 WHERE session_id = ANY($1) AND status = 'RUNNING'",
                &[&sessions],
            )
            .await
            .unwrap()
            .get(0);
        if running >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fewer than {count} sessions ran within a minute");
}
