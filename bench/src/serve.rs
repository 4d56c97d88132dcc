//! `berth bench serve`: model serving's balancer next to calling the replicas' published ports
//! directly, in one run: the latency of a small call (the example model's `/health`) through
//! the endpoint's URL and straight to a replica, taking turns; then the calls per second that
//! concurrent callers get through the URL of an endpoint with two replicas, next to the same
//! callers split over the two replicas' ports (two rounds taking turns, the best of each).
//!
//! The whole control plane runs in this process (`berth::app`) with a Docker agent, on a
//! database and streams of the bench's own; the replicas run `examples/serving/iris`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use berth::app::{self, Parts};
use berth::config::Config;
use events::payloads::ResourceSlots;
use serde_json::{json, Value};

use crate::sessions::{bench_docker_agent, bench_engine, percentile};

const IMAGE: &str = "berth/python:latest";
const DEFINITION: &str = include_str!("../../examples/serving/iris/model-definition.yaml");
const SERVER: &str = include_str!("../../examples/serving/iris/serve.py");

struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", &self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await?;
        let status = answer.status();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        anyhow::ensure!(status.is_success(), "{path}: {status} {body}");
        Ok(body)
    }

    async fn put_file(&self, folder: &str, path: &str, text: &'static str) -> anyhow::Result<()> {
        let answer = self
            .http
            .put(format!(
                "{}/v1/folders/{folder}/files?path={path}",
                self.base
            ))
            .header("x-api-key", &self.key)
            .body(text)
            .send()
            .await?;
        let status = answer.status();
        anyhow::ensure!(
            status.is_success(),
            "{path}: {status} {}",
            answer.text().await?
        );
        Ok(())
    }
}

/// Calls per second `callers` concurrent callers get for `seconds`, each calling `urls`
/// (taken in turn, one per caller) again as soon as answered, on a kept-alive connection.
async fn throughput(urls: &[String], callers: usize, seconds: u64) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..callers {
        let url = urls[i % urls.len()].clone();
        let (stop, answered) = (stop.clone(), answered.clone());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::Relaxed) {
                let ok = client
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if ok {
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    for task in tasks {
        task.await?;
    }
    Ok(answered.load(Ordering::Relaxed) as f64 / elapsed)
}

pub async fn serve(
    base: &Config,
    url: &str,
    requests: usize,
    seconds: u64,
    callers: usize,
) -> anyhow::Result<()> {
    let id = std::process::id();
    let agent_id = format!("serve{id}");
    let mut config = base.clone();
    config.database_url = url.to_owned();
    config.gateway_listen = "127.0.0.1:0".into();
    // The gateway serves the folders of the agent beside it (its data directory).
    config.agent_data_dir = std::env::temp_dir().join(format!("berth-bench-{agent_id}"));
    std::fs::create_dir_all(&config.agent_data_dir)?;
    config.topology = events::relay::Topology {
        stream: format!("BENCH_{id}"),
        prefix: format!("bench{id}.evt"),
    };
    config.agent_bus = bus::Subjects {
        root: format!("bench{id}"),
        commands_stream: format!("BENCH_CMDS_{id}"),
        telemetry_stream: format!("BENCH_TEL_{id}"),
    };
    let platform = app::start(&config, Parts::ALL).await?;
    let (_, key) = platform
        .first_superadmin
        .clone()
        .context("a fresh bench database")?;
    let api = Api {
        http: reqwest::Client::new(),
        base: format!(
            "http://{}",
            platform.gateway.context("the gateway listens")?
        ),
        key,
    };
    let engine = bench_engine(IMAGE).await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let nats = bus::link::connect_as_url_says(&config.nats_url).await?;
    let capacity = ResourceSlots {
        cpu_milli: 8_000,
        memory_bytes: 8 << 30,
        gpu_milli: 0,
    };
    let agent = bench_docker_agent(
        &platform.pool,
        &agent_id,
        capacity,
        &engine,
        nats,
        config.agent_bus.clone(),
        &stop,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    api.call(
        reqwest::Method::POST,
        "/v1/folders",
        Some(json!({"name": "models"})),
    )
    .await?;
    api.put_file("models", "model-definition.yaml", DEFINITION)
        .await?;
    api.put_file("models", "serve.py", SERVER).await?;
    let made = api
        .call(
            reqwest::Method::POST,
            "/v1/services",
            Some(
                json!({"name": "iris", "model_folder": "models", "image": IMAGE,
                   "resources": {"cpu": 1, "memory": "256m"}, "replicas": 2,
                   "open_to_public": true}),
            ),
        )
        .await?;
    let endpoint = made["id"].as_str().context("an endpoint id")?.to_owned();
    let serve_url = format!("{}{}", api.base, made["url"].as_str().unwrap_or_default());
    let waited = Instant::now();
    let routes = loop {
        let s = api
            .call(
                reqwest::Method::GET,
                &format!("/v1/services/{endpoint}"),
                None,
            )
            .await?;
        if s["healthy_replicas"] == 2 {
            break s["routes"].as_array().cloned().unwrap_or_default();
        }
        anyhow::ensure!(
            waited.elapsed() < Duration::from_secs(120),
            "the replicas did not serve: {s}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut direct = Vec::new();
    for route in &routes {
        let session = route["session_id"].as_str().context("a replica")?;
        let detail = api
            .call(
                reqwest::Method::GET,
                &format!("/v1/sessions/{session}"),
                None,
            )
            .await?;
        let port = detail["containers"][0]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["container"] == 8000)
            .and_then(|p| p["host"].as_u64())
            .context("port 8000 published")?;
        direct.push(format!("http://127.0.0.1:{port}/"));
    }

    // A small call, taking turns, each side on a kept-alive connection of its own.
    let (balanced, straight) = (reqwest::Client::new(), reqwest::Client::new());
    let mut balanced_ms = Vec::with_capacity(requests);
    let mut direct_ms = Vec::with_capacity(requests);
    for round in 0..requests + 20 {
        for (client, base, times) in [
            (&balanced, &serve_url, &mut balanced_ms),
            (&straight, &direct[0], &mut direct_ms),
        ] {
            let started = Instant::now();
            let answer = client.get(format!("{base}health")).send().await?;
            anyhow::ensure!(answer.status().is_success(), "{}", answer.status());
            answer.bytes().await?;
            if round >= 20 {
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    balanced_ms.sort_by(f64::total_cmp);
    direct_ms.sort_by(f64::total_cmp);

    // Throughput: the endpoint's URL (two replicas behind it) next to the same callers split
    // over the two replicas' ports.
    // Two rounds, taking turns, the best of each: the replicas, the gateway and the callers
    // share the machine's cores, so one phase's figure moves with what ran before it.
    let health = |base: &String| format!("{base}health");
    let split: Vec<String> = direct.iter().map(health).collect();
    let (mut through, mut apart) = (0f64, 0f64);
    for _ in 0..2 {
        through = through.max(throughput(&[health(&serve_url)], callers, seconds).await?);
        apart = apart.max(throughput(&split, callers, seconds).await?);
    }

    let (b50, b99) = (
        percentile(&balanced_ms, 0.5),
        percentile(&balanced_ms, 0.99),
    );
    let (d50, d99) = (percentile(&direct_ms, 0.5), percentile(&direct_ms, 0.99));
    println!("berth bench serve: the iris example model, 2 replicas ({IMAGE}, 1 core each)");
    println!(
        "latency of a small call ({requests} each, taking turns): through the endpoint's URL p50 {b50:.3} ms, p99 {b99:.3} ms; straight to a replica p50 {d50:.3} ms, p99 {d99:.3} ms; added p50 {:+.3} ms, p99 {:+.3} ms (target: at most +1 ms at p50)",
        b50 - d50,
        b99 - d99
    );
    println!(
        "throughput, {callers} callers for {seconds} s (best of 2, taking turns): through the URL {through:.0}/s; split over the two replicas' ports {apart:.0}/s; {:.1}% of direct (target: at least 90%)",
        through / apart * 100.0
    );

    api.call(
        reqwest::Method::DELETE,
        &format!("/v1/services/{endpoint}"),
        None,
    )
    .await?;
    // The replicas end with the endpoint; their containers are gone once they do.
    let waited = Instant::now();
    for route in &routes {
        let session = route["session_id"].as_str().unwrap_or_default();
        loop {
            let detail = api
                .call(
                    reqwest::Method::GET,
                    &format!("/v1/sessions/{session}"),
                    None,
                )
                .await?;
            if detail["status"] == "TERMINATED" || waited.elapsed() > Duration::from_secs(60) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let _ = agent.stop().await;
    stop.cancel();
    platform.stop().await?;
    let js = async_nats::jetstream::new(bus::link::connect_as_url_says(&config.nats_url).await?);
    let _ = js.delete_stream(&config.topology.stream).await;
    let _ = js.delete_stream(&config.agent_bus.telemetry_stream).await;
    let _ = js.delete_stream(&config.agent_bus.commands_stream).await;
    Ok(())
}
