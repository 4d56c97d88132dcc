//! Outbound calls fenced (S8, S17): a user's webhook reaches no internal address (checked
//! after DNS resolution, no redirect followed) and carries a signature its receiver checks.
//! (S17, the proxy dialling only agents' own addresses, is shown by the recorder's and the
//! proxy's unit tests: no agent the suite runs can report another address.)

// Outbound calls fenced (S8, S17)

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

/// One request a [`listener`] took: its head and body.
#[derive(Debug, Clone)]
struct Taken {
    head: String,
    body: Vec<u8>,
}

impl Taken {
    /// The value of header `name` (lower case; names are matched without case).
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (key, value) = l.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// What a [`listener`] saw: how many connections it accepted, and the requests on them.
#[derive(Debug, Default)]
struct Seen {
    connections: usize,
    requests: Vec<Taken>,
}

/// An HTTP listener on 127.0.0.1 that answers every request with `answer` (a status line
/// and headers), and keeps every connection and request it gets. Its task ends with the test.
async fn listener(answer: &str) -> (u16, Arc<tokio::sync::Mutex<Seen>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Arc<tokio::sync::Mutex<Seen>> = Default::default();
    let kept = seen.clone();
    let answer = format!("{answer}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            kept.lock().await.connections += 1;
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            let taken = loop {
                let n = socket.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    break None;
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                let Some(end) = text.find("\r\n\r\n") else {
                    continue;
                };
                let head = text[..end].to_owned();
                let length = head
                    .to_lowercase()
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:").map(str::to_owned))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if request.len() >= end + 4 + length {
                    let body = request[end + 4..end + 4 + length].to_vec();
                    break Some(Taken { head, body });
                }
            };
            if let Some(taken) = taken {
                kept.lock().await.requests.push(taken);
            }
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    (port, seen)
}

async fn set_webhook(h: &Harness, key: &str, url: &str) -> (StatusCode, Value) {
    h.call(
        key,
        reqwest::Method::PUT,
        "/v1/notifications/webhook",
        Some(json!({ "url": url })),
    )
    .await
}

/// Waits until the notification service holds `url` as the only webhook (it folds the
/// event the gateway recorded), so the notices that follow are delivered there.
async fn webhook_folded(h: &Harness, url: &str) {
    wait_for(|| async {
        let client = h.pool.get().await.unwrap();
        let rows = client
            .query("SELECT url FROM notification.webhooks", &[])
            .await
            .unwrap();
        let urls: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        (urls == [url]).then_some(())
    })
    .await;
}

/// Makes `key`'s user two notices (a session created for later, then cancelled); their ids.
async fn two_notices(h: &Harness, key: &str) -> String {
    let mut later = json!({"type": "batch", "image": "berth/shell:latest",
                           "startup_command": "true", "resources": {"cpu": 1, "memory": "128m"}});
    later["starts_at"] = json!((chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339());
    let (status, created) = h.create(key, later).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let (status, _) = h.delete(key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    id
}

/// The errors of the deliveries tried and failed so far, once there are `n`.
async fn failed_deliveries(h: &Harness, n: usize) -> Vec<String> {
    wait_for(|| async {
        let client = h.pool.get().await.unwrap();
        let rows = client
            .query(
                "SELECT last_error FROM notification.deliveries
                 WHERE last_error IS NOT NULL ORDER BY notice_id",
                &[],
            )
            .await
            .unwrap();
        let errors: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        (errors.len() >= n).then_some(errors)
    })
    .await
}

/// Whether `signature` (`v1,<base64>`) is the HMAC-SHA256 of `<id>.<timestamp>.<body>` under
/// the secret `whsec_<base64>`: what a receiver checks, as Standard Webhooks say.
fn signed_by(secret: &str, id: &str, timestamp: &str, body: &[u8], signature: &str) -> bool {
    let key = BASE64
        .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let Some(sent) = signature.strip_prefix("v1,") else {
        return false;
    };
    let Ok(sent) = BASE64.decode(sent) else {
        return false;
    };
    mac.verify_slice(&sent).is_ok()
}

#[tokio::test]
async fn a_webhook_to_loopback_or_a_name_resolving_to_it_is_refused_and_never_called() {
    // The operator admits nothing beyond public addresses (the default).
    let h = start().await;
    h.agent("fenced1", "default", 8).await;
    let mallory = h.user("mallory@example.com").await;
    let (port, seen) = listener("HTTP/1.1 200 OK").await;

    // An address written in the URL is refused at once, in every spelling of it.
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://[::1]:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://2130706433:{port}/hook"),
        format!("http://0x7f.1:{port}/hook"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1:2375/containers/create".to_owned(),
        "http://[fd00::1]/".to_owned(),
    ] {
        let (status, err) = set_webhook(&h, &mallory, &url).await;
        assert_eq!(
            (status, err["error"]["field"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("url")),
            "{url}: {err}"
        );
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("BERTH_WEBHOOK_ALLOW")),
            "{url}: {err}"
        );
    }

    // A name is taken, and checked after it resolves: `localhost` reaches no one.
    let url = format!("http://localhost:{port}/hook");
    let (status, set) = set_webhook(&h, &mallory, &url).await;
    assert_eq!((status, &set["delivering"]), (StatusCode::OK, &json!(true)));
    webhook_folded(&h, &url).await;
    two_notices(&h, &mallory).await;
    let errors = failed_deliveries(&h, 2).await;
    for error in &errors {
        assert!(
            error.contains("refused") && error.contains("loopback"),
            "{errors:?}"
        );
    }
    let seen = seen.lock().await;
    assert_eq!(
        (seen.connections, seen.requests.len()),
        (0, 0),
        "the receiver on loopback was never reached"
    );
}

#[tokio::test]
async fn an_allowed_webhook_gets_signed_deliveries_and_no_redirect_is_followed() {
    // The operator admits loopback's 127.0.0.1 alone: the test's receivers.
    let mut config = test_config();
    config.webhook_policy.allow = events::outbound::parse_cidrs("127.0.0.1/32").unwrap();
    let h = start_with(config).await;
    h.agent("fenced2", "default", 8).await;
    let alice = h.user("alice@example.com").await;

    // A signed delivery, which the receiver checks with the secret it was shown.
    let (port, seen) = listener("HTTP/1.1 200 OK").await;
    let url = format!("http://127.0.0.1:{port}/hook");
    let (status, set) = set_webhook(&h, &alice, &url).await;
    assert_eq!((status, &set["delivering"]), (StatusCode::OK, &json!(true)));
    let secret = set["secret"].as_str().expect("the secret").to_owned();
    assert!(secret.starts_with("whsec_"), "{set}");
    // Setting it again keeps the secret (a receiver keeps verifying).
    let (_, again) = set_webhook(&h, &alice, &url).await;
    assert_eq!(again["secret"], secret.as_str());
    webhook_folded(&h, &url).await;
    let session = two_notices(&h, &alice).await;
    let taken = wait_for(|| async {
        let seen = seen.lock().await;
        (seen.requests.len() >= 2).then(|| seen.requests.clone())
    })
    .await;
    for request in &taken {
        let id = request.header("webhook-id").expect("webhook-id");
        let timestamp = request
            .header("webhook-timestamp")
            .expect("webhook-timestamp");
        let signature = request
            .header("webhook-signature")
            .expect("webhook-signature");
        assert_eq!(request.header("x-berth-signature"), Some(signature));
        assert_eq!(request.header("idempotency-key"), Some(id));
        assert!(
            signed_by(&secret, id, timestamp, &request.body, signature),
            "{request:?}"
        );
        assert!(!signed_by(
            &secret,
            id,
            timestamp,
            b"{\"forged\":1}",
            signature
        ));
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(
            (body["notice_id"].as_str(), body["session_id"].as_str()),
            (Some(id), Some(session.as_str()))
        );
    }

    // The secret is in no event: the log records only that one was made.
    let client = h.pool.get().await.unwrap();
    let bare = secret.trim_start_matches("whsec_");
    let leaked: i64 = client
        .query_one(
            "SELECT count(*) FROM events WHERE payload::text LIKE $1 OR metadata::text LIKE $1",
            &[&format!("%{bare}%")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(leaked, 0, "the secret is in the log");
    let made: i64 = client
        .query_one(
            "SELECT count(*) FROM events WHERE event_type = 'NotificationWebhookSecretSet'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(made, 1, "one secret made, recorded once");

    // Rotated: what is signed from now on verifies with the new secret, not the old.
    let (status, rotated) = h
        .post(&alice, "/v1/notifications/webhook/secret", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{rotated}");
    let new_secret = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new_secret, secret);
    two_notices(&h, &alice).await;
    let taken = wait_for(|| async {
        let seen = seen.lock().await;
        (seen.requests.len() >= 4).then(|| seen.requests.clone())
    })
    .await;
    for request in &taken[2..] {
        let (id, timestamp, signature) = (
            request.header("webhook-id").unwrap(),
            request.header("webhook-timestamp").unwrap(),
            request.header("webhook-signature").unwrap(),
        );
        assert!(signed_by(
            &new_secret,
            id,
            timestamp,
            &request.body,
            signature
        ));
        assert!(!signed_by(&secret, id, timestamp, &request.body, signature));
    }

    // A receiver answering 302 to another listener: berth does not follow it, and counts it
    // a failed delivery.
    let (elsewhere, followed) = listener("HTTP/1.1 200 OK").await;
    let (redirector, redirected) = listener(&format!(
        "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{elsewhere}/stolen"
    ))
    .await;
    let url = format!("http://127.0.0.1:{redirector}/hook");
    let (status, _) = set_webhook(&h, &alice, &url).await;
    assert_eq!(status, StatusCode::OK);
    webhook_folded(&h, &url).await;
    two_notices(&h, &alice).await;
    let errors = failed_deliveries(&h, 2).await;
    assert!(
        errors.iter().all(|e| e.contains("302")),
        "a 3xx is a failed delivery: {errors:?}"
    );
    assert!(redirected.lock().await.requests.len() >= 2);
    let followed = followed.lock().await;
    assert_eq!(
        (followed.connections, followed.requests.len()),
        (0, 0),
        "the redirect was not followed"
    );
}
