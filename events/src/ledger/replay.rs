//! `berth replay ledger`: the whole log folded again into a scratch schema and compared with
//! the live tables, table by table.

use deadpool_postgres::{Pool, Transaction};

use super::memory::LedgerRows;
use super::LedgerError;

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
    create_scratch(&tx, &tables).await?;
    // The log folded in memory, each batch while the next is read and decoded, then written
    // out one `COPY` per table.
    let mut rows = LedgerRows::default();
    let events =
        crate::store::read_visible_through(&tx, crate::LogPosition::START, 20_000, |batch| {
            for recorded in &batch {
                rows.apply(recorded);
            }
            Ok(())
        })
        .await?;
    write_rows(&tx, &rows).await?;
    let mut differences = Vec::new();
    for table in &tables {
        let columns: Vec<String> = tx
            .query(
                "SELECT column_name::text FROM information_schema.columns
                 WHERE table_schema = 'ledger' AND table_name = $1 ORDER BY ordinal_position",
                &[table],
            )
            .await?
            .iter()
            .map(|r| r.get::<_, String>(0))
            .filter(|c| !NOT_COMPARED.contains(&format!("{table}.{c}").as_str()))
            .collect();
        let columns = columns.join(", ");
        let row = tx
            .query_one(
                &format!(
                    "SELECT (SELECT count(*) FROM (SELECT {columns} FROM ledger.{table}
                               EXCEPT ALL SELECT {columns} FROM {REPLAY_SCHEMA}.{table}) a),
                            (SELECT count(*) FROM (SELECT {columns} FROM {REPLAY_SCHEMA}.{table}
                               EXCEPT ALL SELECT {columns} FROM ledger.{table}) b)"
                ),
                &[],
            )
            .await?;
        let (live_only, replayed_only): (i64, i64) = (row.get(0), row.get(1));
        if live_only != 0 || replayed_only != 0 {
            differences.push((table.clone(), live_only, replayed_only));
        }
    }
    tx.rollback().await?;
    Ok(Replay {
        events,
        tables: tables.len(),
        differences,
    })
}

/// Creates the scratch schema with an empty copy of each of the ledger's `tables`.
async fn create_scratch(tx: &Transaction<'_>, tables: &[String]) -> Result<(), LedgerError> {
    // Same columns, defaults and keys; none of the checks or secondary unique indexes, which
    // guard decisions the log already holds.
    let mut ddl = format!("CREATE SCHEMA {REPLAY_SCHEMA};");
    for table in tables {
        ddl.push_str(&format!(
            "CREATE TABLE {REPLAY_SCHEMA}.{table} (LIKE ledger.{table}
               INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES);"
        ));
    }
    tx.batch_execute(&ddl).await?;
    for index in tx
        .query(
            "SELECT i.indexrelid::regclass::text, c.oid::regclass::text, con.conname::text
             FROM pg_index i
             JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
             LEFT JOIN pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = c.oid
             WHERE n.nspname = $1 AND NOT i.indisprimary",
            &[&REPLAY_SCHEMA],
        )
        .await?
    {
        let drop = match index.get::<_, Option<String>>(2) {
            Some(constraint) => format!(
                "ALTER TABLE {} DROP CONSTRAINT {constraint}",
                index.get::<_, String>(1)
            ),
            None => format!("DROP INDEX {}", index.get::<_, String>(0)),
        };
        tx.batch_execute(&drop).await?;
    }
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
