//! Recording: the events appended and applied to the ledger in one transaction.

use chrono::Utc;
use deadpool_postgres::{Pool, Transaction};

use super::fold::apply;
use super::sessions::SessionPatch;
use super::LedgerError;
use crate::catalogue::{Event, Metadata};
use crate::store::{append_with, check_limits, Appended, ExpectedVersion, ProposedEvent};

/// Appends `events` to `stream_id` and applies them to the ledger, in the caller's
/// transaction (which the caller commits).
pub async fn record(
    tx: &Transaction<'_>,
    stream_id: &str,
    expected: ExpectedVersion,
    events: &[Event],
    metadata: &Metadata,
) -> Result<Appended, LedgerError> {
    let proposed: Vec<ProposedEvent> = events
        .iter()
        .map(|e| ProposedEvent::new(e, metadata.clone()))
        .collect();
    // Built from typed events here, so their payloads decode by construction.
    check_limits(stream_id, &proposed)?;
    let appended = append_with(tx, stream_id, expected, &proposed).await?;
    let at = Utc::now();
    let first_version = appended.stream_version + 1 - events.len() as u64;
    // The session row's changes from all the events are written as one update.
    let mut patch = SessionPatch::default();
    let traceparent = metadata.traceparent.as_deref();
    for (i, event) in events.iter().enumerate() {
        let version = first_version + i as u64;
        apply(tx, &mut patch, event, version, at, traceparent).await?;
    }
    patch.flush(tx).await?;
    Ok(appended)
}

/// [`record`] in a transaction of its own.
pub async fn record_now(
    pool: &Pool,
    stream_id: &str,
    expected: ExpectedVersion,
    events: &[Event],
    metadata: &Metadata,
) -> Result<Appended, LedgerError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let appended = record(&tx, stream_id, expected, events, metadata).await?;
    crate::activity::commit(tx).await?;
    Ok(appended)
}
