//! `berth bench relay`: append-to-delivery latency through the relay to a JetStream consumer,
//! appends paced at a fixed rate.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use berth::config::Config;
use events::catalogue::Metadata;
use events::relay::{RelayConfig, Topology};
use events::store::{self, EventStore, ExpectedVersion, ProposedEvent};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::store::sample_event;

/// A relay of a bench's own, publishing to a JetStream stream and under subjects named after
/// the bench and this process, so that what it publishes meets nothing else.
pub(crate) struct BenchRelay {
    pub topology: Topology,
    /// Stops the relay, and whatever else the bench stops with it.
    pub stop: CancellationToken,
    js: async_nats::jetstream::Context,
    task: tokio::task::JoinHandle<Result<(), events::relay::RelayError>>,
}

impl BenchRelay {
    /// Starts a relay of the log at `url` to the stream `<name>_<pid>` (made if missing), which
    /// it also returns.
    pub(crate) async fn start(
        pool: &deadpool_postgres::Pool,
        url: &str,
        js: &async_nats::jetstream::Context,
        name: &str,
    ) -> anyhow::Result<(BenchRelay, async_nats::jetstream::stream::Stream)> {
        let run = std::process::id();
        let topology = Topology {
            stream: format!("{name}_{run}"),
            prefix: format!("{}{run}.evt", name.to_lowercase()),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(events::relay::run(
            pool.clone(),
            url.to_owned(),
            js.clone(),
            topology.clone(),
            RelayConfig::default(),
            stop.clone(),
        ));
        let stream = events::relay::ensure_stream(js, &topology).await?;
        let relay = BenchRelay {
            topology,
            stop,
            js: js.clone(),
            task,
        };
        Ok((relay, stream))
    }

    /// Stops the relay and deletes its stream.
    pub(crate) async fn finish(self) -> anyhow::Result<()> {
        self.stop.cancel();
        self.task.await??;
        self.js.delete_stream(&self.topology.stream).await?;
        Ok(())
    }
}

pub async fn relay_bench(
    config: &Config,
    url: &str,
    rate: u64,
    seconds: u64,
) -> anyhow::Result<()> {
    let pool = store::pool(url, 24)?;
    berth::app::migrate(&pool).await?;
    let store = EventStore::new(pool.clone());
    let js = async_nats::jetstream::new(bus::link::connect_as_url_says(&config.nats_url).await?);
    let (relay, stream) = BenchRelay::start(&pool, url, &js, "BENCH").await?;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
        .await?;
    let mut messages = consumer.messages().await?;

    let warmup = Duration::from_secs(2);
    let total = rate * seconds;
    let appender = {
        let store = store.clone();
        tokio::spawn(async move { paced_appends(&store, "agent", rate, total).await })
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
    relay.finish().await?;
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

/// Appends `total` single events paced at `rate` a second, each on a task of its own, to 256
/// streams of `category`: every millisecond, the appends due by then start. How long it took.
pub(crate) async fn paced_appends(
    store: &EventStore,
    category: &str,
    rate: u64,
    total: u64,
) -> anyhow::Result<Duration> {
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
            let stream = format!("{category}-lat{}", sent % 256);
            inflight.spawn(async move {
                let proposed = [ProposedEvent::new(&event, Metadata::default())];
                loop {
                    match store.append(&stream, ExpectedVersion::Any, &proposed).await {
                        // Two appends at once to one stream met on its next version: again.
                        Err(store::StoreError::Conflict { .. }) => continue,
                        done => return done,
                    }
                }
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
    Ok(started.elapsed())
}
