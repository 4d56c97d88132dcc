//! Readiness: how far behind each checkpointed reader of the log is, from the event store
//! (`events`, `checkpoints`, written by the `events` crate's store and its readers), for
//! `/readyz`.

use deadpool_postgres::GenericClient;

/// Each checkpointed reader of the log (the relay, the projections): its name, how many
/// events it has not read (counted up to `counted_up_to`) and how long the oldest of them
/// has waited, in seconds.
pub async fn reader_lags(
    client: &impl GenericClient,
    counted_up_to: i64,
) -> Result<Vec<(String, i64, f64)>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT c.name,
                    (SELECT count(*) FROM (SELECT 1 FROM events e
                       WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq) LIMIT $1) unread),
                    coalesce(extract(epoch FROM clock_timestamp() -
                      (SELECT e.recorded_at FROM events e WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq)
                       ORDER BY e.tx_id, e.seq LIMIT 1))::float8, 0)
             FROM checkpoints c ORDER BY c.name",
            &[&counted_up_to],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}
