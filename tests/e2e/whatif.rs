//! What-if replays on a workload berth really ran: two users asking for more than the agent
//! holds, sessions finishing on their own. Replayed through the policy that ran, every
//! recorded placement comes back exactly (same session, same agent, same order, same
//! moment); through DRF, the comparison has its figures.

use std::time::Duration;

use events::payloads::QueuePolicy;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common::*;

fn batch(cores: u64) -> Value {
    json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
           "resources": {"cpu": cores, "memory": "1g"}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_workload_replays_to_its_own_placements_and_compares_with_drf() {
    let h = start().await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("berth-outbox-{}", Uuid::new_v4().simple()));
    admit(&h, "w1", "default").await;
    // 4 cores: two of the 2-core sessions at a time; each batch runs for a second.
    let agent = h
        .simulated_agent(&nats, "w1", &dir, Duration::from_secs(1))
        .await;
    let alice = h.user("alice@whatif.test").await;
    let bob = h.user("bob@whatif.test").await;
    let mut sessions = Vec::new();
    for key in [&alice, &alice, &alice, &bob, &alice, &bob] {
        let (status, created) = h.create(key, batch(2)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        sessions.extend(ids(&created));
    }
    for id in &sessions {
        h.wait_session_within(id, Duration::from_secs(60), |s| s["status"] == "TERMINATED")
            .await;
    }
    // Every session has given its cores back in the log.
    wait_for(|| async {
        (h.count_events("SessionResourcesReleased").await == sessions.len() as i64).then_some(())
    })
    .await;
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);

    let client = h.pool.get().await.unwrap();
    let same = scheduler::whatif::replay(&client, None, Some("default"), None, None)
        .await
        .expect("the log replays");
    assert_eq!(same.len(), 1);
    let same = &same[0];
    assert_eq!((same.requests, same.recorded_policy.as_str()), (6, "fifo"));
    assert_eq!(same.simulated_policy, "fifo");
    assert_eq!(same.placements.compared, 6, "{same:#?}");
    assert_eq!(same.placements.differing, 0, "{same:#?}");
    assert!(same.placements.same_order, "{same:#?}");
    assert_eq!((same.recorded.placed, same.simulated.placed), (6, 6));
    // Placed at the moments they were, but for one race the log cannot tell apart: resources
    // released while a pass read its snapshot, committed after it, are seen by the replay at
    // that pass, one pass (milliseconds) earlier than the live scheduler saw them.
    let within_a_pass = |a: Option<f64>, b: Option<f64>| {
        (a.unwrap() - b.unwrap()).abs() <= scheduler::whatif::WAKE_LATENCY.as_seconds_f64()
    };
    for user in &same.users {
        assert_eq!(user.recorded.placed, user.simulated.placed, "{user:#?}");
        assert!(
            within_a_pass(user.recorded.wait_p50_secs, user.simulated.wait_p50_secs)
                && within_a_pass(user.recorded.wait_p99_secs, user.simulated.wait_p99_secs),
            "{user:#?}"
        );
    }
    // More was asked than the agent held: some waited for others to finish.
    assert!(same.recorded.wait_p99_secs.unwrap() >= 0.5, "{same:#?}");

    let drf = scheduler::whatif::replay(&client, Some(QueuePolicy::Drf), None, None, None)
        .await
        .expect("the log replays");
    assert_eq!(drf.len(), 1, "one group had requests");
    let drf = &drf[0];
    assert_eq!(
        (drf.recorded_policy.as_str(), drf.simulated_policy.as_str()),
        ("fifo", "drf")
    );
    let users: Vec<(&str, usize)> = drf
        .users
        .iter()
        .map(|u| (u.user.as_str(), u.sessions))
        .collect();
    assert_eq!(users, [("alice@whatif.test", 4), ("bob@whatif.test", 2)]);
    assert_eq!(drf.simulated.placed, 6, "{drf:#?}");
    let cpu = drf
        .simulated
        .utilization
        .cpu
        .expect("the agent offered cores");
    assert!(cpu > 0.0 && cpu <= 1.0, "{cpu}");
    let jain = drf.simulated.jain_index.expect("two users");
    assert!(jain > 0.0 && jain <= 1.0, "{jain}");
    // What `-o json` prints is this, serialised.
    let json = serde_json::to_value(drf).unwrap();
    assert!(
        json["users"][0]["simulated"]["wait_p99_secs"].is_number(),
        "{json:#}"
    );
    assert!(
        json["recorded"]["utilization"]["cpu"].is_number(),
        "{json:#}"
    );
    assert_eq!(json["placements"]["compared"], 6);
}
