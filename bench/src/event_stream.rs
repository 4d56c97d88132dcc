//! `berth bench events`: what the event stream (`GET /v1/events`) delivers to its consumers,
//! each figure next to its baseline measured in the same run:
//!
//! - live fan-out: a burst of events delivered to 1, 10 and 100 SSE consumers following the
//!   stream, next to a direct JetStream consumer of the relay's stream receiving the same burst;
//! - live latency: events appended one at a time at a paced rate, from their recording to their
//!   receipt by 10 SSE consumers, next to the direct JetStream consumer's;
//! - catch-up: the whole log read through the event stream from position zero, next to reading
//!   the log itself, a batch of the same size at a time.
//!
//! The gateway, the relay and the consumers run in this process, against the platform's
//! PostgreSQL and NATS, on a database and a JetStream stream of their own.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use events::catalogue::Metadata;
use events::payloads::Role;
use events::relay::Topology;
use events::store::{self, EventStore, ExpectedVersion, ProposedEvent};
use events::LogPosition;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::sessions::percentile;
use crate::store::sample_event;

/// Events one append of a burst holds.
const BURST_APPEND: usize = 1_000;

/// Events the catch-up reads from the log at a time (the gateway's `CATCH_UP_BATCH`).
const LOG_BATCH: i64 = 500;

/// The warm-up before latencies count.
const WARM_UP: Duration = Duration::from_secs(2);

/// What one consumer received: how many, when the last came, and each event's latency from
/// its recording (when asked for).
struct Received {
    count: u64,
    last_at: Instant,
    timed_from: Option<chrono::DateTime<chrono::Utc>>,
    latencies_us: Vec<i64>,
}

/// How a consumer reads: through the gateway's event stream, or JetStream directly.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    Sse,
    JetStream,
}

struct Bench {
    pool: deadpool_postgres::Pool,
    store: EventStore,
    js: async_nats::jetstream::Context,
    topology: Topology,
    http: reqwest::Client,
    base: String,
    key: String,
}

pub async fn events(
    nats_url: &str,
    url: &str,
    burst: u64,
    rate: u64,
    seconds: u64,
    fan_out: &[usize],
) -> anyhow::Result<()> {
    let pool = store::pool(url, 24)?;
    berth::app::migrate(&pool).await?;
    let nats = bus::link::connect_as_url_says(nats_url).await?;
    let js = async_nats::jetstream::new(nats.clone());
    let (relay, _) = crate::relay::BenchRelay::start(&pool, url, &js, "BENCH_EVT").await?;
    let topology = relay.topology.clone();
    launcher::access::bootstrap(&pool).await?;
    let (_, key) = launcher::access::create_user(
        &pool,
        "events@bench.berth",
        Role::Superadmin,
        "default",
        &[],
    )
    .await?;
    let state = gateway::AppState::new(pool.clone(), Some(nats), topology.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    // The gateway stops with the relay.
    tokio::spawn(gateway::run::serve(
        listener.into(),
        state,
        relay.stop.clone(),
    ));
    let bench = Bench {
        store: EventStore::new(pool.clone()),
        pool,
        js,
        topology,
        http: reqwest::Client::builder().build()?,
        base,
        key,
    };
    println!("berth bench events: the gateway, the relay and every consumer in this process");

    for &consumers in fan_out {
        bench.fan_out(consumers, burst).await?;
    }
    bench.paced(10, rate, seconds).await?;
    bench.catch_up().await?;

    relay.finish().await
}

impl Bench {
    /// Starts a consumer of category `category` reading `wanted` events; the latencies of
    /// those recorded after the warm-up from now are kept when `timed`. Returns once it is
    /// subscribed.
    async fn consumer(
        &self,
        way: Way,
        category: &str,
        wanted: u64,
        timed: bool,
    ) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<Received>>> {
        let (ready, mut subscribed) = mpsc::channel::<()>(1);
        let timed_from = timed.then(|| chrono::Utc::now() + WARM_UP);
        let reading = match way {
            Way::Sse => {
                let request = self
                    .http
                    .get(format!("{}/v1/events?category={category}", self.base))
                    .header("x-api-key", &self.key);
                tokio::spawn(async move {
                    let response = request.send().await?.error_for_status()?;
                    // The answer's head comes once the gateway is subscribed.
                    ready.send(()).await.ok();
                    let mut stream = berth::event_stream_client::events_of(response);
                    let mut received = Received::new(timed_from);
                    while received.count < wanted {
                        let event = tokio::time::timeout(Duration::from_secs(60), stream.next())
                            .await
                            .context("no event for 60 s")?
                            .context("the stream ended")??;
                        if event.id.is_empty() {
                            continue;
                        }
                        received.note(event.data.as_bytes())?;
                    }
                    Ok(received)
                })
            }
            Way::JetStream => {
                let stream = self.js.get_stream(&self.topology.stream).await?;
                let consumer = stream
                    .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                        filter_subject: self.topology.category_subject(category),
                        deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::New,
                        ..Default::default()
                    })
                    .await?;
                let mut messages = consumer.messages().await?;
                ready.send(()).await.ok();
                tokio::spawn(async move {
                    let mut received = Received::new(timed_from);
                    while received.count < wanted {
                        let message =
                            tokio::time::timeout(Duration::from_secs(60), messages.next())
                                .await
                                .context("no event for 60 s")?
                                .context("the consumer ended")??;
                        received.note(&message.payload)?;
                    }
                    Ok(received)
                })
            }
        };
        subscribed.recv().await;
        Ok(reading)
    }

    /// A burst of `burst` events to `consumers` SSE consumers and one JetStream consumer.
    async fn fan_out(&self, consumers: usize, burst: u64) -> anyhow::Result<()> {
        let category = format!("fan{consumers}");
        let mut readers = Vec::new();
        for _ in 0..consumers {
            readers.push(self.consumer(Way::Sse, &category, burst, false).await?);
        }
        let direct = self
            .consumer(Way::JetStream, &category, burst, false)
            .await?;
        let started = Instant::now();
        let event = sample_event();
        let mut left = burst;
        while left > 0 {
            let n = left.min(BURST_APPEND as u64);
            let batch: Vec<ProposedEvent> = (0..n)
                .map(|_| ProposedEvent::new(&event, Metadata::default()))
                .collect();
            self.store
                .append(&format!("{category}-1"), ExpectedVersion::Any, &batch)
                .await?;
            left -= n;
        }
        let appended = started.elapsed();
        let direct = direct.await??;
        let mut slowest = Duration::ZERO;
        for reader in readers {
            let received = reader.await??;
            slowest = slowest.max(received.last_at - started);
        }
        let direct_took = direct.last_at - started;
        let per_second = |n: u64, took: Duration| n as f64 / took.as_secs_f64();
        println!(
            "fan-out, {burst} events appended in {:.2} s ({:.0}/s): {consumers} SSE consumer(s) \
             each had all by {:.2} s, {:.0} events/s each, {:.0}/s delivered in all; direct \
             JetStream consumer {:.2} s, {:.0} events/s",
            appended.as_secs_f64(),
            per_second(burst, appended),
            slowest.as_secs_f64(),
            per_second(burst, slowest),
            per_second(burst * consumers as u64, slowest),
            direct_took.as_secs_f64(),
            per_second(burst, direct_took),
        );
        Ok(())
    }

    /// Single-event appends paced at `rate` for `seconds`, to `consumers` SSE consumers and
    /// one JetStream consumer: latency from recording to receipt after the warm-up.
    async fn paced(&self, consumers: usize, rate: u64, seconds: u64) -> anyhow::Result<()> {
        let category = "paced";
        let total = rate * seconds;
        let mut readers = Vec::new();
        for _ in 0..consumers {
            readers.push(self.consumer(Way::Sse, category, total, true).await?);
        }
        let direct = self.consumer(Way::JetStream, category, total, true).await?;
        let appended =
            crate::relay::paced_appends(&self.store, category, rate, 1, total, None).await?;
        let direct = direct.await??;
        let mut sse = Vec::new();
        for reader in readers {
            sse.extend(reader.await??.latencies_us);
        }
        let summary = |mut latencies: Vec<i64>| {
            latencies.sort_unstable();
            let ms = |q: f64| percentile(&latencies, q) as f64 / 1000.0;
            format!(
                "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} measured)",
                ms(0.50),
                ms(0.90),
                ms(0.99),
                ms(1.0),
                latencies.len()
            )
        };
        println!(
            "live latency, {total} events at {rate}/s offered ({:.0}/s achieved), recording to \
             receipt after a {} s warm-up:",
            total as f64 / appended.as_secs_f64(),
            WARM_UP.as_secs()
        );
        println!("  {consumers} SSE consumers: {}", summary(sse));
        println!(
            "  direct JetStream consumer: {}",
            summary(direct.latencies_us)
        );
        Ok(())
    }

    /// The whole log through the event stream from position zero, next to reading the log.
    async fn catch_up(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        let client = self.pool.get().await?;
        let (mut read, mut after) = (0u64, LogPosition::START);
        loop {
            let batch = store::read_all_with(&client, after, LOG_BATCH).await?;
            let Some(last) = batch.last() else { break };
            after = last.position;
            read += batch.len() as u64;
        }
        let log_took = started.elapsed();

        let started = Instant::now();
        let response = self
            .http
            .get(format!("{}/v1/events?after=0:0&follow=false", self.base))
            .header("x-api-key", &self.key)
            .send()
            .await?
            .error_for_status()?;
        let mut stream = berth::event_stream_client::events_of(response);
        let mut served = 0u64;
        while let Some(event) = stream.next().await {
            if !event?.id.is_empty() {
                served += 1;
            }
        }
        let sse_took = started.elapsed();
        anyhow::ensure!(
            served == read,
            "the stream served {served} events, the log holds {read}"
        );
        let log_rate = read as f64 / log_took.as_secs_f64();
        let sse_rate = served as f64 / sse_took.as_secs_f64();
        println!(
            "catch-up from position zero, {read} events: the event stream {:.2} s, {sse_rate:.0} \
             events/s; reading the log {LOG_BATCH} at a time {:.2} s, {log_rate:.0} events/s \
             ({:.0}% of the log's read rate)",
            sse_took.as_secs_f64(),
            log_took.as_secs_f64(),
            100.0 * sse_rate / log_rate
        );
        Ok(())
    }
}

impl Received {
    /// Counting from now; latencies kept of the events recorded after `timed_from`, if given.
    fn new(timed_from: Option<chrono::DateTime<chrono::Utc>>) -> Received {
        Received {
            count: 0,
            last_at: Instant::now(),
            timed_from,
            latencies_us: Vec::new(),
        }
    }

    /// One event received, in its recorded form (read only when latencies are kept).
    fn note(&mut self, recorded: &[u8]) -> anyhow::Result<()> {
        let now = chrono::Utc::now();
        self.count += 1;
        self.last_at = Instant::now();
        let Some(from) = self.timed_from else {
            return Ok(());
        };
        // Only the time it was recorded: a consumer reading its payload pays for that itself.
        #[derive(serde::Deserialize)]
        struct Recorded {
            recorded_at: chrono::DateTime<chrono::Utc>,
        }
        let event: Recorded = serde_json::from_slice(recorded)?;
        if event.recorded_at > from {
            let latency = (now - event.recorded_at).num_microseconds();
            self.latencies_us.push(latency.unwrap_or(i64::MAX));
        }
        Ok(())
    }
}
