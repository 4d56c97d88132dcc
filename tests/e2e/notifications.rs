//! Notifications: the owner is told, in order and live, what became of their sessions, and no
//! one else is; reading marks them; a restarted notification service loses and duplicates
//! nothing.

use std::time::Duration;

use crate::common::*;
use crate::containers::local_agent;
use berth::app::{self, Parts};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Opens `key`'s notification stream; live once the response has started.
async fn open(
    h: &Harness,
    key: &str,
) -> impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin {
    let response = h
        .http
        .get(format!("{}/v1/notifications/stream", h.base))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.bytes_stream()
}

/// Reads `stream` until `until` is in what it carried, or fails after 30 s.
async fn read_until(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin),
    until: &str,
) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut seen = String::new();
    while !seen.contains(until) {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("`{until}` did not arrive; seen: {seen}"))
            .expect("the stream goes on")
            .expect("the stream does not fail");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

fn kinds(seen: &str) -> Vec<&str> {
    seen.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect()
}

async fn notices(h: &Harness, key: &str, query: &str) -> Value {
    let (status, page) = h.get(key, &format!("/v1/notifications{query}")).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page
}

#[tokio::test]
async fn the_owner_is_told_in_order_and_live_and_no_one_else_is() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;
    let mut alices = open(&h, &alice).await;
    let mut bobs = open(&h, &bob).await;
    let (status, created) = h
        .create(
            &alice,
            json!({"type": "batch", "name": "told1", "image": "berth/shell:latest",
                   "startup_command": "exit 3", "resources": {"cpu": 1, "memory": "128m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let seen = read_until(&mut alices, "session_terminated").await;
    assert_eq!(
        kinds(&seen),
        ["session_created", "session_started", "session_terminated"],
        "{seen}"
    );
    assert!(
        seen.contains("session told1 ended with exit code 3"),
        "{seen}"
    );
    assert!(seen.contains(&id), "{seen}");

    // Bob's stream carries nothing of Alice's: his own notice arrives on it after every one
    // of hers was pushed.
    let (_, mine) = h
        .create(
            &bob,
            json!({"type": "batch", "name": "bobs1", "image": "berth/shell:latest",
                   "startup_command": "true", "resources": {"cpu": 1, "memory": "128m"}}),
        )
        .await;
    let bobs_id = ids(&mine)[0].clone();
    let bob_saw = read_until(&mut bobs, &bobs_id).await;
    assert!(
        !bob_saw.contains(&id),
        "Bob was told of Alice's session: {bob_saw}"
    );

    // The list: newest first, three unread; Bob's marks on Alice's notices change nothing.
    let page = notices(&h, &alice, "").await;
    assert_eq!(page["unread"], 3, "{page}");
    let items = page["items"].as_array().unwrap();
    let listed: Vec<&str> = items.iter().map(|n| n["kind"].as_str().unwrap()).collect();
    assert_eq!(
        listed,
        ["session_terminated", "session_started", "session_created"]
    );
    let first = items[2]["notice_id"].as_str().unwrap().to_owned();
    let (status, body) = h
        .post(&bob, "/v1/notifications/read", json!({"ids": [first]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(notices(&h, &alice, "").await["unread"], 3);
    let (status, body) = h
        .post(&alice, "/v1/notifications/read", json!({"ids": [first]}))
        .await;
    assert_eq!(
        (status, &body["unread"]),
        (StatusCode::OK, &json!(2)),
        "{body}"
    );
    let unread = notices(&h, &alice, "?unread=true").await;
    assert_eq!(unread["items"].as_array().unwrap().len(), 2);
    let (status, body) = h
        .post(&alice, "/v1/notifications/read", json!({"all": true}))
        .await;
    assert_eq!(
        (status, &body["unread"]),
        (StatusCode::OK, &json!(0)),
        "{body}"
    );
    let (status, err) = h
        .post(
            &alice,
            "/v1/notifications/read",
            json!({"ids": ["not-an-id"]}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_notification_service_loses_and_duplicates_nothing() {
    let config = test_config();
    let h = start_parts(
        config.clone(),
        Parts {
            notification: false,
            ..Parts::ALL
        },
    )
    .await;
    h.agent("told2", "default", 8).await;
    let mut later = json!({"type": "batch", "image": "berth/shell:latest",
                           "startup_command": "true", "resources": {"cpu": 1, "memory": "128m"}});
    later["starts_at"] = json!((chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339());
    let cancel_some = |n: usize| {
        let later = later.clone();
        let h = &h;
        async move {
            for _ in 0..n {
                let (_, created) = h.create(&h.admin_key, later.clone()).await;
                let id = ids(&created)[0].clone();
                let (status, _) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
                assert_eq!(status, StatusCode::ACCEPTED);
            }
        }
    };
    let count = |expected: i64| {
        let h = &h;
        async move {
            wait_for(|| async {
                let page = notices(h, &h.admin_key, "?limit=500").await;
                (page["unread"] == expected).then_some(page)
            })
            .await
        }
    };
    // Told while the service is down: the events wait for it in the stream.
    cancel_some(3).await;
    let service = app::start(&config, Parts::NOTIFICATION).await.unwrap();
    count(6).await;
    service.stop().await.unwrap();
    cancel_some(2).await;
    let service = app::start(&config, Parts::NOTIFICATION).await.unwrap();
    let page = count(10).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let items = page["items"].as_array().unwrap();
    let mut ids: Vec<&str> = items
        .iter()
        .map(|n| n["notice_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 10, "no notice twice: {page}");
    for kind in ["session_created", "session_cancelled"] {
        assert_eq!(
            items.iter().filter(|n| n["kind"] == kind).count(),
            5,
            "{page}"
        );
    }
    assert_eq!(notices(&h, &h.admin_key, "").await["unread"], 10);
    service.stop().await.unwrap();
}

/// A webhook receiver on a port of its own: it answers its first request 500 and the others
/// 200, and keeps each request's `Idempotency-Key` and body, in order.
async fn receiver() -> (
    u16,
    std::sync::Arc<tokio::sync::Mutex<Vec<(String, Value)>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: std::sync::Arc<tokio::sync::Mutex<Vec<(String, Value)>>> = Default::default();
    let kept = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            let (head, body) = loop {
                let n = socket.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    break (String::new(), Vec::new());
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                let Some(end) = text.find("\r\n\r\n") else {
                    continue;
                };
                let head = text[..end].to_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if request.len() >= end + 4 + length {
                    break (head, request[end + 4..end + 4 + length].to_vec());
                }
            };
            let key = head
                .lines()
                .find_map(|l| l.strip_prefix("idempotency-key:"))
                .map(|v| v.trim().to_owned())
                .unwrap_or_default();
            let mut seen = kept.lock().await;
            let status = if seen.is_empty() {
                "500 Internal Server Error"
            } else {
                "200 OK"
            };
            seen.push((key, serde_json::from_slice(&body).unwrap_or(Value::Null)));
            drop(seen);
            let answer =
                format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    (port, seen)
}

#[tokio::test]
async fn a_webhook_gets_each_notice_once_it_answers_with_its_id_as_idempotency_key() {
    // The receiver is on loopback, which the operator must admit.
    let mut config = test_config();
    config.webhook_policy.allow = events::outbound::parse_cidrs("127.0.0.1/32").unwrap();
    let h = start_with(config).await;
    h.agent("hooked1", "default", 8).await;
    let alice = h.user("alice@example.com").await;
    let (status, err) = h
        .call(
            &alice,
            reqwest::Method::PUT,
            "/v1/notifications/webhook",
            Some(json!({"url": "ftp://hooks.example.com"})),
        )
        .await;
    assert_eq!(
        (status, err["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("url"))
    );
    let (port, seen) = receiver().await;
    let url = format!("http://127.0.0.1:{port}/hook");
    let (status, set) = h
        .call(
            &alice,
            reqwest::Method::PUT,
            "/v1/notifications/webhook",
            Some(json!({"url": url})),
        )
        .await;
    assert_eq!((status, &set["delivering"]), (StatusCode::OK, &json!(true)));
    // The service folds the webhook before the session's events, which come after it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut later = json!({"type": "batch", "image": "berth/shell:latest",
                           "startup_command": "true", "resources": {"cpu": 1, "memory": "128m"}});
    later["starts_at"] = json!((chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339());
    let (_, created) = h.create(&alice, later).await;
    let id = ids(&created)[0].clone();
    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);

    // The first delivery is refused and comes again a second later with the same key.
    let deliveries = wait_for(|| async {
        let seen = seen.lock().await.clone();
        (seen.len() >= 3).then_some(seen)
    })
    .await;
    let page = notices(&h, &alice, "").await;
    let mut expected: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["notice_id"].as_str().unwrap().to_owned())
        .collect();
    expected.reverse();
    assert_eq!(expected.len(), 2, "{page}");
    let keys: Vec<&str> = deliveries.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys[0], expected[0], "created first: {deliveries:?}");
    let mut distinct: Vec<&str> = keys.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let mut want: Vec<&str> = expected.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(distinct, want, "every notice, under its id: {deliveries:?}");
    assert_eq!(
        keys.iter().filter(|k| **k == expected[0]).count(),
        2,
        "refused once, delivered again: {deliveries:?}"
    );
    for (key, body) in &deliveries {
        assert_eq!(body["notice_id"], key.as_str(), "{body}");
        assert_eq!(body["session_id"], id.as_str());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        seen.lock().await.len(),
        3,
        "nothing delivered twice once answered"
    );
}
