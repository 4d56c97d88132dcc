//! A user's password, for the web console, through the HTTP API: set without one, changed
//! only by someone who knows it, refused by name, and afterwards what signs them in.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::*;

async fn put(h: &Harness, key: &str, body: Value) -> (StatusCode, Value) {
    h.call(key, Method::PUT, "/v1/whoami/password", Some(body))
        .await
}

async fn signs_in(h: &Harness, email: &str, password: &str) -> bool {
    let client = h.pool.get().await.unwrap();
    events::ledger::password_owner(&client, email, password)
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn a_user_sets_a_password_and_changes_it_only_knowing_it() {
    let h = start().await;
    let ada = h.user("ada@example.com").await;
    let bob = h.user("bob@example.com").await;

    let anonymous = h
        .http
        .put(format!("{}/v1/whoami/password", h.base))
        .json(&json!({"new": "no key at all"}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let (_, me) = h.get(&ada, "/v1/whoami").await;
    let me: gateway::model::Whoami = serde_json::from_value(me).unwrap();
    assert!(!me.password_set);

    // Bad input is refused naming the field, and sets nothing.
    for (body, field) in [
        (json!({"new": "7 chars"}), "new"),
        (json!({"new": "x".repeat(257)}), "new"),
        (json!({"current": null}), "new"),
        (
            json!({"new": "long enough", "again": "long enough"}),
            "again",
        ),
        (json!({"new": "long\u{0}enough"}), "new"),
    ] {
        let (status, answer) = put(&h, &ada, body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
    assert_eq!(h.count_events("UserPasswordSet").await, 0);

    // Ada has none: she sets one without a current one.
    let (status, answer) = put(&h, &ada, json!({"new": "first password"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    assert_eq!(answer, Value::Null);
    let (_, me) = h.get(&ada, "/v1/whoami").await;
    assert_eq!(me["password_set"], true, "{me}");
    assert!(signs_in(&h, "ada@example.com", "first password").await);

    // Now she has one: missing or wrong, the current one is a 403 naming `current`.
    for body in [
        json!({"new": "second password"}),
        json!({"current": "First password", "new": "second password"}),
    ] {
        let (status, answer) = put(&h, &ada, body.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}: {answer}");
        assert_eq!(answer["error"]["field"], "current", "{answer}");
        assert_eq!(answer["error"]["code"], "forbidden", "{answer}");
    }
    let (status, answer) = put(
        &h,
        &ada,
        json!({"current": "first password", "new": "second password"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    assert!(signs_in(&h, "ada@example.com", "second password").await);
    assert!(!signs_in(&h, "ada@example.com", "first password").await);

    // Her password is hers alone.
    assert!(!signs_in(&h, "bob@example.com", "second password").await);
    let (_, bob_me) = h.get(&bob, "/v1/whoami").await;
    assert_eq!(bob_me["password_set"], false, "{bob_me}");
    assert_eq!(h.count_events("UserPasswordSet").await, 2);
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}
