//! The test harness shared by the gateway's integration tests: a fresh database, the
//! sessions projection, a scheduler, the relay and the gateway running in this process.
#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use events::payloads::*;
use events::projection;
use events::relay::{RelayConfig, Topology};
use events::store;
use gateway::projection::SessionsView;
use reqwest::StatusCode;
use scheduler::run::{Scheduler, SchedulerConfig};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub const GIB: u64 = 1 << 30;

pub fn base_url() -> String {
    std::env::var("BERTH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://berth@127.0.0.1:55432/berth".into())
}

pub fn nats_url() -> String {
    std::env::var("BERTH_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:54222".into())
}

pub struct Harness {
    pub pool: Pool,
    pub base: String,
    pub admin_key: String,
    pub http: reqwest::Client,
    pub topology: Topology,
    pub stop: CancellationToken,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub async fn start() -> Harness {
    let base = base_url();
    let (prefix, _) = base.rsplit_once('/').expect("url has a database");
    let url = format!("{prefix}/test_{}", Uuid::new_v4().simple());
    store::ensure_database(&url)
        .await
        .expect("create test database");
    let pool = store::pool(&url, 24).expect("pool");
    store::migrate(&pool, &[]).await.expect("migrate");
    let (_, admin_key) = launcher::access::bootstrap(&pool)
        .await
        .unwrap()
        .expect("fresh install");
    projection::install(&pool, &SessionsView).await.unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(projection::run(
        pool.clone(),
        SessionsView,
        Duration::from_millis(10),
        stop.clone(),
    ));
    let wake = Arc::new(Notify::new());
    let config = SchedulerConfig {
        interval: Duration::from_millis(100),
        ..Default::default()
    };
    tokio::spawn(Scheduler::new(pool.clone(), config).run(wake.clone(), stop.clone()));
    let id = Uuid::new_v4().simple().to_string();
    let topology = Topology {
        stream: format!("T_{id}"),
        prefix: format!("t{id}.evt"),
    };
    let client = async_nats::connect(nats_url()).await.expect("NATS");
    let js = async_nats::jetstream::new(client.clone());
    tokio::spawn(events::relay::run(
        pool.clone(),
        url.clone(),
        js,
        topology.clone(),
        RelayConfig::default(),
        stop.clone(),
    ));
    let state = gateway::AppState::new(pool.clone(), Some(client), topology.clone(), wake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(gateway::serve(listener, state, stop.clone()));
    Harness {
        pool,
        base: format!("http://{address}"),
        admin_key,
        http: reqwest::Client::new(),
        topology,
        stop,
    }
}

impl Harness {
    pub async fn call(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("gateway answers");
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn create(&self, key: &str, body: Value) -> (StatusCode, Value) {
        self.call(key, reqwest::Method::POST, "/v1/sessions", Some(body))
            .await
    }

    pub async fn get(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.call(key, reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, key: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(key, reqwest::Method::POST, path, Some(body))
            .await
    }

    pub async fn delete(&self, key: &str, path: &str) -> (StatusCode, Value) {
        self.call(key, reqwest::Method::DELETE, path, None).await
    }

    pub async fn agent(&self, id: &str, group: &str, cpu: u64) {
        agent::register(
            &self.pool,
            &agent::AgentSpec {
                agent_id: id.into(),
                resource_group: group.into(),
                capacity: ResourceSlots {
                    cpu_milli: cpu * 1000,
                    memory_bytes: 64 * GIB,
                    gpu_milli: 0,
                },
                images: vec!["berth/shell:latest".into()],
                address: None,
            },
        )
        .await
        .unwrap();
    }

    pub async fn user(&self, email: &str) -> String {
        let (_, key) = launcher::access::create_user(
            &self.pool,
            email,
            Role::User,
            "default",
            &["default".into()],
        )
        .await
        .unwrap();
        key
    }

    /// Polls the session's detail until `done` holds (or fails after 20 s).
    pub async fn wait_session(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        wait_for(|| async {
            let (status, body) = self
                .get(&self.admin_key, &format!("/v1/sessions/{id}"))
                .await;
            (status == StatusCode::OK && done(&body)).then_some(body)
        })
        .await
    }

    pub async fn history(&self, id: &str) -> Vec<Value> {
        let (_, body) = self
            .get(&self.admin_key, &format!("/v1/sessions/{id}/history"))
            .await;
        body["history"].as_array().cloned().unwrap_or_default()
    }

    pub async fn count_events(&self, event_type: &str) -> i64 {
        let client = self.pool.get().await.unwrap();
        client
            .query_one(
                "SELECT count(*) FROM events WHERE event_type = $1",
                &[&event_type],
            )
            .await
            .unwrap()
            .get(0)
    }
}

pub async fn wait_for<T, F, Fut>(probe: F) -> T
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn shell(cpu: f64) -> Value {
    json!({"image": "berth/shell:latest", "resources": {"cpu": cpu, "memory": "1g"}})
}

pub fn ids(created: &Value) -> Vec<String> {
    created["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect()
}
