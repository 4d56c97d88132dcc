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

#[tokio::test(flavor = "multi_thread")]
async fn sessions_survive_the_agent_and_the_control_plane_killed_and_started_again() {
    let (pool, url) = fresh_database().await;
    let owner = first_superadmin(&pool, &url).await;
    // A policy that lets every session of the test run at once.
    let (ok, text) = berth(
        &url,
        &[
            "admin",
            "set-policy",
            "default",
            "--max-sessions",
            "100",
            "--max-cpu",
            "64",
            "--max-memory-gib",
            "64",
        ],
    );
    assert!(ok, "{text}");
    let id = Uuid::new_v4().simple().to_string();
    let dir: PathBuf = std::env::temp_dir().join(format!("berth-faults-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let agent_id = format!("fault{}", &id[..8]);
    let credential = dir.join("credential");
    admit_agent(&url, &agent_id, &credential, &[]);
    let shared = bus_env("f", &id);
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
    let data = dir.join("data");
    let data = data.to_str().unwrap();
    let agent_args = [
        "agent",
        "--id",
        &agent_id,
        "--cpu",
        "4",
        "--memory-gib",
        "4",
        "--data-dir",
        data,
    ];
    let (up_log, agent_log) = (dir.join("up.log"), dir.join("agent.log"));

    let up = BerthProcess::start(&["up"], &up_env, &up_log);
    let agent = BerthProcess::start(&agent_args, &agent_env, &agent_log);
    for _ in 0..300 {
        let client = pool.get().await.unwrap();
        let registered = client
            .query_opt(
                "SELECT 1 FROM ledger.agents WHERE agent_id = $1",
                &[&agent_id],
            )
            .await
            .unwrap();
        if registered.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut sessions = launch(&pool, &owner, 6).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    agent.kill();
    sessions.extend(launch(&pool, &owner, 6).await);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let agent = BerthProcess::start(&agent_args, &agent_env, &agent_log);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    up.kill();
    sessions.extend(launch(&pool, &owner, 6).await);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let up = BerthProcess::start(&["up"], &up_env, &up_log);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    agent.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _agent = BerthProcess::start(&agent_args, &agent_env, &agent_log);

    // Every session ends, TERMINATED with its exit code and its whole output, in one
    // container, and none is left behind.
    let logs = || {
        format!(
            "agent log:\n{}\nup log (tail):\n{}",
            std::fs::read_to_string(&agent_log).unwrap_or_default(),
            std::fs::read_to_string(&up_log)
                .unwrap_or_default()
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        )
    };
    assert_every_batch_ended_whole(&pool, &sessions, &agent_id, logs).await;
    let replay = events::ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    drop(up);
    delete_streams(&shared).await;
    let _ = std::fs::remove_dir_all(&dir);
}
