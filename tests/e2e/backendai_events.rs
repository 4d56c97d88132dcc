//! Backend.AI's event stream (`GET /events/session`) as Backend.AI's client reads it: requests
//! signed as `backend-ai-client` 23.09 signs them, a batch session that fails on a real Docker
//! agent, its lifecycle in Backend.AI's names with the real exit code, a stream of one session
//! (by id or by name) that ends with `server_close`, again after the session ended (replayed
//! from the log), and the caller's own sessions only.

use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::*;
use crate::containers::local_agent;

/// Backend.AI's client, as far as the event stream goes: every request signed with a keypair
/// the way `backend-ai-client` signs it.
struct BackendAiClient {
    http: reqwest::Client,
    base: String,
    /// The `Host` header, as signed: the gateway's address with its port.
    host: String,
    access_key: String,
    secret_key: String,
}

impl BackendAiClient {
    fn new(h: &Harness, (access_key, secret_key): (String, String)) -> BackendAiClient {
        BackendAiClient {
            http: h.http.clone(),
            base: h.base.clone(),
            host: h.base.trim_start_matches("http://").to_owned(),
            access_key,
            secret_key,
        }
    }

    /// `GET target` as the client sends an event-stream request: the ISO 8601 date with
    /// microseconds and `+00:00`, the API version, the Host, and no Content-Type (signed as
    /// `application/octet-stream`).
    async fn get(&self, target: &str) -> reqwest::Response {
        use gateway::backendai::auth::{client_date, Signed};
        let date = client_date(chrono::Utc::now());
        let authorization = Signed {
            method: "GET",
            target,
            date: &date,
            host: &self.host,
            content_type: None,
            version: gateway::backendai::API_VERSION,
        }
        .authorization(&self.access_key, &self.secret_key)
        .unwrap();
        self.http
            .get(format!("{}{target}", self.base))
            .header("host", &self.host)
            .header("date", &date)
            .header("x-backendai-version", gateway::backendai::API_VERSION)
            .header("user-agent", "Backend.AI Client for Python 23.09.10")
            .header("authorization", authorization)
            .send()
            .await
            .expect("the gateway answers")
    }

    /// The events of a stream that must end (one session's), read to its end.
    async fn events_to_end(&self, query: &str) -> Vec<(String, Value)> {
        let response = self.get(&format!("/events/session?{query}")).await;
        assert_eq!(response.status(), StatusCode::OK, "{query}");
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "{query}"
        );
        let text = tokio::time::timeout(Duration::from_secs(60), response.text())
            .await
            .unwrap_or_else(|_| panic!("the stream of {query} did not end"))
            .expect("the stream does not fail");
        parse(&text)
    }

    /// A refused stream: its status and problem.
    async fn refused(&self, query: &str) -> (StatusCode, Value) {
        let response = self.get(&format!("/events/session?{query}")).await;
        let status = response.status();
        (status, response.json().await.expect("a problem is JSON"))
    }
}

/// The server-sent events in `text`, each its name and its data (JSON), heartbeats skipped.
fn parse(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = Some(n.trim().to_owned());
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.trim_start());
                }
            }
            // A block without an event is a heartbeat (a comment).
            let name = name?;
            let data = serde_json::from_str(&data)
                .unwrap_or_else(|e| panic!("data is JSON ({e}): {block}"));
            Some((name, data))
        })
        .collect()
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

fn event<'a>(events: &'a [(String, Value)], name: &str) -> &'a Value {
    &events
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", names(events)))
        .1
}

/// A failing batch session's lifecycle, as Backend.AI names it, and the end of its stream.
const FAILED_BATCH: [&str; 10] = [
    "session_enqueued",
    "session_scheduled",
    "kernel_preparing",
    "kernel_creating",
    "kernel_started",
    "session_started",
    "kernel_terminated",
    "session_failure",
    "session_terminated",
    "server_close",
];

#[tokio::test]
async fn a_failing_batch_session_streams_its_lifecycle_and_exit_code_and_the_stream_ends() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let ada = h.user("ada@example.com").await;
    let _bob = h.user("bob@example.com").await;
    let adas = BackendAiClient::new(&h, h.backendai_keypair("ada@example.com").await);
    let bobs = BackendAiClient::new(&h, h.backendai_keypair("bob@example.com").await);

    let (status, created) = h
        .create(
            &ada,
            json!({"name": "failing1", "type": "batch", "image": "berth/shell:latest",
                   "startup_command": "sleep 2; exit 3",
                   "resources": {"cpu": 1, "memory": "256m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    // Both while the session lives: by id (as `backend.ai events <uuid>` asks) and by name.
    let by_id_query = format!("sessionId={id}&scope=*");
    let (by_id, by_name) = tokio::join!(
        adas.events_to_end(&by_id_query),
        adas.events_to_end("sessionName=failing1&scope=*"),
    );
    assert_eq!(names(&by_id), FAILED_BATCH);
    assert_eq!(names(&by_name), FAILED_BATCH);
    for name in ["kernel_terminated", "session_failure", "session_terminated"] {
        let data = event(&by_id, name);
        assert_eq!(data["exitCode"], 3, "{name}: {data}");
        assert_eq!(data["sessionId"], id.as_str(), "{name}: {data}");
        assert_eq!(data["sessionName"], "failing1", "{name}: {data}");
        assert_eq!(data["ownerAccessKey"], adas.access_key.as_str(), "{data}");
    }
    let started = event(&by_id, "kernel_started");
    assert_eq!(
        (
            &started["kernelId"],
            &started["clusterRole"],
            &started["clusterIdx"]
        ),
        (&json!(id), &json!("main"), &json!(1)),
        "{started}"
    );
    assert_eq!(event(&by_id, "session_started")["exitCode"], Value::Null);
    assert!(
        event(&by_id, "session_terminated")["reason"]
            .as_str()
            .is_some_and(|r| r.contains("exit code 3")),
        "{by_id:?}"
    );

    // Ended, the session's stream replays its life from the log and ends again.
    let replayed = adas.events_to_end(&format!("sessionId={id}")).await;
    assert_eq!(replayed, by_id);
    let kernels = adas
        .events_to_end("sessionName=failing1&scope=kernel")
        .await;
    assert_eq!(
        names(&kernels),
        [
            "kernel_preparing",
            "kernel_creating",
            "kernel_started",
            "kernel_terminated",
            "server_close"
        ]
    );

    // Nobody else's: another user's keypair is told the session does not exist, and may not
    // name Ada's keypair as the owner.
    let (status, problem) = bobs.refused(&format!("sessionId={id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    assert_eq!(problem["title"], "No such session.", "{problem}");
    let (status, _) = bobs.refused("sessionName=failing1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, problem) = bobs
        .refused(&format!("ownerAccessKey={}", adas.access_key))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{problem}");
    assert_eq!(
        problem["type"], "https://api.backend.ai/probs/insufficient-privilege",
        "{problem}"
    );
    let (status, problem) = adas.refused("scope=everything").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert!(problem["data"].get("scope").is_some(), "{problem}");
    h.assert_running();
}

#[tokio::test]
async fn the_stream_of_every_session_shows_the_callers_own_from_the_moment_of_connect() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let ada = h.user("ada@example.com").await;
    let bob = h.user("bob@example.com").await;
    let adas = BackendAiClient::new(&h, h.backendai_keypair("ada@example.com").await);
    let response = adas
        .get("/events/session?sessionName=*&scope=session")
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.bytes_stream();
    // Bob's session first, then Ada's: Ada's stream shows hers alone.
    let batch = |command: &str| {
        json!({"type": "batch", "image": "berth/shell:latest", "startup_command": command,
               "resources": {"cpu": 1, "memory": "256m"}})
    };
    let (status, bobs) = h.create(&bob, batch("exit 5")).await;
    assert_eq!(status, StatusCode::CREATED, "{bobs}");
    let bobs_id = ids(&bobs)[0].clone();
    h.wait_session(&bobs_id, |s| s["status"] == "TERMINATED")
        .await;
    let (status, adas_session) = h.create(&ada, batch("true")).await;
    assert_eq!(status, StatusCode::CREATED, "{adas_session}");
    let adas_id = ids(&adas_session)[0].clone();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut seen = String::new();
    // Until the block of the first `session_terminated` is whole.
    let whole = |seen: &str| {
        seen.find("event: session_terminated")
            .is_some_and(|at| seen[at..].contains("\n\n"))
    };
    while !whole(&seen) {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("Ada's session did not end on her stream: {seen}"))
            .expect("the stream goes on")
            .expect("the stream does not fail");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let end = seen.find("event: session_terminated").unwrap();
    let end = end + seen[end..].find("\n\n").unwrap();
    let events = parse(&seen[..end]);
    assert_eq!(
        names(&events),
        [
            "session_enqueued",
            "session_scheduled",
            "session_started",
            "session_success",
            "session_terminated"
        ]
    );
    for (name, data) in &events {
        assert_eq!(data["sessionId"], adas_id.as_str(), "{name}: {data}");
        assert!(data.get("kernelId").is_none(), "scope=session: {data}");
    }
    assert_eq!(event(&events, "session_success")["exitCode"], 0);
    h.assert_running();
}
