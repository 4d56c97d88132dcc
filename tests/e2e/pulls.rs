//! An image pull's progress, as a hand-driven agent reports it: recorded as
//! `SessionPullProgressed` while the session is PULLING and delivered on its owner's
//! `/v1/events` (where `berth session wait` draws it as a bar); a report once the session
//! has moved on records nothing.

use std::time::Duration;

use crate::common::*;
use bus::protocol::{Fact, Report};
use events::payloads::*;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

fn progress(session_id: Uuid, current_bytes: u64) -> Report {
    Report {
        report_id: Uuid::now_v7(),
        session_id,
        fact: Fact::PullProgressed {
            image: "berth/shell:latest".into(),
            current_bytes,
            total_bytes: 4 << 20,
            layers_done: 1,
            layers: 2,
        },
        traceparent: None,
    }
}

#[tokio::test]
async fn a_pulls_progress_reaches_the_owners_event_stream_while_it_pulls() {
    let h = start().await;
    h.agent("pull1", "default", 8).await;
    let alice = h.user("alice@example.com").await;
    let (status, created) = h
        .create(
            &alice,
            json!({"image": "berth/shell:latest", "resources": {"cpu": 0.5, "memory": "64m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let session = Uuid::parse_str(&id).unwrap();
    h.wait_session(&id, |s| s["status"] == "SCHEDULED").await;
    let events = h
        .http
        .get(format!("{}/v1/events", h.base))
        .header("x-api-key", &alice)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    let mut events = events.bytes_stream();
    for to in [SessionStatus::Preparing, SessionStatus::Pulling] {
        recorder::record::move_session(&h.pool, "pull1", session, to, None, None)
            .await
            .unwrap();
    }
    recorder::record::report(
        &h.pool,
        &Default::default(),
        "pull1",
        &progress(session, 1 << 20),
    )
    .await
    .unwrap();
    assert_eq!(h.count_events("SessionPullProgressed").await, 1);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    while !seen.contains("event: SessionPullProgressed") {
        let chunk = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("no progress on the stream: {seen}"))
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let line = seen
        .lines()
        .skip_while(|l| *l != "event: SessionPullProgressed")
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or_else(|| panic!("no data: {seen}"));
    let recorded: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(
        recorded["payload"],
        json!({"session_id": id, "image": "berth/shell:latest", "current_bytes": 1 << 20,
               "total_bytes": 4 << 20, "layers_done": 1, "layers": 2}),
        "{recorded}"
    );

    // Pulled: a late report records nothing.
    recorder::record::move_session(
        &h.pool,
        "pull1",
        session,
        SessionStatus::Prepared,
        None,
        None,
    )
    .await
    .unwrap();
    recorder::record::report(
        &h.pool,
        &Default::default(),
        "pull1",
        &progress(session, 4 << 20),
    )
    .await
    .unwrap();
    assert_eq!(h.count_events("SessionPullProgressed").await, 1);
}
