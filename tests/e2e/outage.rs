//! Outages seen from the control plane. The bus goes away and comes back: a nats-server of
//! the test's own is killed while an agent runs, a session is created while it is down, and
//! it is started again on the same store; no agent is marked lost for the bus's silence, the
//! command created meanwhile is delivered, and the session runs to its end. PostgreSQL slows
//! down: creates beyond the gateway's queue are answered 503 `busy` at once.

use std::time::Duration;

use berth::app::Parts;
use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

use crate::common::*;

fn batch() -> serde_json::Value {
    json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
           "resources": {"cpu": 1, "memory": "256m"}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nats_restart_loses_no_command_and_marks_no_agent_lost() {
    let port = free_port();
    let store = std::env::temp_dir().join(format!("berth-nats-{}", Uuid::new_v4().simple()));
    let server = start_server(port, &store, None).await;
    let mut config = test_config();
    config.nats_url = format!("nats://127.0.0.1:{port}");
    config.nats_authorization = None;
    // Silent for 7 s (agents say they are alive every 5 s) is lost, and the reconciler looks
    // every second.
    config.timings.heartbeat_timeout = Duration::from_secs(7);
    config.timings.reconcile_every = Duration::from_secs(1);
    let h = start_parts(config.clone(), Parts::ALL).await;
    let seed = admit(&h, "sim1", "default").await;
    let nats = bus::link::connect(&config.nats_url, "sim1", Some(seed))
        .await
        .unwrap();
    let dir = store.join("agent");
    let agent = h
        .simulated_agent(&nats, "sim1", &dir, Duration::from_millis(500))
        .await;
    let (status, created) = h.create(&h.admin_key, batch()).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let first = ids(&created)[0].clone();
    h.wait_session(&first, |s| s["status"] == "TERMINATED")
        .await;

    // The bus goes away for twice the heartbeat timeout; a session is created meanwhile.
    server.kill();
    let (status, created) = h.create(&h.admin_key, batch()).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the API takes creates without the bus: {created}"
    );
    let second = ids(&created)[0].clone();
    tokio::time::sleep(Duration::from_secs(9)).await;
    // The agent has been silent for longer than the timeout, with the reconciler running.
    let silent: f64 = h
        .pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT extract(epoch FROM now() - seen_at)::float8 FROM recorder.agent_liveness WHERE agent_id = 'sim1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(silent > 7.0, "silent for {silent} s only");
    let _server = start_server(port, &store, None).await;

    let detail = h
        .wait_session_within(&second, Duration::from_secs(60), |s| {
            s["status"] == "TERMINATED"
        })
        .await;
    assert_eq!(detail["exit_code"], 0, "{detail}");
    // Reconciled for seconds after the bus came back: the agent's silence was the bus's.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        h.count_events("AgentLost").await,
        0,
        "an agent was marked lost"
    );
    h.assert_running();
    agent.stop().await;
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

/// PostgreSQL slow rather than down (the sessions table held by a lock): creates beyond the
/// gateway's queue are answered 503 `busy` with `Retry-After` at once, instead of piling up
/// connections; those in the queue complete once it is fast again, and nothing else was
/// written.
#[tokio::test(flavor = "multi_thread")]
async fn creates_beyond_the_queue_are_answered_busy_while_postgresql_is_slow() {
    let mut config = test_config();
    config.create_queue = 2;
    let h = start_with(config).await;
    h.agent("a1", "default", 8).await;
    // The caller's key is looked up (and cached) before PostgreSQL slows down.
    let (status, created) = h.create(&h.admin_key, batch()).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");

    let mut holder = h.pool.get().await.unwrap();
    let lock = holder.transaction().await.unwrap();
    lock.batch_execute("LOCK TABLE ledger.sessions IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    events::tls::use_ring();
    let http = reqwest::Client::new();
    let url = format!("{}/v1/sessions", h.base);
    let requests = (0..6).map(|_| {
        let (http, url, key) = (http.clone(), url.clone(), h.admin_key.clone());
        tokio::spawn(async move {
            let response = http
                .post(url)
                .header("X-API-Key", key)
                .json(&batch())
                .send()
                .await
                .unwrap();
            let retry_after = response.headers().get("retry-after").cloned();
            let status = response.status();
            let body: serde_json::Value = response.json().await.unwrap();
            (status, retry_after, body)
        })
    });
    let requests: Vec<_> = requests.collect();
    // The four beyond the queue are answered while the lock is still held.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let finished = requests.iter().filter(|r| r.is_finished()).count();
    assert_eq!(
        finished, 4,
        "only the creates beyond the queue are answered"
    );
    lock.commit().await.unwrap();
    let mut answers = Vec::new();
    for request in requests {
        answers.push(request.await.unwrap());
    }
    let busy: Vec<_> = answers
        .iter()
        .filter(|(status, _, _)| *status == StatusCode::SERVICE_UNAVAILABLE)
        .collect();
    assert_eq!(busy.len(), 4, "{answers:?}");
    for (_, retry_after, body) in &busy {
        assert_eq!(body["error"]["code"], "busy", "{body}");
        assert!(retry_after.is_some(), "a 503 without Retry-After: {body}");
    }
    let created = answers
        .iter()
        .filter(|(status, _, _)| *status == StatusCode::CREATED)
        .count();
    assert_eq!(created, 2, "{answers:?}");
    assert_eq!(h.count_events("SessionRequested").await, 3);
}

/// `/readyz` waits only on readers that run: a replay of each projection, compared and not
/// swapped, leaves no reader behind, and a checkpoint an older berth's replay left for its
/// rebuilt tables is dropped when the projection is installed.
#[tokio::test(flavor = "multi_thread")]
async fn readiness_counts_live_readers_only_after_a_replay_of_each_projection() {
    use events::projection::{self, StreamIndex};
    use gateway::projection::SessionsView;

    let h = start().await;
    h.agent("a1", "default", 4).await;
    let (status, created) = h.post(&h.admin_key, "/v1/sessions", batch()).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");

    let streams = projection::rebuild(&h.pool, &StreamIndex, false)
        .await
        .unwrap();
    assert!(streams.differences.is_empty(), "{:?}", streams.differences);
    let sessions = projection::rebuild(&h.pool, &SessionsView, false)
        .await
        .unwrap();
    assert!(
        sessions.differences.is_empty(),
        "{:?}",
        sessions.differences
    );
    let ledger = events::ledger::replay(&h.pool).await.unwrap();
    assert!(ledger.equal(), "{:?}", ledger.differences);
    let client = h.pool.get().await.unwrap();
    let rebuilt: i64 = client
        .query_one(
            "SELECT count(*) FROM checkpoints WHERE name LIKE '%\\_rebuild'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rebuilt, 0, "a replay left a reader behind");

    // As an older berth's replay left it: a checkpoint for the rebuilt tables, far behind.
    client
        .execute(
            "INSERT INTO checkpoints (name, tx_id, seq) VALUES ('projection:proj_streams_rebuild', '0', 0)",
            &[],
        )
        .await
        .unwrap();
    projection::install(&h.pool, &StreamIndex).await.unwrap();
    let readers: Vec<String> = client
        .query("SELECT name FROM checkpoints ORDER BY name", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        readers.iter().all(|r| !r.ends_with("_rebuild")),
        "{readers:?}"
    );

    // The gateway's next check counts the live readers alone, and says it is ready.
    let mut last = serde_json::Value::Null;
    for _ in 0..50 {
        let (status, report) = h.get(&h.admin_key, "/readyz").await;
        let names: Vec<&str> = report["readers"]
            .as_array()
            .map(|r| r.iter().filter_map(|r| r["name"].as_str()).collect())
            .unwrap_or_default();
        if status == StatusCode::OK && !names.is_empty() {
            assert!(names.iter().all(|n| !n.ends_with("_rebuild")), "{report}");
            return;
        }
        last = report;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("/readyz did not answer 200 with its readers: {last}");
}
