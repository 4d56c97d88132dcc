//! Durable, idempotent handling of published events.
//!
//! A consumer is a durable JetStream pull consumer plus a table of the event ids it has
//! applied. Each event is applied in one PostgreSQL transaction that also records its id;
//! a redelivered or duplicate event finds its id there and is acknowledged without being
//! applied again. The message is acknowledged only after that transaction commits, with a
//! plain ack: should the ack be lost, the redelivery finds the id and costs nothing, so the
//! next event does not wait for the server to confirm it. An event the handler passes over
//! ([`Handler::wants`]) is acknowledged without a transaction.
//!
//! Fit for services: several subject filters; a handler that fails for now is retried with
//! growing delays a bounded number of times, then the event is given up and logged; a long
//! handler keeps its message with progress acks; a lost subscription (NATS restarted, the
//! consumer deleted) is made again instead of ending the consumer.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::consumer::pull::MessagesErrorKind;
use async_nats::jetstream::{self, consumer, AckKind};
use deadpool_postgres::{Pool, Transaction};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::fault::Outage;
use crate::relay::{ensure_stream, RelayError, Topology};
use crate::RecordedEvent;

/// What a handler does with one event, inside the transaction that marks it applied.
pub trait Handler: Send + Sync {
    /// Whether the handler does anything with `event`. One it passes over is acknowledged
    /// at once, without a transaction or a row in the applied-events table: there is nothing
    /// to apply twice. A consumer's subjects select categories; this selects within them.
    fn wants(&self, _event: &RecordedEvent) -> bool {
        true
    }

    fn handle<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        event: &'a RecordedEvent,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send + 'a;
}

#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// Worth another try later (the message is redelivered after a delay).
    #[error("transient: {0}")]
    Transient(String),
    /// Will never succeed; the message is terminated and logged.
    #[error("permanent: {0}")]
    Permanent(String),
}

impl From<tokio_postgres::Error> for HandlerError {
    fn from(e: tokio_postgres::Error) -> Self {
        HandlerError::Transient(crate::fault::described(&e))
    }
}

/// Whether `apply` ran the handler or found the event already applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Now,
    Already,
}

/// Applies `event` with `handler` unless consumer `name` has applied it before.
pub async fn apply<H: Handler>(
    pool: &Pool,
    name: &str,
    handler: &H,
    event: &RecordedEvent,
) -> Result<Applied, HandlerError> {
    let mut client = pool
        .get()
        .await
        .map_err(|e| HandlerError::Transient(e.to_string()))?;
    let tx = client.transaction().await?;
    let fresh = tx
        .execute(
            "INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&name, &event.event_id],
        )
        .await?;
    if fresh == 0 {
        return Ok(Applied::Already);
    }
    handler.handle(&tx, event).await?;
    tx.commit().await?;
    Ok(Applied::Now)
}

/// How a consumer redelivers an event whose handler failed for now: after
/// `base · 2^(attempt − 1)`, capped at `max`, for at most `attempts` deliveries in all; then it
/// gives up on that event (terminates the message, logs it as an error) and goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redelivery {
    pub attempts: i64,
    pub base: Duration,
    pub max: Duration,
}

impl Default for Redelivery {
    fn default() -> Self {
        Redelivery {
            attempts: 5,
            base: Duration::from_secs(1),
            max: Duration::from_secs(120),
        }
    }
}

impl Redelivery {
    /// What to do after delivery number `delivered` (1 for the first) failed for now: wait
    /// this long before the next, or `None` to give up.
    pub fn after_failure(&self, delivered: i64) -> Option<Duration> {
        if delivered >= self.attempts {
            return None;
        }
        let doublings = u32::try_from(delivered.max(1) - 1)
            .unwrap_or(u32::MAX)
            .min(30);
        Some(self.base.saturating_mul(1 << doublings).min(self.max))
    }
}

/// Which events a consumer receives, and how it treats them.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Durable name; also the key of its applied-events table rows.
    pub name: String,
    /// Subject filters, e.g. `berth.evt.session.>` ([`Topology::category_subject`]); none for
    /// every event.
    pub filter_subjects: Vec<String>,
    /// How long the server waits for an ack before redelivering. A handler that runs longer
    /// keeps its message with progress acks, sent every half of this.
    pub ack_wait: Duration,
    pub redelivery: Redelivery,
}

impl ConsumerConfig {
    /// A consumer `name` of the events on `filter_subjects`, with the default ack wait (30 s)
    /// and redelivery.
    pub fn new(name: impl Into<String>, filter_subjects: Vec<String>) -> ConsumerConfig {
        ConsumerConfig {
            name: name.into(),
            filter_subjects,
            ack_wait: Duration::from_secs(30),
            redelivery: Redelivery::default(),
        }
    }

    fn server_config(&self) -> consumer::pull::Config {
        consumer::pull::Config {
            durable_name: Some(self.name.clone()),
            filter_subjects: self.filter_subjects.clone(),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: self.ack_wait,
            // The server's bound too, should a consumer die on an event every time.
            max_deliver: self.redelivery.attempts,
            ..Default::default()
        }
    }
}

/// How long a consumer waits before making its subscription again after losing it.
const RESUBSCRIBE: Duration = Duration::from_secs(1);

/// Runs consumer `config.name` until `stop` is cancelled. The consumer is created, or updated
/// to `config`, on the server. When NATS goes away or the consumer's messages end (a server
/// restart, the consumer deleted), it says so once (an [`Outage`] of part
/// `consumer <name>`), makes the consumer and its subscription again until that works, and
/// says when it is back; it returns only when stopped.
pub async fn run<H: Handler>(
    pool: Pool,
    js: jetstream::Context,
    topology: Topology,
    config: ConsumerConfig,
    handler: H,
    stop: CancellationToken,
) -> Result<(), RelayError> {
    let part = format!("consumer {}", config.name);
    let mut outage = Outage::default();
    loop {
        let subscribed = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            subscribed = subscribe(&js, &topology, &config) => subscribed,
        };
        let mut messages = match subscribed {
            Ok(messages) => {
                outage.passed(&part);
                messages
            }
            Err(e) => {
                outage.failed(&part, &format_args!("cannot subscribe: {e}"));
                tokio::select! {
                    _ = stop.cancelled() => return Ok(()),
                    _ = tokio::time::sleep(RESUBSCRIBE) => {}
                }
                continue;
            }
        };
        loop {
            let next = tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                next = messages.next() => next,
            };
            match next {
                None => {
                    outage.failed(&part, &"its messages ended; subscribing again");
                    break;
                }
                Some(Err(e)) if e.kind() == MessagesErrorKind::ConsumerDeleted => {
                    outage.failed(&part, &"deleted on the server; making it again");
                    break;
                }
                Some(Err(e)) => {
                    // Missed heartbeats and the like: the stream recovers by itself.
                    tracing::warn!(consumer = %config.name, "pull error: {e}");
                }
                Some(Ok(message)) => handle_message(&pool, &config, &handler, message).await,
            }
        }
    }
}

async fn subscribe(
    js: &jetstream::Context,
    topology: &Topology,
    config: &ConsumerConfig,
) -> Result<consumer::pull::Stream, RelayError> {
    let stream = ensure_stream(js, topology).await?;
    let consumer: consumer::PullConsumer = stream
        .create_consumer(config.server_config())
        .await
        .map_err(|e| RelayError::Nats(e.to_string()))?;
    consumer
        .messages()
        .await
        .map_err(|e| RelayError::Nats(e.to_string()))
}

/// Applies one message's event and answers the server: ack once applied, a delayed Nak when
/// the handler failed for now, Term when it refused or when redelivery is spent.
async fn handle_message<H: Handler>(
    pool: &Pool,
    config: &ConsumerConfig,
    handler: &H,
    message: jetstream::Message,
) {
    let event: RecordedEvent = match serde_json::from_slice(&message.payload) {
        Ok(event) => event,
        Err(e) => {
            tracing::error!(consumer = %config.name, subject = %message.subject, "undecodable event: {e}");
            let _ = message.ack_with(AckKind::Term).await;
            return;
        }
    };
    // What this consumer has yet to take after this event, and how old the event is.
    if let Ok(info) = message.info() {
        metrics::gauge!(crate::metrics::CONSUMER_LAG_EVENTS, "consumer" => config.name.clone())
            .set(info.pending as f64);
    }
    metrics::gauge!(crate::metrics::CONSUMER_LAG_SECONDS, "consumer" => config.name.clone())
        .set(crate::metrics::age_secs(event.recorded_at));
    if !handler.wants(&event) {
        if let Err(e) = message.ack().await {
            tracing::debug!(consumer = %config.name, "ack of a passed-over event failed: {e}");
        }
        return;
    }
    let delivered = message.info().map(|i| i.delivered).unwrap_or(1);
    let span = tracing::info_span!("consume", consumer = %config.name, event_id = %event.event_id,
        event_type = event.event_type(), stream_id = %event.stream_id, delivered);
    // The handling joins the journey the event was recorded in.
    crate::trace::follow(&span, event.metadata.traceparent.as_deref());
    async {
        // A long handler keeps its message: progress acks restart the server's ack wait.
        let applied = {
            let work = apply(pool, &config.name, handler, &event);
            tokio::pin!(work);
            let mut progress = tokio::time::interval(config.ack_wait / 2);
            progress.tick().await;
            loop {
                tokio::select! {
                    applied = &mut work => break applied,
                    _ = progress.tick() => {
                        let _ = message.ack_with(AckKind::Progress).await;
                    }
                }
            }
        };
        match applied {
            Ok(_) => {
                if let Err(e) = message.ack().await {
                    // The event is recorded as applied; a redelivery will be skipped.
                    tracing::warn!("ack failed: {e}");
                }
            }
            Err(HandlerError::Transient(reason)) => {
                match config.redelivery.after_failure(delivered) {
                    Some(delay) => {
                        tracing::warn!(%reason, ?delay, "handler failed, will retry");
                        let _ = message.ack_with(AckKind::Nak(Some(delay))).await;
                    }
                    None => {
                        tracing::error!(%reason, position = %event.position, delivered,
                            "handler failed on every delivery; giving up on the event");
                        let _ = message.ack_with(AckKind::Term).await;
                    }
                }
            }
            Err(HandlerError::Permanent(reason)) => {
                tracing::error!(%reason, position = %event.position, "handler refused the event");
                let _ = message.ack_with(AckKind::Term).await;
            }
        }
    }
    .instrument(span)
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redelivery_backs_off_doubling_to_its_cap_then_gives_up() {
        let r = Redelivery {
            attempts: 5,
            base: Duration::from_millis(100),
            max: Duration::from_millis(500),
        };
        let waits: Vec<Option<Duration>> = (1..=6).map(|d| r.after_failure(d)).collect();
        assert_eq!(
            waits,
            [100, 200, 400, 500]
                .map(|ms| Some(Duration::from_millis(ms)))
                .into_iter()
                .chain([None, None])
                .collect::<Vec<_>>()
        );
        let huge = Redelivery {
            attempts: i64::MAX,
            ..r
        };
        assert_eq!(huge.after_failure(1_000), Some(Duration::from_millis(500)));
    }
}
