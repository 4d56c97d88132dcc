//! `berth bench`: figures for docs/performance.md, each next to the raw PostgreSQL figure
//! for the same rows measured in the same run.
//!
//! Every run uses a database of its own (dropped at the end), so the figures do not depend
//! on what the platform's database holds.

// A benchmark measures wall-clock time on purpose, outside any runtime's clock.
#![allow(clippy::disallowed_types)]

use std::process::Command as Process;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::db;
use clap::Subcommand;
use events::catalogue::{Event, Metadata};
use events::payloads::{AgentRegistered, ResourceSlots};
use events::relay::{RelayConfig, Topology};
use events::store::{self, EventStore, ExpectedVersion, LogPosition, ProposedEvent};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use berth::config::Config;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Appends (single and batched), reading the whole log, and raw PostgreSQL for each.
    Store {
        /// Seconds each append phase runs.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Concurrent writers.
        #[arg(long, default_value_t = 16)]
        writers: usize,
        /// Run without the audit sealer beside the writers.
        #[arg(long)]
        no_sealer: bool,
    },
    /// Append-to-delivery latency through the relay to a JetStream consumer.
    Relay {
        /// Events appended per second.
        #[arg(long, default_value_t = 2_000)]
        rate: u64,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
    },
    /// The scheduling core under fifo and drf side by side, and scheduling end to end, with
    /// 1,000 agents and 10,000 pending.
    Schedule {
        #[arg(long, default_value_t = 1_000)]
        agents: usize,
        #[arg(long, default_value_t = 10_000)]
        sessions: usize,
        /// Only the scheduling core, in memory (no database): e.g. `--agents 10000
        /// --sessions 100000`.
        #[arg(long)]
        core_only: bool,
    },
    /// An in-process launch to RUNNING with real containers, next to the bare Engine API's
    /// create and start and plain `docker run -d`; and sessions started per second in a
    /// burst, next to as many parallel `docker run -d` on an engine as quiet.
    Start {
        #[arg(long, default_value_t = 50)]
        sessions: usize,
        #[arg(long, default_value_t = 20)]
        burst: usize,
    },
    /// Create to placement, one session at a time: the scheduler woken by the bus (relay and
    /// NATS, as in service) next to an in-process poke (how the gateway woke it before).
    Wake {
        #[arg(long, default_value_t = 200)]
        sessions: usize,
    },
    /// Simulated agents on the bus against `berth up` as its own process: PostgreSQL
    /// connections and CPU idle, with none and with all of them; then batch sessions
    /// placed and run per second.
    Fleet {
        #[arg(long, default_value_t = 1_000)]
        agents: usize,
        #[arg(long, default_value_t = 2_000)]
        sessions: usize,
    },
    /// The idle-reaper: from a session falling due to its reaping, next to terminating it in
    /// process when due; the CPU of watching sessions, next to watching none.
    Reap {
        #[arg(long, default_value_t = 100)]
        sessions: usize,
        #[arg(long, default_value_t = 1_000)]
        watched: usize,
    },
    /// A RUNNING berth/python session committed to an image, next to the bare Engine API's
    /// commit and `docker commit` of the same container; only commits that ended done are
    /// timed.
    Commit {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// The app proxy next to the published port (a small request's latency, a 100 MB
    /// download), the terminal's keystroke echo, and JupyterLab's first page.
    Apps {
        #[arg(long, default_value_t = 500)]
        requests: usize,
    },
    /// How soon sessions are placed and RUNNING again once PostgreSQL or NATS returns from
    /// an outage, next to a create's own times with nothing away. Runs on a PostgreSQL
    /// cluster and a nats-server of its own, which it stops and starts.
    Recovery {
        /// Outages of each dependency.
        #[arg(long, default_value_t = 10)]
        rounds: usize,
        /// Seconds each outage lasts.
        #[arg(long, default_value_t = 3)]
        outage: u64,
    },
    /// The ledger replayed and each projection folded again over a log of sessions' lives,
    /// next to a raw `COPY` of the log and to applying events a statement at a time.
    Replay {
        /// Events in the log (at least; whole sessions are recorded).
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
    },
    /// The console's Sessions page over many sessions next to the JSON list of the same
    /// page: bytes and answer times, and in headless Chromium its first paint next to the
    /// list fetched from the page.
    Console {
        #[arg(long, default_value_t = 1_000)]
        sessions: usize,
        #[arg(long, default_value_t = 30)]
        rounds: usize,
    },
    /// What Backend.AI's compatibility costs: a signed request's verification next to an API
    /// key's, through the gateway and alone, and Backend.AI's own `backend.ai ps` over one
    /// user's sessions next to `berth session ls` (the client is installed from PyPI into
    /// `--client-dir` when missing).
    Backendai {
        #[arg(long, default_value_t = 1_000)]
        sessions: usize,
        /// Requests each way.
        #[arg(long, default_value_t = 2_000)]
        requests: usize,
        /// Runs of each CLI.
        #[arg(long, default_value_t = 10)]
        runs: usize,
        #[arg(long, default_value_os_t = crate::bench_backendai::default_client_dir())]
        client_dir: std::path::PathBuf,
    },
    /// What TLS costs a session create: over HTTPS kept alive, with a new connection and
    /// with a new client (a full handshake) each time, next to plain HTTP.
    Tls {
        /// Creates measured in each way.
        #[arg(long, default_value_t = 300)]
        creates: usize,
    },
    /// A what-if replay of recorded requests (synthetic, in memory) through FIFO and DRF,
    /// next to reading the workload out of its log and one pass of the core over it all.
    Whatif {
        #[arg(long, default_value_t = 100_000)]
        sessions: usize,
        #[arg(long, default_value_t = 100)]
        agents: usize,
    },
    /// Session-detail reads through the gateway: requests per second and latency.
    Gateway {
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Serve every read from the projection (no detail cache).
        #[arg(long)]
        no_cache: bool,
    },
    /// The gateway's session-detail reads with metrics on (every request measured, `/metrics`
    /// scraped every second) next to metrics off, in alternating rounds in one run.
    Metrics {
        /// Seconds of each round, each way.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        #[arg(long, default_value_t = 4)]
        rounds: usize,
        #[arg(long, default_value_t = 16)]
        clients: usize,
    },
}

pub async fn run(config: &Config, command: BenchCommand) -> anyhow::Result<()> {
    // In memory only: no database of its own.
    if let BenchCommand::Whatif { sessions, agents } = command {
        return crate::bench_whatif::whatif(sessions, agents);
    }
    let (url, name) = bench_database(&config.database_url)?;
    store::ensure_database(&url).await?;
    let result = match command {
        BenchCommand::Store {
            seconds,
            writers,
            no_sealer,
        } => store_bench(&url, Duration::from_secs(seconds), writers, !no_sealer).await,
        BenchCommand::Relay { rate, seconds } => relay_bench(config, &url, rate, seconds).await,
        BenchCommand::Schedule {
            agents,
            sessions,
            core_only,
        } => crate::bench_sessions::schedule(&url, agents, sessions, core_only).await,
        BenchCommand::Start { sessions, burst } => {
            crate::bench_sessions::start(&config.nats_url, &url, sessions, burst).await
        }
        BenchCommand::Wake { sessions } => {
            crate::bench_sessions::wake(&config.nats_url, &url, sessions).await
        }
        BenchCommand::Commit { rounds } => {
            crate::bench_commit::commit(&config.nats_url, &url, rounds).await
        }
        BenchCommand::Apps { requests } => crate::bench_apps::apps(config, &url, requests).await,
        BenchCommand::Reap { sessions, watched } => {
            crate::bench_reap::reap(&config.nats_url, &url, sessions, watched).await
        }
        BenchCommand::Fleet { agents, sessions } => {
            let binary = std::env::current_exe()?;
            crate::bench_fleet::fleet(&binary, &config.nats_url, &url, &name, agents, sessions)
                .await
        }
        BenchCommand::Recovery { rounds, outage } => {
            crate::bench_recovery::recovery(rounds, Duration::from_secs(outage)).await
        }
        BenchCommand::Replay { events } => crate::bench_replay::replay(&url, events).await,
        BenchCommand::Console { sessions, rounds } => {
            crate::bench_console::console(&url, sessions, rounds).await
        }
        BenchCommand::Tls { creates } => crate::bench_tls::tls(&url, creates).await,
        BenchCommand::Backendai {
            sessions,
            requests,
            runs,
            client_dir,
        } => crate::bench_backendai::backendai(&url, sessions, requests, runs, &client_dir).await,
        BenchCommand::Gateway {
            seconds,
            clients,
            no_cache,
        } => {
            crate::bench_sessions::gateway(&config.nats_url, &url, seconds, clients, !no_cache)
                .await
        }
        BenchCommand::Metrics {
            seconds,
            rounds,
            clients,
        } => crate::bench_sessions::metrics(&config.nats_url, &url, seconds, rounds, clients).await,
        BenchCommand::Whatif { .. } => unreachable!("run in memory above"),
    };
    drop_database(&config.database_url, &name).await?;
    result
}

fn bench_database(url: &str) -> anyhow::Result<(String, String)> {
    let (prefix, _) = url
        .rsplit_once('/')
        .context("the database url names no database")?;
    let name = format!("berth_bench_{}", std::process::id());
    Ok((format!("{prefix}/{name}"), name))
}

async fn drop_database(url: &str, name: &str) -> anyhow::Result<()> {
    let (prefix, _) = url
        .rsplit_once('/')
        .context("the database url names no database")?;
    db::drop_database(&format!("{prefix}/postgres"), name).await
}

/// The event every store benchmark writes: an agent registration, about 200 bytes of JSON.
fn sample_event() -> Event {
    Event::AgentRegistered(AgentRegistered {
        agent_id: "agent-0042.rack7.example".into(),
        resource_group: "default".into(),
        capacity: ResourceSlots {
            cpu_milli: 64_000,
            memory_bytes: 256 << 30,
            gpu_milli: 8_000,
        },
        images: vec!["berth/python:3.11".into(), "berth/shell:latest".into()],
        address: Some("10.0.7.42:6001".into()),
        image_apps: Default::default(),
        network_scope: None,
    })
}

async fn store_bench(
    url: &str,
    phase: Duration,
    writers: usize,
    sealer: bool,
) -> anyhow::Result<()> {
    let pool = store::pool(url, writers + 8)?;
    crate::app::migrate(&pool).await?;
    db::create_raw_events(&pool).await?;
    let store = EventStore::new(pool.clone());
    let payload = sample_event().to_payload().to_string();
    println!(
        "berth bench store: {writers} writers, {}s per phase, payload {} bytes, sealer {}",
        phase.as_secs(),
        payload.len(),
        if sealer { "running" } else { "off" }
    );

    let raw_single = pgbench(url, db::PGBENCH_SINGLE_INSERT, &payload, writers, phase)?;
    let berth_single = append_phase(&store, writers, 1, phase, sealer).await?;
    report("single-event appends", "events/s", berth_single, raw_single);

    let raw_batch = pgbench(url, &db::pgbench_batch_insert(), &payload, writers, phase)? * 100.0;
    let berth_batch = append_phase(&store, writers, 100, phase, sealer).await?;
    report(
        "batched appends (100 per transaction)",
        "events/s",
        berth_batch,
        raw_batch,
    );

    let (berth_read, rows) = read_phase(&store).await?;
    let raw_read = copy_phase(url).await?;
    report(
        &format!("read whole log in global order ({rows} events)"),
        "events/s",
        berth_read,
        raw_read,
    );
    Ok(())
}

fn report(what: &str, unit: &str, berth: f64, raw: f64) {
    println!(
        "{what}: berth {berth:.0} {unit}, raw PostgreSQL {raw:.0} {unit}, ratio {:.0}%",
        100.0 * berth / raw
    );
}

/// Runs pgbench with `script` (which binds `:payload` and `:metadata`) and returns its
/// transactions per second.
fn pgbench(
    url: &str,
    script: &str,
    payload: &str,
    clients: usize,
    phase: Duration,
) -> anyhow::Result<f64> {
    let path = std::env::temp_dir().join(format!("berth-bench-{}.sql", std::process::id()));
    std::fs::write(&path, script)?;
    let output = Process::new("pgbench")
        .args([
            "-n",
            "-M",
            "prepared",
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-T",
        ])
        .arg(phase.as_secs().to_string())
        .arg("-D")
        .arg(format!("payload={payload}"))
        .arg("-D")
        .arg(r#"metadata={"actor":"bench"}"#)
        .arg("-f")
        .arg(&path)
        .arg(url)
        .output()
        .context("run pgbench (Debian's postgresql-client)")?;
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "pgbench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    text.lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .context("pgbench printed no tps")
}

/// `writers` tasks append `per_append` events at a time to streams of their own, with the
/// exact expected version, for `phase`. Returns events per second.
async fn append_phase(
    store: &EventStore,
    writers: usize,
    per_append: usize,
    phase: Duration,
    sealer: bool,
) -> anyhow::Result<f64> {
    let total = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let stop_sealer = CancellationToken::new();
    let sealer_task = sealer.then(|| {
        let pool = store.pool().clone();
        let stop = stop_sealer.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                if events::audit::seal_once(&pool, 20_000).await? == 0 {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            Ok::<_, events::StoreError>(())
        })
    });
    let event = sample_event();
    let sealed = || async {
        let head = events::audit::head(store.pool()).await?;
        anyhow::Ok(head.map_or(0, |h| h.audit_seq))
    };
    let sealed_before = sealed().await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, total, done, event) =
            (store.clone(), total.clone(), done.clone(), event.clone());
        tasks.push(tokio::spawn(async move {
            let mut versions: Vec<Option<u64>> = vec![None; 64];
            let mut round = 0usize;
            let run = uuid::Uuid::new_v4().simple().to_string();
            while !done.load(Ordering::Relaxed) {
                let slot = round % versions.len();
                let stream = format!("agent-{run}-{w}-{slot}");
                let batch: Vec<ProposedEvent> = (0..per_append)
                    .map(|_| {
                        ProposedEvent::new(
                            &event,
                            Metadata {
                                actor: Some("bench".into()),
                                ..Metadata::default()
                            },
                        )
                    })
                    .collect();
                let expected =
                    versions[slot].map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact);
                // As the services append (`ledger::record`): events built from the typed
                // catalogue are held to the store's limits, not decoded again.
                store::check_limits(&stream, &batch)?;
                let client = store.pool().get().await?;
                let appended = store::append_with(&client, &stream, expected, &batch).await?;
                versions[slot] = Some(appended.stream_version);
                total.fetch_add(per_append as u64, Ordering::Relaxed);
                round += 1;
            }
            Ok::<_, events::StoreError>(())
        }));
    }
    tokio::time::sleep(phase).await;
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop_sealer.cancel();
    if let Some(task) = sealer_task {
        task.await??;
        // Whether the sealer keeps up: what it sealed over the phase, and what it left.
        let sealed_after = sealed().await?;
        let sealed_rate = (sealed_after - sealed_before) as f64 / elapsed;
        let unsealed = db::log_length(&store.pool().get().await?).await? as i64 - sealed_after;
        println!(
            "  sealer beside {per_append}-event appends: {sealed_rate:.0} events/s sealed, {unsealed} left unsealed at the end"
        );
    }
    Ok(total.load(Ordering::Relaxed) as f64 / elapsed)
}

/// Reads the whole log in global order into typed events. Returns (events/s, events).
async fn read_phase(store: &EventStore) -> anyhow::Result<(f64, u64)> {
    let client = store.pool().get().await?;
    let started = Instant::now();
    let rows = store::read_through(&client, LogPosition::START, 20_000, |_| Ok(())).await?;
    Ok((rows as f64 / started.elapsed().as_secs_f64(), rows))
}

/// COPY of the same rows, in the same order, out of PostgreSQL as text. Returns rows/s.
async fn copy_phase(url: &str) -> anyhow::Result<f64> {
    let client = db::connect(url).await?;
    let started = Instant::now();
    let rows = db::copy_events_out(&client).await?;
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

async fn relay_bench(config: &Config, url: &str, rate: u64, seconds: u64) -> anyhow::Result<()> {
    let pool = store::pool(url, 24)?;
    crate::app::migrate(&pool).await?;
    let store = EventStore::new(pool.clone());
    let js = async_nats::jetstream::new(bus::link::connect_as_url_says(&config.nats_url).await?);
    let topology = Topology {
        stream: format!("BENCH_{}", std::process::id()),
        prefix: format!("bench{}.evt", std::process::id()),
    };
    let stop = CancellationToken::new();
    let relay = tokio::spawn(events::relay::run(
        pool.clone(),
        url.to_owned(),
        js.clone(),
        topology.clone(),
        RelayConfig::default(),
        stop.clone(),
    ));
    let stream = events::relay::ensure_stream(&js, &topology).await?;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
        .await?;
    let mut messages = consumer.messages().await?;

    // Pace appends: every millisecond, start the appends due by then, each on its own task.
    let warmup = Duration::from_secs(2);
    let total = rate * seconds;
    let appender = {
        let store = store.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let mut sent = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            let event = sample_event();
            let mut inflight = tokio::task::JoinSet::new();
            while sent < total {
                tick.tick().await;
                let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
                while sent < due.min(total) {
                    let (store, event) = (store.clone(), event.clone());
                    let stream = format!("agent-lat{}", sent % 256);
                    inflight.spawn(async move {
                        store
                            .append(
                                &stream,
                                ExpectedVersion::Any,
                                &[ProposedEvent::new(&event, Metadata::default())],
                            )
                            .await
                    });
                    sent += 1;
                }
                while let Some(done) = inflight.try_join_next() {
                    done??;
                }
            }
            while let Some(done) = inflight.join_next().await {
                done??;
            }
            anyhow::Ok(started.elapsed())
        })
    };
    let mut latencies = Vec::with_capacity(total as usize);
    let bench_start = chrono::Utc::now();
    let mut received = 0u64;
    while received < total {
        let message = tokio::time::timeout(Duration::from_secs(30), messages.next())
            .await
            .context("no delivery for 30 s")?
            .context("consumer ended")??;
        let now = chrono::Utc::now();
        let event: events::RecordedEvent = serde_json::from_slice(&message.payload)?;
        received += 1;
        if event.recorded_at - bench_start > chrono::Duration::from_std(warmup)? {
            latencies.push(
                (now - event.recorded_at)
                    .num_microseconds()
                    .unwrap_or(i64::MAX),
            );
        }
    }
    let append_time = appender.await??;
    stop.cancel();
    relay.await??;
    js.delete_stream(&topology.stream).await?;
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
    println!(
        "berth bench relay: {total} events at {rate}/s offered ({:.0}/s achieved), {} measured after a {}s warm-up",
        total as f64 / append_time.as_secs_f64(),
        latencies.len(),
        warmup.as_secs()
    );
    println!(
        "append-to-delivery latency: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(1.0)
    );
    Ok(())
}
