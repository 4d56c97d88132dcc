//! The PostgreSQL event store: atomic appends with optimistic concurrency, reads of one
//! stream, and a gap-safe read of the whole log in one global order.
//!
//! The global order is `(tx_id, seq)`, read only behind the transaction horizon (the xmin of
//! a fresh snapshot): see `migrations/0001_event_store.sql` and docs/ARCHITECTURE.md. Both
//! run on the log's own clock, which a restore moves past every restored event
//! ([`continue_clock`]; `migrations/0014_log_clock.sql`).

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Hook, HookError, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use crate::catalogue::{current_schema_version, CatalogueError, Event, Metadata};
use crate::pg::{JsonText, RawJson, Xid8};
use crate::RecordedEvent;

/// Largest payload the store accepts for one event, in bytes of JSON.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// Most events one append may carry.
pub const MAX_EVENTS_PER_APPEND: usize = 1_000;

/// One migration of one component: its name (its row in `schema_migrations`), its version,
/// and its SQL. The backbone's list is [`crate::migrations::MIGRATIONS`]; a service that owns
/// a schema exports its own (`idle_reaper::MIGRATIONS`, ...) for [`migrate`].
pub type Migration = (&'static str, i32, &'static str);
/// The role services run as: it may append to and read the log, never change a row of it
/// (migration 0006). [`pool`] switches every new connection to it.
pub const SERVICE_ROLE: &str = "berth_service";
/// Advisory lock key that serialises migrations between processes starting together.
const MIGRATION_LOCK: i64 = 0x6265_7274_685f_6d31;

pub use domain::LogPosition;

/// What the writer believes the stream's version to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// The stream must not exist yet.
    NoStream,
    /// The stream's last event has exactly this version (versions start at 0).
    Exact(u64),
    /// Append whatever the version is.
    Any,
}

impl ExpectedVersion {
    fn as_sql(self) -> i64 {
        match self {
            ExpectedVersion::NoStream => -1,
            ExpectedVersion::Exact(v) => v as i64,
            ExpectedVersion::Any => -2,
        }
    }
}

/// An event about to be appended, in its stored form.
#[derive(Debug, Clone)]
pub struct ProposedEvent {
    pub event_id: Uuid,
    pub event_type: String,
    pub schema_version: i32,
    /// The payload as JSON text, serialised once and sent to PostgreSQL as it is.
    pub payload: String,
    pub metadata: Metadata,
}

impl ProposedEvent {
    pub fn new(event: &Event, metadata: Metadata) -> ProposedEvent {
        ProposedEvent {
            event_id: Uuid::now_v7(),
            event_type: event.event_type().to_owned(),
            schema_version: event.schema_version(),
            payload: event.to_payload_text(),
            metadata,
        }
    }
}

/// Where an append landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// Version of the stream's last event after the append.
    pub stream_version: u64,
    /// Position of the last appended event.
    pub position: LogPosition,
    /// When the events were recorded (the log's `recorded_at`, one moment for the whole
    /// append): the ledger keeps its rows' times by it, so that a status's `since` in the
    /// ledger is the time its event has in the log, to the microsecond.
    pub recorded_at: DateTime<Utc>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "stream `{stream_id}` is at version {actual:?}, not {expected:?}: re-read and decide again"
    )]
    Conflict {
        stream_id: String,
        expected: ExpectedVersion,
        actual: Option<u64>,
    },
    #[error("expected version {expected} of stream `{stream_id}` is ahead of its last version {actual:?}")]
    ExpectedVersionAhead {
        stream_id: String,
        expected: u64,
        actual: Option<u64>,
    },
    #[error("event id {0} is already in the log")]
    DuplicateEventId(Uuid),
    #[error("stream id `{0}` is not CATEGORY-ID (category: a-z, 0-9, _; id: letters, digits, _, -; at most 200 characters)")]
    BadStreamId(String),
    #[error(transparent)]
    Catalogue(#[from] CatalogueError),
    #[error(transparent)]
    Tls(crate::tls::TlsError),
    #[error("payload of event {index} is {size} bytes; the limit is {MAX_PAYLOAD_BYTES}")]
    PayloadTooLarge { index: usize, size: usize },
    #[error("an append carries 1 to {MAX_EVENTS_PER_APPEND} events, not {0}")]
    BadBatchSize(usize),
    #[error(
        "the log's newest event (transaction {newest}) is ahead of this database's clock \
         ({clock}): it was restored without `berth restore`, and new events would sort before \
         old ones; restore it again with `berth restore`"
    )]
    ClockBehind { newest: u64, clock: u64 },
    #[error("the database already holds a berth log: restore into an empty database")]
    NotEmpty,
    #[error("database: {}", crate::fault::described(.0))]
    Database(#[from] tokio_postgres::Error),
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("stored event {position} could not be decoded: {source}")]
    Corrupt {
        position: LogPosition,
        source: CatalogueError,
    },
    #[error("bad database url: {0}")]
    BadUrl(String),
}

impl StoreError {
    /// Whether PostgreSQL was unavailable (an outage, not a mistake): nothing was written.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Database(e) => crate::fault::postgres_unavailable(e),
            StoreError::Pool(e) => crate::fault::pool_unavailable(e),
            _ => false,
        }
    }
}

impl From<crate::tls::TlsError> for StoreError {
    fn from(e: crate::tls::TlsError) -> StoreError {
        match e {
            crate::tls::TlsError::Database(e) => StoreError::Database(e),
            crate::tls::TlsError::BadUrl(why) => StoreError::BadUrl(why),
            other => StoreError::Tls(other),
        }
    }
}

/// The event store over a connection pool.
#[derive(Clone)]
pub struct EventStore {
    pool: Pool,
}

/// Builds a connection pool for `url` with at most `max_size` connections.
pub fn pool(url: &str, max_size: usize) -> Result<Pool, StoreError> {
    let manager = crate::tls::pool_manager(
        url,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    )?;
    // A server that accepts but does not answer (stopped, swamped) costs a bounded wait per
    // new connection, not a hang: the caller gets an outage it can retry.
    Pool::builder(manager)
        .max_size(max_size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .create_timeout(Some(std::time::Duration::from_secs(5)))
        .recycle_timeout(Some(std::time::Duration::from_secs(5)))
        .post_create(Hook::async_fn(|client, _| {
            Box::pin(async move {
                become_service_role(client)
                    .await
                    .map_err(HookError::Backend)
            })
        }))
        .build()
        .map_err(|e| StoreError::BadUrl(e.to_string()))
}

/// Switches the connection to [`SERVICE_ROLE`] for the rest of its life. Before migration
/// 0006 has created the role, the connection stays the login role (the first migrations need
/// the owner's rights anyway; `migrate` switches its connection once they are done).
async fn become_service_role(client: &tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
    client
        .batch_execute(&format!(
            "SELECT set_config('role', '{SERVICE_ROLE}', false)
             WHERE EXISTS (SELECT FROM pg_roles WHERE rolname = '{SERVICE_ROLE}')"
        ))
        .await
}

/// Creates the database named in `url` when it does not exist yet, through the `postgres`
/// maintenance database of the same server.
pub async fn ensure_database(url: &str) -> Result<(), StoreError> {
    let parsed = crate::tls::PgUrl::parse(url)?;
    let config = parsed.config()?;
    let name = config
        .get_dbname()
        .ok_or_else(|| StoreError::BadUrl("the url names no database".into()))?
        .to_owned();
    let mut admin = config.clone();
    admin.dbname("postgres");
    let (client, connection) = crate::tls::connect_with(&parsed, &admin).await?;
    tokio::spawn(connection);
    let exists = client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await?
        .is_some();
    if !exists {
        let quoted = name.replace('"', "\"\"");
        match client
            .batch_execute(&format!("CREATE DATABASE \"{quoted}\""))
            .await
        {
            Ok(()) => {}
            // Another process created it between our check and our CREATE.
            Err(e) if e.code() == Some(&SqlState::DUPLICATE_DATABASE) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Applies the store's migrations that are not applied yet, then `extra`'s (the schemas the
/// services own, each under its own component), one process at a time. A migration counts as
/// applied when `schema_migrations` holds its component and version; its text is not compared.
pub async fn migrate(pool: &Pool, extra: &[Migration]) -> Result<(), StoreError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    // Migrations need the owner's rights; the pool's connections run as the service role
    // (after the first run), so drop it for this transaction only.
    tx.batch_execute("SET LOCAL ROLE NONE").await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            component text NOT NULL, version integer NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (component, version))",
    )
    .await?;
    let all = crate::migrations::MIGRATIONS.iter().chain(extra).copied();
    for (component, version, sql) in all {
        let done = tx
            .query_opt(
                "SELECT 1 FROM schema_migrations WHERE component = $1 AND version = $2",
                &[&component, &version],
            )
            .await?
            .is_some();
        if !done {
            tx.batch_execute(sql).await?;
            tx.execute(
                "INSERT INTO schema_migrations (component, version) VALUES ($1, $2)",
                &[&component, &version],
            )
            .await?;
        }
    }
    check_clock(&tx).await?;
    tx.commit().await?;
    become_service_role(&client).await?;
    Ok(())
}

/// Refuses a log whose newest event is ahead of the clock the next transaction would write
/// at: a database restored without [`continue_clock`].
async fn check_clock<C: GenericClient>(client: &C) -> Result<(), StoreError> {
    let row = client
        .query_one(
            "SELECT (SELECT tx_id::text::bigint FROM events ORDER BY tx_id DESC, seq DESC LIMIT 1),
                    pg_snapshot_xmax(pg_current_snapshot())::text::bigint + berth_xid_offset()",
            &[],
        )
        .await?;
    let (newest, clock): (Option<i64>, i64) = (row.get(0), row.get(1));
    match newest {
        Some(newest) if newest >= clock => Err(StoreError::ClockBehind {
            newest: newest as u64,
            clock: clock as u64,
        }),
        _ => Ok(()),
    }
}

/// Before a logical restore into this database: refuses one that holds a log already, and
/// makes the role berth's services run as (roles belong to the cluster, not to a dump), as
/// migration 0006 does, so that the dump's owners and grants apply.
pub async fn prepare_restore(client: &tokio_postgres::Client) -> Result<(), StoreError> {
    let occupied: bool = client
        .query_one("SELECT to_regclass('public.events') IS NOT NULL", &[])
        .await?
        .get(0);
    if occupied {
        return Err(StoreError::NotEmpty);
    }
    client
        .batch_execute(
            "DO $$
             BEGIN
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'berth_service') THEN
                     CREATE ROLE berth_service NOLOGIN;
                 END IF;
                 IF NOT pg_has_role(current_user, 'berth_service', 'MEMBER') THEN
                     EXECUTE format('GRANT berth_service TO %I', current_user);
                 END IF;
                 EXECUTE format('GRANT CONNECT, TEMPORARY, CREATE ON DATABASE %I TO berth_service',
                                current_database());
             END
             $$",
        )
        .await?;
    Ok(())
}

/// How far [`continue_clock`] moved the log's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockContinued {
    /// The events the log holds.
    pub events: i64,
    /// What the clock now adds to the cluster's transaction ids.
    pub offset: i64,
}

/// After a logical restore into this database: sets the log's clock (`berth.xid_offset`)
/// so that every transaction from now on writes after the newest restored event, and returns
/// the offset. Takes effect for new connections, so it runs before berth starts on the
/// database. Needs the database owner's rights.
pub async fn continue_clock(client: &tokio_postgres::Client) -> Result<ClockContinued, StoreError> {
    // Every transaction that starts from now on has an id at or above the oldest one
    // running now.
    let row = client
        .query_one(
            "SELECT greatest(0, coalesce((SELECT tx_id::text::bigint FROM events
                                          ORDER BY tx_id DESC, seq DESC LIMIT 1), 0)
                               + 1 - pg_snapshot_xmin(pg_current_snapshot())::text::bigint),
                    (SELECT count(*) FROM events)",
            &[],
        )
        .await?;
    let (offset, events): (i64, i64) = (row.get(0), row.get(1));
    let statement: String = client
        .query_one(
            "SELECT format('ALTER DATABASE %I SET berth.xid_offset = %L',
                           current_database(), $1::bigint::text)",
            &[&offset],
        )
        .await?
        .get(0);
    client.batch_execute(&statement).await?;
    Ok(ClockContinued { events, offset })
}

/// The category of a stream id (`session-1f2e` is in `session`), once the id is valid.
pub fn category_of(stream_id: &str) -> Result<&str, StoreError> {
    let bad = || StoreError::BadStreamId(stream_id.to_owned());
    let (category, id) = stream_id.split_once('-').ok_or_else(bad)?;
    let category_ok = !category.is_empty()
        && category
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    let id_ok = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if stream_id.len() > 200 || !category_ok || !id_ok {
        return Err(bad());
    }
    Ok(category)
}

/// Checks a proposed batch against the catalogue and the store's limits without touching
/// the database, so that bad input is refused before anything is written.
pub fn validate(stream_id: &str, events: &[ProposedEvent]) -> Result<(), StoreError> {
    check_limits(stream_id, events)?;
    for event in events {
        Event::decode_str(&event.event_type, event.schema_version, &event.payload)?;
    }
    Ok(())
}

/// The checks of [`validate`] that do not decode payloads: enough for events built from the
/// typed catalogue in this process, whose payloads decode by construction.
pub fn check_limits(stream_id: &str, events: &[ProposedEvent]) -> Result<(), StoreError> {
    category_of(stream_id)?;
    if events.is_empty() || events.len() > MAX_EVENTS_PER_APPEND {
        return Err(StoreError::BadBatchSize(events.len()));
    }
    for (index, event) in events.iter().enumerate() {
        let current = current_schema_version(&event.event_type)?;
        if event.schema_version != current {
            return Err(CatalogueError::WrongSchemaVersion {
                event_type: event.event_type.clone(),
                given: event.schema_version,
                current,
                what: "the one this build writes",
            }
            .into());
        }
        let size = event.payload.len();
        if size > MAX_PAYLOAD_BYTES {
            return Err(StoreError::PayloadTooLarge { index, size });
        }
    }
    Ok(())
}

/// One statement an append: the stream's version read, checked against the expected one, and
/// every event inserted after it. The log's clock (`berth_log_tx_id()`) and the wall clock
/// are read once for the statement rather than by the columns' defaults for every row.
const APPEND_SQL: &str = "
WITH current AS (
    SELECT coalesce((SELECT stream_version FROM events WHERE stream_id = $1
                     ORDER BY stream_version DESC LIMIT 1), -1) AS version,
           berth_log_tx_id() AS tx_id, clock_timestamp() AS recorded_at
), inserted AS (
    INSERT INTO events (tx_id, event_id, stream_id, category, stream_version, event_type,
                        schema_version, payload, metadata, recorded_at)
    SELECT current.tx_id, e.event_id, $1, $2, current.version + e.ord, e.event_type,
           e.schema_version, e.payload, e.metadata, current.recorded_at
    FROM current,
         unnest($4::uuid[], $5::text[], $6::int[], $7::jsonb[], $8::jsonb[])
             WITH ORDINALITY AS e(event_id, event_type, schema_version, payload, metadata, ord)
    WHERE $3::bigint = -2 OR current.version = $3::bigint
    RETURNING tx_id, seq, stream_version
)
SELECT current.version, inserted.tx_id, inserted.seq, inserted.stream_version,
       current.recorded_at
FROM current LEFT JOIN inserted ON true
ORDER BY inserted.stream_version DESC NULLS LAST
LIMIT 1";

/// [`APPEND_SQL`] for one event, the most common append: the same version check, without
/// the arrays unnested, the common table expressions and the join that return the stream's
/// version when the append is refused, which cost PostgreSQL more than the insert itself
/// (docs/performance.md). Its row is [`APPEND_SQL`]'s (the version before, the event's
/// position and version, the time); a refused append returns none, and the stream's version
/// is read again to say why. (`OFFSET 0` keeps the version's subquery from being pulled up:
/// pulled up, its lookup runs twice, once for the check and once for the new version.)
const APPEND_ONE_SQL: &str = "
INSERT INTO events (tx_id, event_id, stream_id, category, stream_version, event_type,
                    schema_version, payload, metadata, recorded_at)
SELECT berth_log_tx_id(), $4::uuid, $1::text, $2::text, current.version + 1, $5::text,
       $6::int, $7::jsonb, $8::jsonb, clock_timestamp()
FROM (SELECT coalesce((SELECT stream_version FROM events WHERE stream_id = $1::text
                       ORDER BY stream_version DESC LIMIT 1), -1) AS version
      OFFSET 0) current
WHERE $3::bigint = -2 OR current.version = $3::bigint
RETURNING stream_version - 1, tx_id, seq, stream_version, recorded_at";

const READ_COLUMNS: &str = "tx_id, seq, event_id, stream_id, stream_version, event_type, \
     schema_version, payload, metadata, recorded_at";

impl EventStore {
    pub fn new(pool: Pool) -> EventStore {
        EventStore { pool }
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Appends `events` to `stream_id` in one transaction if the stream is at `expected`.
    /// Nothing is written when any event is invalid or the version does not match.
    pub async fn append(
        &self,
        stream_id: &str,
        expected: ExpectedVersion,
        events: &[ProposedEvent],
    ) -> Result<Appended, StoreError> {
        validate(stream_id, events)?;
        let client = self.pool.get().await?;
        let appended = append_with(&client, stream_id, expected, events).await?;
        // Its own transaction has committed: the readers can see it now.
        crate::activity::appended();
        Ok(appended)
    }

    /// The events of one stream, oldest first.
    pub async fn read_stream(&self, stream_id: &str) -> Result<Vec<RecordedEvent>, StoreError> {
        let client = self.pool.get().await?;
        read_stream_with(&client, stream_id).await
    }

    /// Up to `limit` events after `after` in global order, only from transactions that have
    /// ended: a reader that follows the returned positions sees every event exactly once.
    pub async fn read_all(
        &self,
        after: LogPosition,
        limit: i64,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let client = self.pool.get().await?;
        read_all_with(&client, after, limit).await
    }
}

/// The position of the last event committed so far, whether or not it is behind the horizon
/// yet. Used to wait until readers have caught up with everything written before a moment.
pub async fn last_committed<C: GenericClient>(
    client: &C,
) -> Result<Option<LogPosition>, StoreError> {
    let row = client
        .query_opt(
            "SELECT tx_id, seq FROM events ORDER BY tx_id DESC, seq DESC LIMIT 1",
            &[],
        )
        .await?;
    Ok(row.as_ref().map(position_of))
}

/// `EventStore::append` on a client or transaction the caller holds (the payloads must
/// already be validated with [`validate`]).
pub async fn append_with<C: GenericClient>(
    client: &C,
    stream_id: &str,
    expected: ExpectedVersion,
    events: &[ProposedEvent],
) -> Result<Appended, StoreError> {
    let category = category_of(stream_id)?;
    let ids: Vec<Uuid> = events.iter().map(|e| e.event_id).collect();
    let metadata: Vec<String> = events
        .iter()
        .map(|e| serde_json::to_string(&e.metadata).expect("metadata serialises"))
        .collect();
    // The readers of the log wake on this (the append may still be rolled back: they read
    // only what committed).
    crate::activity::appended();
    let result = match events {
        [event] => {
            let statement = client.prepare_cached(APPEND_ONE_SQL).await?;
            client
                .query_opt(
                    &statement,
                    &[
                        &stream_id,
                        &category,
                        &expected.as_sql(),
                        &event.event_id,
                        &event.event_type,
                        &event.schema_version,
                        &JsonText(&event.payload),
                        &JsonText(&metadata[0]),
                    ],
                )
                .await
        }
        _ => {
            let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
            let versions: Vec<i32> = events.iter().map(|e| e.schema_version).collect();
            let payloads: Vec<JsonText<'_>> = events.iter().map(|e| JsonText(&e.payload)).collect();
            let metadata: Vec<JsonText<'_>> = metadata.iter().map(|m| JsonText(m)).collect();
            let statement = client.prepare_cached(APPEND_SQL).await?;
            client
                .query_one(
                    &statement,
                    &[
                        &stream_id,
                        &category,
                        &expected.as_sql(),
                        &ids,
                        &types,
                        &versions,
                        &payloads,
                        &metadata,
                    ],
                )
                .await
                .map(Some)
        }
    };
    let row = match result {
        Ok(Some(row)) => row,
        // Refused by the single event's statement, which returns no row: the stream's
        // version is read again to say why (a statement later, so a writer in between may
        // have moved it on; the refusal stands either way).
        Ok(None) => {
            let current = last_version(client, stream_id).await?;
            return Err(refused(stream_id, expected, current));
        }
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            let constraint = e
                .as_db_error()
                .and_then(|d| d.constraint())
                .unwrap_or_default();
            if constraint == "events_event_id_unique" {
                let existing = client
                    .query_one(
                        "SELECT event_id FROM events WHERE event_id = ANY($1) LIMIT 1",
                        &[&ids],
                    )
                    .await
                    .map(|r| r.get::<_, Uuid>(0))
                    .unwrap_or(ids[0]);
                return Err(StoreError::DuplicateEventId(existing));
            }
            // A concurrent writer took the same versions first. The violation has aborted a
            // caller's transaction, where this read fails too: the conflict stands, with the
            // stream's version unknown.
            let actual = last_version(client, stream_id)
                .await
                .ok()
                .and_then(|v| u64::try_from(v).ok());
            return Err(StoreError::Conflict {
                stream_id: stream_id.to_owned(),
                expected,
                actual,
            });
        }
        Err(e) => return Err(e.into()),
    };
    let current: i64 = row.get(0);
    let Some(Xid8(tx)) = row.get::<_, Option<Xid8>>(1) else {
        return Err(refused(stream_id, expected, current));
    };
    Ok(Appended {
        stream_version: row.get::<_, i64>(3) as u64,
        position: LogPosition {
            tx,
            seq: row.get(2),
        },
        recorded_at: row.get(4),
    })
}

/// The version of the last event of `stream_id` (-1: no stream).
async fn last_version<C: GenericClient>(
    client: &C,
    stream_id: &str,
) -> Result<i64, tokio_postgres::Error> {
    Ok(client
        .query_one(
            "SELECT coalesce(max(stream_version), -1) FROM events WHERE stream_id = $1",
            &[&stream_id],
        )
        .await?
        .get(0))
}

/// Why an append to `stream_id`, now at version `current` (-1: no stream), was refused for
/// expecting `expected`: a version it has not reached, or any other mismatch.
fn refused(stream_id: &str, expected: ExpectedVersion, current: i64) -> StoreError {
    let actual = (current >= 0).then_some(current as u64);
    match expected {
        ExpectedVersion::Exact(v) if current < v as i64 => StoreError::ExpectedVersionAhead {
            stream_id: stream_id.to_owned(),
            expected: v,
            actual,
        },
        _ => StoreError::Conflict {
            stream_id: stream_id.to_owned(),
            expected,
            actual,
        },
    }
}

/// One stream's share of [`append_many`]: its events, appended if it is at `expected`.
pub struct StreamAppend<'a> {
    pub stream_id: &'a str,
    pub expected: ExpectedVersion,
    pub events: Vec<ProposedEvent>,
}

/// What [`append_many`] appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendedMany {
    /// Each stream's version after the append, in the order given.
    pub versions: Vec<u64>,
    /// When the events were recorded, one moment for them all, as [`Appended::recorded_at`]
    /// (nothing given: when it was asked).
    pub recorded_at: DateTime<Utc>,
}

/// [`append_with`] for many streams in one statement, all or nothing: every stream's version
/// read and checked, then every event inserted in the order given (the streams' events in
/// turn). Callers check the events' limits first ([`check_limits`]). A stream may appear
/// once only.
pub async fn append_many<C: GenericClient>(
    client: &C,
    streams: &[StreamAppend<'_>],
) -> Result<AppendedMany, StoreError> {
    if streams.is_empty() {
        return Ok(AppendedMany {
            versions: Vec::new(),
            recorded_at: Utc::now(),
        });
    }
    let mut stream_ids = Vec::with_capacity(streams.len());
    let mut categories = Vec::with_capacity(streams.len());
    let mut expected = Vec::with_capacity(streams.len());
    let events = streams.iter().map(|s| s.events.len()).sum();
    let mut of_stream: Vec<i64> = Vec::with_capacity(events);
    let mut ords: Vec<i64> = Vec::with_capacity(events);
    let mut ids: Vec<Uuid> = Vec::with_capacity(events);
    let mut types: Vec<&str> = Vec::with_capacity(events);
    let mut versions: Vec<i32> = Vec::with_capacity(events);
    let mut payloads: Vec<JsonText<'_>> = Vec::with_capacity(events);
    let mut metadata: Vec<String> = Vec::with_capacity(events);
    for (n, stream) in (1i64..).zip(streams) {
        stream_ids.push(stream.stream_id);
        categories.push(category_of(stream.stream_id)?);
        expected.push(stream.expected.as_sql());
        for (ord, event) in (1i64..).zip(&stream.events) {
            of_stream.push(n);
            ords.push(ord);
            ids.push(event.event_id);
            types.push(event.event_type.as_str());
            versions.push(event.schema_version);
            payloads.push(JsonText(&event.payload));
            metadata.push(serde_json::to_string(&event.metadata).expect("metadata serialises"));
        }
    }
    let metadata: Vec<JsonText<'_>> = metadata.iter().map(|m| JsonText(m)).collect();
    let statement = client.prepare_cached(APPEND_MANY_SQL).await?;
    crate::activity::appended();
    let result = client
        .query_one(
            &statement,
            &[
                &stream_ids,
                &categories,
                &expected,
                &of_stream,
                &ords,
                &ids,
                &types,
                &versions,
                &payloads,
                &metadata,
            ],
        )
        .await;
    let row = match result {
        Ok(row) => row,
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            let db = e.as_db_error();
            if db.and_then(|d| d.constraint()) == Some("events_event_id_unique") {
                return Err(StoreError::DuplicateEventId(
                    duplicate_in(db.and_then(|d| d.detail())).unwrap_or(ids[0]),
                ));
            }
            // A concurrent writer took one of the streams' next versions first; the detail
            // names which (`Key (stream_id, stream_version)=(<stream>, <version>) ...`).
            let stream_id = db
                .and_then(|d| d.detail())
                .and_then(|d| d.split_once(")=("))
                .and_then(|(_, rest)| rest.rsplit_once(", "))
                .map_or_else(|| stream_ids[0].to_owned(), |(id, _)| id.to_owned());
            let expected = streams
                .iter()
                .find(|s| s.stream_id == stream_id)
                .map_or(ExpectedVersion::Any, |s| s.expected);
            return Err(StoreError::Conflict {
                stream_id,
                expected,
                actual: None,
            });
        }
        Err(e) => return Err(e.into()),
    };
    let before: Vec<i64> = row.get(0);
    let refused_at: Option<i64> = row.get(1);
    if let Some(n) = refused_at {
        let stream = &streams[n as usize - 1];
        return Err(refused(
            stream.stream_id,
            stream.expected,
            before[n as usize - 1],
        ));
    }
    Ok(AppendedMany {
        versions: before
            .iter()
            .zip(streams)
            .map(|(version, stream)| (version + stream.events.len() as i64) as u64)
            .collect(),
        recorded_at: row.get(2),
    })
}

/// The event id a unique violation's detail names (`Key (event_id)=(<uuid>) already exists.`).
fn duplicate_in(detail: Option<&str>) -> Option<Uuid> {
    let (_, rest) = detail?.split_once(")=(")?;
    rest.split_once(')')?.0.parse().ok()
}

/// [`append_many`]'s statement: each stream's version read once, the first stream (in the
/// order given) not at its expected version named, and the events inserted in the order
/// given only when there is none, all stamped with the log's clock and the wall clock read
/// once.
const APPEND_MANY_SQL: &str = "
WITH streams AS (
    SELECT s.n, s.stream_id, s.category, s.expected,
           coalesce((SELECT stream_version FROM events WHERE stream_id = s.stream_id
                     ORDER BY stream_version DESC LIMIT 1), -1) AS version
    FROM unnest($1::text[], $2::text[], $3::bigint[])
         WITH ORDINALITY AS s(stream_id, category, expected, n)
), refused AS (
    SELECT min(n) AS n FROM streams WHERE NOT (expected = -2 OR version = expected)
), clock AS (
    SELECT berth_log_tx_id() AS tx_id, clock_timestamp() AS recorded_at
), inserted AS (
    INSERT INTO events (tx_id, event_id, stream_id, category, stream_version, event_type,
                        schema_version, payload, metadata, recorded_at)
    SELECT clock.tx_id, e.event_id, s.stream_id, s.category, s.version + e.ord, e.event_type,
           e.schema_version, e.payload, e.metadata, clock.recorded_at
    FROM clock, refused,
         unnest($4::bigint[], $5::bigint[], $6::uuid[], $7::text[], $8::int[], $9::jsonb[],
                $10::jsonb[])
             WITH ORDINALITY AS e(stream_n, ord, event_id, event_type, schema_version, payload,
                                  metadata, i)
         JOIN streams s ON s.n = e.stream_n
    WHERE refused.n IS NULL
    ORDER BY e.i
)
SELECT (SELECT array_agg(version ORDER BY n) FROM streams), (SELECT n FROM refused),
       (SELECT recorded_at FROM clock)";

/// `EventStore::read_stream` on a client or transaction the caller holds.
pub async fn read_stream_with<C: GenericClient>(
    client: &C,
    stream_id: &str,
) -> Result<Vec<RecordedEvent>, StoreError> {
    // Prepared once per connection: every command on an aggregate reads its stream first
    // (each agent's report, each session change), so an unprepared read cost a round trip
    // and a plan per command.
    let sql =
        format!("SELECT {READ_COLUMNS} FROM events WHERE stream_id = $1 ORDER BY stream_version");
    let statement = client.prepare_cached(&sql).await?;
    let rows = client.query(&statement, &[&stream_id]).await?;
    rows.iter().map(decode_row).collect()
}

/// Every event of the streams of `category` whose id begins with `prefix`, in log order
/// (committed ones, whatever the horizon: a command deciding on them reads them so).
pub async fn read_streams_with_prefix<C: GenericClient>(
    client: &C,
    category: &str,
    prefix: &str,
) -> Result<Vec<RecordedEvent>, StoreError> {
    let sql = format!(
        "SELECT {READ_COLUMNS} FROM events
         WHERE category = $1 AND starts_with(stream_id, $2)
         ORDER BY tx_id, seq"
    );
    let statement = client.prepare_cached(&sql).await?;
    let rows = client.query(&statement, &[&category, &prefix]).await?;
    rows.iter().map(decode_row).collect()
}

/// `EventStore::read_all` on a client or transaction the caller holds.
pub async fn read_all_with<C: GenericClient>(
    client: &C,
    after: LogPosition,
    limit: i64,
) -> Result<Vec<RecordedEvent>, StoreError> {
    read_rows(client, &read_all_sql(), after, limit).await
}

/// The next events after a position (`$1`, `$2`) in global order, at most `$3`, only from
/// transactions behind the horizon.
fn read_all_sql() -> String {
    format!(
        "SELECT {READ_COLUMNS} FROM events
         WHERE (tx_id, seq) > ($1, $2) AND tx_id < berth_log_horizon()
         ORDER BY tx_id, seq LIMIT $3"
    )
}

/// Up to `limit` events after `after` in global order that `filter` wants, behind the
/// horizon as [`read_all_with`] reads: a reader that follows the returned positions, and then
/// the relay's live stream from the last of them, sees every event it wants exactly once. A
/// session's owner and group are those of the ledger.
pub async fn read_filtered_with<C: GenericClient>(
    client: &C,
    after: LogPosition,
    limit: i64,
    filter: &domain::event_filter::EventFilter,
) -> Result<Vec<RecordedEvent>, StoreError> {
    let sql = format!(
        "SELECT {READ_COLUMNS} FROM events e
         WHERE (e.tx_id, e.seq) > ($1, $2) AND e.tx_id < berth_log_horizon()
           AND (cardinality($4::text[]) + cardinality($5::text[]) = 0
                OR e.event_type = ANY($4)
                OR EXISTS (SELECT 1 FROM unnest($5::text[]) p WHERE starts_with(e.event_type, p)))
           AND (cardinality($6::text[]) = 0 OR split_part(e.stream_id, '-', 1) = ANY($6))
           AND (cardinality($7::text[]) = 0 OR e.stream_id = ANY($7))
           AND (($8::uuid IS NULL AND $9::text IS NULL) OR EXISTS (
                SELECT 1 FROM ledger.sessions s
                WHERE s.session_id = CASE WHEN e.stream_id LIKE 'session-%'
                                          THEN substr(e.stream_id, 9)::uuid END
                  AND ($8::uuid IS NULL OR s.owner = $8)
                  AND ($9::text IS NULL OR s.resource_group = $9)))
         ORDER BY e.tx_id, e.seq LIMIT $3"
    );
    let statement = client.prepare_cached(&sql).await?;
    let rows = client
        .query(
            &statement,
            &[
                &Xid8(after.tx),
                &after.seq,
                &limit,
                &filter.types,
                &filter.type_prefixes,
                &filter.categories,
                &filter.streams,
                &filter.owner,
                &filter.resource_group,
            ],
        )
        .await?;
    rows.iter().map(decode_row).collect()
}

/// The position of the first event recorded at or after `since`, less one: where a reader
/// that wants the events from `since` on starts reading after. `None`: none was recorded
/// since.
pub async fn position_before<C: GenericClient>(
    client: &C,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<Option<LogPosition>, StoreError> {
    let row = client
        .query_opt(
            "SELECT tx_id, seq FROM events WHERE recorded_at >= $1 ORDER BY tx_id, seq LIMIT 1",
            &[&since],
        )
        .await?;
    Ok(row.as_ref().map(|r| {
        let first = position_of(r);
        LogPosition {
            seq: first.seq - 1,
            ..first
        }
    }))
}

/// Every event the caller's snapshot sees after a position (`$1`, `$2`), in log order, horizon
/// or not, at most `$3`: inside a REPEATABLE READ transaction, exactly the events whose effects
/// that snapshot shows.
fn read_visible_sql() -> String {
    format!(
        "SELECT {READ_COLUMNS} FROM events WHERE (tx_id, seq) > ($1, $2)
         ORDER BY tx_id, seq LIMIT $3"
    )
}

/// Reads every event after `after` in global order (behind the horizon, as [`read_all_with`]
/// does), `batch` at a time, handing each batch to `each`; returns how many were read. Each
/// batch is decoded on a blocking thread while the next is fetched and the one before is
/// handed over, so the database, the decoding and the caller's fold work at once instead of
/// in turn: how a whole log is read (the `berth bench store` read, replays, rebuilds).
pub async fn read_through<C, F>(
    client: &C,
    after: LogPosition,
    batch: i64,
    each: F,
) -> Result<u64, StoreError>
where
    C: GenericClient,
    F: FnMut(Vec<RecordedEvent>) -> Result<(), StoreError>,
{
    read_batches(client, &read_all_sql(), after, batch, each).await
}

/// [`read_through`] of every event the caller's snapshot sees, horizon or not: a replay
/// inside a REPEATABLE READ transaction.
pub(crate) async fn read_visible_through<C, F>(
    client: &C,
    after: LogPosition,
    batch: i64,
    each: F,
) -> Result<u64, StoreError>
where
    C: GenericClient,
    F: FnMut(Vec<RecordedEvent>) -> Result<(), StoreError>,
{
    read_batches(client, &read_visible_sql(), after, batch, each).await
}

async fn read_batches<C, F>(
    client: &C,
    sql: &str,
    after: LogPosition,
    batch: i64,
    mut each: F,
) -> Result<u64, StoreError>
where
    C: GenericClient,
    F: FnMut(Vec<RecordedEvent>) -> Result<(), StoreError>,
{
    let statement = client.prepare_cached(sql).await?;
    let fetch = |after: LogPosition| {
        let statement = statement.clone();
        async move {
            client
                .query(&statement, &[&Xid8(after.tx), &after.seq, &batch])
                .await
        }
    };
    let mut read = 0u64;
    let mut rows = fetch(after).await?;
    // Three stages at once: the database sends batch N + 1 while batch N is decoded on a
    // blocking thread and batch N - 1 is handed to `each` here. (The next batch's query goes
    // out on the join's first poll, before `each` holds this task; on a runtime of more than
    // one thread the connection's own task takes its rows in meanwhile.)
    let mut decoded_before: Option<Vec<RecordedEvent>> = None;
    while let Some(last) = rows.last() {
        let after = position_of(last);
        let decode = tokio::task::spawn_blocking(move || {
            rows.iter().map(decode_row).collect::<Result<Vec<_>, _>>()
        });
        let hand_over = async { decoded_before.take().map_or(Ok(()), &mut each) };
        let (next, decoded, handed) = tokio::join!(fetch(after), decode, hand_over);
        handed?;
        let events = decoded.expect("decoding a batch does not panic")?;
        read += events.len() as u64;
        decoded_before = Some(events);
        rows = next?;
    }
    if let Some(events) = decoded_before {
        each(events)?;
    }
    Ok(read)
}

async fn read_rows<C: GenericClient>(
    client: &C,
    sql: &str,
    after: LogPosition,
    limit: i64,
) -> Result<Vec<RecordedEvent>, StoreError> {
    let statement = client.prepare_cached(sql).await?;
    let rows = client
        .query(&statement, &[&Xid8(after.tx), &after.seq, &limit])
        .await?;
    rows.iter().map(decode_row).collect()
}

/// The log position a row's first two columns (`tx_id`, `seq`) name.
fn position_of(row: &tokio_postgres::Row) -> LogPosition {
    let Xid8(tx) = row.get(0);
    LogPosition {
        tx,
        seq: row.get(1),
    }
}

fn decode_row(row: &tokio_postgres::Row) -> Result<RecordedEvent, StoreError> {
    let position = position_of(row);
    let event_type: &str = row.get(5);
    let schema_version: i32 = row.get(6);
    let RawJson(payload) = row.get(7);
    let RawJson(metadata) = row.get(8);
    let event = Event::decode_str(event_type, schema_version, payload)
        .map_err(|source| StoreError::Corrupt { position, source })?;
    let metadata: Metadata = serde_json::from_str(metadata).map_err(|e| StoreError::Corrupt {
        position,
        source: CatalogueError::BadPayload {
            event_type: "metadata".into(),
            schema_version: 0,
            reason: e.to_string(),
        },
    })?;
    Ok(RecordedEvent {
        event_id: row.get(2),
        stream_id: row.get(3),
        stream_version: row.get::<_, i64>(4) as u64,
        position,
        recorded_at: row.get::<_, DateTime<Utc>>(9),
        schema_version,
        metadata,
        event,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payloads::AgentLost;

    fn lost() -> ProposedEvent {
        ProposedEvent::new(
            &Event::AgentLost(AgentLost {
                agent_id: "a".into(),
                reason: "r".into(),
                last_heard: None,
            }),
            Metadata::default(),
        )
    }

    #[test]
    fn stream_ids_name_a_category() {
        assert_eq!(category_of("session-0f3a").unwrap(), "session");
        assert_eq!(category_of("agent_pool-x-y").unwrap(), "agent_pool");
        for bad in [
            "session",
            "-x",
            "Session-1",
            "se ss-1",
            "session-",
            "s-a.b",
            "s-é",
        ] {
            assert!(category_of(bad).is_err(), "{bad} should be refused");
        }
        assert!(category_of(&format!("s-{}", "x".repeat(199))).is_err());
    }

    #[test]
    fn validation_refuses_bad_batches_before_any_io() {
        assert!(matches!(
            validate("agent-a", &[]),
            Err(StoreError::BadBatchSize(0))
        ));
        let mut unknown = lost();
        unknown.event_type = "Nope".into();
        assert!(matches!(
            validate("agent-a", &[unknown]),
            Err(StoreError::Catalogue(CatalogueError::UnknownEventType(_)))
        ));
        let mut old = lost();
        old.schema_version = 0;
        assert!(matches!(
            validate("agent-a", &[old]),
            Err(StoreError::Catalogue(
                CatalogueError::WrongSchemaVersion { .. }
            ))
        ));
        let mut big = lost();
        big.payload = serde_json::json!({"agent_id": "a", "reason": "x".repeat(MAX_PAYLOAD_BYTES)})
            .to_string();
        assert!(matches!(
            validate("agent-a", &[lost(), big]),
            Err(StoreError::PayloadTooLarge { index: 1, .. })
        ));
        assert!(validate("agent-a", &[lost(), lost()]).is_ok());
    }

    #[test]
    fn positions_print_and_parse() {
        let p = LogPosition { tx: 812, seq: 40 };
        assert_eq!(p.to_string().parse::<LogPosition>(), Ok(p));
        assert!("812".parse::<LogPosition>().is_err());
        assert!(LogPosition { tx: 1, seq: 9 } < LogPosition { tx: 2, seq: 1 });
    }
}
