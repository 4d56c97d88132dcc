//! The idle-reaper: terminates a session past its lifetime, silent on the network, or idle
//! by its utilization (the checkers of `domain::idleness`), and records which checker fired
//! and the figures that decided it. `berth idle-reaper` on its own, or part of `berth up`.
//!
//! - [`watch`]: its state, folded from events (sessions, users, idle checks) and usage.
//! - `db`: that fold kept in schema `idle_reaper`, so a restart goes on where it stopped;
//!   the crate owns the schema and exports its migrations ([`MIGRATIONS`]).
//!
//! It never polls the ledger: a durable consumer of the event stream keeps the fold (each
//! event applied once, in the transaction that keeps it), an ordered consumer of the
//! telemetry stream brings usage (on start it reads the last window again, so a restart
//! loses none), and a tick compares both with the clock. A verdict goes through the session's
//! lifecycle (`SessionState::reap`), so a session exempted or already stopping is left alone
//! and a reap recorded twice is impossible. It answers the gateway and the CLI on NATS with
//! what each checker says of a session, and which sessions it would reap now.

pub mod watch;

mod db;

pub use db::MIGRATIONS;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use bus::protocol::{AppActivity, UsageSample};
use bus::Subjects;
use deadpool_postgres::{Pool, Transaction};
use events::consumer::{ConsumerConfig, Handler, HandlerError};
use events::idleness::IdleVerdict;
use events::lifecycle::{self, CommandError, TransitionError};
use events::relay::Topology;
use events::{Metadata, RecordedEvent};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::watch::Watchlist;

/// The consumer's durable name.
pub const NAME: &str = "idle-reaper";

/// The actor its events name.
pub const ACTOR: &str = "idle-reaper";

#[derive(Debug, thiserror::Error)]
pub enum ReaperError {
    #[error(transparent)]
    Load(#[from] db::LoadError),
    #[error("events: {0}")]
    Events(#[from] events::relay::RelayError),
    #[error("NATS: {0}")]
    Bus(String),
}

/// How often the reaper compares what it knows with the clock.
#[derive(Debug, Clone, Copy)]
pub struct ReaperConfig {
    pub tick: Duration,
    /// How many sessions it terminates at once.
    pub in_flight: usize,
}

impl Default for ReaperConfig {
    fn default() -> Self {
        ReaperConfig {
            tick: Duration::from_millis(250),
            in_flight: 16,
        }
    }
}

type Shared = Arc<Mutex<Watchlist>>;

fn lock(list: &Shared) -> std::sync::MutexGuard<'_, Watchlist> {
    list.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the reaper until `stop`.
pub async fn run(
    nats: async_nats::Client,
    pool: Pool,
    subjects: Subjects,
    topology: Topology,
    config: ReaperConfig,
    stop: CancellationToken,
) -> Result<(), ReaperError> {
    let list: Shared = Arc::new(Mutex::new(db::load(&pool).await?));
    let js = jetstream::new(nats.clone());
    let consumer = ConsumerConfig::new(
        NAME,
        ["session", "user", "idle"]
            .iter()
            .map(|c| topology.category_subject(c))
            .collect(),
    );
    let folding = events::consumer::run(
        pool.clone(),
        js.clone(),
        topology,
        consumer,
        Fold { list: list.clone() },
        stop.clone(),
    );
    let usage = follow_usage(js, subjects.clone(), list.clone(), stop.clone());
    let answering = answer(nats, subjects, list.clone(), stop.clone());
    let reaping = reap_when_due(pool, list, config, stop);
    let (folded, _, answered, _) = tokio::join!(folding, usage, answering, reaping);
    folded?;
    answered
}

/// The consumer's handler: each event folded, and what it changed kept in its transaction.
struct Fold {
    list: Shared,
}

impl Handler for Fold {
    async fn handle<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        event: &'a RecordedEvent,
    ) -> Result<(), HandlerError> {
        // Folding is idempotent: if the transaction does not commit, the redelivered event
        // changes the list to the same state again.
        let change = lock(&self.list).apply(&event.event, event.recorded_at);
        db::keep(tx, &change).await?;
        Ok(())
    }
}

/// Follows the usage agents send, from a window back, until `stop`. A lost subscription
/// (NATS restarted) is made again from a window back; readings seen twice are dropped.
async fn follow_usage(
    js: jetstream::Context,
    subjects: Subjects,
    list: Shared,
    stop: CancellationToken,
) {
    const PART: &str = "the idle-reaper's usage";
    let mut outage = events::fault::Outage::default();
    while !stop.is_cancelled() {
        let back = lock(&list).keep_secs().min(bus::TELEMETRY_KEPT_SECS) + 10;
        let mut messages = match subscribe_usage(&js, &subjects, back).await {
            Ok(m) => {
                outage.passed(PART);
                m
            }
            Err(e) => {
                outage.failed(PART, &format_args!("cannot follow usage: {e}"));
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                continue;
            }
        };
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => return,
                next = messages.next() => next,
            };
            match next {
                Some(Ok(message)) => {
                    let Some(agent) = subjects.agent_of_telemetry(&message.subject) else {
                        continue;
                    };
                    match serde_json::from_slice::<UsageSample>(&message.payload) {
                        Ok(sample) => {
                            lock(&list).observe(agent, &sample);
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "a usage sample that does not decode")
                        }
                    }
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "usage message error");
                    break;
                }
                None => break,
            }
        }
        outage.failed(PART, &"lost usage; following it again");
    }
}

async fn subscribe_usage(
    js: &jetstream::Context,
    subjects: &Subjects,
    back_secs: u64,
) -> Result<consumer::pull::Ordered, bus::BusError> {
    bus::ensure_streams(js, subjects).await?;
    let stream = js.get_stream(&subjects.telemetry_stream).await?;
    let start_time = time::OffsetDateTime::now_utc() - time::Duration::seconds(back_secs as i64);
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subjects.all_usage(),
            deliver_policy: consumer::DeliverPolicy::ByStartTime { start_time },
            ..Default::default()
        })
        .await?;
    Ok(consumer.messages().await?)
}

/// Answers the gateway and the CLI: readings of a session, and the sessions due now.
async fn answer(
    nats: async_nats::Client,
    subjects: Subjects,
    list: Shared,
    stop: CancellationToken,
) -> Result<(), ReaperError> {
    let bus_error = |e: async_nats::SubscribeError| ReaperError::Bus(e.to_string());
    let readings_subject = subjects.idle_readings();
    let mut readings = nats
        .queue_subscribe(readings_subject.clone(), NAME.into())
        .await
        .map_err(bus_error)?;
    let mut preview = nats
        .queue_subscribe(subjects.idle_preview(), NAME.into())
        .await
        .map_err(bus_error)?;
    let activity_subject = subjects.idle_activity();
    let mut activity = nats
        .queue_subscribe(activity_subject.clone(), NAME.into())
        .await
        .map_err(bus_error)?;
    loop {
        let message = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            m = readings.next() => m,
            m = preview.next() => m,
            m = activity.next() => m,
        };
        let Some(message) = message else {
            return Err(ReaperError::Bus("a request subscription ended".into()));
        };
        if message.subject.as_str() == activity_subject {
            if let Ok(moved) = serde_json::from_slice::<AppActivity>(&message.payload) {
                lock(&list).app_activity(moved.session_id, moved.at);
            }
            continue;
        }
        let Some(reply) = message.reply else { continue };
        let now = chrono::Utc::now();
        let body = if message.subject.as_str() == readings_subject {
            let id: Option<Uuid> = serde_json::from_slice(&message.payload).ok();
            let found = id.and_then(|id| lock(&list).readings(id, now));
            serde_json::to_vec(&found)
        } else {
            serde_json::to_vec(&lock(&list).due(now))
        }
        .expect("readings serialise");
        if let Err(e) = nats.publish(reply, body.into()).await {
            tracing::debug!(error = %e, "an idle answer was not sent");
        }
    }
}

/// Every tick, terminates the sessions due, a few at a time; one being terminated is not
/// started again until its outcome is known.
async fn reap_when_due(pool: Pool, list: Shared, config: ReaperConfig, stop: CancellationToken) {
    let in_flight: Arc<Mutex<HashSet<Uuid>>> = Arc::default();
    let turns = Arc::new(tokio::sync::Semaphore::new(config.in_flight.max(1)));
    let mut tick = tokio::time::interval(config.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let due = lock(&list).due(chrono::Utc::now());
        for verdict in due {
            if !in_flight
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(verdict.session_id)
            {
                continue;
            }
            let Ok(turn) = turns.clone().acquire_owned().await else {
                return;
            };
            let (pool, in_flight) = (pool.clone(), in_flight.clone());
            tokio::spawn(async move {
                let id = verdict.session_id;
                // Once recorded, the session's own events unwatch it (a tick in between finds
                // it stopping and records nothing).
                reap(&pool, verdict).await;
                in_flight
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                drop(turn);
            });
        }
    }
}

pub const REAPS: &str = "berth_idle_reaps_total";

/// Describes the idle-reaper's metrics to the installed recorder.
pub fn describe_metrics() {
    metrics::describe_counter!(
        REAPS,
        "Sessions the idle-reaper terminated, by the checker that fired: `lifetime`, \
         `network_idle` or `utilization`"
    );
}

/// Terminates one session for `verdict`. A failure is logged; the next tick tries again.
async fn reap(pool: &Pool, verdict: IdleVerdict) {
    let metadata = Metadata {
        actor: Some(ACTOR.into()),
        ..Default::default()
    };
    let id = verdict.session_id;
    let reading = verdict.reading;
    match lifecycle::command(pool, id, &metadata, |s| s.reap(reading.clone())).await {
        Ok(_) => {
            metrics::counter!(REAPS, "checker" => reading.checker.as_str()).increment(1);
            tracing::info!(session_id = %id, checker = reading.checker.as_str(), "{}", reading.explanation);
        }
        Err(CommandError::Refused(TransitionError::Ended(_)) | CommandError::NotFound(_)) => {}
        Err(e) => tracing::warn!(session_id = %id, error = %e, "could not reap; trying again"),
    }
}
