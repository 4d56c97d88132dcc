//! Credentials with a life cycle (S2, S7, S16): what is revoked, disabled or expired is
//! refused at once on every gateway, and guessing passwords is throttled.

use std::time::Duration;

use gateway::backendai::auth::{client_date, Signed};
use gateway::backendai::API_VERSION;
use reqwest::header::{LOCATION, ORIGIN, RETRY_AFTER, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::common::*;

// Credentials (S2, S7, S16)
//
// A second gateway on the same database and bus stands for "every gateway": it has the key
// in its cache (it served the key a moment before) when another gateway records the change,
// and must refuse it within a second, by the relayed event rather than its cache's lifetime.

/// How soon every gateway must refuse what was revoked.
const AT_ONCE: Duration = Duration::from_secs(1);

/// A gateway alone on the harness's database and bus.
async fn second_gateway(config: &berth::config::Config) -> (berth::app::App, String) {
    let app = berth::app::start(config, berth::app::Parts::GATEWAY)
        .await
        .expect("the second gateway starts");
    let base = format!("http://{}", app.gateway.expect("it listens"));
    (app, base)
}

fn client() -> reqwest::Client {
    events::tls::use_ring();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap()
}

/// `GET /v1/whoami` on `base` with `key`: its status.
async fn whoami(base: &str, key: &str) -> StatusCode {
    client()
        .get(format!("{base}/v1/whoami"))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap()
        .status()
}

/// `GET /v1/admin/users` on `base` with `key`: its status (a superadmin's only).
async fn admin_list(base: &str, key: &str) -> StatusCode {
    client()
        .get(format!("{base}/v1/admin/users"))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap()
        .status()
}

/// Polls `probe` until it gives `want`, for `within` at most; panics saying what it gave last.
async fn within<F, Fut>(within: Duration, want: StatusCode, what: &str, probe: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = StatusCode>,
{
    let deadline = Instant::now() + within;
    loop {
        let got = probe().await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {got}, not {want}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A console sign-in form posted to `base` (from its own origin): the answer.
async fn console_sign_in(base: &str, form: &[(&str, &str)]) -> reqwest::Response {
    // The form encoded as a query is: `application/x-www-form-urlencoded`.
    let mut encoded = reqwest::Url::parse("http://form/").unwrap();
    encoded.query_pairs_mut().extend_pairs(form);
    client()
        .post(format!("{base}/console/sign-in"))
        .header(ORIGIN, base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encoded.query().unwrap_or_default().to_owned())
        .send()
        .await
        .unwrap()
}

/// Signs in to the console on `base`: the cookie it set.
async fn console_cookie(base: &str, form: &[(&str, &str)]) -> String {
    let answer = console_sign_in(base, form).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER, "signed in");
    let cookie = answer.headers()[SET_COOKIE].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

/// A console page on `base` with `cookie`: 200 while signed in, 303 to the sign-in form
/// otherwise.
async fn console_page(base: &str, cookie: &str) -> StatusCode {
    let answer = client()
        .get(format!("{base}/console/sessions"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    if answer.status() == StatusCode::SEE_OTHER {
        let to = answer.headers()[LOCATION].to_str().unwrap();
        assert!(to.starts_with("/console/sign-in"), "{to}");
    }
    answer.status()
}

/// A Backend.AI request signed with `keypair` on `base` (`GET /session/<none>`): 404 while
/// the keypair is honoured (no such session), 401 when it is not.
async fn backendai_get(base: &str, (access_key, secret_key): &(String, String)) -> StatusCode {
    let host = base.strip_prefix("http://").unwrap();
    let date = client_date(chrono::Utc::now());
    let target = "/session/nosuchsession";
    let authorization = Signed {
        method: "GET",
        target,
        date: &date,
        host,
        content_type: Some("text/plain"),
        version: API_VERSION,
    }
    .authorization(access_key, secret_key)
    .unwrap();
    client()
        .get(format!("{base}{target}"))
        .header("X-BackendAI-Version", API_VERSION)
        .header("Date", &date)
        .header("Content-Type", "text/plain")
        .header("Authorization", authorization)
        .send()
        .await
        .unwrap()
        .status()
}

/// Issues `email` another key through gateway A, with `extra` fields: the key.
async fn issue_key(h: &Harness, email: &str, extra: Value) -> String {
    let mut body = json!({ "email": email });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, issued) = h.post(&h.admin_key, "/v1/admin/api-keys", body).await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    issued["api_key"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_revoked_key_a_disabled_user_and_an_expired_key_are_refused_at_once_on_every_gateway() {
    let config = test_config();
    let h = start_with(config.clone()).await;
    let (gateway_b, b) = second_gateway(&config).await;
    let email = "alice@example.com";
    let first = h.user(email).await;
    let second = issue_key(&h, email, json!({})).await;
    let keypair = h.backendai_keypair(email).await;
    // B has served each of them (its cache holds them), and signed Alice in.
    for key in [&first, &second] {
        assert_eq!(whoami(&b, key).await, StatusCode::OK);
    }
    assert_eq!(backendai_get(&b, &keypair).await, StatusCode::NOT_FOUND);
    let cookie = console_cookie(&b, &[("key", &second)]).await;
    assert_eq!(console_page(&b, &cookie).await, StatusCode::OK);

    // S2: a key revoked on A (by its prefix) is refused on B within a second; the other not.
    let revoke = format!("/v1/admin/api-keys/{}/revoke", &first[..12]);
    let (status, answer) = h.post(&h.admin_key, &revoke, json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    within(
        AT_ONCE,
        StatusCode::UNAUTHORIZED,
        "revoked key on B",
        || whoami(&b, &first),
    )
    .await;
    assert_eq!(whoami(&b, &second).await, StatusCode::OK);
    let refused = console_sign_in(&b, &[("key", &first)]).await;
    assert_eq!(
        refused.status(),
        StatusCode::UNAUTHORIZED,
        "console sign-in"
    );
    assert_eq!(h.count_events("ApiKeyRevoked").await, 1);
    // A prefix no key has, and a malformed one, are named.
    let (status, answer) = h
        .post(
            &h.admin_key,
            "/v1/admin/api-keys/berth_zzzzzz/revoke",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["field"], "prefix");

    // S2: Alice disabled on A: her key, her keypair and her console sign-in are refused on B
    // within a second.
    let disable = format!("/v1/admin/users/{email}/disable");
    let (status, answer) = h.post(&h.admin_key, &disable, json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    within(
        AT_ONCE,
        StatusCode::UNAUTHORIZED,
        "disabled user's key on B",
        || whoami(&b, &second),
    )
    .await;
    within(
        AT_ONCE,
        StatusCode::UNAUTHORIZED,
        "disabled user's keypair on B",
        || backendai_get(&b, &keypair),
    )
    .await;
    within(
        AT_ONCE,
        StatusCode::SEE_OTHER,
        "disabled user's console on B",
        || console_page(&b, &cookie),
    )
    .await;
    // Nobody disables themselves.
    let (status, answer) = h
        .post(
            &h.admin_key,
            "/v1/admin/users/admin@berth.local/disable",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(answer["error"]["field"], "email");

    // Enabled again: her key and keypair work again on B; the console sign-in stays ended.
    let enable = format!("/v1/admin/users/{email}/enable");
    let (status, answer) = h.post(&h.admin_key, &enable, json!({})).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    within(
        AT_ONCE,
        StatusCode::OK,
        "re-enabled user's key on B",
        || whoami(&b, &second),
    )
    .await;
    assert_eq!(backendai_get(&b, &keypair).await, StatusCode::NOT_FOUND);
    assert_eq!(console_page(&b, &cookie).await, StatusCode::SEE_OTHER);
    assert_eq!(
        whoami(&b, &first).await,
        StatusCode::UNAUTHORIZED,
        "still revoked"
    );

    // An expiring key: honoured on B until its time, refused from then on (its cached owner
    // too), on every surface that takes a key.
    let (status, answer) = h
        .post(
            &h.admin_key,
            "/v1/admin/api-keys",
            json!({"email": email, "expires_in_secs": 0}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["field"], "expires_in_secs");
    let expiring = issue_key(&h, email, json!({"expires_in_secs": 2})).await;
    assert_eq!(whoami(&b, &expiring).await, StatusCode::OK);
    within(
        Duration::from_secs(2) + AT_ONCE,
        StatusCode::UNAUTHORIZED,
        "expired key on B",
        || whoami(&b, &expiring),
    )
    .await;
    let refused = console_sign_in(&b, &[("key", &expiring)]).await;
    assert_eq!(
        refused.status(),
        StatusCode::UNAUTHORIZED,
        "console sign-in"
    );

    gateway_b.stop().await.expect("B stops cleanly");
}

#[tokio::test]
async fn a_role_change_holds_at_once_on_every_gateway() {
    let config = test_config();
    let h = start_with(config.clone()).await;
    let (gateway_b, b) = second_gateway(&config).await;
    let bob = h.user("bob@example.com").await;
    assert_eq!(admin_list(&b, &bob).await, StatusCode::FORBIDDEN);

    let role = "/v1/admin/users/bob@example.com/role";
    let set = |to: &'static str| {
        let h = &h;
        async move {
            h.call(
                &h.admin_key,
                reqwest::Method::PUT,
                role,
                Some(json!({ "role": to })),
            )
            .await
        }
    };
    let (status, answer) = set("superadmin").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    within(AT_ONCE, StatusCode::OK, "promoted on B", || {
        admin_list(&b, &bob)
    })
    .await;
    let (status, answer) = set("user").await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    within(AT_ONCE, StatusCode::FORBIDDEN, "demoted on B", || {
        admin_list(&b, &bob)
    })
    .await;
    let (status, answer) = set("emperor").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(h.count_events("UserRoleChanged").await, 2);

    gateway_b.stop().await.expect("B stops cleanly");
}

#[tokio::test]
async fn a_password_change_signs_its_user_out_everywhere() {
    let config = test_config();
    let h = start_with(config.clone()).await;
    let (gateway_b, b) = second_gateway(&config).await;
    let email = "carol@example.com";
    let carol = h.user(email).await;
    let (status, answer) = h
        .call(
            &h.admin_key,
            reqwest::Method::PUT,
            "/v1/admin/passwords",
            Some(json!({"email": email, "password": "first password"})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    let form = [("email", email), ("password", "first password")];
    let on_a = console_cookie(&h.base, &form).await;
    let on_b = console_cookie(&b, &form).await;
    assert_eq!(console_page(&b, &on_a).await, StatusCode::OK);

    let (status, answer) = h
        .call(
            &carol,
            reqwest::Method::PUT,
            "/v1/whoami/password",
            Some(json!({"current": "first password", "new": "second password"})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    for cookie in [&on_a, &on_b] {
        for base in [&h.base, &b] {
            assert_eq!(console_page(base, cookie).await, StatusCode::SEE_OTHER);
        }
    }
    // One for the superadmin's setting of the first password, one for Carol's change.
    assert_eq!(h.count_events("ConsoleSignedOutEverywhere").await, 2);
    let again = console_cookie(&b, &[("email", email), ("password", "second password")]).await;
    assert_eq!(console_page(&b, &again).await, StatusCode::OK);

    gateway_b.stop().await.expect("B stops cleanly");
}

#[tokio::test]
async fn the_eleventh_wrong_password_from_one_address_in_a_minute_gets_429() {
    let h = start().await;
    let email = "dave@example.com";
    h.user(email).await;
    let (status, _) = h
        .call(
            &h.admin_key,
            reqwest::Method::PUT,
            "/v1/admin/passwords",
            Some(json!({"email": email, "password": "the right one"})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for i in 0..10 {
        let wrong = format!("wrong guess {i}");
        let answer = console_sign_in(&h.base, &[("email", email), ("password", &wrong)]).await;
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "try {i}");
    }
    let eleventh = console_sign_in(&h.base, &[("email", email), ("password", "wrong")]).await;
    assert_eq!(eleventh.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = eleventh.headers()[RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "Retry-After: {wait}");
    // Held back meanwhile, even with the right password: no hash is spent on the address.
    let right = console_sign_in(&h.base, &[("email", email), ("password", "the right one")]).await;
    assert_eq!(right.status(), StatusCode::TOO_MANY_REQUESTS);
}
