//! Recording: the events appended and applied to the ledger in one transaction.

use chrono::{DateTime, Utc};
use deadpool_postgres::{Pool, Transaction};

use super::fold::apply;
use super::sessions::{Decisions, SessionPatch};
use super::LedgerError;
use crate::catalogue::{Event, Metadata};
use crate::store::{
    append_many, append_with, check_limits, Appended, ExpectedVersion, ProposedEvent, StoreError,
    StreamAppend,
};

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
    let first_version = appended.stream_version + 1 - events.len() as u64;
    // The ledger's clock is the log's: a pending session's `status_since`, which its
    // pending timeout counts from, is its request's `recorded_at`, as a what-if replay
    // reads it (`scheduler::whatif`).
    apply_all(tx, events, first_version, appended.recorded_at, metadata).await?;
    Ok(appended)
}

/// One stream's events for [`record_many`].
pub struct Recording {
    pub stream_id: String,
    pub expected: ExpectedVersion,
    pub events: Vec<Event>,
    pub metadata: Metadata,
}

/// [`record`] for many streams, all or nothing, in the caller's transaction: every stream's
/// events appended with one statement, and the streams that hold only a session's request or
/// only a scheduling decision written together (`sessions::Decisions`: one insert for every
/// requested session, one update for every session row, one statement for every
/// placement); any other stream is applied as [`record`] applies it. A pass of the scheduler
/// writes thousands of decisions so, and a launch all its sessions; one statement per change
/// cost them most of their time. Each stream may appear once only.
pub async fn record_many(
    tx: &Transaction<'_>,
    recordings: &[Recording],
) -> Result<(), LedgerError> {
    let appends = recordings
        .iter()
        .map(|r| {
            let events: Vec<ProposedEvent> = r
                .events
                .iter()
                .map(|e| ProposedEvent::new(e, r.metadata.clone()))
                .collect();
            check_limits(&r.stream_id, &events)?;
            Ok(StreamAppend {
                stream_id: &r.stream_id,
                expected: r.expected,
                events,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let appended = append_many(tx, &appends).await?;
    // The ledger's clock is the log's, as in [`record`].
    let at = appended.recorded_at;
    let mut decisions = Decisions::default();
    for (recording, version) in recordings.iter().zip(appended.versions) {
        let first_version = version + 1 - recording.events.len() as u64;
        let traceparent = recording.metadata.traceparent.as_deref();
        if !decisions.take_request(&recording.events, first_version, at, traceparent)
            && !decisions.take(&recording.events, first_version, at)
        {
            apply_all(
                tx,
                &recording.events,
                first_version,
                at,
                &recording.metadata,
            )
            .await?;
        }
    }
    decisions.write(tx).await
}

/// Applies one stream's new events to the ledger, the first of them its `first_version`-th.
async fn apply_all(
    tx: &Transaction<'_>,
    events: &[Event],
    first_version: u64,
    at: DateTime<Utc>,
    metadata: &Metadata,
) -> Result<(), LedgerError> {
    // The session row's changes from all the events are written as one update.
    let mut patch = SessionPatch::default();
    let traceparent = metadata.traceparent.as_deref();
    for (i, event) in events.iter().enumerate() {
        let version = first_version + i as u64;
        apply(tx, &mut patch, event, version, at, traceparent).await?;
    }
    patch.flush(tx).await
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
