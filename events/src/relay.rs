//! The relay: the only way events reach NATS.
//!
//! It reads committed events from the store in global order (behind the horizon), publishes
//! each to JetStream on `berth.evt.<category>.<stream_id>` (see [`Topology`]) with the event id as `Nats-Msg-Id`
//! (JetStream drops a repeat inside its duplicate window), and moves its checkpoint in
//! PostgreSQL only over what JetStream acknowledged. Batches are pipelined: the next batch is
//! read and published while the last one's acknowledgements are awaited. A crash or a
//! refused publish between publish and checkpoint republishes from the last acknowledged
//! position, never loses: delivery is at least once and consumers are idempotent.
//! One relay publishes at a time: the leader holds a session advisory lock on a connection
//! of its own, which PostgreSQL frees when the process dies.

use std::time::Duration;

use tokio::time::Instant;

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use deadpool_postgres::Pool;
use tokio_util::sync::CancellationToken;

use crate::fault::Outage;
use crate::pg::Xid8;
use crate::store::{read_all_with, LogPosition, StoreError};
use crate::trace::headers;
use crate::RecordedEvent;

/// Where events go on NATS: the JetStream stream and the prefix of every subject.
/// Production uses the default; tests give each run names of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub stream: String,
    pub prefix: String,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            stream: "BERTH_EVENTS".into(),
            prefix: "berth.evt".into(),
        }
    }
}

impl Topology {
    /// The subject an event is published on: `<prefix>.<category>.<stream_id>`.
    pub fn subject_of(&self, event: &RecordedEvent) -> String {
        self.stream_subject(event.category(), &event.stream_id)
    }

    /// The subject the events of one stream (`session-<id>`, of `category`) are published
    /// on: what to subscribe to for that stream alone.
    pub fn stream_subject(&self, category: &str, stream_id: &str) -> String {
        format!("{}.{category}.{stream_id}", self.prefix)
    }

    /// Subject filter matching every event of one category.
    pub fn category_subject(&self, category: &str) -> String {
        format!("{}.{category}.>", self.prefix)
    }

    /// Subject filter matching every event.
    pub fn all_subjects(&self) -> String {
        format!("{}.>", self.prefix)
    }
}
const RELAY_LOCK: i64 = 0x6265_7274_685f_7231;
const CHECKPOINT: &str = "relay";

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("database: {}", crate::fault::described(.0))]
    Database(#[from] tokio_postgres::Error),
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("nats: {0}")]
    Nats(String),
}

fn nats<E: std::fmt::Display>(e: E) -> RelayError {
    RelayError::Nats(e.to_string())
}

/// Creates the events stream when it does not exist.
pub async fn ensure_stream(
    js: &jetstream::Context,
    topology: &Topology,
) -> Result<stream::Stream, RelayError> {
    js.get_or_create_stream(stream::Config {
        name: topology.stream.clone(),
        subjects: vec![topology.all_subjects()],
        storage: stream::StorageType::File,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .map_err(nats)
}

/// How the relay polls and batches.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Most events read and published in one round.
    pub batch: i64,
    /// Pause after a round that found nothing new while the log is active; once it is quiet,
    /// the relay rests until an append in this process or `activity::QUIET_POLL`.
    pub idle_poll: Duration,
    /// Least time between two checkpoint writes.
    pub checkpoint_every: Duration,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            batch: 2_000,
            idle_poll: Duration::from_millis(2),
            checkpoint_every: Duration::from_millis(200),
        }
    }
}

/// Where the relay stopped, as stored in PostgreSQL.
pub async fn checkpoint(pool: &Pool) -> Result<LogPosition, RelayError> {
    let client = pool.get().await?;
    Ok(read_checkpoint(&client, CHECKPOINT).await?)
}

/// Where the log's reader `name` (the relay, a projection) stopped; the log's start when it
/// has no checkpoint yet.
pub(crate) async fn read_checkpoint<C: deadpool_postgres::GenericClient>(
    client: &C,
    name: &str,
) -> Result<LogPosition, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT tx_id, seq FROM checkpoints WHERE name = $1",
            &[&name],
        )
        .await?;
    Ok(row.map_or(LogPosition::START, |r| LogPosition {
        tx: r.get::<_, Xid8>(0).0,
        seq: r.get(1),
    }))
}

pub(crate) async fn write_checkpoint<C: deadpool_postgres::GenericClient>(
    client: &C,
    name: &str,
    at: LogPosition,
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "INSERT INTO checkpoints (name, tx_id, seq) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET tx_id = $2, seq = $3, updated_at = now()",
            &[&name, &Xid8(at.tx), &at.seq],
        )
        .await
        .map(|_| ())
}

/// Runs the relay until `stop` is cancelled: waits to become leader, then publishes.
pub async fn run(
    pool: Pool,
    database_url: String,
    js: jetstream::Context,
    topology: Topology,
    config: RelayConfig,
    stop: CancellationToken,
) -> Result<(), RelayError> {
    ensure_stream(&js, &topology).await?;
    // The leader lock lives on a connection outside the pool: when this task or process
    // ends, the connection closes and PostgreSQL releases the lock.
    let (lock_client, connection) = crate::tls::connect(&database_url)
        .await
        .map_err(StoreError::from)?;
    let connection = tokio::spawn(connection);
    loop {
        let leader: bool = lock_client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&RELAY_LOCK])
            .await?
            .get(0);
        if leader {
            break;
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    tracing::info!("relay is leader");
    let result = publish_loop(&pool, &js, &topology, &config, &stop).await;
    drop(lock_client);
    connection.abort();
    result
}

async fn publish_loop(
    pool: &Pool,
    js: &jetstream::Context,
    topology: &Topology,
    config: &RelayConfig,
    stop: &CancellationToken,
) -> Result<(), RelayError> {
    // Every event up to `acked` is in JetStream; those up to `sent` are published, and the
    // last batch's acknowledgements may still be on their way.
    let mut acked = checkpoint(pool).await?;
    let mut sent = acked;
    let mut in_flight: Option<InFlight> = None;
    let mut saved = acked;
    let mut last_save = Instant::now();
    // The checkpoint's write in flight: it runs beside the loop, never in its way.
    let mut saving: Option<Saving> = None;
    tracing::info!(after = %acked, "relay resumes");
    // Publishes that failed in a row: NATS is away, and what was not acknowledged is
    // published again (from the last acknowledged position: the server's duplicate window
    // and consumers drop what landed twice).
    let mut failures = 0u32;
    let mut outage = Outage::default();
    let mut activity = crate::activity::Activity::new();
    while !stop.is_cancelled() {
        let events = {
            let client = pool.get().await?;
            read_all_with(&client, sent, config.batch).await?
        };
        // The next batch goes out before the last one's acknowledgements are awaited: the
        // read and the publish of one overlap the other's round trip to JetStream.
        let settled = async {
            let next = match events.last() {
                Some(last) => Some(InFlight {
                    acks: send_batch(js, topology, &events).await?,
                    through: last.position,
                    recorded_at: last.recorded_at,
                }),
                None => None,
            };
            if let Some(previous) = std::mem::replace(&mut in_flight, next) {
                acked = previous.settle().await?;
            }
            Ok::<_, RelayError>(())
        }
        .await;
        if let Err(e) = settled {
            outage.failed(
                "relay",
                &format_args!(
                    "NATS does not take the relay's events ({e}); publishing again from {acked}"
                ),
            );
            in_flight = None;
            sent = acked;
            failures += 1;
            // Capped at a second: a try costs one failed publish, and the bus's return is
            // noticed within it.
            let wait = Duration::from_millis(100)
                .saturating_mul(1 << failures.min(6))
                .min(Duration::from_secs(1));
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep(wait) => {}
            }
            continue;
        }
        outage.passed("relay");
        failures = 0;
        if let Some(last) = events.last() {
            sent = last.position;
            activity.saw_events();
        }
        // Every `checkpoint_every` while events flow; soon after they stop, so that a quiet
        // log's checkpoint is its head.
        let since = last_save.elapsed();
        let due = since >= config.checkpoint_every || (events.is_empty() && since >= IDLE_SAVE);
        if acked != saved && due && saving.as_ref().is_none_or(|s| s.is_finished()) {
            if let Some(done) = saving.take() {
                done.finish().await?;
            }
            saving = Some(Saving::start(pool, acked));
            saved = acked;
            last_save = Instant::now();
        }
        if events.is_empty() {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = activity.rest(config.idle_poll) => {}
            }
        }
    }
    // What is still on its way counts once it is acknowledged; otherwise the next leader
    // publishes it again.
    if let Some(last) = in_flight {
        if let Ok(through) = last.settle().await {
            acked = through;
        }
    }
    if let Some(done) = saving {
        done.finish().await?;
    }
    if acked != saved {
        save_checkpoint(pool.clone(), acked).await?;
    }
    Ok(())
}

/// The least time between a checkpoint's write and the next once the log is quiet: at
/// 10,000 events a second most reads find nothing new, and a write after each was a
/// transaction in the loop's way hundreds of times a second.
const IDLE_SAVE: Duration = Duration::from_millis(50);

/// A checkpoint's write running as a task of its own.
struct Saving(tokio::task::JoinHandle<Result<(), RelayError>>);

impl Saving {
    fn start(pool: &Pool, at: LogPosition) -> Saving {
        Saving(tokio::spawn(save_checkpoint(pool.clone(), at)))
    }

    fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// Its outcome, once it has ended; a panic in it goes on as the loop's.
    async fn finish(self) -> Result<(), RelayError> {
        match self.0.await {
            Ok(saved) => saved,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

/// Moves the relay's checkpoint without waiting for the commit's flush to disk: a checkpoint
/// lost in a crash only means events published again, which JetStream's duplicate window
/// and the consumers drop, and the publishing loop does not stall on a busy disk meanwhile.
async fn save_checkpoint(pool: Pool, at: LogPosition) -> Result<(), RelayError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    tx.batch_execute("SET LOCAL synchronous_commit TO off")
        .await?;
    write_checkpoint(&tx, CHECKPOINT, at).await?;
    tx.commit().await?;
    Ok(())
}

/// A published batch whose acknowledgements are awaited: the log's position once they came.
struct InFlight {
    acks: Vec<jetstream::context::PublishAckFuture>,
    through: LogPosition,
    recorded_at: chrono::DateTime<chrono::Utc>,
}

impl InFlight {
    /// Waits for every acknowledgement of the batch; the position it brings the relay to.
    async fn settle(self) -> Result<LogPosition, RelayError> {
        let published = self.acks.len();
        for ack in self.acks {
            ack.await.map_err(nats)?;
        }
        metrics::counter!(crate::metrics::RELAY_PUBLISHED).increment(published as u64);
        metrics::gauge!(crate::metrics::RELAY_LAG_SECONDS)
            .set(crate::metrics::age_secs(self.recorded_at));
        Ok(self.through)
    }
}

/// Publishes a batch with every publish in flight at once (one connection keeps them in
/// order on the server); their acknowledgements, to be awaited.
async fn send_batch(
    js: &jetstream::Context,
    topology: &Topology,
    events: &[RecordedEvent],
) -> Result<Vec<jetstream::context::PublishAckFuture>, RelayError> {
    let mut acks = Vec::with_capacity(events.len());
    for event in events {
        let body = serde_json::to_vec(event).expect("recorded events serialise");
        let ack = js
            .publish_with_headers(
                topology.subject_of(event),
                message_headers(event),
                body.into(),
            )
            .await
            .map_err(nats)?;
        acks.push(ack);
    }
    Ok(acks)
}

fn message_headers(event: &RecordedEvent) -> HeaderMap {
    let mut map = HeaderMap::new();
    map.insert("Nats-Msg-Id", event.event_id.to_string().as_str());
    map.insert(headers::EVENT_TYPE, event.event_type());
    map.insert(headers::POSITION, event.position.to_string().as_str());
    if let Some(traceparent) = &event.metadata.traceparent {
        map.insert(headers::TRACEPARENT, traceparent.as_str());
    }
    if let Some(tracestate) = &event.metadata.tracestate {
        map.insert(headers::TRACESTATE, tracestate.as_str());
    }
    map
}
