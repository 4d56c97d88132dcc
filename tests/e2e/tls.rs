//! TLS wherever a connection may leave the host, against servers the tests start with
//! certificates they make (rcgen, `testkit::scratch::Authority`): PostgreSQL checked as each
//! `sslmode` says and refused with a wrong CA; NATS over `tls://` with client certificates,
//! refusing plain and certificate-less clients; and the whole platform at once over TLS (its
//! database, its bus, an agent, an HTTPS gateway) delivering a webhook to an `https://`
//! receiver.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::scratch::{Authority, Postgres};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Every error of `e`'s chain, in words.
fn chain(e: &dyn std::error::Error) -> String {
    let mut words = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        words.push_str(": ");
        words.push_str(&cause.to_string());
        source = cause.source();
    }
    words
}

/// A PostgreSQL cluster of the test's own serving TLS with a certificate for `db.example`
/// only, signed by `ca`; `None` (and the test fails under CI) without PostgreSQL's programs.
fn cluster_with_tls(ca: &Authority) -> Option<Postgres> {
    let (cert, key) = ca.issue("postgres", &["db.example"]).unwrap();
    match Postgres::start_with_tls(&cert, &key) {
        Ok(cluster) => Some(cluster),
        Err(e) => {
            berth_tests::missing_prerequisite(&format!(
                "a PostgreSQL cluster of the test's own: {e:#}"
            ));
            None
        }
    }
}

/// The URL of `database` on `cluster` as `db.example` (reached at 127.0.0.1), with `tls`.
fn tls_url(cluster: &Postgres, database: &str, tls: &str) -> String {
    format!(
        "postgres://berth@db.example:{}/{database}?hostaddr=127.0.0.1&{tls}",
        cluster.port
    )
}

async fn encrypted(url: &str) -> Result<bool, String> {
    let (client, connection) = events::tls::connect(url).await.map_err(|e| chain(&e))?;
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| chain(&e))?;
    Ok(row.get(0))
}

#[tokio::test]
async fn postgres_is_checked_as_sslmode_says_and_a_wrong_ca_is_refused() {
    let ca = Authority::new("berth test CA").unwrap();
    let Some(cluster) = cluster_with_tls(&ca) else {
        return;
    };
    let root = format!("sslrootcert={}", ca.ca().display());

    // verify-full: the CA and the name both checked.
    let full = tls_url(&cluster, "postgres", &format!("sslmode=verify-full&{root}"));
    assert_eq!(encrypted(&full).await, Ok(true));

    // A CA that did not sign the server's certificate: refused, saying why.
    let stranger = Authority::new("another CA").unwrap();
    let wrong = tls_url(
        &cluster,
        "postgres",
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            stranger.ca().display()
        ),
    );
    let refused = encrypted(&wrong).await.expect_err("a wrong CA is refused");
    assert!(refused.contains("UnknownIssuer"), "{refused}");
    let wrong_ca = wrong.replace("verify-full", "verify-ca");
    let refused = encrypted(&wrong_ca)
        .await
        .expect_err("a wrong CA is refused");
    assert!(refused.contains("UnknownIssuer"), "{refused}");

    // The certificate names db.example, not 127.0.0.1: verify-full refuses the address,
    // verify-ca (the CA only) takes it.
    let by_address = format!(
        "postgres://berth@127.0.0.1:{}/postgres?sslmode=verify-full&{root}",
        cluster.port
    );
    let refused = encrypted(&by_address)
        .await
        .expect_err("a certificate for another name is refused by verify-full");
    assert!(refused.contains("not valid for name"), "{refused}");
    assert_eq!(
        encrypted(&by_address.replace("verify-full", "verify-ca")).await,
        Ok(true)
    );

    // require encrypts without checking; disable does not encrypt.
    let plain = format!("postgres://berth@127.0.0.1:{}/postgres", cluster.port);
    assert_eq!(
        encrypted(&format!("{plain}?sslmode=require")).await,
        Ok(true)
    );
    assert_eq!(
        encrypted(&format!("{plain}?sslmode=disable")).await,
        Ok(false)
    );

    // The store's pool and its database creation go the same way.
    let url = tls_url(&cluster, "tls_pool", &format!("sslmode=verify-full&{root}"));
    events::store::ensure_database(&url).await.unwrap();
    let pool = events::store::pool(&url, 2).unwrap();
    let client = pool.get().await.unwrap();
    let ssl: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl, "the pool's connections are encrypted");
    let wrong_pool = events::store::pool(
        &tls_url(
            &cluster,
            "tls_pool",
            &format!(
                "sslmode=verify-full&sslrootcert={}",
                stranger.ca().display()
            ),
        ),
        2,
    )
    .unwrap();
    let Err(refused) = wrong_pool.get().await else {
        panic!("a wrong CA is refused");
    };
    assert!(
        chain(&refused).contains("UnknownIssuer"),
        "{}",
        chain(&refused)
    );
}

/// A nats-server of the test's own that speaks TLS only, with `ca`'s certificate for
/// 127.0.0.1, and asks every client for a certificate signed by `ca`.
struct TlsNats {
    server: NatsServer,
    port: u16,
}

fn start_tls_nats(ca: &Authority) -> TlsNats {
    let (cert, key) = ca.issue("nats", &["127.0.0.1", "localhost"]).unwrap();
    let port = free_port();
    let dir = ca.dir.join("nats");
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "host: 127.0.0.1\nport: {port}\njetstream: {{store_dir: \"{}\"}}\n\
         tls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n  timeout: 5\n}}\n",
        dir.join("js").display(),
        cert.display(),
        key.display(),
        ca.ca().display()
    );
    let file = dir.join("nats.conf");
    std::fs::write(&file, config).unwrap();
    let server = NatsServer::spawn(&file, &dir);
    TlsNats { server, port }
}

async fn wait_listening(port: u16) {
    wait_for(|| async { std::net::TcpStream::connect(("127.0.0.1", port)).ok() }).await;
}

fn client_tls(ca: &Authority, name: &str) -> bus::link::NatsTls {
    let (cert, key) = ca.issue(name, &[name]).unwrap();
    bus::link::NatsTls {
        ca: Some(ca.ca()),
        cert: Some(cert),
        key: Some(key),
    }
}

#[tokio::test]
async fn nats_takes_tls_clients_with_a_certificate_and_refuses_the_others() {
    let ca = Authority::new("berth test CA").unwrap();
    let nats = start_tls_nats(&ca);
    wait_listening(nats.port).await;
    let tls_url = format!("tls://127.0.0.1:{}", nats.port);

    let agent = client_tls(&ca, "agent-1");
    let client = bus::link::connect_as_url_says_with(&tls_url, &agent)
        .await
        .expect("a client with a certificate signed by the CA connects");
    client.publish("hello", "over tls".into()).await.unwrap();
    client.flush().await.unwrap();

    // A plain URL with the TLS settings still goes over TLS.
    let plain_url = format!("nats://127.0.0.1:{}", nats.port);
    bus::link::connect_as_url_says_with(&plain_url, &agent)
        .await
        .expect("the settings make a nats:// URL TLS");

    // No certificate: refused. No TLS settings at all: refused.
    let no_cert = bus::link::NatsTls {
        ca: Some(ca.ca()),
        ..Default::default()
    };
    let refused = bus::link::connect_as_url_says_with(&tls_url, &no_cert).await;
    assert!(
        refused.is_err(),
        "a client without a certificate is refused"
    );
    let refused = bus::link::connect_as_url_says(&plain_url).await;
    assert!(refused.is_err(), "a plain client is refused");
    // A certificate from another CA: refused.
    let stranger = Authority::new("another CA").unwrap();
    let foreign = bus::link::NatsTls {
        ca: Some(ca.ca()),
        ..client_tls(&stranger, "intruder")
    };
    let refused = bus::link::connect_as_url_says_with(&tls_url, &foreign).await;
    assert!(refused.is_err(), "a certificate of another CA is refused");
    drop(nats.server);
}

/// An `https://` webhook receiver with the certificate `cert`/`key`: keeps each request's
/// `Idempotency-Key` and answers 200.
async fn https_receiver(cert: &Path, key: &Path) -> (u16, Arc<tokio::sync::Mutex<Vec<String>>>) {
    let config = gateway::tls::server_config(cert, key).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Arc<tokio::sync::Mutex<Vec<String>>> = Default::default();
    let kept = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let Ok(mut socket) = acceptor.accept(socket).await else {
                continue;
            };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            let head = loop {
                let n = socket.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    break String::new();
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_lowercase();
                let Some(end) = text.find("\r\n\r\n") else {
                    continue;
                };
                let length = text[..end]
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if request.len() >= end + 4 + length {
                    break text[..end].to_owned();
                }
            };
            if let Some(key) = head
                .lines()
                .find_map(|l| l.strip_prefix("idempotency-key:"))
            {
                kept.lock().await.push(key.trim().to_owned());
            }
            let answer = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            let _ = socket.write_all(answer.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    (port, seen)
}

/// The test's files for the gateway's TLS: its certificate for localhost and the CA.
fn gateway_files(ca: &Authority) -> (PathBuf, PathBuf) {
    ca.issue("gateway", &["localhost", "127.0.0.1"]).unwrap()
}

#[tokio::test]
async fn the_platform_runs_over_tls_and_delivers_a_webhook_over_https() {
    let ca = Authority::new("berth test CA").unwrap();
    let Some(cluster) = cluster_with_tls(&ca) else {
        return;
    };
    let nats = start_tls_nats(&ca);
    wait_listening(nats.port).await;
    let (gateway_cert, gateway_key) = gateway_files(&ca);

    let mut config = test_config();
    let database = format!("tls_{}", uuid::Uuid::new_v4().simple());
    config.database_url = tls_url(
        &cluster,
        &database,
        &format!("sslmode=verify-full&sslrootcert={}", ca.ca().display()),
    );
    config.nats_url = format!("tls://127.0.0.1:{}", nats.port);
    config.nats_tls = client_tls(&ca, "control");
    config.nats_authorization = None;
    config.gateway_tls_cert = Some(gateway_cert);
    config.gateway_tls_key = Some(gateway_key);
    config.gateway_ca = Some(ca.ca());
    config.webhook_ca = Some(ca.ca());
    // The receiver is on loopback (`localhost`), which the operator must admit.
    config.webhook_policy.allow = events::outbound::parse_cidrs("127.0.0.1/32").unwrap();
    let h = start_with(config.clone()).await;
    assert!(h.base.starts_with("https://"), "{}", h.base);

    // The gateway speaks HTTPS only: a plain request gets no answer.
    let port = h.base.rsplit(':').next().unwrap().trim_end_matches('/');
    events::tls::use_ring();
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await;
    assert!(
        !plain.is_ok_and(|r| r.status().is_success()),
        "a plain request is not served"
    );

    // An agent of its own over tls://, with its client certificate.
    admit(&h, "sim-tls", "default").await;
    let outbox = ca.dir.join("outbox");
    let host = agent::host::start(
        agent::host::HostConfig {
            agent_id: "sim-tls".into(),
            resource_group: "default".into(),
            offer: agent::host::Offered::fixed(
                events::payloads::ResourceSlots {
                    cpu_milli: 4000,
                    memory_bytes: 8 << 30,
                    gpu_milli: 0,
                },
                agent::docker::HostImages {
                    names: vec!["berth/shell:latest".into()],
                    ..Default::default()
                },
            ),
            nats: agent::host::Nats::Connect {
                url: config.nats_url.clone(),
                seed: None,
                tls: client_tls(&ca, "sim-tls"),
            },
            subjects: config.agent_bus.clone(),
            outbox,
            runtime: agent::host::Runtime::Simulated {
                batch_runs_for: Duration::from_millis(200),
            },
        },
        Default::default(),
    )
    .await
    .expect("the agent starts over TLS");
    h.wait_registered("sim-tls").await;

    // A webhook to an https:// receiver whose certificate the CA signed.
    let alice = h.user("alice@example.com").await;
    let (cert, key) = ca.issue("hooks", &["localhost"]).unwrap();
    let (hook_port, seen) = https_receiver(&cert, &key).await;
    let (status, set) = h
        .call(
            &alice,
            reqwest::Method::PUT,
            "/v1/notifications/webhook",
            Some(json!({"url": format!("https://localhost:{hook_port}/hook")})),
        )
        .await;
    assert_eq!((status, &set["delivering"]), (StatusCode::OK, &json!(true)));
    // The service folds the webhook before the session's events, which come after it.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A session runs to its end on the agent, over the TLS bus.
    let batch = json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
                       "resources": {"cpu": 1, "memory": "128m"}});
    let (status, created) = h.create(&alice, batch).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let done: Value = h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    assert_eq!(done["status"], "TERMINATED");

    let delivered = wait_for(|| async {
        let seen = seen.lock().await.clone();
        (!seen.is_empty()).then_some(seen)
    })
    .await;
    let (_, page) = h.get(&alice, "/v1/notifications").await;
    let known: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["notice_id"].as_str())
        .collect();
    assert!(
        !known.is_empty() && delivered.iter().all(|key| known.contains(&key.as_str())),
        "each delivery carries a notice's id: {delivered:?} vs {page}"
    );
    host.stop().await.expect("the agent ran without failing");
    h.stop();
    drop(nats.server);
}
