//! `berth bench shapes`: the log's append statement next to raw inserts and next to a version
//! row per stream (Marten's shape), all three by pgbench in the bench's database: the
//! measurement issue 44 asks for before the log's shape is changed. Each statement writes the
//! same rows (berth's 44-character stream ids, time-ordered event ids, the store bench's
//! payload), each client on 64 streams of its own as the store bench's writers are, and the
//! three take turns within a round, so a VM that drifts falls on all of them.
//!
//! The shapes are copies of `events` (`LIKE events INCLUDING ALL`): `shape_log` as it is,
//! `shape_by_number` keyed by a stream's number with its version row in `shape_streams`. Both
//! append at any version (berth's `-2`), so neither pays for an expected version the other
//! does not check.

use std::time::Duration;

use events::store;

use crate::db;
use crate::store::{pgbench, sample_event};

/// Each pgbench client's streams, as each of the store bench's writers has.
const STREAMS_PER_CLIENT: usize = 64;
/// Events in a batched append.
const BATCH: usize = 100;

/// How `shapes` runs.
pub struct ShapesRun {
    pub phase: Duration,
    pub clients: usize,
    pub rounds: usize,
}

/// A stream id of berth's length (44 characters), the client's stream `:s` of this run.
fn stream_expr(run: &str) -> String {
    format!("'agent-{run}-' || :s")
}

/// A time-ordered event id, as berth makes them: the clock's milliseconds, then random bits.
const EVENT_ID: &str =
    "(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') \
     || substr(md5(random()::text), 1, 20))::uuid";

const PICK_STREAM: &str = "\\set s :client_id * 64 + random(0, 63)\n";

const COLUMNS: &str =
    "event_id, stream_id, category, stream_version, event_type, schema_version, payload, metadata";

/// The three single-event statements: raw, berth's, a row per stream.
fn single_scripts(run: &str) -> [String; 3] {
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
fn batch_scripts(run: &str) -> [String; 3] {
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

pub async fn shapes(url: &str, run: ShapesRun) -> anyhow::Result<()> {
    let ShapesRun {
        phase,
        clients,
        rounds,
    } = run;
    let pool = store::pool(url, 2)?;
    berth::app::migrate(&pool).await?;
    db::create_raw_events(&pool).await?;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    pool.get()
        .await?
        .batch_execute(&tables_sql(&tag, clients))
        .await?;
    let payload = sample_event().to_payload().to_string();
    println!(
        "berth bench shapes: {clients} pgbench clients, {}s a statement, {rounds} rounds, payload {} bytes",
        phase.as_secs(),
        payload.len()
    );
    for (what, scripts, per_statement) in [
        ("single event", single_scripts(&tag), 1),
        ("100 events of one stream", batch_scripts(&tag), BATCH),
    ] {
        let mut ratios = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            // Each round starts with the next statement, so none always runs first.
            let mut rates = [0.0; 3];
            for turn in 0..3 {
                let which = (round + turn) % 3;
                rates[which] =
                    pgbench(url, &scripts[which], &payload, clients, phase)? * per_statement as f64;
            }
            let [raw, log, by_number] = rates;
            println!(
                "  {what}, round {}: raw {raw:.0} events/s, berth's statement {log:.0} events/s ({:.0}%), a version row per stream {by_number:.0} events/s ({:.0}%)",
                round + 1,
                100.0 * log / raw,
                100.0 * by_number / raw
            );
            ratios[0].push(log / raw);
            ratios[1].push(by_number / raw);
        }
        let [log, by_number] = ratios.map(median);
        println!(
            "{what}: berth's statement {:.0}% of raw, a version row per stream {:.0}% of raw (medians of {rounds} rounds)",
            100.0 * log,
            100.0 * by_number
        );
    }
    ensure_written(&pool).await
}

/// Every statement wrote what it was timed for: a version row's statement inserts nothing for
/// a stream without a row, so its events are counted against its rows' versions.
async fn ensure_written(pool: &deadpool_postgres::Pool) -> anyhow::Result<()> {
    let row = pool
        .get()
        .await?
        .query_one(
            "SELECT (SELECT count(*) FROM shape_log), (SELECT count(*) FROM shape_by_number),
                    (SELECT sum(version + 1)::bigint FROM shape_streams)",
            &[],
        )
        .await?;
    let (log, by_number, versions): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    anyhow::ensure!(
        log > 0 && by_number > 0 && by_number == versions,
        "the shapes were not all written: {log} events in the log's shape, {by_number} by number \
         against their streams' {versions}"
    );
    Ok(())
}

/// The median of `values` (the lower middle one of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[(values.len() - 1) / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_value_or_the_lower_middle_one() {
        assert_eq!(median(vec![0.7, 0.5, 0.9]), 0.7);
        assert_eq!(median(vec![0.8, 0.6, 0.9, 0.5]), 0.6);
    }

    /// Every script binds only what the bench gives pgbench (`:payload`, `:metadata`) and the
    /// stream it picks (`:s`, from `:client_id`), and the batched ones stay within pgbench's
    /// 255 parameters.
    #[test]
    fn the_scripts_bind_only_the_payload_the_metadata_and_the_stream() {
        for script in single_scripts("r").iter().chain(&batch_scripts("r")) {
            let names: std::collections::BTreeSet<&str> = script
                .split(':')
                .skip(1)
                .filter_map(|rest| {
                    rest.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                        .next()
                })
                .filter(|name| {
                    !name.is_empty() && !["uuid", "jsonb", "text", "bigint"].contains(name)
                })
                .collect();
            assert_eq!(
                names,
                ["client_id", "metadata", "payload", "s"]
                    .into_iter()
                    .collect(),
                "{script}"
            );
            assert!(script.matches(":payload").count() <= 127, "{script}");
        }
    }
}
