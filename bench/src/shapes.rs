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

use crate::db::shapes::{self as sql, BATCH};
use crate::store::{pgbench, sample_event};

/// How `shapes` runs.
pub struct ShapesRun {
    pub phase: Duration,
    pub clients: usize,
    pub rounds: usize,
}

pub async fn shapes(url: &str, run: ShapesRun) -> anyhow::Result<()> {
    let ShapesRun {
        phase,
        clients,
        rounds,
    } = run;
    let pool = store::pool(url, 2)?;
    berth::app::migrate(&pool).await?;
    crate::db::create_raw_events(&pool).await?;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    sql::create_tables(&pool, &tag, clients).await?;
    let payload = sample_event().to_payload().to_string();
    println!(
        "berth bench shapes: {clients} pgbench clients, {}s a statement, {rounds} rounds, payload {} bytes",
        phase.as_secs(),
        payload.len()
    );
    for (what, scripts, per_statement) in [
        ("single event", sql::single_scripts(&tag), 1),
        ("100 events of one stream", sql::batch_scripts(&tag), BATCH),
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
    let (log, by_number, versions) = sql::written(pool).await?;
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
        for script in sql::single_scripts("r")
            .iter()
            .chain(&sql::batch_scripts("r"))
        {
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
