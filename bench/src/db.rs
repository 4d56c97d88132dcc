//! The SQL the `berth` binary itself writes (benchmark set-up and checks), as typed
//! functions: the only place in this crate that does (the workspace's tidy test checks it).
//! Everything else goes through the libraries.

use deadpool_postgres::{GenericClient, Pool};
use events::payloads::SessionStatus;
use futures::StreamExt;
use uuid::Uuid;

/// A connection to `url` (TLS as its `sslmode` says), driven on its own task.
pub async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = events::tls::connect(url).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Drops the database `name` of the server at `server_url` (a URL naming the `postgres`
/// database), disconnecting whoever uses it.
pub async fn drop_database(server_url: &str, name: &str) -> anyhow::Result<()> {
    connect(server_url)
        .await?
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    Ok(())
}

/// The raw table the store benchmark writes next to the event store: the same columns as
/// `events`, with none of its checks, triggers or indexes besides the key.
pub async fn create_raw_events(pool: &Pool) -> anyhow::Result<()> {
    pool.get()
        .await?
        .batch_execute(
            "CREATE TABLE raw_events (
                tx_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
                seq bigint NOT NULL GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                event_id uuid NOT NULL, stream_id text NOT NULL, category text NOT NULL,
                stream_version bigint NOT NULL, event_type text NOT NULL, schema_version integer NOT NULL,
                payload jsonb NOT NULL, metadata jsonb NOT NULL,
                recorded_at timestamptz NOT NULL DEFAULT clock_timestamp())",
        )
        .await?;
    Ok(())
}

/// Vacuums and analyses every table of the database `client` owns: a freshly written log
/// made quiet before it is timed.
pub async fn vacuum_analyze(client: &tokio_postgres::Client) -> anyhow::Result<()> {
    client.batch_execute("VACUUM (ANALYZE)").await?;
    Ok(())
}

/// Copies every event, in log order, out of PostgreSQL as text; returns the rows read.
pub async fn copy_events_out(client: &tokio_postgres::Client) -> anyhow::Result<u64> {
    let stream = client
        .copy_out(
            "COPY (SELECT tx_id, seq, event_id, stream_id, stream_version, event_type, schema_version,
                          payload, metadata, recorded_at FROM events ORDER BY tx_id, seq) TO STDOUT",
        )
        .await?;
    futures::pin_mut!(stream);
    let mut rows = 0u64;
    while let Some(chunk) = stream.next().await {
        rows += chunk?.iter().filter(|b| **b == b'\n').count() as u64;
    }
    Ok(rows)
}

/// How many events of the types `types` the log holds.
pub async fn count_events(client: &impl GenericClient, types: &[&str]) -> anyhow::Result<i64> {
    Ok(client
        .query_one(
            "SELECT count(*) FROM events WHERE event_type = ANY($1)",
            &[&types],
        )
        .await?
        .get(0))
}

/// How commit `commit_id` ended, once its `SessionCommitEnded` is in the log.
pub async fn commit_outcome(
    client: &impl GenericClient,
    commit_id: Uuid,
) -> anyhow::Result<Option<events::payloads::CommitOutcome>> {
    let row = client
        .query_opt(
            "SELECT payload->'outcome' FROM events
             WHERE event_type = 'SessionCommitEnded' AND payload->>'commit_id' = $1",
            &[&commit_id.to_string()],
        )
        .await?;
    Ok(match row {
        Some(row) => Some(serde_json::from_value(row.get(0))?),
        None => None,
    })
}

/// How many sessions the idle-reaper has folded in and watches.
pub async fn reaper_watching(client: &impl GenericClient) -> anyhow::Result<i64> {
    Ok(client
        .query_one("SELECT count(*) FROM idle_reaper.watched", &[])
        .await?
        .get(0))
}

/// How many events the log holds.
pub async fn log_length(client: &impl GenericClient) -> anyhow::Result<u64> {
    let n: i64 = client
        .query_one("SELECT count(*) FROM events", &[])
        .await?
        .get(0);
    Ok(n as u64)
}

/// Whether every event is behind the horizon, where every reader of the log sees it.
pub async fn log_behind_horizon(client: &impl GenericClient) -> anyhow::Result<bool> {
    Ok(client
        .query_one(
            "SELECT berth_log_horizon() > (SELECT max(tx_id) FROM events)",
            &[],
        )
        .await?
        .get(0))
}

/// Every session id in the ledger.
pub async fn session_ids(client: &impl GenericClient) -> anyhow::Result<Vec<Uuid>> {
    Ok(client
        .query("SELECT session_id FROM ledger.sessions", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// When each of sessions `ids` reached each step from its request to RUNNING, by the log's
/// clock, in milliseconds after its request: placed, the agent's first report (PREPARING),
/// CREATING, its kernel started, RUNNING. A step not reached is absent.
pub async fn start_steps(
    client: &impl GenericClient,
    ids: &[Uuid],
) -> anyhow::Result<Vec<[Option<f64>; 5]>> {
    let streams: Vec<String> = ids
        .iter()
        .map(|id| events::catalogue::stream_id("session", *id))
        .collect();
    let rows = client
        .query(
            "WITH t AS (
               SELECT stream_id,
                 min(recorded_at) FILTER (WHERE event_type = 'SessionRequested') AS requested,
                 min(recorded_at) FILTER (WHERE event_type = 'SessionScheduled') AS placed,
                 min(recorded_at) FILTER (WHERE payload->>'to' = 'PREPARING') AS preparing,
                 min(recorded_at) FILTER (WHERE payload->>'to' = 'CREATING') AS creating,
                 min(recorded_at) FILTER (WHERE event_type = 'KernelStarted') AS started,
                 min(recorded_at) FILTER (WHERE payload->>'to' = 'RUNNING') AS running
               FROM events WHERE stream_id = ANY($1) GROUP BY stream_id)
             SELECT extract(epoch FROM placed - requested)::float8 * 1000,
                    extract(epoch FROM preparing - requested)::float8 * 1000,
                    extract(epoch FROM creating - requested)::float8 * 1000,
                    extract(epoch FROM started - requested)::float8 * 1000,
                    extract(epoch FROM running - requested)::float8 * 1000
             FROM t",
            &[&streams],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)])
        .collect())
}

/// How many of the sessions `ids` are in one of `statuses`.
pub async fn count_in_status(
    client: &impl GenericClient,
    ids: &[Uuid],
    statuses: &[SessionStatus],
) -> anyhow::Result<i64> {
    let sql = format!(
        "SELECT count(*) FROM ledger.sessions WHERE session_id = ANY($1) AND status IN ({})",
        events::sql::status_list(statuses)
    );
    Ok(client.query_one(&sql, &[&ids]).await?.get(0))
}

/// Session `id`'s status in the ledger (none when it has no such session).
pub async fn session_status(
    client: &impl GenericClient,
    id: Uuid,
) -> anyhow::Result<Option<SessionStatus>> {
    let row = client
        .query_opt(
            "SELECT status FROM ledger.sessions WHERE session_id = $1",
            &[&id],
        )
        .await?;
    Ok(match row {
        Some(row) => Some(serde_json::from_value(serde_json::Value::String(
            row.get(0),
        ))?),
        None => None,
    })
}

/// How many agents the ledger offers to the scheduler (registered, not lost).
pub async fn live_agents(client: &impl GenericClient) -> anyhow::Result<i64> {
    Ok(client
        .query_one("SELECT count(*) FROM ledger.agents WHERE lost IS NULL", &[])
        .await?
        .get(0))
}

/// How many connections PostgreSQL has open to `database`.
pub async fn connections_to(client: &impl GenericClient, database: &str) -> anyhow::Result<i64> {
    Ok(client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
            &[&database],
        )
        .await?
        .get(0))
}

/// The time from session `id`'s request to its placement, by the log's own clock (both
/// events' `recorded_at`); `None` while it is not placed.
pub async fn request_to_placement(
    client: &impl GenericClient,
    id: Uuid,
) -> anyhow::Result<Option<f64>> {
    let stream = events::catalogue::stream_id("session", id);
    Ok(client
        .query_one(
            "SELECT extract(epoch FROM max(recorded_at) FILTER (WHERE event_type = 'SessionScheduled')
                                   - max(recorded_at) FILTER (WHERE event_type = 'SessionRequested'))::float8
             FROM events WHERE stream_id = $1",
            &[&stream],
        )
        .await?
        .get(0))
}

/// pgbench's script for the raw single-row insert the store benchmark compares with.
pub const PGBENCH_SINGLE_INSERT: &str = "\\set s random(1, 1000000)\n\
     INSERT INTO raw_events (event_id, stream_id, category, stream_version, event_type, schema_version, payload, metadata) \
     VALUES (gen_random_uuid(), 'agent-' || :s, 'agent', 0, 'AgentRegistered', 1, :payload::jsonb, :metadata::jsonb);\n";

/// pgbench's script for the raw 100-row insert the store benchmark compares with: one
/// statement of 100 rows, each with a payload and metadata parameter of its own, so
/// PostgreSQL receives and parses 100 of each as it does for a batch berth appends. (pgbench
/// binds every `:name` it meets as a parameter of its own; at most 255 of them.)
pub fn pgbench_batch_insert() -> String {
    let rows: Vec<String> = (0..100)
        .map(|n| format!("({n}, :payload::jsonb, :metadata::jsonb)"))
        .collect();
    format!(
        "\\set s random(1, 1000000)\n\
         INSERT INTO raw_events (event_id, stream_id, category, stream_version, event_type, schema_version, payload, metadata) \
         SELECT gen_random_uuid(), 'agent-' || :s, 'agent', v.n, 'AgentRegistered', 1, v.p, v.m \
         FROM (VALUES {}) AS v(n, p, m);\n",
        rows.join(", ")
    )
}

/// When session `id` was requested, by the log's clock.
pub async fn requested_at(pool: &Pool, id: Uuid) -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    let client = pool.get().await?;
    let stream = events::catalogue::stream_id("session", id);
    Ok(client
        .query_one(
            "SELECT recorded_at FROM events WHERE stream_id = $1 AND event_type = 'SessionRequested'",
            &[&stream],
        )
        .await?
        .get(0))
}

/// Seconds from session `id`'s request to its first `event_type` event, by the log's clock.
pub async fn requested_to(pool: &Pool, id: Uuid, event_type: &str) -> anyhow::Result<f64> {
    let client = pool.get().await?;
    let stream = events::catalogue::stream_id("session", id);
    let seconds: Option<f64> = client
        .query_one(
            "SELECT extract(epoch FROM min(recorded_at) FILTER (WHERE event_type = $2)
                                   - min(recorded_at) FILTER (WHERE event_type = 'SessionRequested'))::float8
             FROM events WHERE stream_id = $1",
            &[&stream, &event_type],
        )
        .await?
        .get(0);
    seconds.ok_or_else(|| anyhow::anyhow!("session {id} has no {event_type}"))
}

/// `berth bench shapes`: the statements pgbench runs (raw, berth's append statement, a version
/// row per stream) and the tables they write.
pub mod shapes {
    use deadpool_postgres::Pool;

    /// Each pgbench client's streams, as each of the store bench's writers has.
    pub const STREAMS_PER_CLIENT: usize = 64;
    /// Events in a batched append.
    pub const BATCH: usize = 100;

    /// A stream id of berth's length (44 characters), the client's stream `:s` of this run.
    fn stream_expr(run: &str) -> String {
        format!("'agent-{run}-' || :s")
    }

    /// A time-ordered event id, as berth makes them: the clock's milliseconds, then random bits.
    const EVENT_ID: &str =
        "(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') \
         || substr(md5(random()::text), 1, 20))::uuid";

    /// Each client's stream (`:s`), one of its [`STREAMS_PER_CLIENT`].
    const PICK_STREAM: &str = "\\set s :client_id * 64 + random(0, 63)\n";

    const COLUMNS: &str =
        "event_id, stream_id, category, stream_version, event_type, schema_version, payload, metadata";

    /// The three single-event statements: raw, berth's, a row per stream.
    pub fn single_scripts(run: &str) -> [String; 3] {
        let stream = stream_expr(run);
        let raw = format!(
            "{PICK_STREAM}INSERT INTO raw_events ({COLUMNS}) VALUES ({EVENT_ID}, {stream}, 'agent', 0, \
             'AgentRegistered', 1, :payload::jsonb, :metadata::jsonb);\n"
        );
        // `APPEND_ONE_SQL` (events/src/store.rs) with its table swapped and its parameters spelt
        // as pgbench's.
        let log = format!(
            "{PICK_STREAM}INSERT INTO shape_log (tx_id, {COLUMNS}, recorded_at) \
             SELECT berth_log_tx_id(), {EVENT_ID}, {stream}, 'agent', current.version + 1, \
             'AgentRegistered', 1, :payload::jsonb, :metadata::jsonb, clock_timestamp() \
             FROM (SELECT coalesce((SELECT stream_version FROM shape_log WHERE stream_id = {stream} \
             ORDER BY stream_version DESC LIMIT 1), -1) AS version OFFSET 0) current \
             RETURNING stream_version - 1, tx_id, seq, stream_version, recorded_at;\n"
        );
        let by_number = format!(
            "{PICK_STREAM}WITH s AS (UPDATE shape_streams SET version = version + 1 \
             WHERE stream_id = {stream} RETURNING stream_no, version) \
             INSERT INTO shape_by_number (tx_id, {COLUMNS}, stream_no, recorded_at) \
             SELECT berth_log_tx_id(), {EVENT_ID}, {stream}, 'agent', s.version, 'AgentRegistered', \
             1, :payload::jsonb, :metadata::jsonb, s.stream_no, clock_timestamp() FROM s \
             RETURNING stream_version - 1, tx_id, seq, stream_version, recorded_at;\n"
        );
        [raw, log, by_number]
    }

    /// The three statements of [`BATCH`] events of one stream, each event with a payload and
    /// metadata parameter of its own as berth binds them.
    pub fn batch_scripts(run: &str) -> [String; 3] {
        let stream = stream_expr(run);
        let rows: Vec<String> = (0..BATCH)
            .map(|n| format!("({n}, :payload::jsonb, :metadata::jsonb)"))
            .collect();
        let values = format!("(VALUES {}) AS v(n, p, m)", rows.join(", "));
        let raw = format!(
            "{PICK_STREAM}INSERT INTO raw_events ({COLUMNS}) SELECT {EVENT_ID}, {stream}, 'agent', \
             v.n, 'AgentRegistered', 1, v.p, v.m FROM {values};\n"
        );
        let log = format!(
            "{PICK_STREAM}INSERT INTO shape_log (tx_id, {COLUMNS}, recorded_at) \
             SELECT current.tx_id, {EVENT_ID}, {stream}, 'agent', current.version + 1 + v.n, \
             'AgentRegistered', 1, v.p, v.m, current.recorded_at \
             FROM (SELECT coalesce((SELECT stream_version FROM shape_log WHERE stream_id = {stream} \
             ORDER BY stream_version DESC LIMIT 1), -1) AS version, berth_log_tx_id() AS tx_id, \
             clock_timestamp() AS recorded_at OFFSET 0) current, {values} RETURNING seq;\n"
        );
        let by_number = format!(
            "{PICK_STREAM}WITH s AS (UPDATE shape_streams SET version = version + {BATCH} \
             WHERE stream_id = {stream} RETURNING stream_no, version - {BATCH} AS version, \
             berth_log_tx_id() AS tx_id, clock_timestamp() AS recorded_at) \
             INSERT INTO shape_by_number (tx_id, {COLUMNS}, stream_no, recorded_at) \
             SELECT s.tx_id, {EVENT_ID}, {stream}, 'agent', s.version + 1 + v.n, 'AgentRegistered', \
             1, v.p, v.m, s.stream_no, s.recorded_at FROM s, {values} RETURNING seq;\n"
        );
        [raw, log, by_number]
    }

    /// The shapes' tables, the streams' version rows made for every client's streams.
    fn tables_sql(run: &str, clients: usize) -> String {
        let streams = clients * STREAMS_PER_CLIENT;
        format!(
            "CREATE TABLE shape_log (LIKE events INCLUDING ALL);
             CREATE TABLE shape_streams (stream_id text PRIMARY KEY,
                 stream_no bigint GENERATED ALWAYS AS IDENTITY UNIQUE, version bigint NOT NULL);
             CREATE TABLE shape_by_number (LIKE events INCLUDING ALL, stream_no bigint NOT NULL);
             ALTER TABLE shape_by_number DROP CONSTRAINT shape_by_number_stream_id_stream_version_key;
             ALTER TABLE shape_by_number ADD UNIQUE (stream_no, stream_version);
             INSERT INTO shape_streams (stream_id, version)
                 SELECT 'agent-{run}-' || n, -1 FROM generate_series(0, {streams} - 1) n;"
        )
    }

    /// Makes the shapes' tables in the bench's database (migrated, with `raw_events`).
    pub async fn create_tables(pool: &Pool, run: &str, clients: usize) -> anyhow::Result<()> {
        pool.get()
            .await?
            .batch_execute(&tables_sql(run, clients))
            .await?;
        Ok(())
    }

    /// Events in the log's shape, events keyed by number, and the versions their streams' rows
    /// reached (whose sum is the events those rows' statements wrote).
    pub async fn written(pool: &Pool) -> anyhow::Result<(i64, i64, i64)> {
        let row = pool
            .get()
            .await?
            .query_one(
                "SELECT (SELECT count(*) FROM shape_log), (SELECT count(*) FROM shape_by_number),
                        coalesce((SELECT sum(version + 1)::bigint FROM shape_streams), 0)",
                &[],
            )
            .await?;
        Ok((row.get(0), row.get(1), row.get(2)))
    }
}
