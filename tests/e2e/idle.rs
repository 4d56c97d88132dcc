//! The idle-reaper with real containers and short timeouts: each checker terminates what it
//! should, with its figures in the reason and the event; a busy session and an exempted one
//! survive; a restarted reaper loses and duplicates nothing.

use std::time::Duration;

use crate::common::*;
use crate::containers::local_agent;
use berth::app::{self, Parts};
use events::idleness::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn set_group_checks(h: &Harness, checks: IdleChecks) {
    h.set_group_idle_checks("default", checks).await;
}

fn interactive(command: Option<&str>) -> Value {
    let mut body =
        json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "128m"}});
    if let Some(command) = command {
        body["startup_command"] = json!(command);
    }
    body
}

async fn create(h: &Harness, key: &str, body: Value) -> String {
    let (status, created) = h.create(key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    ids(&created)[0].clone()
}

fn is(status: &'static str) -> impl Fn(&Value) -> bool {
    move |s: &Value| s["status"] == status
}

/// The `SessionIdleReaped` events of a session, as their payloads.
async fn reaped(h: &Harness, id: &str) -> Vec<Value> {
    let client = h.pool.get().await.unwrap();
    let stream = format!("session-{}", id.replace('-', ""));
    client
        .query(
            "SELECT payload FROM events WHERE stream_id = $1 AND event_type = 'SessionIdleReaped'",
            &[&stream],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The session's idle readings, once the reaper has folded it (it reads the event stream,
/// so it may lag a create by a few milliseconds).
async fn readings(h: &Harness, key: &str, id: &str) -> Value {
    wait_for(|| async {
        let (status, body) = h.get(key, &format!("/v1/sessions/{id}/idle")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        (!body["readings"].as_array().unwrap().is_empty()).then_some(body)
    })
    .await
}

fn reading<'a>(body: &'a Value, checker: &str) -> &'a Value {
    body["readings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["checker"] == checker)
        .unwrap_or_else(|| panic!("no {checker} reading in {body}"))
}

#[tokio::test]
async fn a_session_past_its_lifetime_is_reaped_with_that_reason() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    set_group_checks(
        &h,
        IdleChecks {
            max_lifetime_secs: Some(3),
            ..Default::default()
        },
    )
    .await;
    let id = create(&h, &h.admin_key, interactive(None)).await;
    let shown = readings(&h, &h.admin_key, &id).await;
    let lifetime = reading(&shown, "lifetime");
    assert_eq!(lifetime["measures"][0]["threshold"], 3.0, "{shown}");
    let left = lifetime["remaining_secs"].as_f64().unwrap();
    assert!(left > 0.0 && left <= 3.0, "time left shown: {shown}");

    let ended = h.wait_session(&id, is("TERMINATED")).await;
    let reason = ended["status_reason"].as_str().unwrap();
    assert!(reason.contains("lifetime checker"), "{reason}");
    let events = reaped(&h, &id).await;
    assert_eq!(events.len(), 1, "{events:?}");
    let age = events[0]["reading"]["measures"][0]["value"]
        .as_f64()
        .unwrap();
    assert!(age >= 3.0, "the figures that decided: {}", events[0]);
}

#[tokio::test]
async fn an_idle_session_is_reaped_by_utilization_while_a_busy_one_survives() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    set_group_checks(
        &h,
        IdleChecks {
            max_lifetime_secs: Some(3600),
            utilization: Some(UtilizationCheck {
                grace_period_secs: 2,
                window_secs: 6,
                thresholds: Thresholds {
                    cpu_percent: Some(10.0),
                    ..Default::default()
                },
                combine: Combine::All,
            }),
            ..Default::default()
        },
    )
    .await;
    let idle = create(&h, &h.admin_key, interactive(Some("sleep 600"))).await;
    let busy = create(&h, &h.admin_key, interactive(Some("yes > /dev/null"))).await;
    h.wait_session(&busy, is("RUNNING")).await;

    let ended = h
        .wait_session_within(&idle, Duration::from_secs(40), is("TERMINATED"))
        .await;
    let reason = ended["status_reason"].as_str().unwrap();
    assert!(reason.contains("utilization checker"), "{reason}");
    let events = reaped(&h, &idle).await;
    assert_eq!(events.len(), 1);
    let cpu = &events[0]["reading"]["measures"][0];
    assert_eq!(cpu["name"], "cpu_percent");
    assert!(cpu["value"].as_f64().unwrap() < 10.0, "{cpu}");

    // The busy one has been RUNNING for longer than grace and window, and is kept.
    let shown = readings(&h, &h.admin_key, &busy).await;
    let utilization = reading(&shown, "utilization");
    assert_eq!(utilization["fires"], false, "{shown}");
    assert_eq!(utilization["remaining_secs"], Value::Null, "{shown}");
    let used = utilization["measures"][0]["value"].as_f64().unwrap();
    assert!(used > 10.0, "the busy session's CPU: {shown}");
    let lifetime = reading(&shown, "lifetime");
    assert!(lifetime["remaining_secs"].as_f64().unwrap() > 3000.0);
    let (status, detail) = h.get(&h.admin_key, &format!("/v1/sessions/{busy}")).await;
    assert_eq!(
        (status, detail["status"].as_str()),
        (StatusCode::OK, Some("RUNNING"))
    );
    assert!(reaped(&h, &busy).await.is_empty());
    // Its usage over its life, for the detail's charts: the minute it ran, busy.
    let (status, usage) = h
        .get(&h.admin_key, &format!("/v1/sessions/{busy}/usage"))
        .await;
    assert_eq!(status, StatusCode::OK, "{usage}");
    let points = usage["points"].as_array().unwrap();
    assert!(
        !points.is_empty() && points.len() <= 2,
        "a point a minute: {usage}"
    );
    let last = points.last().unwrap();
    assert!(last["cpu_percent"].as_f64().unwrap() > 10.0, "{usage}");
    assert!(last["memory_bytes"].as_i64().unwrap() > 0, "{usage}");
    let (status, _) = h
        .delete(&h.admin_key, &format!("/v1/sessions/{busy}"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // Its container is stopped before the agent goes with the test: none is left behind.
    h.wait_session(&busy, is("TERMINATED")).await;
}

#[tokio::test]
async fn an_exempted_session_survives_and_only_its_owner_or_an_admin_may_exempt_it() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    set_group_checks(
        &h,
        IdleChecks {
            max_lifetime_secs: Some(4),
            ..Default::default()
        },
    )
    .await;
    let owner = h.user("owner@example.com").await;
    let other = h.user("other@example.com").await;
    let kept = create(&h, &owner, interactive(None)).await;
    let path = format!("/v1/sessions/{kept}/idle-exemption");
    let (status, _) = h.post(&other, &path, json!({"reason": "mine now"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another user's session");
    let (status, err) = h.post(&owner, &path, json!({"reason": ""})).await;
    assert_eq!(
        (status, err["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("reason"))
    );
    let (status, body) = h
        .post(&owner, &path, json!({"reason": "a long training run"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["idle_exempt"], true);
    // A control: the same lifetime reaps a session nobody exempted.
    let control = create(&h, &owner, interactive(None)).await;
    h.wait_session(&control, is("TERMINATED")).await;
    h.wait_session(&kept, is("RUNNING")).await;
    let shown = readings(&h, &owner, &kept).await;
    assert_eq!(shown["exempt"], true, "{shown}");
    assert_eq!(reading(&shown, "lifetime")["fires"], true, "{shown}");
    assert!(reaped(&h, &kept).await.is_empty());
    assert_eq!(h.count_events("SessionIdleExempted").await, 1);
    let (status, _) = h.delete(&owner, &format!("/v1/sessions/{kept}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // Its container is stopped before the agent goes with the test: none is left behind.
    h.wait_session(&kept, is("TERMINATED")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_preview_lists_what_is_due_and_a_restarted_reaper_reaps_each_once() {
    let mut config = test_config();
    let everything_but_the_reaper = Parts {
        idle_reaper: false,
        ..Parts::ALL
    };
    let h = start_parts(config.clone(), everything_but_the_reaper).await;
    set_group_checks(
        &h,
        IdleChecks {
            max_lifetime_secs: Some(1),
            ..Default::default()
        },
    )
    .await;
    // Batch sessions reserved for an hour from now wait in the queue; one past its lifetime
    // there is cancelled by the reaper.
    h.agent("idle1", "default", 8).await;
    let mut later = json!({"type": "batch", "image": "berth/shell:latest",
                           "startup_command": "true", "resources": {"cpu": 1, "memory": "128m"}});
    later["starts_at"] = json!((chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339());
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(create(&h, &h.admin_key, later.clone()).await);
    }
    let exempt = create(&h, &h.admin_key, later.clone()).await;
    let (status, _) = h
        .post(
            &h.admin_key,
            &format!("/v1/sessions/{exempt}/idle-exemption"),
            json!({"reason": "kept"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // A reaper whose tick is an hour away after its first: it folds and answers, and reaps
    // nothing more.
    config.timings.reaper_tick = Duration::from_secs(3600);
    let slow = app::start(&config, Parts::IDLE_REAPER).await.unwrap();
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    // Once it has folded the exemption (the last event), what it previews is settled.
    wait_for(|| {
        let (nats, subject) = (nats.clone(), h.agent_bus.idle_readings());
        let exempt = uuid::Uuid::parse_str(&exempt).unwrap();
        async move {
            let body = serde_json::to_vec(&exempt).unwrap();
            let answer = nats.request(subject, body.into()).await.ok()?;
            let readings: Option<SessionReadings> = serde_json::from_slice(&answer.payload).ok()?;
            readings.filter(|r| r.exempt).map(|_| ())
        }
    })
    .await;
    let preview: Vec<IdleVerdict> = wait_for(|| {
        let (nats, subject) = (nats.clone(), h.agent_bus.idle_preview());
        async move {
            let answer = nats.request(subject, Vec::new().into()).await.ok()?;
            let due: Vec<IdleVerdict> = serde_json::from_slice(&answer.payload).ok()?;
            (due.len() >= 3).then_some(due)
        }
    })
    .await;
    let mut listed: Vec<String> = preview.iter().map(|v| v.session_id.to_string()).collect();
    listed.sort();
    let mut expected = sessions.clone();
    expected.sort();
    assert_eq!(listed, expected, "the three due, not the exempted one");
    assert!(preview
        .iter()
        .all(|v| v.reading.checker == IdleChecker::Lifetime));
    slow.stop().await.unwrap();

    config.timings.reaper_tick = Duration::from_millis(250);
    let reaper = app::start(&config, Parts::IDLE_REAPER).await.unwrap();
    for id in &sessions {
        let ended = h.wait_session(id, is("CANCELLED")).await;
        assert!(ended["status_reason"]
            .as_str()
            .unwrap()
            .contains("lifetime checker"));
    }
    // Stopped and started again: the fold is kept, nothing is reaped twice.
    reaper.stop().await.unwrap();
    let again = app::start(&config, Parts::IDLE_REAPER).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for id in &sessions {
        assert_eq!(reaped(&h, id).await.len(), 1, "{id}");
    }
    assert_eq!(h.count_events("SessionIdleReaped").await, 3);
    let (status, detail) = h.get(&h.admin_key, &format!("/v1/sessions/{exempt}")).await;
    assert_eq!(
        (status, detail["status"].as_str()),
        (StatusCode::OK, Some("PENDING"))
    );
    again.stop().await.unwrap();
}
