//! The log reads of what-if replays: the events a workload is made of, decoded with the
//! catalogue, in log order. The only SQL of [`super`] (the workspace's tidy test checks it).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use events::catalogue::Event;
use events::ledger::LedgerError;

use super::workload::{Logged, EVENT_TYPES};
use super::WhatIfError;

/// Every event of the types a workload is read from ([`EVENT_TYPES`]) recorded up to `to`
/// (`None`: the whole log), in log order (the table's transaction ids as numbers: the text
/// the query reads them as would sort `10147` before `7935`). Events before the window are read too: the agents,
/// groups, policies and sessions of the window's start are made of them.
pub async fn logged_events(
    client: &impl GenericClient,
    to: Option<DateTime<Utc>>,
) -> Result<Vec<Logged>, WhatIfError> {
    let rows = client
        .query(
            "SELECT tx_id::text, recorded_at, event_type, schema_version, payload::text
             FROM events
             WHERE event_type = ANY($1) AND ($2::timestamptz IS NULL OR recorded_at <= $2)
             ORDER BY events.tx_id, events.seq",
            &[&EVENT_TYPES, &to],
        )
        .await
        .map_err(LedgerError::from)?;
    rows.iter()
        .map(|r| {
            let event = Event::decode_str(r.get(2), r.get(3), r.get(4))?;
            Ok(Logged {
                tx: r.get(0),
                at: r.get(1),
                event,
            })
        })
        .collect()
}
