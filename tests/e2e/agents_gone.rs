//! Nothing a user asked for is lost when an agent goes away: the scheduler passes over an
//! agent that has gone silent (two heartbeats missed) and says so in the history, and when
//! the reconciler calls an agent lost, what never ran there and the inference sessions that
//! ran there run on another agent. An agent that departed and never returns is taken for
//! lost past its bound. Simulated agents, killed as a process dies or departing as a stopped
//! one does.

use std::time::Duration;

use crate::common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

fn outbox() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("berth-outbox-{}", Uuid::new_v4().simple()))
}

fn batch() -> Value {
    json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
           "resources": {"cpu": 1, "memory": "256m"}})
}

async fn create(h: &Harness, body: Value) -> String {
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    ids(&created)[0].clone()
}

/// Waits until agent `id` has gone unheard for longer than `secs` by the database's clock.
async fn unheard_for(h: &Harness, id: &str, secs: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let client = h.pool.get().await.unwrap();
        let silent = client
            .query_opt(
                "SELECT 1 FROM ledger.agents a LEFT JOIN recorder.agent_liveness l USING (agent_id)
                 WHERE a.agent_id = $1
                   AND greatest(a.last_heartbeat, l.seen_at) < now() - make_interval(secs => $2)",
                &[&id, &secs],
            )
            .await
            .unwrap();
        if silent.is_some() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{id} still heard");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_passes_over_a_silent_agent_before_it_is_lost_and_says_why() {
    let mut config = test_config();
    // Heartbeats as in service; the reconciler's timeout stays far off, so what keeps the
    // session off the silent agent is the scheduler's own rule.
    config.timings.agent_silent_after = events::aggregate::SILENT_AFTER;
    let h = start_with(config).await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let dirs = [outbox(), outbox()];
    // Concentrated placement between two empty agents picks the first by id: `a1-quiet`.
    admit(&h, "a1-quiet", "default").await;
    admit(&h, "a2-live", "default").await;
    let quiet = h
        .simulated_agent(&nats, "a1-quiet", &dirs[0], Duration::from_secs(1))
        .await;
    let live = h
        .simulated_agent(&nats, "a2-live", &dirs[1], Duration::from_secs(1))
        .await;
    quiet.kill().await;
    let silent_after = events::aggregate::SILENT_AFTER.as_secs_f64();
    unheard_for(&h, "a1-quiet", silent_after + 1.0).await;

    let id = create(&h, batch()).await;
    let detail = h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    assert_eq!(detail["agent_id"], "a2-live", "{detail}");
    let history = h.history(&id).await;
    let placed = history
        .iter()
        .find(|r| r["phase"] == "schedule" && r["result"] == "SUCCESS")
        .unwrap_or_else(|| panic!("no placement in {history:#?}"));
    let message = placed["message"].as_str().unwrap();
    assert!(message.contains("on a2-live"), "{message}");
    assert!(
        message.contains("passed over silent agent(s) `a1-quiet` (last heard"),
        "{message}"
    );
    let steps = placed["sub_steps"].as_array().unwrap();
    let step = steps
        .iter()
        .find(|s| s["step"] == "pass over silent agents")
        .unwrap_or_else(|| panic!("no step passing over in {placed:#}"));
    assert_eq!(step["error_code"], "AGENT_SILENT", "{placed:#}");
    // Not lost: only passed over.
    let client = h.pool.get().await.unwrap();
    let lost: Option<String> = client
        .query_one(
            "SELECT lost FROM ledger.agents WHERE agent_id = 'a1-quiet'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(lost, None);
    live.stop().await;
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn what_never_ran_on_a_lost_agent_and_its_inference_session_run_on_another() {
    let mut config = test_config();
    // The scheduler stops placing on a silent agent after two heartbeats; the reconciler
    // calls it lost a few seconds later.
    config.timings.agent_silent_after = events::aggregate::SILENT_AFTER;
    config.timings.heartbeat_timeout = events::aggregate::SILENT_AFTER + Duration::from_secs(5);
    let h = start_with(config).await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let dirs = [outbox(), outbox()];
    admit(&h, "doomed", "default").await;
    admit(&h, "spare", "default").await;
    let doomed = h
        .simulated_agent(&nats, "doomed", &dirs[0], Duration::from_secs(1))
        .await;
    let serving = create(
        &h,
        json!({"type": "inference", "image": "berth/shell:latest",
               "resources": {"cpu": 1, "memory": "256m"}}),
    )
    .await;
    h.wait_session(&serving, |s| {
        s["status"] == "RUNNING" && s["agent_id"] == "doomed"
    })
    .await;

    // The agent dies; what is created right after is placed on it (it was heard from less
    // than two heartbeats ago) and never starts.
    doomed.kill().await;
    let mut stranded = Vec::new();
    for _ in 0..3 {
        stranded.push(create(&h, batch()).await);
    }
    for id in &stranded {
        h.wait_session(id, |s| {
            s["status"] == "SCHEDULED" && s["agent_id"] == "doomed"
        })
        .await;
    }
    let spare = h
        .simulated_agent(&nats, "spare", &dirs[1], Duration::from_secs(1))
        .await;

    // Lost: the batch sessions run on the spare agent and end as their command does.
    let patience = Duration::from_secs(60);
    for id in &stranded {
        let detail = h
            .wait_session_within(id, patience, |s| s["status"] == "TERMINATED")
            .await;
        assert_eq!(detail["agent_id"], "spare", "{detail}");
        assert_eq!(detail["exit_code"], 0, "{detail}");
        let history = h.history(id).await;
        let back = history
            .iter()
            .find(|r| r["phase"] == "reconcile")
            .unwrap_or_else(|| panic!("no reconcile row in {history:#?}"));
        assert_eq!(
            (
                &back["from_status"],
                &back["to_status"],
                &back["error_code"]
            ),
            (&json!("SCHEDULED"), &json!("PENDING"), &json!("AGENT_LOST")),
            "{back:#}"
        );
        let message = back["message"].as_str().unwrap();
        assert!(message.contains("agent `doomed` lost"), "{message}");
        assert!(message.contains("never ran"), "{message}");
    }
    // The inference session it ran recovers: running again, elsewhere.
    let detail = h
        .wait_session_within(&serving, patience, |s| {
            s["status"] == "RUNNING" && s["agent_id"] == "spare"
        })
        .await;
    assert_eq!(detail["status"], "RUNNING");
    let history = h.history(&serving).await;
    let back = history
        .iter()
        .find(|r| r["phase"] == "reconcile")
        .unwrap_or_else(|| panic!("no reconcile row in {history:#?}"));
    assert_eq!(
        (&back["from_status"], &back["to_status"]),
        (&json!("RUNNING"), &json!("PENDING")),
        "{back:#}"
    );
    assert!(
        back["message"]
            .as_str()
            .unwrap()
            .contains("inference session recovers"),
        "{back:#}"
    );
    // Nothing ended in ERROR, and the ledger is still exactly the fold of the log.
    let client = h.pool.get().await.unwrap();
    let errors: i64 = client
        .query_one(
            "SELECT count(*) FROM ledger.sessions WHERE status = 'ERROR'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(errors, 0);
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    spare.stop().await;
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_departed_and_never_returns_is_lost_past_its_bound() {
    let mut config = test_config();
    // The heartbeat timeout stays far off: what marks the agent lost is its departure's bound.
    config.timings.agent_departed_timeout = Duration::from_secs(3);
    let h = start_with(config).await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let dirs = [outbox(), outbox()];
    admit(&h, "leaver", "default").await;
    admit(&h, "spare", "default").await;
    // A batch command that runs for an hour: RUNNING until something ends it.
    let leaver = h
        .simulated_agent(&nats, "leaver", &dirs[0], Duration::from_secs(3600))
        .await;
    let running = create(&h, batch()).await;
    let serving = create(
        &h,
        json!({"type": "inference", "image": "berth/shell:latest",
               "resources": {"cpu": 1, "memory": "256m"}}),
    )
    .await;
    for id in [&running, &serving] {
        h.wait_session(id, |s| {
            s["status"] == "RUNNING" && s["agent_id"] == "leaver"
        })
        .await;
    }

    leaver
        .depart("stopped for a host that is not coming back")
        .await;
    let spare = h
        .simulated_agent(&nats, "spare", &dirs[1], Duration::from_secs(3600))
        .await;

    // Past the bound, the departure is taken for a loss: the batch session ends in ERROR
    // naming it, the inference session runs again on the spare agent.
    let patience = Duration::from_secs(60);
    let detail = h
        .wait_session_within(&running, patience, |s| s["status"] == "ERROR")
        .await;
    let reason = detail["status_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("agent `leaver` lost: it departed (stopped for a host that is not coming back) and has not returned"),
        "{detail}"
    );
    let history = h.history(&running).await;
    let ended = history
        .iter()
        .find(|r| r["phase"] == "reconcile")
        .unwrap_or_else(|| panic!("no reconcile row in {history:#?}"));
    assert_eq!(
        (
            &ended["from_status"],
            &ended["to_status"],
            &ended["error_code"]
        ),
        (&json!("RUNNING"), &json!("ERROR"), &json!("AGENT_LOST")),
        "{ended:#}"
    );
    let detail = h
        .wait_session_within(&serving, patience, |s| {
            s["status"] == "RUNNING" && s["agent_id"] == "spare"
        })
        .await;
    assert_eq!(detail["status"], "RUNNING");

    // The ledger has it lost now, no longer departed, and is still the fold of the log.
    let client = h.pool.get().await.unwrap();
    let lost: Option<String> = client
        .query_one(
            "SELECT lost FROM ledger.agents WHERE agent_id = 'leaver'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let lost = lost.expect("the agent is marked gone");
    assert!(
        lost.starts_with("agent `leaver` lost: it departed"),
        "{lost}"
    );
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    spare.stop().await;
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}
