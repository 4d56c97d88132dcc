//! Nothing secret in the log (S10): a password's hash and the token an app was started with
//! are kept in the erasable `secrets` schema, and no event's payload holds either.

use crate::apps::{app_call, running_session, scene_with, Scene};
use crate::common::*;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn no_event_holds_a_password_hash_or_an_apps_token() {
    let Scene {
        h, alice, _agent, ..
    } = scene_with(test_config()).await;
    // A password set by an admin, then changed by its user.
    let (status, answer) = h
        .put(
            &h.admin_key,
            "/v1/admin/passwords",
            json!({"email": "alice@example.com", "password": "correct horse battery"}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    let (status, answer) = h
        .put(
            &alice,
            "/v1/whoami/password",
            json!({"current": "correct horse battery", "new": "staple of the stable"}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    // The terminal is started with a token of its own.
    let (id, _) = running_session(
        &h,
        &alice,
        json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "128m"}}),
    )
    .await;
    let (status, started) = app_call(&h, &alice, &id, "ttyd", "start", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{started}");

    let client = h.pool.get().await.unwrap();
    let token: String = client
        .query_one(
            "SELECT token FROM secrets.app_tokens WHERE session_id = $1::text::uuid AND app = 'ttyd'",
            &[&id],
        )
        .await
        .expect("the terminal's token is kept apart")
        .get(0);
    let hash: String = client
        .query_one(
            "SELECT p.password_hash FROM secrets.password_hashes p
             JOIN ledger.users u USING (user_id) WHERE u.email = 'alice@example.com'",
            &[],
        )
        .await
        .expect("the password's hash is kept apart")
        .get(0);
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    // Every payload of the log, as stored: none holds either secret, nor any Argon2 hash.
    let payloads: Vec<String> = client
        .query("SELECT payload::text FROM events", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(payloads.len() > 10, "the log has the run's events");
    for payload in &payloads {
        assert!(!payload.contains(&token), "a token in the log: {payload}");
        assert!(!payload.contains("$argon2"), "a hash in the log: {payload}");
    }
    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
}
