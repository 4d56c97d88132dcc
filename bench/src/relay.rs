//! `berth bench relay`: commit-to-delivery latency through the relay to a JetStream consumer,
//! appends paced at a fixed rate, on a log of any size: the backlog written before the relay
//! starts is its catch-up, timed apart, and only the paced events are measured. An event's
//! commit is the moment its writer saw the append's transaction committed; the latency from
//! the row's insert (its `recorded_at`, before the commit's flush) is printed beside it. The
//! latency is cut where JetStream stored each event (its own stored time), into the relay's
//! share and the bus's, and the run's 100 ms windows that hold its slowest hundredth counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use berth::config::Config;
use events::catalogue::Metadata;
use events::relay::{RelayConfig, Topology};
use events::store::{self, EventStore, ExpectedVersion, ProposedEvent};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::sessions::percentile;
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

/// What `berth bench relay` measures: a log of `backlog` events written before the relay
/// starts (its catch-up, timed apart), then `rate` events a second in appends of
/// `per_append`, for `seconds`.
pub struct RelayRun {
    pub rate: u64,
    pub seconds: u64,
    pub per_append: u64,
    pub backlog: u64,
}

/// The category the backlog is written under; the measured events are under `agent`.
const BACKLOG: &str = "backlog";

pub async fn relay_bench(config: &Config, url: &str, run: RelayRun) -> anyhow::Result<()> {
    let pool = store::pool(url, 24)?;
    berth::app::migrate(&pool).await?;
    let store = EventStore::new(pool.clone());
    let written = write_backlog(&store, run.backlog).await?;
    let js = async_nats::jetstream::new(bus::link::connect_as_url_says(&config.nats_url).await?);
    let caught_up_from = Instant::now();
    let (relay, stream) = BenchRelay::start(&pool, url, &js, "BENCH").await?;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
        .await?;
    let mut messages = consumer.messages().await?;
    // The backlog first: the relay republishes the log from its start.
    for _ in 0..written {
        let event = next_event(&mut messages).await?.event;
        anyhow::ensure!(
            event.category() == BACKLOG,
            "a measured event came before the backlog's end"
        );
    }
    let catch_up = caught_up_from.elapsed();

    // Two seconds, or half a short run.
    let warmup = Duration::from_secs(2).min(Duration::from_secs(run.seconds) / 2);
    let total = run.rate * run.seconds;
    let commits = Commits::default();
    let appender = {
        let (store, commits) = (store.clone(), commits.clone());
        let (rate, per_append) = (run.rate, run.per_append);
        tokio::spawn(async move {
            paced_appends(&store, "agent", rate, per_append, total, Some(commits)).await
        })
    };
    let mut measured = Vec::with_capacity(total as usize);
    let bench_start = chrono::Utc::now();
    for _ in 0..total {
        let delivery = next_event(&mut messages).await?;
        if delivery.event.recorded_at - bench_start > chrono::Duration::from_std(warmup)? {
            measured.push(delivery);
        }
    }
    let append_time = appender.await??;
    let commits = std::mem::take(&mut *commits.lock().expect("no writer panicked"));
    let shares = Shares::of(&measured, &commits);
    relay.finish().await?;
    if written > 0 {
        println!(
            "berth bench relay: catch-up of a {written}-event log: {:.2} s = {:.0} events/s",
            catch_up.as_secs_f64(),
            written as f64 / catch_up.as_secs_f64()
        );
    }
    anyhow::ensure!(!measured.is_empty(), "no event after the warm-up");
    println!(
        "berth bench relay: {total} events at {}/s offered in appends of {} ({:.0}/s achieved), {} measured after a {}s warm-up",
        run.rate,
        run.per_append,
        total as f64 / append_time.as_secs_f64(),
        measured.len(),
        warmup.as_secs()
    );
    shares.print();
    Ok(())
}

/// One measured event as its consumer received it.
struct Delivery {
    event: events::RecordedEvent,
    /// When JetStream stored it (the server's clock, on this host).
    stored: chrono::DateTime<chrono::Utc>,
    received: chrono::DateTime<chrono::Utc>,
}

/// The measured events' latencies in microseconds: from the commit to the consumer, cut where
/// JetStream stored each event, so that a tail is seen to lie in the relay (the horizon, its
/// read and its publish) or in the bus (the store's write and the delivery to the consumer);
/// and from the row's insert, before its commit.
struct Shares {
    from_commit: Vec<i64>,
    relay: Vec<i64>,
    bus: Vec<i64>,
    from_insert: Vec<i64>,
    /// Each event's commit, in microseconds from the first measured one's: where in the run
    /// the slowest events lie.
    committed_at: Vec<i64>,
}

/// The spans of time the slowest hundredth of the events is counted in.
const WINDOW_MICROS: i64 = 100_000;

impl Shares {
    /// An event can reach the consumer before its writer hears of the commit: no wait, then.
    fn of(
        measured: &[Delivery],
        commits: &HashMap<uuid::Uuid, chrono::DateTime<chrono::Utc>>,
    ) -> Shares {
        let micros = |later: chrono::DateTime<chrono::Utc>,
                      earlier: chrono::DateTime<chrono::Utc>| {
            (later - earlier)
                .num_microseconds()
                .unwrap_or(i64::MAX)
                .max(0)
        };
        let mut shares = Shares {
            from_commit: Vec::with_capacity(measured.len()),
            relay: Vec::with_capacity(measured.len()),
            bus: Vec::with_capacity(measured.len()),
            from_insert: Vec::with_capacity(measured.len()),
            committed_at: Vec::with_capacity(measured.len()),
        };
        let first = measured
            .iter()
            .filter_map(|d| commits.get(&d.event.event_id))
            .min()
            .copied()
            .unwrap_or_else(chrono::Utc::now);
        for d in measured {
            let committed = commits
                .get(&d.event.event_id)
                .copied()
                .unwrap_or(d.received)
                .min(d.received);
            shares.from_commit.push(micros(d.received, committed));
            shares.committed_at.push(micros(committed, first));
            shares.relay.push(micros(d.stored, committed));
            shares.bus.push(micros(d.received, d.stored.max(committed)));
            shares
                .from_insert
                .push(micros(d.received, d.event.recorded_at));
        }
        shares
    }

    /// In how many of the run's 100 ms windows (by commit) the events slower than the 99th
    /// percentile came, and how many windows there were: a few windows say the tail is the
    /// machine stalling now and then, most of them a cost every event pays.
    fn slowest_windows(&self) -> (usize, i64) {
        let mut sorted = self.from_commit.clone();
        sorted.sort_unstable();
        let p99 = percentile(&sorted, 0.99);
        let slow: std::collections::HashSet<i64> = self
            .from_commit
            .iter()
            .zip(&self.committed_at)
            .filter(|(latency, _)| **latency > p99)
            .map(|(_, at)| at / WINDOW_MICROS)
            .collect();
        let windows = self.committed_at.iter().max().copied().unwrap_or(0) / WINDOW_MICROS + 1;
        (slow.len(), windows)
    }

    fn print(mut self) {
        let (slow, windows) = self.slowest_windows();
        print_latency("commit-to-delivery latency", &mut self.from_commit);
        println!(
            "  the events slower than its p99 came in {slow} of the run's {windows} windows of {} ms",
            WINDOW_MICROS / 1000
        );
        print_latency(
            "  of it the relay's share, commit to stored in JetStream (the horizon, the read, the publish)",
            &mut self.relay,
        );
        print_latency(
            "  of it the bus's share, stored in JetStream to the consumer",
            &mut self.bus,
        );
        print_latency(
            "insert-to-delivery latency (the row's recorded_at, before its commit)",
            &mut self.from_insert,
        );
    }
}

/// When each paced event's append was seen committed by its writer, by event id (the wall
/// clock, which JetStream's stored times are read against).
pub(crate) type Commits = Arc<Mutex<HashMap<uuid::Uuid, chrono::DateTime<chrono::Utc>>>>;

/// Prints `micros`' p50, p90, p99 and max in milliseconds.
fn print_latency(what: &str, micros: &mut [i64]) {
    micros.sort_unstable();
    let pct = |q: f64| percentile(micros, q) as f64 / 1000.0;
    println!(
        "{what}: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(1.0)
    );
}

/// The next event the consumer receives, when JetStream stored it and when it came.
async fn next_event<S, E>(messages: &mut S) -> anyhow::Result<Delivery>
where
    S: futures::Stream<Item = Result<async_nats::jetstream::Message, E>> + Unpin,
    E: std::error::Error + Send + Sync + 'static,
{
    let message = tokio::time::timeout(Duration::from_secs(30), messages.next())
        .await
        .context("no delivery for 30 s")?
        .context("consumer ended")??;
    let received = chrono::Utc::now();
    let event: events::RecordedEvent = serde_json::from_slice(&message.payload)?;
    let published = message
        .info()
        .map_err(|e| anyhow::anyhow!("a JetStream message without its info: {e}"))?
        .published
        .unix_timestamp_nanos();
    let stored = chrono::DateTime::from_timestamp_nanos(i64::try_from(published)?);
    Ok(Delivery {
        event,
        stored,
        received,
    })
}

/// Writes `events` sample events to the log, 1,000 to an append, under the backlog's
/// category (the relay's log before it starts; the sealer's in `bench seal`). How many.
pub(crate) async fn write_backlog(store: &EventStore, events: u64) -> anyhow::Result<u64> {
    let event = sample_event();
    let mut written = 0;
    let mut stream = 0;
    while written < events {
        let size = (events - written).min(1_000);
        let batch: Vec<ProposedEvent> = (0..size)
            .map(|_| ProposedEvent::new(&event, Metadata::default()))
            .collect();
        store
            .append(
                &format!("{BACKLOG}-{stream}"),
                ExpectedVersion::NoStream,
                &batch,
            )
            .await?;
        written += size;
        stream += 1;
    }
    Ok(written)
}

/// Appends `total` events paced at `rate` a second, `per_append` to an append, each append on
/// a task of its own, to 256 streams of `category`: every millisecond, the appends due by then
/// start; each append's commit noted in `commits` when given. How long it took.
pub(crate) async fn paced_appends(
    store: &EventStore,
    category: &str,
    rate: u64,
    per_append: u64,
    total: u64,
    commits: Option<Commits>,
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
            let (store, event, commits) = (store.clone(), event.clone(), commits.clone());
            let stream = format!("{category}-lat{}", (sent / per_append) % 256);
            let size = per_append.min(total - sent);
            inflight.spawn(async move {
                let proposed: Vec<ProposedEvent> = (0..size)
                    .map(|_| ProposedEvent::new(&event, Metadata::default()))
                    .collect();
                loop {
                    match store.append(&stream, ExpectedVersion::Any, &proposed).await {
                        // Two appends at once to one stream met on its next version: again.
                        Err(store::StoreError::Conflict { .. }) => continue,
                        done => {
                            if let (Ok(_), Some(commits)) = (&done, commits) {
                                let now = chrono::Utc::now();
                                let mut commits = commits.lock().expect("no writer panicked");
                                commits.extend(proposed.iter().map(|e| (e.event_id, now)));
                            }
                            return done;
                        }
                    }
                }
            });
            sent += size;
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
