//! Two gateways against one PostgreSQL and NATS, as behind a load balancer: both answer the
//! same reads; a circuit opened on one is served by both (each on its own proxy address,
//! the same port); its single-use link, made on one, is redeemed on the other, once, and the
//! cookie it sets opens the app on either; a gateway stopped and started again serves the
//! circuit again and honours that cookie; the session's end closes the circuit once.

use std::time::Duration;

use crate::apps::Cleanup;
use crate::common::*;
use crate::containers::{data_dir, fresh_agent_id, spawn_agent};
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A server in the session answering every GET with its path.
const PATH_SERVER: &str = r#"exec python3 - <<'PY'
import http.server
class Path(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Path).serve_forever()
PY"#;

/// Gateway A's proxy address, and gateway B's: two hosts' addresses, on loopback.
const PROXY_A: &str = "127.0.0.1";
const PROXY_B: &str = "127.0.0.2";

fn browser() -> reqwest::Client {
    events::tls::use_ring();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap()
}

/// A ticket link followed on `host`: the cookie it sets, or the status it got instead.
async fn redeem_on(url: &str, host: &str) -> Result<String, StatusCode> {
    let url = reqwest::Url::parse(url).unwrap();
    let mut on = url.clone();
    on.set_host(Some(host)).unwrap();
    let answer = browser().get(on).send().await.unwrap();
    if answer.status() != StatusCode::SEE_OTHER {
        return Err(answer.status());
    }
    assert_eq!(answer.headers()[LOCATION], "/");
    let cookie = answer.headers()[SET_COOKIE].to_str().unwrap();
    Ok(cookie.split(';').next().unwrap().to_owned())
}

/// `GET http://host:port/hello` with `cookie`: its status and body, or none when nothing
/// listens there.
async fn app_get(host: &str, port: u16, cookie: &str) -> Option<(StatusCode, String)> {
    let answer = browser()
        .get(format!("http://{host}:{port}/hello"))
        .header(COOKIE, cookie)
        .send()
        .await
        .ok()?;
    Some((answer.status(), answer.text().await.unwrap_or_default()))
}

/// Waits until the app answers 200 on `host` through the circuit.
async fn answers(host: &str, port: u16, cookie: &str) -> String {
    wait_for(|| async {
        match app_get(host, port, cookie).await {
            Some((StatusCode::OK, body)) => Some(body),
            _ => None,
        }
    })
    .await
}

/// A port nothing listens on at either proxy address: below the kernel's ephemeral range
/// (32768 and up), where neither outgoing connections nor the engine's published ports take
/// it while the test runs.
fn free_port() -> u16 {
    loop {
        let port = 20_000 + (uuid::Uuid::new_v4().as_u128() % 12_000) as u16;
        let free = |host: &str| std::net::TcpListener::bind((host, port)).is_ok();
        if free(PROXY_A) && free(PROXY_B) {
            return port;
        }
    }
}

/// Waits (as long as a loaded run's relay may lag, 90 s) until nothing listens at
/// `host:port`.
async fn stops_answering(host: &str, port: u16) {
    for _ in 0..450 {
        if std::net::TcpStream::connect((host, port)).is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{host}:{port} still answers");
}

/// A gateway alone (`Parts::GATEWAY`) on the harness's database and bus, its proxy on
/// `proxy`: the second control-plane host.
async fn second_gateway(config: &berth::config::Config) -> (berth::app::App, String) {
    let app = berth::app::start(config, berth::app::Parts::GATEWAY)
        .await
        .expect("the second gateway starts");
    assert!(app.first_superadmin.is_none(), "the install exists already");
    let base = format!("http://{}", app.gateway.expect("it listens"));
    (app, base)
}

async fn get_on(base: &str, key: &str, path: &str) -> (StatusCode, Value) {
    let answer = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap();
    (answer.status(), answer.json().await.unwrap())
}

async fn post_on(base: &str, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let answer = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("x-api-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    (answer.status(), answer.json().await.unwrap())
}

#[tokio::test]
async fn an_app_link_made_on_one_gateway_is_redeemed_on_another_and_outlives_a_restart() {
    let mut config = test_config();
    let first = free_port();
    config.proxy_ports = Some((first, first));
    config.proxy_address = Some(PROXY_A.parse().unwrap());
    let h = start_with(config.clone()).await;
    let mut config_b = config.clone();
    config_b.proxy_address = Some(PROXY_B.parse().unwrap());
    let (gateway_b, base_b) = second_gateway(&config_b).await;

    let agent_id = fresh_agent_id();
    let data = data_dir();
    let _agent = (
        spawn_agent(&h, &agent_id, &data, 4_000, None).await,
        Cleanup(agent_id),
    );
    let alice = h.user("alice@example.com").await;
    let (status, created) = h
        .create(
            &alice,
            json!({"image": "berth/python:latest", "preopen_ports": [8080],
                   "startup_command": PATH_SERVER, "resources": {"cpu": 1, "memory": "256m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    h.wait_session_within(&id, Duration::from_secs(90), |s| s["status"] == "RUNNING")
        .await;

    // The same API on both: the session as each reads it, and the caller.
    let (_, on_a) = h.get(&alice, &format!("/v1/sessions/{id}")).await;
    let (status, on_b) = get_on(&base_b, &alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{on_b}");
    for field in ["session_id", "status", "owner", "request", "containers"] {
        assert_eq!(on_a[field], on_b[field], "{field}: {on_a} / {on_b}");
    }
    let (_, me_a) = h.get(&alice, "/v1/whoami").await;
    let (_, me_b) = get_on(&base_b, &alice, "/v1/whoami").await;
    assert_eq!(me_a, me_b);

    // Opened on A; its link redeemed on B, and only once (not on A after).
    let open = format!("/v1/sessions/{id}/apps/8080/open");
    let (status, opened) = h.post(&alice, &open, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{opened}");
    assert_eq!(opened["port"], first);
    let url = opened["url"].as_str().unwrap().to_owned();
    // B serves the circuit once it hears of it on the bus (the relay's lag).
    wait_for(|| async { std::net::TcpStream::connect((PROXY_B, first)).ok() }).await;
    let cookie = redeem_on(&url, PROXY_B).await.expect("B takes A's ticket");
    assert_eq!(
        redeem_on(&url, PROXY_A).await.unwrap_err(),
        StatusCode::UNAUTHORIZED,
        "a ticket works once, whichever gateway took it"
    );
    // The cookie B handed out opens the app on both; none opens it nowhere.
    assert_eq!(answers(PROXY_B, first, &cookie).await, "/hello");
    assert_eq!(answers(PROXY_A, first, &cookie).await, "/hello");
    let circuit = opened["circuit_id"].as_str().unwrap().replace('-', "");
    let forged = format!("berth_app_{circuit}=00");
    assert_eq!(
        app_get(PROXY_B, first, &forged).await.map(|a| a.0),
        Some(StatusCode::UNAUTHORIZED)
    );

    // Asked on B, the same app reuses the circuit A opened, and B's link works on A.
    let (status, again) = post_on(&base_b, &alice, &open, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(
        (again["reused"].as_bool(), again["circuit_id"].clone()),
        (Some(true), opened["circuit_id"].clone())
    );
    let on_a_cookie = redeem_on(again["url"].as_str().unwrap(), PROXY_A)
        .await
        .expect("A takes B's ticket");
    assert_eq!(answers(PROXY_A, first, &on_a_cookie).await, "/hello");

    // B stops: its port no longer answers; started again, it serves the circuit again and
    // lets the old cookie in, and a link made on A meanwhile is redeemed on it.
    gateway_b.stop().await.expect("B stops cleanly");
    stops_answering(PROXY_B, first).await;
    let (_, later) = h.post(&alice, &open, json!({})).await;
    let (gateway_b, _) = second_gateway(&config_b).await;
    assert_eq!(answers(PROXY_B, first, &cookie).await, "/hello");
    let later_cookie = redeem_on(later["url"].as_str().unwrap(), PROXY_B)
        .await
        .expect("the restarted B takes a ticket A made while it was down");
    assert_eq!(answers(PROXY_B, first, &later_cookie).await, "/hello");

    // The session ends: the circuit closes, once, and neither gateway serves it.
    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    stops_answering(PROXY_A, first).await;
    stops_answering(PROXY_B, first).await;
    assert_eq!(h.count_events("AppCircuitOpened").await, 1);
    // A proxy stops serving a circuit as soon as its session ends; the close is recorded
    // beside that, a moment later under load.
    wait_for(|| async { (h.count_events("AppCircuitClosed").await > 0).then_some(()) }).await;
    assert_eq!(h.count_events("AppCircuitClosed").await, 1, "closed once");
    gateway_b.stop().await.expect("B stops cleanly");
}
