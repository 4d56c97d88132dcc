//! Projections: read models folded from the log, each with its own checkpoint.
//!
//! A projection keeps its tables in a schema of its own (`proj_<name>`). The runner reads the
//! log behind the horizon, applies a batch and moves the checkpoint in one transaction, so
//! each event takes effect exactly once. `rebuild` folds the whole log again into a fresh
//! schema and compares it, row for row, with the live one; it can then take its place.

use std::future::Future;
use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool, Transaction};
use tokio_postgres::types::ToSql;
use tokio_util::sync::CancellationToken;

use crate::pg::{create_indexes, differing_tables, drop_secondary_indexes, Xid8};
use crate::relay::{read_checkpoint, write_checkpoint};
use crate::store::{read_all_with, read_through, LogPosition, StoreError};
use crate::RecordedEvent;

/// A read model. Its `apply` must be deterministic: it may use only the event (its
/// `recorded_at`, never `now()`), so a rebuild equals the live tables.
pub trait Projection: Send + Sync {
    /// Short lower-case name; the schema is `proj_<name>`.
    fn name(&self) -> &'static str;
    /// Tables the projection owns, compared by `rebuild`.
    fn tables(&self) -> &'static [&'static str];
    /// DDL that creates the tables in `schema` (which exists and is empty).
    fn create_tables(&self, schema: &str) -> String;
    /// Applies one event to the tables in `schema`.
    fn apply<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        schema: &'a str,
        event: &'a RecordedEvent,
    ) -> impl Future<Output = Result<(), tokio_postgres::Error>> + Send + 'a;
    /// The same tables folded in memory, how a whole log is folded at once (a first install,
    /// a rebuild). It is a second account of `apply`'s rules, written apart: a rebuild
    /// compares the two, so a rule one of them lacks shows as a difference.
    type Rows: FoldedRows;
}

/// A projection's tables as a fold of the log in memory, written out with one `COPY` per
/// table: about a hundred times faster than a statement per event.
pub trait FoldedRows: Default + Send {
    /// Folds one event in, as the projection's `apply` changes its tables.
    fn apply(&mut self, event: &RecordedEvent);
    /// Writes the rows into the tables in `schema` (which exist and are empty).
    fn write<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        schema: &'a str,
    ) -> impl Future<Output = Result<(), tokio_postgres::Error>> + Send + 'a;
}

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("database: {}", crate::fault::described(.0))]
    Database(#[from] tokio_postgres::Error),
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
}

pub fn live_schema(projection: &impl Projection) -> String {
    format!("proj_{}", projection.name())
}

fn rebuild_schema(projection: &impl Projection) -> String {
    format!("proj_{}_rebuild", projection.name())
}

fn checkpoint_name(schema: &str) -> String {
    format!("projection:{schema}")
}

/// The digest of a projection's DDL, kept as its live schema's comment.
fn shape_of(ddl: &str) -> String {
    use sha2::Digest;
    format!(
        "shape:{}",
        hex::encode(sha2::Sha256::digest(ddl.as_bytes()))
    )
}

/// Creates the live schema and tables of `projection` when they do not exist. A projection
/// whose tables changed shape since it was installed (its DDL's digest, kept as the schema's
/// comment, differs) is dropped and folded again from the start of the log. A new one folds
/// what the log holds in memory and writes it at once.
pub async fn install<P: Projection>(pool: &Pool, projection: &P) -> Result<(), ProjectionError> {
    let schema = live_schema(projection);
    let ddl = projection.create_tables(&schema);
    let shape = shape_of(&ddl);
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    // Serialise installs of the same projection from processes starting together.
    tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&schema])
        .await?;
    let installed: Option<Option<String>> = tx
        .query_opt(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1",
            &[&schema],
        )
        .await?
        .map(|r| r.get(0));
    let current = installed
        .as_ref()
        .is_some_and(|c| c.as_deref() == Some(shape.as_str()));
    // A rebuild by an older berth kept a checkpoint for its tables, which nothing reads into:
    // `/readyz` would wait on it for ever.
    tx.execute(
        "DELETE FROM checkpoints WHERE name = $1",
        &[&checkpoint_name(&rebuild_schema(projection))],
    )
    .await?;
    if !current {
        if installed.is_some() {
            tracing::info!(%schema, "the projection changed shape; folding it again from the log");
            tx.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                .await?;
            tx.execute(
                "DELETE FROM checkpoints WHERE name = $1",
                &[&checkpoint_name(&schema)],
            )
            .await?;
        }
        tx.batch_execute(&format!(
            "CREATE SCHEMA {schema}; {ddl}; COMMENT ON SCHEMA {schema} IS '{shape}'"
        ))
        .await?;
        // What the log already holds is folded at once rather than a statement an event.
        let (rows, at, _) = fold_in_memory::<P>(&tx, None).await?;
        if let Some(at) = at {
            write_rows(&tx, &rows, &schema).await?;
            write_checkpoint(&tx, &checkpoint_name(&schema), at).await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Writes a fold's rows into the empty tables of `schema`, their secondary indexes built
/// after the rows are in.
async fn write_rows<'a, R: FoldedRows>(
    tx: &'a Transaction<'a>,
    rows: &'a R,
    schema: &'a str,
) -> Result<(), tokio_postgres::Error> {
    let indexes = drop_secondary_indexes(tx, schema).await?;
    rows.write(tx, schema).await?;
    create_indexes(tx, &indexes).await
}

/// Folds the log from its start (up to `until`, when given) in memory, reading behind the
/// horizon; returns the rows, the position of the last event folded and how many.
async fn fold_in_memory<P: Projection>(
    client: &impl GenericClient,
    until: Option<LogPosition>,
) -> Result<(P::Rows, Option<LogPosition>, u64), ProjectionError> {
    let mut rows = P::Rows::default();
    let mut last = None;
    let mut events = 0;
    read_through(client, LogPosition::START, 20_000, |batch| {
        for event in batch
            .iter()
            .filter(|e| until.is_none_or(|until| e.position <= until))
        {
            rows.apply(event);
            last = Some(event.position);
            events += 1;
        }
        Ok(())
    })
    .await?;
    Ok((rows, last, events))
}

/// Applies at most `batch` new events to the projection in `schema`; returns how many.
/// `known` is where this runner last saw the checkpoint: most polls find nothing, and one
/// that finds nothing after it ([`has_news`]) ends there, one statement outside a
/// transaction rather than five (begin, make the checkpoint, lock it, read, end), which was
/// most of what an idle control plane asked of PostgreSQL. Otherwise the checkpoint is
/// locked and read from as before. A checkpoint only moves forward, so news after where it
/// was seen is news after where it is, or another runner has applied it meanwhile (then this
/// one reads nothing, and knows the checkpoint anew).
async fn step(
    pool: &Pool,
    projection: &impl Projection,
    schema: &str,
    batch: i64,
    known: &mut Option<LogPosition>,
) -> Result<usize, ProjectionError> {
    let name = checkpoint_name(schema);
    let mut client = pool.get().await?;
    if let Some(seen) = *known {
        if !has_news(&client, seen).await? {
            return Ok(0);
        }
    }
    let tx = client.transaction().await?;
    let after = lock_checkpoint(&tx, &name).await?;
    *known = Some(after);
    let events = read_all_with(&tx, after, batch).await?;
    let Some(last) = events.last().map(|e| e.position) else {
        return Ok(0);
    };
    for event in &events {
        projection.apply(&tx, schema, event).await?;
    }
    write_checkpoint(&tx, &name, last).await?;
    tx.commit().await?;
    *known = Some(last);
    let projection_name = projection.name();
    metrics::counter!(crate::metrics::PROJECTION_APPLIED, "projection" => projection_name)
        .increment(events.len() as u64);
    if let Some(newest) = events.last() {
        metrics::gauge!(crate::metrics::PROJECTION_LAG_SECONDS, "projection" => projection_name)
            .set(crate::metrics::age_secs(newest.recorded_at));
    }
    Ok(events.len())
}

/// Whether the log holds an event after `after` behind the horizon (as [`read_all_with`]
/// reads). Asked as the first row in the log's order, not as `EXISTS`: a generic plan of
/// `EXISTS` expects a third of the log past any position and scans the table for the first
/// (0.67 ms a poll over 3,000 events with 1,000 agents, and the whole log when nothing waits);
/// in order it is the log's index from the position.
async fn has_news<C: GenericClient>(
    client: &C,
    after: LogPosition,
) -> Result<bool, tokio_postgres::Error> {
    let probe = client
        .prepare_cached(
            "SELECT 1 FROM events
             WHERE (tx_id, seq) > ($1, $2) AND tx_id < berth_log_horizon()
             ORDER BY tx_id, seq LIMIT 1",
        )
        .await?;
    Ok(client
        .query_opt(&probe, &[&Xid8(after.tx), &after.seq])
        .await?
        .is_some())
}

/// Reads a checkpoint and locks it until the transaction ends, so two runners of the same
/// projection take turns instead of applying the same events twice.
async fn lock_checkpoint(
    tx: &Transaction<'_>,
    name: &str,
) -> Result<LogPosition, tokio_postgres::Error> {
    // Both prepared once per connection: a runner polls several times a second.
    let insert = tx
        .prepare_cached(
            "INSERT INTO checkpoints (name, tx_id, seq) VALUES ($1, '0'::xid8, 0) ON CONFLICT DO NOTHING",
        )
        .await?;
    tx.execute(&insert, &[&name]).await?;
    let lock = tx
        .prepare_cached("SELECT tx_id, seq FROM checkpoints WHERE name = $1 FOR UPDATE")
        .await?;
    let row = tx.query_one(&lock, &[&name]).await?;
    Ok(LogPosition {
        tx: row.get::<_, Xid8>(0).0,
        seq: row.get(1),
    })
}

/// Applies every event committed before the call to the live projection (waiting, if need
/// be, for the cluster-wide horizon to pass them); returns how many events.
pub async fn catch_up(pool: &Pool, projection: &impl Projection) -> Result<u64, ProjectionError> {
    let schema = live_schema(projection);
    let target = {
        let client = pool.get().await?;
        crate::store::last_committed(&client).await?
    };
    let mut total = 0;
    let mut known = None;
    loop {
        let n = step(pool, projection, &schema, 1_000, &mut known).await?;
        total += n as u64;
        if n == 0 {
            if Some(current_checkpoint(pool, &checkpoint_name(&schema)).await?) >= target {
                return Ok(total);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Keeps the live projection up to date until `stop` is cancelled: reading every `idle_poll`
/// while the log is active, resting (until an append in this process, or
/// `activity::QUIET_POLL`) once it is quiet.
pub async fn run(
    pool: Pool,
    projection: impl Projection,
    idle_poll: Duration,
    stop: CancellationToken,
) -> Result<(), ProjectionError> {
    install(&pool, &projection).await?;
    let schema = live_schema(&projection);
    let mut activity = crate::activity::Activity::new();
    let mut known = None;
    while !stop.is_cancelled() {
        let n = step(&pool, &projection, &schema, 1_000, &mut known).await?;
        if n == 0 {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = activity.rest(idle_poll) => {}
            }
        } else {
            activity.saw_events();
        }
    }
    Ok(())
}

/// What a rebuild found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuild {
    /// Events folded into the fresh tables.
    pub events: u64,
    /// The position both the live and the rebuilt tables stand at when compared.
    pub at: LogPosition,
    /// Per table, rows present on one side only (`(table, live_only, rebuilt_only)`).
    pub differences: Vec<(String, i64, i64)>,
    /// Whether the rebuilt tables now serve as the live ones.
    pub swapped: bool,
}

impl Rebuild {
    pub fn equal(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Folds the whole log again into a fresh schema and compares it with the live projection
/// at the same position. With `swap`, the rebuilt tables replace the live ones.
pub async fn rebuild<P: Projection>(
    pool: &Pool,
    projection: &P,
    swap: bool,
) -> Result<Rebuild, ProjectionError> {
    install(pool, projection).await?;
    let live = live_schema(projection);
    let fresh = rebuild_schema(projection);
    {
        let client = pool.get().await?;
        client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {fresh} CASCADE; CREATE SCHEMA {fresh}; {}
                 DELETE FROM checkpoints WHERE name = '{}';",
                projection.create_tables(&fresh),
                checkpoint_name(&fresh)
            ))
            .await?;
    }
    // Fold in memory up to wherever the live projection is now, without holding it up.
    let target = current_checkpoint(pool, &checkpoint_name(&live)).await?;
    let (mut rows, folded, mut events) = {
        let client = pool.get().await?;
        fold_in_memory::<P>(&client, Some(target)).await?
    };
    let mut folded = folded.unwrap_or(LogPosition::START);
    // Then hold the live checkpoint still, fold what it moved on by, write out and compare.
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let at = lock_checkpoint(&tx, &checkpoint_name(&live)).await?;
    loop {
        let mut batch = read_all_with(&tx, folded, 5_000).await?;
        batch.retain(|e| e.position <= at);
        let Some(last) = batch.last().map(|e| e.position) else {
            break;
        };
        for event in &batch {
            rows.apply(event);
        }
        events += batch.len() as u64;
        folded = last;
    }
    // The rebuilt tables get no checkpoint of their own: nothing reads the log into them
    // after this, and a checkpoint would count as a reader that `/readyz` waits on for ever.
    write_rows(&tx, &rows, &fresh).await?;
    let differences =
        differing_tables(&tx, projection.tables(), &live, &fresh, |_, _| true).await?;
    if swap {
        tx.batch_execute(&format!(
            "DROP SCHEMA {live} CASCADE; ALTER SCHEMA {fresh} RENAME TO {live};
             COMMENT ON SCHEMA {live} IS '{}';",
            shape_of(&projection.create_tables(&live))
        ))
        .await?;
        write_checkpoint(&tx, &checkpoint_name(&live), at).await?;
    }
    tx.commit().await?;
    Ok(Rebuild {
        events,
        at,
        differences,
        swapped: swap,
    })
}

async fn current_checkpoint(pool: &Pool, name: &str) -> Result<LogPosition, ProjectionError> {
    let client = pool.get().await?;
    Ok(read_checkpoint(&client, name).await?)
}

/// A built-in projection: one row per stream with its category, version and last event.
/// `berth audit` and operators use it to find streams.
pub struct StreamIndex;

/// One stream's row of [`StreamIndex`].
pub struct StreamRow {
    category: String,
    version: i64,
    events: i64,
    last_event_type: &'static str,
    first_recorded_at: chrono::DateTime<chrono::Utc>,
    last_recorded_at: chrono::DateTime<chrono::Utc>,
}

/// [`StreamIndex`] folded in memory.
#[derive(Default)]
pub struct StreamRows(std::collections::HashMap<String, StreamRow>);

impl FoldedRows for StreamRows {
    fn apply(&mut self, event: &RecordedEvent) {
        let version = event.stream_version as i64;
        match self.0.get_mut(&event.stream_id) {
            Some(row) => {
                row.version = row.version.max(version);
                row.events += 1;
                row.last_event_type = event.event_type();
                row.last_recorded_at = event.recorded_at;
            }
            None => {
                self.0.insert(
                    event.stream_id.clone(),
                    StreamRow {
                        category: event.category().to_owned(),
                        version,
                        events: 1,
                        last_event_type: event.event_type(),
                        first_recorded_at: event.recorded_at,
                        last_recorded_at: event.recorded_at,
                    },
                );
            }
        }
    }

    async fn write<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        schema: &'a str,
    ) -> Result<(), tokio_postgres::Error> {
        crate::pg::copy_rows(
            tx,
            &format!("{schema}.streams"),
            [
                "stream_id",
                "category",
                "version",
                "events",
                "last_event_type",
                "first_recorded_at",
                "last_recorded_at",
            ],
            &self
                .0
                .iter()
                .map(|(id, r)| -> [&(dyn ToSql + Sync); 7] {
                    [
                        id,
                        &r.category,
                        &r.version,
                        &r.events,
                        &r.last_event_type,
                        &r.first_recorded_at,
                        &r.last_recorded_at,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }
}

impl Projection for StreamIndex {
    type Rows = StreamRows;

    fn name(&self) -> &'static str {
        "streams"
    }

    fn tables(&self) -> &'static [&'static str] {
        &["streams"]
    }

    fn create_tables(&self, schema: &str) -> String {
        format!(
            "CREATE TABLE {schema}.streams (
                stream_id text PRIMARY KEY,
                category text NOT NULL,
                version bigint NOT NULL,
                events bigint NOT NULL,
                last_event_type text NOT NULL,
                first_recorded_at timestamptz NOT NULL,
                last_recorded_at timestamptz NOT NULL);
             CREATE INDEX ON {schema}.streams (category, last_recorded_at);"
        )
    }

    async fn apply<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        schema: &'a str,
        event: &'a RecordedEvent,
    ) -> Result<(), tokio_postgres::Error> {
        let sql = format!(
            "INSERT INTO {schema}.streams AS s VALUES ($1, $2, $3, 1, $4, $5, $5)
             ON CONFLICT (stream_id) DO UPDATE SET version = greatest(s.version, $3),
               events = s.events + 1, last_event_type = $4, last_recorded_at = $5"
        );
        let statement = tx.prepare_cached(&sql).await?;
        tx.execute(
            &statement,
            &[
                &event.stream_id,
                &event.category(),
                &(event.stream_version as i64),
                &event.event_type(),
                &event.recorded_at,
            ],
        )
        .await?;
        Ok(())
    }
}
