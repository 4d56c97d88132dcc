//! `berth replay ledger`: the whole log folded again into scratch schemas and compared with
//! the live tables, table by table.

use std::collections::HashMap;
use std::time::Duration;

use deadpool_postgres::{Pool, Transaction};
use tokio::time::Instant;

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
/// The largest table a fold writes, written beside all the others.
const SESSIONS: &str = "sessions";

/// Whether a column of a ledger table is compared.
fn compared(table: &str, column: &str) -> bool {
    !NOT_COMPARED.contains(&format!("{table}.{column}").as_str())
}

/// Folds the whole log into a scratch copy of the ledger's tables and compares it, row for
/// row, with the live ledger, both as one snapshot sees them; then throws the copy away. The
/// live tables are only read, and writers are never held up.
pub async fn replay(pool: &Pool) -> Result<Replay, LedgerError> {
    let started = Instant::now();
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
    // The replay's own scratch schema holds the fold's `sessions`; its other tables only when
    // they are written here (no second connection, or a difference to count).
    create_scratch(&tx, REPLAY_SCHEMA, &[SESSIONS]).await?;
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
    let live: HashMap<&str, &Fingerprint> = tables.iter().copied().zip(&live).collect();
    let read = started.elapsed();
    let others: Vec<&str> = tables.iter().copied().filter(|t| *t != SESSIONS).collect();
    let (folded, others_here) = folded_fingerprints(pool, &tx, &rows, &others).await?;
    let written = started.elapsed() - read;
    let unequal: Vec<&str> = tables
        .iter()
        .copied()
        .filter(|table| live.get(table) != folded.get(table).as_ref())
        .collect();
    // Only a table whose sums differ has its rows grouped and counted, against the fold's
    // rows in this transaction's scratch schema.
    let mut differences = Vec::new();
    if !unequal.is_empty() {
        if !others_here {
            write_others_here(&tx, &rows, &others).await?;
        }
        let left: Vec<Fingerprint> = unequal.iter().map(|t| live[t].clone()).collect();
        differences =
            differing_from(&tx, &unequal, ("ledger", &left), REPLAY_SCHEMA, compared).await?;
    }
    tx.rollback().await?;
    // The fold's maps (a million events: some 85,000 sessions' rows) are freed on a thread of
    // their own: the answer need not wait for the allocator.
    tokio::task::spawn_blocking(move || drop(rows));
    tracing::debug!(
        events,
        ?read,
        ?written,
        total = ?started.elapsed(),
        "ledger replay: the log read and folded, the fold written and summed"
    );
    Ok(Replay {
        events,
        tables: tables.len(),
        differences,
    })
}

/// The fold's tables written out and summed up, by table, in two parts at once: `sessions`
/// (the largest) in the replay's scratch schema, the `others` on a second connection in a
/// scratch schema of their own, thrown away with its transaction; all of them in the replay's
/// scratch when the pool gives no second connection. Also whether the others are in the
/// replay's scratch.
async fn folded_fingerprints<'t>(
    pool: &Pool,
    tx: &Transaction<'_>,
    rows: &LedgerRows,
    others: &[&'t str],
) -> Result<(HashMap<&'t str, Fingerprint>, bool), LedgerError> {
    let sessions = async {
        rows.sessions.copy_sessions(tx, REPLAY_SCHEMA).await?;
        Ok::<_, LedgerError>(fingerprints(tx, &[SESSIONS], REPLAY_SCHEMA, compared).await?)
    };
    let (sessions, elsewhere) = tokio::try_join!(sessions, others_elsewhere(pool, rows, others))?;
    let (others_summed, here) = match elsewhere {
        Some(summed) => (summed, false),
        None => {
            write_others_here(tx, rows, others).await?;
            (
                fingerprints(tx, others, REPLAY_SCHEMA, compared).await?,
                true,
            )
        }
    };
    let folded = others
        .iter()
        .copied()
        .zip(others_summed)
        .chain(std::iter::once(SESSIONS).zip(sessions))
        .collect();
    Ok((folded, here))
}

/// The fold's tables other than `sessions` (`others`) written and summed up on a second
/// connection, in a scratch schema named for this replay alone. None when the pool gives no
/// second connection.
async fn others_elsewhere(
    pool: &Pool,
    rows: &LedgerRows,
    others: &[&str],
) -> Result<Option<Vec<Fingerprint>>, LedgerError> {
    let Some(mut client) = second_connection(pool).await? else {
        return Ok(None);
    };
    let tx = client.transaction().await?;
    let schema = format!("{REPLAY_SCHEMA}_{}", uuid::Uuid::new_v4().simple());
    create_scratch(&tx, &schema, others).await?;
    write_others(&tx, rows, &schema).await?;
    let summed = fingerprints(&tx, others, &schema, compared).await?;
    tx.rollback().await?;
    Ok(Some(summed))
}

/// A connection of the pool besides the replay's own, when one comes within a second: None
/// when the pool has only the one, or its others are held for longer.
async fn second_connection(pool: &Pool) -> Result<Option<deadpool_postgres::Object>, LedgerError> {
    if pool.status().max_size < 2 {
        return Ok(None);
    }
    match tokio::time::timeout(Duration::from_secs(1), pool.get()).await {
        Ok(client) => Ok(Some(client?)),
        Err(_) => Ok(None),
    }
}

/// The live ledger's `tables` summed up on a connection of their own, in the snapshot the
/// replay exported: they are only read, so they need not wait for the fold. None when the
/// pool gives no second connection.
async fn live_fingerprints(
    pool: &Pool,
    snapshot: String,
    tables: &[&str],
) -> Result<Option<Vec<Fingerprint>>, LedgerError> {
    let Some(mut client) = second_connection(pool).await? else {
        return Ok(None);
    };
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

/// Creates scratch schema `schema` with an empty copy of each of the ledger's `tables`.
async fn create_scratch(
    tx: &Transaction<'_>,
    schema: &str,
    tables: &[&str],
) -> Result<(), tokio_postgres::Error> {
    let ddl = format!("CREATE SCHEMA {schema};{}", scratch_tables(schema, tables));
    tx.batch_execute(&ddl).await
}

/// What makes an empty copy of each of the ledger's `tables` in scratch schema `schema`.
fn scratch_tables(schema: &str, tables: &[&str]) -> String {
    // Same columns and defaults; no index, key or check. Those guard decisions the log already
    // holds, and the comparison needs none: a row the fold wrote twice is a difference it
    // counts. Unlogged, as the schema never outlives the transaction: the fold's rows are
    // written without their WAL.
    tables
        .iter()
        .map(|table| {
            format!(
                "CREATE UNLOGGED TABLE {schema}.{table} (LIKE ledger.{table}
                   INCLUDING DEFAULTS INCLUDING IDENTITY);"
            )
        })
        .collect()
}

/// Makes the ledger's tables other than `sessions` (`others`) in the replay's own scratch
/// schema and writes the fold's rows into them.
async fn write_others_here(
    tx: &Transaction<'_>,
    rows: &LedgerRows,
    others: &[&str],
) -> Result<(), tokio_postgres::Error> {
    tx.batch_execute(&scratch_tables(REPLAY_SCHEMA, others))
        .await?;
    write_others(tx, rows, REPLAY_SCHEMA).await
}

/// Writes the folded tables other than `sessions` into scratch schema `schema`.
async fn write_others(
    tx: &Transaction<'_>,
    rows: &LedgerRows,
    schema: &str,
) -> Result<(), tokio_postgres::Error> {
    rows.accounts.copy_into(tx, schema).await?;
    rows.resources.copy_into(tx, schema).await?;
    rows.agents.copy_into(tx, schema).await?;
    rows.sessions.copy_others(tx, schema).await?;
    rows.images.copy_into(tx, schema).await?;
    rows.apps.copy_into(tx, schema).await?;
    rows.launches.copy_into(tx, schema).await?;
    Ok(())
}
