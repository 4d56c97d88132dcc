//! Readiness: how far behind each checkpointed reader of the log is, from the event store
//! (`events`, `checkpoints`, written by the `events` crate's store and its readers), for
//! `/readyz`; and the sessions view's counts the gateway reports as gauges.

use deadpool_postgres::GenericClient;

/// Each checkpointed reader of the log (the relay, the projections): its name, how many
/// events it has not read (counted up to `counted_up_to`) and how long the oldest of them
/// has waited, in seconds.
///
/// Asked every second, so it is cheap when every reader is caught up: it takes no
/// parameter (PostgreSQL plans it once per connection, where a parameter had it planned
/// anew each time, 20-27 ms a plan just after 1,000 agents registered), and counts only
/// for a reader that has something unread, in the log's order (the count alone, planned
/// for a third of the log, was a sequential scan of all of it: 12-22 ms). Before, it took
/// 4% of a core of PostgreSQL with the install idle.
pub async fn reader_lags(
    client: &impl GenericClient,
    counted_up_to: u32,
) -> Result<Vec<(String, i64, f64)>, tokio_postgres::Error> {
    let after = "(e.tx_id, e.seq) > (c.tx_id, c.seq)";
    let statement = client
        .prepare_cached(&format!(
            "SELECT c.name,
                    CASE WHEN EXISTS (SELECT 1 FROM events e WHERE {after})
                         THEN (SELECT count(*) FROM (SELECT 1 FROM events e WHERE {after}
                               ORDER BY e.tx_id, e.seq LIMIT {counted_up_to}) unread)
                         ELSE 0 END,
                    coalesce(extract(epoch FROM clock_timestamp() -
                      (SELECT e.recorded_at FROM events e WHERE {after}
                       ORDER BY e.tx_id, e.seq LIMIT 1))::float8, 0)
             FROM checkpoints c ORDER BY c.name"
        ))
        .await?;
    let rows = client.query(&statement, &[]).await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// Sessions in the sessions view by status and type, with how many of each.
pub async fn session_counts(
    client: &impl GenericClient,
) -> Result<Vec<(String, String, i64)>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT status, session_type, count(*) FROM proj_sessions.sessions GROUP BY 1, 2",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// Agents in the ledger by state: `lost`, `silent` (unheard for `silent_after_secs`)
/// or `alive`.
pub async fn agent_counts(
    client: &impl GenericClient,
    silent_after_secs: f64,
) -> Result<Vec<(String, i64)>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT CASE WHEN a.lost IS NOT NULL THEN 'lost'
                         WHEN greatest(a.last_heartbeat, l.seen_at)
                              < now() - make_interval(secs => $1) THEN 'silent'
                         ELSE 'alive' END, count(*)
             FROM ledger.agents a LEFT JOIN recorder.agent_liveness l USING (agent_id) GROUP BY 1",
            &[&silent_after_secs],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
