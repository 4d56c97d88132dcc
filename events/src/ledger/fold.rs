//! The SQL account of how each event changes the ledger's tables, as
//! [`record`](super::record) applies events in the transaction that appends them: each event
//! routed to its family's `apply_sql`. A replay folds the log with the second account
//! (`memory`, each family's `apply_in_memory`), written apart, and compares the two.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::sessions::{self, SessionPatch};
use super::{accounts, agents, apps, images, launches, resources, Family, LedgerError};
use crate::catalogue::Event;

/// Applies one event, the `stream_version`-th of its stream, to the ledger.
/// `traceparent` is the trace the event was recorded in (kept for a session's journey).
/// The session row's changes are gathered in `patch` (the caller flushes it at the end);
/// what it holds is written before any event that is not of a session's stream, so the
/// statements keep the events' order.
pub(super) async fn apply<C: GenericClient>(
    client: &C,
    patch: &mut SessionPatch,
    event: &Event,
    stream_version: u64,
    at: DateTime<Utc>,
    traceparent: Option<&str>,
) -> Result<(), LedgerError> {
    match Family::of(event) {
        Family::Accounts => {
            patch.flush(client).await?;
            accounts::apply_sql(client, event, at).await
        }
        Family::Resources => {
            patch.flush(client).await?;
            resources::apply_sql(client, event).await
        }
        Family::Agents => {
            patch.flush(client).await?;
            agents::apply_sql(client, event, at).await
        }
        Family::Sessions => {
            sessions::apply_sql(client, patch, event, stream_version, at, traceparent).await
        }
        Family::Apps => apps::apply_sql(client, patch, event, stream_version, at).await,
        Family::Images => images::apply_sql(client, patch, event, stream_version, at).await,
        Family::Launches => {
            patch.flush(client).await?;
            launches::apply_sql(client, event, at).await
        }
        Family::Ignored => patch.flush(client).await,
    }
}

/// Runs one statement, prepared once per connection.
pub(super) async fn exec<C: GenericClient>(
    client: &C,
    sql: &'static str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.execute(&statement, params).await
}
