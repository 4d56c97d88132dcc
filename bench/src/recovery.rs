//! `berth bench recovery`: how soon berth places and starts sessions again once a dependency
//! that went away returns. The bench starts a PostgreSQL cluster and a nats-server of its own
//! (it stops them, so never the configured ones), the whole control plane in process as
//! `berth up` runs it, and a simulated agent on the bus. Each round takes one dependency
//! away for `--outage` seconds and gives it back; the figures are from its return to the
//! first session placed and RUNNING, next to a create's own time to placement and RUNNING
//! with nothing away (the baseline, measured in the same run).
//!
//! - PostgreSQL (`pg_ctl stop -m fast`, then start): from the server taking connections
//!   again, a client retrying its create as `Retry-After` allows (every 50 ms here) until it
//!   is taken, to that session placed and RUNNING.
//! - NATS (killed, then started on its store): a session created during the outage (the API
//!   takes it), from the server's return to that session RUNNING; it is placed during the
//!   outage or by the wake-up the relay publishes once the bus is back.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use berth::app::{self, Parts};
use berth::config::Config;
use events::payloads::{ResourceSlots, SessionStatus};
use serde_json::json;
use testkit::scratch::{Nats, Postgres};
use uuid::Uuid;

use crate::db;
use crate::sessions::{admit_for_bench, percentile, shell_image};

/// A session's milestones, in seconds from a moment the caller chose.
#[derive(Debug, Clone, Copy)]
struct Milestones {
    placed: f64,
    running: f64,
}

struct Bench {
    http: reqwest::Client,
    base: String,
    key: String,
    pool: deadpool_postgres::Pool,
}

impl Bench {
    /// Asks for one short batch session; its id once the API takes it, or the status.
    async fn create(&self) -> Result<Uuid, u16> {
        let body = json!({"type": "batch", "image": "berth/shell:latest",
            "startup_command": "true", "resources": {"cpu": 0.25, "memory": "64m"}});
        let response = self
            .http
            .post(format!("{}/v1/sessions", self.base))
            .header("X-API-Key", &self.key)
            .json(&body)
            .send()
            .await
            .map_err(|_| 0u16)?;
        let status = response.status().as_u16();
        if status != 201 {
            return Err(status);
        }
        let body: serde_json::Value = response.json().await.map_err(|_| status)?;
        body["sessions"][0]["session_id"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .ok_or(status)
    }

    /// Creates a session, retrying while the API answers 503 (or `also` such as 409, no
    /// agent registered yet); its id.
    async fn create_when_taken(&self, also: Option<u16>) -> anyhow::Result<Uuid> {
        let began = Instant::now();
        loop {
            match self.create().await {
                Ok(id) => return Ok(id),
                Err(status)
                    if (status == 0 || status == 503 || Some(status) == also)
                        && began.elapsed() < Duration::from_secs(60) =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(status) => anyhow::bail!("a create was answered {status}"),
            }
        }
    }

    /// When session `id` was placed and RUNNING, in seconds after `from`.
    async fn milestones(&self, id: Uuid, from: Instant) -> anyhow::Result<Milestones> {
        let mut placed = None;
        loop {
            let status = match self.pool.get().await {
                Ok(client) => db::session_status(&client, id).await.ok().flatten(),
                Err(_) => None,
            };
            let at = from.elapsed().as_secs_f64();
            match status {
                Some(SessionStatus::Pending) | None => {}
                Some(SessionStatus::Scheduled) | Some(SessionStatus::Preparing) => {
                    placed.get_or_insert(at);
                }
                Some(s) if s == SessionStatus::Running || s.is_terminal() => {
                    anyhow::ensure!(
                        s != SessionStatus::Error && s != SessionStatus::Cancelled,
                        "session {id} ended {s:?}"
                    );
                    return Ok(Milestones {
                        placed: *placed.get_or_insert(at),
                        running: at,
                    });
                }
                Some(_) => {
                    placed.get_or_insert(at);
                }
            }
            anyhow::ensure!(
                from.elapsed() < Duration::from_secs(120),
                "session {id} did not start within 120 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn summary(name: &str, seconds: &mut [f64]) -> String {
    seconds.sort_by(f64::total_cmp);
    format!(
        "{name} p50 {:.0} ms, p99 {:.0} ms",
        percentile(seconds, 0.5) * 1000.0,
        percentile(seconds, 0.99) * 1000.0
    )
}

pub async fn recovery(rounds: usize, outage: Duration) -> anyhow::Result<()> {
    let postgres = Postgres::start()?;
    let mut nats = Nats::start()?;
    let mut config = Config::defaults();
    config.database_url = postgres.url("berth");
    config.nats_url = nats.url();
    config.gateway_listen = "127.0.0.1:0".into();
    config.proxy_ports = None;
    let control = app::start(&config, Parts::ALL).await?;
    let (_, key) = control
        .first_superadmin
        .clone()
        .context("a fresh install has its first superadmin")?;
    let base = format!("http://{}", control.gateway.context("the gateway listens")?);
    let pool = events::store::pool(&config.database_url, 4)?;
    let seed = admit_for_bench(&pool, "recovery1").await?;
    let outbox = std::env::temp_dir().join(format!("berth-recovery-{}", Uuid::new_v4().simple()));
    let stop = tokio_util::sync::CancellationToken::new();
    let host = agent::host::HostConfig {
        agent_id: "recovery1".into(),
        resource_group: "default".into(),
        offer: agent::host::Offered::fixed(
            ResourceSlots {
                cpu_milli: 64_000,
                memory_bytes: 64 << 30,
                gpu_milli: 0,
            },
            shell_image(),
        ),
        nats: agent::host::Nats::Connect {
            url: config.nats_url.clone(),
            seed: Some(seed),
            tls: config.nats_tls.clone(),
        },
        subjects: config.agent_bus.clone(),
        outbox: outbox.clone(),
        runtime: agent::host::Runtime::Simulated {
            batch_runs_for: Duration::from_millis(100),
        },
    };
    let agent = agent::host::start(host, stop.clone()).await?;
    let bench = Bench {
        http: reqwest::Client::new(),
        base,
        key,
        pool,
    };
    // The agent registers, then one session runs before anything is measured.
    let warm = bench.create_when_taken(Some(409)).await?;
    bench.milestones(warm, Instant::now()).await?;
    println!(
        "berth bench recovery: {rounds} rounds per dependency, each away for {} s",
        outage.as_secs()
    );

    let (mut base_placed, mut base_running) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let began = Instant::now();
        let id = bench.create_when_taken(None).await?;
        let m = bench.milestones(id, began).await?;
        base_placed.push(m.placed);
        base_running.push(m.running);
    }

    let (mut pg_taken, mut pg_placed, mut pg_running) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        postgres.stop()?;
        tokio::time::sleep(outage).await;
        postgres.start_again()?;
        let back = Instant::now();
        let id = bench.create_when_taken(None).await?;
        pg_taken.push(back.elapsed().as_secs_f64());
        let m = bench.milestones(id, back).await?;
        pg_placed.push(m.placed);
        pg_running.push(m.running);
    }

    let (mut bus_placed, mut bus_running) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        nats.kill();
        let id = bench.create_when_taken(None).await?;
        tokio::time::sleep(outage).await;
        nats.start_again()?;
        let back = Instant::now();
        let m = bench.milestones(id, back).await?;
        // Placed during the outage counts as placed at the return.
        bus_placed.push(m.placed);
        bus_running.push(m.running);
    }

    println!(
        "baseline, nothing away: create to {}; create to {}",
        summary("placed", &mut base_placed),
        summary("RUNNING", &mut base_running)
    );
    println!(
        "PostgreSQL back: to a create taken {}; to {}; to {}",
        summary("", &mut pg_taken).trim_start(),
        summary("placed", &mut pg_placed),
        summary("RUNNING", &mut pg_running)
    );
    println!(
        "NATS back: a session created during the outage, to {}; to {}",
        summary("placed", &mut bus_placed),
        summary("RUNNING", &mut bus_running)
    );
    stop.cancel();
    let _ = agent.finished().await;
    control.stop().await?;
    let _ = std::fs::remove_dir_all(&outbox);
    Ok(())
}
