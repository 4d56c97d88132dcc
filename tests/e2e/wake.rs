//! The scheduler is woken by the bus and by its own deadlines, not by a handle the gateway
//! holds: with its safety-net interval at an hour, a session still gets placed as soon as an
//! event frees room for it, and a reserved start is honoured on time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::common::*;

/// A control plane whose scheduler would otherwise look only once an hour.
async fn start_drowsy() -> Harness {
    let mut config = test_config();
    config.timings.scheduler_interval = Duration::from_secs(3600);
    start_with(config).await
}

/// Waits until session `id`'s history has a row whose `field` is `value`.
async fn wait_for_history(h: &Harness, id: &str, field: &str, value: &str) {
    wait_for(|| async {
        h.history(id)
            .await
            .iter()
            .any(|row| row[field] == value)
            .then_some(())
    })
    .await;
}

fn needs(cpu: u64) -> serde_json::Value {
    json!({"image": "berth/shell:latest", "resources": {"cpu": cpu, "memory": "1g"}})
}

#[tokio::test]
async fn only_the_bus_can_have_woken_the_scheduler_that_places_a_waiting_session() {
    let h = start_drowsy().await;
    h.agent("a1", "default", 2).await;
    let (status, first) = h.create(&h.admin_key, needs(2)).await;
    assert_eq!(status, 201, "{first}");
    let first = ids(&first).remove(0);
    h.wait_session(&first, |d| d["status"] == "SCHEDULED").await;

    // The second does not fit: a pass sees it and records the wait, then the scheduler sleeps.
    let (_, second) = h.create(&h.admin_key, needs(2)).await;
    let second = ids(&second).remove(0);
    wait_for_history(&h, &second, "result", "NEED_RETRY").await;
    let detail = h.wait_session(&second, |d| d["status"] == "PENDING").await;
    assert_eq!(detail["agent_id"], serde_json::Value::Null);

    // Ending the first frees its cores. Within the hour, only the events on NATS
    // (SessionTerminationRequested, SessionResourcesReleased) can wake the scheduler.
    let (status, _) = h
        .delete(&h.admin_key, &format!("/v1/sessions/{first}?force=true"))
        .await;
    assert_eq!(status, 202);
    let placed = h
        .wait_session(&second, |d| d["status"] == "SCHEDULED")
        .await;
    assert_eq!(placed["agent_id"], "a1");
    h.assert_running();
}

#[tokio::test]
async fn a_reserved_start_is_placed_when_it_falls_due_with_no_event_to_wake_it() {
    let h = start_drowsy().await;
    h.agent("a1", "default", 4).await;
    // The database's clock decides, so the start time is taken from it.
    let starts_at = h.database_time_in(3).await;
    let body = json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
        "starts_at": starts_at, "resources": {"cpu": 1, "memory": "1g"}});
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, 201, "{created}");
    let id = ids(&created).remove(0);
    // A pass saw it before its time and left it waiting.
    wait_for_history(&h, &id, "error_code", "RESERVED_START").await;
    let placed = h
        .wait_session_within(&id, Duration::from_secs(30), |d| d["status"] == "SCHEDULED")
        .await;
    let scheduled_at: DateTime<Utc> = serde_json::from_value(placed["scheduled_at"].clone())
        .expect("a scheduled session has its time");
    assert!(
        scheduled_at >= starts_at,
        "placed at {scheduled_at}, before its reserved start {starts_at}"
    );
    h.assert_running();
}
