//! `berth bench tls`: what TLS costs a session create. The same gateway serves plain HTTP on
//! one port and HTTPS (a certificate of the bench's own CA, rcgen) on another; one client at
//! a time creates batch sessions (set to start in an hour, so nothing is placed) over each:
//! plain HTTP on a kept-alive connection (the baseline) and on a new connection each time,
//! HTTPS on a kept-alive connection, on a new connection each time (the client's TLS session
//! cache resumes it), and with a new client each time (a full handshake, as each `berth
//! session create` process makes).

use std::time::{Duration, Instant};

use events::payloads::*;
use serde_json::json;

use crate::sessions::{agent_capacity, fill_policy, percentile, register_agents};

/// How each run of creates reaches the gateway.
#[derive(Clone, Copy)]
enum Way {
    PlainKeptAlive,
    PlainNewConnection,
    HttpsKeptAlive,
    HttpsNewConnection,
    HttpsNewClient,
}

impl Way {
    fn words(self) -> &'static str {
        match self {
            Way::PlainKeptAlive => "http, kept-alive connection (baseline)",
            Way::PlainNewConnection => "http, new connection each create",
            Way::HttpsKeptAlive => "https, kept-alive connection",
            Way::HttpsNewConnection => "https, new connection each create (resumed)",
            Way::HttpsNewClient => "https, new client each create (full handshake)",
        }
    }
}

pub async fn tls(url: &str, creates: usize) -> anyhow::Result<()> {
    events::tls::use_ring();
    let pool = events::store::pool(url, 8)?;
    berth::app::migrate(&pool).await?;
    launcher::access::bootstrap(&pool).await?;
    fill_policy(&pool).await?;
    register_agents(&pool, 1, agent_capacity()).await?;
    let (_, key) = launcher::access::create_user(
        &pool,
        "tls@berth.local",
        Role::User,
        "default",
        &["default".into()],
    )
    .await?;

    let authority = testkit::scratch::Authority::new("berth bench CA")?;
    let (cert, cert_key) = authority.issue("gateway", &["localhost"])?;
    let tls = gateway::tls::server_config(&cert, &cert_key)?;
    let stop = tokio_util::sync::CancellationToken::new();
    let state = gateway::AppState::new(pool.clone(), None, Default::default());
    let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let secure = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let (plain_port, secure_port) = (plain.local_addr()?.port(), secure.local_addr()?.port());
    tokio::spawn(gateway::run::serve(
        plain.into(),
        state.clone(),
        stop.clone(),
    ));
    let secure = gateway::run::Listener::from(secure).with_tls(tls);
    tokio::spawn(gateway::run::serve(secure, state, stop.clone()));

    let ca = reqwest::Certificate::from_pem_bundle(&std::fs::read(authority.ca())?)?;
    let client = |fresh_connections: bool| {
        let builder = reqwest::Client::builder().tls_certs_merge(ca.clone());
        let builder = if fresh_connections {
            builder.pool_max_idle_per_host(0)
        } else {
            builder
        };
        builder.build()
    };
    let body = json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
                      "resources": {"cpu": 1, "memory": "128m"},
                      "starts_at": (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339()});
    println!("session creates, one client, {creates} each after 20 to warm up:");
    let mut baseline = None;
    for way in [
        Way::PlainKeptAlive,
        Way::PlainNewConnection,
        Way::HttpsKeptAlive,
        Way::HttpsNewConnection,
        Way::HttpsNewClient,
    ] {
        let (base, fresh) = match way {
            Way::PlainKeptAlive => (format!("http://127.0.0.1:{plain_port}"), false),
            Way::PlainNewConnection => (format!("http://127.0.0.1:{plain_port}"), true),
            Way::HttpsKeptAlive => (format!("https://localhost:{secure_port}"), false),
            Way::HttpsNewConnection | Way::HttpsNewClient => {
                (format!("https://localhost:{secure_port}"), true)
            }
        };
        let mut shared = client(fresh)?;
        let mut took = Vec::with_capacity(creates);
        for i in 0..creates + 20 {
            let started = Instant::now();
            if matches!(way, Way::HttpsNewClient) {
                shared = client(true)?;
            }
            let response = shared
                .post(format!("{base}/v1/sessions"))
                .header("x-api-key", &key)
                .json(&body)
                .send()
                .await?;
            anyhow::ensure!(
                response.status().is_success(),
                "create answered {}: {}",
                response.status(),
                response.text().await.unwrap_or_default()
            );
            response.bytes().await?;
            if i >= 20 {
                took.push(started.elapsed());
            }
        }
        took.sort_unstable();
        let mean = took.iter().sum::<Duration>().as_secs_f64() / took.len() as f64 * 1000.0;
        let p50 = percentile(&took, 0.5).as_secs_f64() * 1000.0;
        let p90 = percentile(&took, 0.9).as_secs_f64() * 1000.0;
        let versus = match baseline {
            None => {
                baseline = Some(mean);
                String::new()
            }
            Some(base) => format!(", {:+.2} ms on the baseline", mean - base),
        };
        println!(
            "  {:<48} mean {mean:.2} ms, p50 {p50:.2} ms, p90 {p90:.2} ms, {:.0} creates/s{versus}",
            way.words(),
            1000.0 / mean
        );
    }
    stop.cancel();
    Ok(())
}
