//! Durable, idempotent handling of published events.
//!
//! A consumer is a durable JetStream pull consumer plus a table of the event ids it has
//! applied. Each event is applied in one PostgreSQL transaction that also records its id;
//! a redelivered or duplicate event finds its id there and is acknowledged without being
//! applied again. The message is acknowledged only after that transaction commits.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, AckKind};
use deadpool_postgres::{Pool, Transaction};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::relay::{ensure_stream, RelayError, Topology};
use crate::RecordedEvent;

/// What a handler does with one event, inside the transaction that marks it applied.
pub trait Handler: Send + Sync {
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
        HandlerError::Transient(e.to_string())
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

/// Which events a consumer receives.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Durable name; also the key of its applied-events table rows.
    pub name: String,
    /// Subject filter, e.g. `berth.evt.session.>` ([`Topology::category_subject`]); empty for
    /// every event.
    pub filter_subject: String,
    /// How long the server waits for an ack before redelivering.
    pub ack_wait: Duration,
}

/// Runs consumer `config.name` until `stop` is cancelled.
pub async fn run<H: Handler>(
    pool: Pool,
    js: jetstream::Context,
    topology: Topology,
    config: ConsumerConfig,
    handler: H,
    stop: CancellationToken,
) -> Result<(), RelayError> {
    let stream = ensure_stream(&js, &topology).await?;
    let consumer: consumer::PullConsumer = stream
        .get_or_create_consumer(
            &config.name,
            consumer::pull::Config {
                durable_name: Some(config.name.clone()),
                filter_subject: config.filter_subject.clone(),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: config.ack_wait,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| RelayError::Nats(e.to_string()))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| RelayError::Nats(e.to_string()))?;
    loop {
        let next = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            next = messages.next() => next,
        };
        let message = match next {
            None => return Err(RelayError::Nats("consumer stream ended".into())),
            Some(Err(e)) => {
                // Missed heartbeats and the like: the stream recovers by itself.
                tracing::warn!(consumer = %config.name, "pull error: {e}");
                continue;
            }
            Some(Ok(message)) => message,
        };
        let event: RecordedEvent = match serde_json::from_slice(&message.payload) {
            Ok(event) => event,
            Err(e) => {
                tracing::error!(consumer = %config.name, subject = %message.subject, "undecodable event: {e}");
                let _ = message.ack_with(AckKind::Term).await;
                continue;
            }
        };
        let span = tracing::info_span!("consume", consumer = %config.name, event_id = %event.event_id,
            event_type = event.event_type(), stream_id = %event.stream_id);
        // The handling joins the journey the event was recorded in.
        crate::trace::follow(&span, event.metadata.traceparent.as_deref());
        async {
            match apply(&pool, &config.name, &handler, &event).await {
                Ok(_) => {
                    if let Err(e) = message.double_ack().await {
                        // The event is recorded as applied; a redelivery will be skipped.
                        tracing::warn!("ack failed: {e}");
                    }
                }
                Err(HandlerError::Transient(reason)) => {
                    tracing::warn!(%reason, "handler failed, will retry");
                    let _ = message
                        .ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
                        .await;
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
}
