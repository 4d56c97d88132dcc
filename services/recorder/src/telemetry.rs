//! The telemetry sink: a durable consumer of the telemetry stream that keeps each kernel's
//! output in `recorder.session_logs` and each session's latest usage in
//! `recorder.session_usage`. Both are idempotent (a chunk is appended only at the end of what
//! is held of its reading, a sample only if no later one is kept), so a redelivered message
//! changes nothing. An agent may send only about sessions placed on it: the sink drops what an
//! agent sends about another agent's session.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, AckKind};
use bus::protocol::{LogChunk, UsageSample};
use bus::Subjects;
use deadpool_postgres::Pool;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::db::{self, Kept};

/// The consumer's durable name.
pub const NAME: &str = "telemetry-sink";

/// Keeps what agents send until `stop`. A lost subscription (NATS restarted) is made again.
pub async fn run(js: jetstream::Context, pool: Pool, subjects: Subjects, stop: CancellationToken) {
    const PART: &str = "the telemetry sink";
    let mut outage = events::fault::Outage::default();
    while !stop.is_cancelled() {
        let mut messages = match subscribe(&js, &subjects).await {
            Ok(m) => {
                outage.passed(PART);
                m
            }
            Err(e) => {
                outage.failed(PART, &format_args!("cannot subscribe: {e}"));
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
            let message = match next {
                Some(Ok(m)) => m,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "telemetry message error");
                    continue;
                }
                None => break,
            };
            let ack = match keep(&pool, &subjects, &message.subject, &message.payload).await {
                Ok(()) => AckKind::Ack,
                Err(Retry::Early) => AckKind::Nak(Some(Duration::from_millis(200))),
                Err(Retry::Store(why)) => {
                    tracing::warn!(subject = %message.subject, %why, "telemetry not kept; it comes again");
                    AckKind::Nak(Some(Duration::from_secs(1)))
                }
            };
            let _ = message.ack_with(ack).await;
        }
        outage.failed(PART, &"lost its subscription; making it again");
    }
}

async fn subscribe(
    js: &jetstream::Context,
    subjects: &Subjects,
) -> Result<consumer::pull::Stream, bus::BusError> {
    crate::ensure_streams(js, subjects).await?;
    let config = consumer::pull::Config {
        durable_name: Some(NAME.into()),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(30),
        ..Default::default()
    };
    let consumer = js
        .create_consumer_on_stream(config, subjects.telemetry_stream.clone())
        .await?;
    Ok(consumer.messages().await?)
}

/// Worth another try later.
enum Retry {
    /// A chunk came before an earlier one of its reading.
    Early,
    /// The store failed.
    Store(String),
}

async fn keep(
    pool: &Pool,
    subjects: &Subjects,
    subject: &str,
    payload: &[u8],
) -> Result<(), Retry> {
    let Some(agent) = subjects.agent_of_telemetry(subject) else {
        return Ok(());
    };
    let kind = subject.split('.').nth(subjects.root.split('.').count() + 2);
    let placed = |session| async move {
        db::has_kernel_on(pool, session, agent)
            .await
            .map_err(|e| Retry::Store(e.to_string()))
    };
    match kind {
        Some("log") => {
            let Ok(chunk) = serde_json::from_slice::<LogChunk>(payload) else {
                tracing::warn!(%agent, "an unreadable log chunk was dropped");
                return Ok(());
            };
            if !placed(chunk.session_id).await? {
                tracing::warn!(%agent, session = %chunk.session_id, "output about a session not placed on the agent was dropped");
                return Ok(());
            }
            match db::keep_log_chunk(pool, &chunk).await {
                Ok(Kept::Now | Kept::Already) => Ok(()),
                Ok(Kept::Early) => Err(Retry::Early),
                Err(e) => Err(Retry::Store(e.to_string())),
            }
        }
        Some("usage") => {
            let Ok(sample) = serde_json::from_slice::<UsageSample>(payload) else {
                tracing::warn!(%agent, "an unreadable usage sample was dropped");
                return Ok(());
            };
            if !placed(sample.session_id).await? {
                return Ok(());
            }
            db::keep_usage(pool, &sample)
                .await
                .map_err(|e| Retry::Store(e.to_string()))
        }
        _ => Ok(()),
    }
}
