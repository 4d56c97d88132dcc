//! `berth replay ledger`: the whole log folded again into a scratch schema and compared with
//! the live tables, table by table.

use std::time::Duration;

use deadpool_postgres::{Pool, Transaction};

use super::memory::LedgerRows;
use super::LedgerError;
use crate::pg::{differing_from, fingerprints, Fingerprint};

/// What [`replay`] found: how many events it folded, and per table that differs, the rows only
/// the live ledger has and the rows only the fold of the log has.
#[derive(Debug)]
pub struct Replay {
    pub events: u64,
    pub tables: usize,
    pub differences: Vec<(String, i64, i64)>,
}

impl Replay {
    pub fn equal(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Columns a replay does not compare (`table.column`). The times are the ledger's own clock
/// when it wrote the row, which the log records as each event's `recorded_at` a few
/// microseconds apart; the queue sequence is the order rows were inserted, which is log order
/// except between launchers that raced.
pub const NOT_COMPARED: [&str; 14] = [
    "users.created_at",
    "folders.created_at",
    "folders.trashed_at",
    "agents.registered_at",
    "agents.last_heartbeat",
    "sessions.status_since",
    "sessions.created_at",
    "sessions.queue_seq",
    "custom_images.created_at",
    "registries.set_at",
    "circuits.opened_at",
    "app_services.started_at",
    "launches.created_at",
    "fit_watches.requested_at",
];

const REPLAY_SCHEMA: &str = "ledger_replay";

/// Whether a column of a ledger table is compared.
fn compared(table: &str, column: &str) -> bool {
    !NOT_COMPARED.contains(&format!("{table}.{column}").as_str())
}

/// Folds the whole log into a scratch copy of the ledger's tables and compares it, row for
/// row, with the live ledger, both as one snapshot sees them; then throws the copy away. The
/// live tables are only read, and writers are never held up.
pub async fn replay(pool: &Pool) -> Result<Replay, LedgerError> {
    let mut client = pool.get().await?;
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await?;
    let tables: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = 'ledger' AND table_type = 'BASE TABLE' ORDER BY 1",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let tables: Vec<&str> = tables.iter().map(String::as_str).collect();
    create_scratch(&tx, &tables).await?;
    // The live tables summed up on a connection of their own, in this transaction's
    // snapshot, while this one reads the log; here after the fold when the pool has no
    // other connection to give.
    let snapshot: String = tx
        .query_one("SELECT pg_export_snapshot()", &[])
        .await?
        .get(0);
    let beside = live_fingerprints(pool, snapshot, &tables);
    // The log folded in memory, each batch while the next is read and decoded, then written
    // out one `COPY` per table.
    let mut rows = LedgerRows::default();
    let fold = async {
        let events =
            crate::store::read_visible_through(&tx, crate::LogPosition::START, 20_000, |batch| {
                for recorded in &batch {
                    rows.apply(recorded);
                }
                Ok(())
            })
            .await?;
        Ok::<_, LedgerError>(events)
    };
    let (events, live) = tokio::try_join!(fold, beside)?;
    let live = match live {
        Some(live) => live,
        None => fingerprints(&tx, &tables, "ledger", compared).await?,
    };
    write_rows(&tx, &rows).await?;
    let differences =
        differing_from(&tx, &tables, ("ledger", &live), REPLAY_SCHEMA, compared).await?;
    tx.rollback().await?;
    Ok(Replay {
        events,
        tables: tables.len(),
        differences,
    })
}

/// The live ledger's `tables` summed up on a connection of their own, in the snapshot the
/// replay exported: they are only read, so they need not wait for the fold. None when the
/// pool gives no connection within a second (its only one is the replay's, or its others are
/// held for longer).
async fn live_fingerprints(
    pool: &Pool,
    snapshot: String,
    tables: &[&str],
) -> Result<Option<Vec<Fingerprint>>, LedgerError> {
    if pool.status().max_size < 2 {
        return Ok(None);
    }
    let Ok(client) = tokio::time::timeout(Duration::from_secs(1), pool.get()).await else {
        return Ok(None);
    };
    let mut client = client?;
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    tx.batch_execute(&format!("SET TRANSACTION SNAPSHOT '{snapshot}'"))
        .await?;
    let live = fingerprints(&tx, tables, "ledger", compared).await?;
    tx.rollback().await?;
    Ok(Some(live))
}

/// Creates the scratch schema with an empty copy of each of the ledger's `tables`.
async fn create_scratch(tx: &Transaction<'_>, tables: &[&str]) -> Result<(), LedgerError> {
    // Same columns and defaults; no index, key or check. Those guard decisions the log already
    // holds, and the comparison needs none: a row the fold wrote twice is a difference it
    // counts. Unlogged, as the schema never outlives the transaction: the fold's rows are
    // written without their WAL.
    let mut ddl = format!("CREATE SCHEMA {REPLAY_SCHEMA};");
    for table in tables {
        ddl.push_str(&format!(
            "CREATE UNLOGGED TABLE {REPLAY_SCHEMA}.{table} (LIKE ledger.{table}
               INCLUDING DEFAULTS INCLUDING IDENTITY);"
        ));
    }
    tx.batch_execute(&ddl).await?;
    Ok(())
}

/// Writes the folded tables into the replay's scratch schema, family by family.
async fn write_rows(tx: &Transaction<'_>, rows: &LedgerRows) -> Result<(), tokio_postgres::Error> {
    rows.accounts.copy_into(tx, REPLAY_SCHEMA).await?;
    rows.resources.copy_into(tx, REPLAY_SCHEMA).await?;
    rows.agents.copy_into(tx, REPLAY_SCHEMA).await?;
    rows.sessions.copy_into(tx, REPLAY_SCHEMA).await?;
    rows.images.copy_into(tx, REPLAY_SCHEMA).await?;
    rows.apps.copy_into(tx, REPLAY_SCHEMA).await?;
    rows.launches.copy_into(tx, REPLAY_SCHEMA).await?;
    Ok(())
}
