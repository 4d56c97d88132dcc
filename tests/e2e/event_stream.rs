//! The event stream as its consumers read it: a consumer cut three times (the last by its
//! gateway stopping) resumes with `Last-Event-ID` and has seen every event exactly once, in
//! the log's order; filters by type, session and category hold in the catch-up and live, a
//! filtered stream resumes, and a user sees only their own sessions' events.

use std::time::Duration;

use berth::app::Parts;
use events::catalogue::Event;
use events::payloads::SchedulerWakeupsMissed;
use events::store::{ExpectedVersion, ProposedEvent};
use events::{EventStore, LogPosition, Metadata};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common::*;

/// One server-sent event: its id (a log position) and its data (the recorded event).
pub(crate) type Seen = (String, Value);

/// Reads `GET {base}/v1/events{query}` with `key`, resuming after `last_id` when given, until
/// `enough` says so of what was read, or the stream ends; what it read.
async fn read(
    h: &Harness,
    base: &str,
    key: &str,
    query: &str,
    last_id: Option<&str>,
    enough: impl FnMut(&[Seen]) -> bool,
) -> Vec<Seen> {
    let url = format!("{base}/v1/events{query}");
    read_url(h, &url, key, last_id, enough).await
}

/// Reads the server-sent events at `url` with `key`, sending `last_id` as `Last-Event-ID`
/// when given, until `enough` says so of what was read, or the stream ends; what it read.
pub(crate) async fn read_url(
    h: &Harness,
    url: &str,
    key: &str,
    last_id: Option<&str>,
    mut enough: impl FnMut(&[Seen]) -> bool,
) -> Vec<Seen> {
    let mut request = h
        .http
        .get(url)
        .header("x-api-key", key)
        // The harness's client gives up on a request after 30 s; a stream lasts longer.
        .timeout(Duration::from_secs(600));
    if let Some(id) = last_id {
        request = request.header("last-event-id", id);
    }
    let response = request.send().await.expect("the gateway answers");
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = berth::event_stream_client::events_of(response);
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !enough(&seen) {
        let Ok(next) = tokio::time::timeout_at(deadline, events.next()).await else {
            panic!("no event within 2 minutes after {} read", seen.len());
        };
        let Some(Ok(event)) = next else { break };
        if event.id.is_empty() {
            continue;
        }
        let data: Value = serde_json::from_str(&event.data).expect("the data is JSON");
        seen.push((event.id, data));
    }
    seen
}

/// Every event of the log up to `last`, by position, as the log holds them.
async fn log_positions(h: &Harness, last: LogPosition) -> Vec<String> {
    let client = h.pool.get().await.unwrap();
    let mut positions = Vec::new();
    let mut after = LogPosition::START;
    loop {
        let batch = events::store::read_all_with(&client, after, 5_000)
            .await
            .unwrap();
        let Some(end) = batch.last().map(|e| e.position) else {
            break;
        };
        positions.extend(
            batch
                .iter()
                .filter(|e| e.position <= last)
                .map(|e| e.position.to_string()),
        );
        if end >= last {
            break;
        }
        after = end;
    }
    positions
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_cut_three_times_resumes_and_sees_every_event_exactly_once_in_log_order() {
    let config = test_config();
    let h = start_with(config.clone()).await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("berth-outbox-{}", Uuid::new_v4().simple()));
    admit(&h, "s1", "default").await;
    let agent = h
        .simulated_agent(&nats, "s1", &dir, Duration::from_millis(300))
        .await;
    const APPENDED: usize = 10_000;

    // While the consumer reads: 10,000 events appended in appends of 100, and sessions run.
    let store = EventStore::new(h.pool.clone());
    let appender = tokio::spawn(async move {
        for _ in 0..APPENDED / 100 {
            let now = chrono::Utc::now();
            let batch: Vec<ProposedEvent> = (0..100)
                .map(|_| {
                    let event = Event::SchedulerWakeupsMissed(SchedulerWakeupsMissed {
                        from: now,
                        until: now,
                    });
                    ProposedEvent::new(&event, Metadata::default())
                })
                .collect();
            store
                .append("probe-stream", ExpectedVersion::Any, &batch)
                .await
                .expect("appended");
        }
    });
    let mut sessions = Vec::new();
    for _ in 0..5 {
        let body = json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
                          "resources": {"cpu": 1, "memory": "256m"}});
        let (status, created) = h.create(&h.admin_key, body).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        sessions.extend(ids(&created));
    }

    // From the log's start; cut after 2,500 events, and again after 2,500 more.
    let key = &h.admin_key;
    let mut seen = read(&h, &h.base, key, "?after=0:0", None, |s| s.len() >= 2_500).await;
    for _ in 0..2 {
        let last = seen.last().map(|(id, _)| id.clone());
        let more = read(&h, &h.base, key, "", last.as_deref(), |s| s.len() >= 2_500).await;
        seen.extend(more);
    }
    // A gateway of its own, stopped under the consumer: the stream ends, and the consumer
    // resumes on the first gateway.
    let second = berth::app::start(&config, Parts::GATEWAY)
        .await
        .expect("a second gateway starts");
    let second_base = format!("http://{}", second.gateway.expect("it listens"));
    let last = seen.last().map(|(id, _)| id.clone());
    let reading = {
        let (h, key, last) = (&h, key.clone(), last.clone());
        let base = second_base.clone();
        async move { read(h, &base, &key, "", last.as_deref(), |_| false).await }
    };
    let stopping = async {
        // The consumer reads some of it before the gateway goes.
        tokio::time::sleep(Duration::from_millis(800)).await;
        second
            .stop_within(Duration::from_secs(10))
            .await
            .expect("the second gateway stops");
    };
    let (more, ()) = tokio::join!(reading, stopping);
    assert!(!more.is_empty(), "nothing read from the second gateway");
    seen.extend(more);

    // Everything written, every session ended: the consumer reads up to the log's last event.
    appender.await.unwrap();
    for id in &sessions {
        h.wait_session(id, |s| s["status"] == "TERMINATED").await;
    }
    let client = h.pool.get().await.unwrap();
    let end = events::store::last_committed(&client)
        .await
        .unwrap()
        .expect("a log");
    let end_id = end.to_string();
    if seen.last().map(|(id, _)| id) != Some(&end_id) {
        let last = seen.last().map(|(id, _)| id.clone());
        let more = read(&h, &h.base, key, "", last.as_deref(), |s| {
            s.last().is_some_and(|(id, _)| *id == end_id)
        })
        .await;
        seen.extend(more);
    }
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);

    let read_ids: Vec<String> = seen.iter().map(|(id, _)| id.clone()).collect();
    let expected = log_positions(&h, end).await;
    assert!(
        expected.len() > APPENDED,
        "{} events in the log",
        expected.len()
    );
    assert_eq!(
        read_ids.len(),
        expected.len(),
        "read {} events, the log holds {}",
        read_ids.len(),
        expected.len()
    );
    assert!(
        read_ids == expected,
        "the events read are not the log's, in its order"
    );
    // Each event's data is the recorded event at that position.
    for (id, data) in seen.iter().step_by(997) {
        assert!(data["event_id"].is_string(), "{data}");
        assert!(
            data["position"].as_str().is_none_or(|p| p == id),
            "{id}: {data}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn filters_hold_in_the_catch_up_and_live_a_filtered_stream_resumes_and_users_see_their_own() {
    let h = start().await;
    h.agent("a1", "default", 8).await;
    let alice = h.user("alice@stream.test").await;
    let bob = h.user("bob@stream.test").await;
    let body = json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "256m"}});
    let (_, created) = h.create(&alice, body.clone()).await;
    let alices = ids(&created)[0].clone();
    let (_, created) = h.create(&bob, body).await;
    let bobs = ids(&created)[0].clone();
    h.wait_session(&alices, |s| s["status"] != "PENDING").await;
    h.wait_session(&bobs, |s| s["status"] != "PENDING").await;

    // Read to the log's end: only Alice's session's Session* events, in the log's order.
    let query = format!("?type=Session*&session={alices}&follow=false");
    let all = read(&h, &h.base, &h.admin_key, &query, None, |_| false).await;
    let stream = format!("session-{}", alices.replace('-', ""));
    assert!(all.len() >= 2, "{all:?}");
    for (_, data) in &all {
        assert_eq!(data["stream_id"], stream.as_str(), "{data}");
        assert!(
            data["event_type"].as_str().unwrap().starts_with("Session"),
            "{data}"
        );
    }
    let client = h.pool.get().await.unwrap();
    let in_log: i64 = client
        .query_one(
            "SELECT count(*) FROM events WHERE stream_id = $1 AND event_type LIKE 'Session%'",
            &[&stream],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(all.len() as i64, in_log);

    // Resumed after its second event, the filtered stream goes on with the third.
    let rest = read(
        &h,
        &h.base,
        &h.admin_key,
        &query,
        Some(all[1].0.as_str()),
        |_| false,
    )
    .await;
    assert_eq!(rest, all[2..].to_vec());

    // Live: a filter on agent events sees the agent's, and nothing of the sessions'.
    let live = {
        let h = &h;
        async move {
            read(h, &h.base, &h.admin_key, "?category=agent", None, |s| {
                !s.is_empty()
            })
            .await
        }
    };
    let registering = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        h.agent("a2", "default", 4).await;
    };
    let (live, ()) = tokio::join!(live, registering);
    assert_eq!(live[0].1["stream_id"], "agent-a2", "{live:?}");

    // Alice, from the start: her session's events only, whatever category she asks for.
    let hers = read(&h, &h.base, &alice, "?follow=false", None, |_| false).await;
    assert!(!hers.is_empty());
    let alices_stream = stream.clone();
    assert!(
        hers.iter()
            .all(|(_, d)| d["stream_id"] == alices_stream.as_str()),
        "{hers:?}"
    );
    let agents = read(
        &h,
        &h.base,
        &alice,
        "?category=agent&follow=false",
        None,
        |_| false,
    )
    .await;
    assert!(agents.is_empty(), "{agents:?}");
    // Another's events, a group's, and a position past the log's end are refused by name.
    for (query, status, field) in [
        ("?owner=bob@stream.test", StatusCode::FORBIDDEN, "owner"),
        (
            "?resource_group=default",
            StatusCode::FORBIDDEN,
            "resource_group",
        ),
        ("?after=999999999:1", StatusCode::NOT_FOUND, "after"),
        (
            "?after=yesterday",
            StatusCode::UNPROCESSABLE_ENTITY,
            "after",
        ),
    ] {
        let (got, body) = h.get(&alice, &format!("/v1/events{query}")).await;
        assert_eq!(
            (got, body["error"]["field"].as_str()),
            (status, Some(field)),
            "{query}: {body}"
        );
    }
    // A superadmin follows one owner's sessions.
    let owners = read(
        &h,
        &h.base,
        &h.admin_key,
        "?owner=bob@stream.test&follow=false",
        None,
        |_| false,
    )
    .await;
    let bobs_stream = format!("session-{}", bobs.replace('-', ""));
    assert!(!owners.is_empty());
    assert!(owners
        .iter()
        .all(|(_, d)| d["stream_id"] == bobs_stream.as_str()));
}

/// The Python that schemathesis runs in (`infra/test.sh` makes it): its `jsonschema_rs`
/// package is a well-kept validator of JSON Schema 2020-12.
fn python() -> std::path::PathBuf {
    match std::env::var("BERTH_SCHEMATHESIS") {
        Ok(path) => std::path::PathBuf::from(path).with_file_name("python3"),
        Err(_) => {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.berth/venv/bin/python3")
        }
    }
}

const VALIDATE: &str = r#"
import json, sys
from jsonschema_rs import Draft202012Validator
schema = json.load(open(sys.argv[1]))
events = [json.loads(line) for line in open(sys.argv[2])]
envelope = Draft202012Validator(schema["envelope"])
payloads = {name: Draft202012Validator(e["payload"]) for name, e in schema["events"].items()}
bad, types = [], set()
for e in events:
    bad += [f"envelope at {e.get('position')}: {err.message}" for err in envelope.iter_errors(e)]
    name = e["event_type"]
    if name not in payloads:
        bad.append(f"no schema for {name}")
        continue
    if schema["events"][name]["version"] != e["schema_version"]:
        bad.append(f"{name} served at version {e['schema_version']}")
    bad += [f"{name} at {e['position']}: {err.message} ({list(err.instance_path)})"
            for err in payloads[name].iter_errors(e["payload"])]
    types.add(name)
print(json.dumps({"events": len(events), "types": sorted(types), "bad": bad[:20]}))
sys.exit(1 if bad else 0)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn every_event_of_a_run_validates_against_the_published_schema() {
    let h = start().await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("berth-outbox-{}", Uuid::new_v4().simple()));
    admit(&h, "v1", "default").await;
    let agent = h
        .simulated_agent(&nats, "v1", &dir, Duration::from_millis(300))
        .await;
    // Accounts, a folder, a batch session run to its end, an interactive one renamed and
    // terminated: events of many types.
    let alice = h.user("alice@schema.test").await;
    let (status, folder) = h.post(&alice, "/v1/folders", json!({"name": "data"})).await;
    assert!(status.is_success(), "{folder}");
    let batch = json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
                       "resources": {"cpu": 1, "memory": "256m"}});
    let (_, created) = h.create(&alice, batch).await;
    let batch_id = ids(&created)[0].clone();
    let interactive =
        json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "256m"}});
    let (_, created) = h.create(&alice, interactive).await;
    let shell_id = ids(&created)[0].clone();
    h.wait_session(&batch_id, |s| s["status"] == "TERMINATED")
        .await;
    h.wait_session(&shell_id, |s| s["status"] == "RUNNING")
        .await;
    let (status, _) = h
        .call(
            &alice,
            reqwest::Method::DELETE,
            &format!("/v1/sessions/{shell_id}"),
            None,
        )
        .await;
    assert!(status.is_success());
    h.wait_session(&shell_id, |s| s["status"] == "TERMINATED")
        .await;
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    // A durable subscription made and deleted.
    let filters = json!({"name": "audit", "type": "Session*", "from_start": true});
    let (status, made) = h.post(&alice, "/v1/subscriptions", filters).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let (status, _) = h.delete(&alice, "/v1/subscriptions/audit").await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let (status, schema) = h.get(&alice, "/v1/events/schema").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        schema["events"].as_object().unwrap().len(),
        events::catalogue::EVENT_TYPES.len()
    );
    let (status, asyncapi) = h.get(&alice, "/asyncapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(asyncapi["asyncapi"], "3.0.0");
    assert_eq!(
        asyncapi["components"]["messages"]
            .as_object()
            .unwrap()
            .len(),
        events::catalogue::EVENT_TYPES.len()
    );
    let all = read(&h, &h.base, &h.admin_key, "?follow=false", None, |_| false).await;
    let work = std::env::temp_dir().join(format!("berth-schema-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("schema.json"), schema.to_string()).unwrap();
    let lines: Vec<String> = all.iter().map(|(_, data)| data.to_string()).collect();
    std::fs::write(work.join("events.jsonl"), lines.join("\n")).unwrap();
    let output = tokio::process::Command::new(python())
        .args(["-c", VALIDATE])
        .arg(work.join("schema.json"))
        .arg(work.join("events.jsonl"))
        .output()
        .await
        .expect("python runs");
    let _ = std::fs::remove_dir_all(&work);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{printed}");
    let report: Value = serde_json::from_str(printed.trim()).expect("the report is JSON");
    println!("{report}");
    assert!(report["events"].as_u64().unwrap() as usize == all.len());
    assert!(report["types"].as_array().unwrap().len() >= 15, "{report}");
}
