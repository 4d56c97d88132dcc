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
/// anew each time, 20-27 ms a plan just after 1,000 agents registered), and it reads the log
/// only through its index, from each reader's checkpoint: the first unread event (none, when
/// caught up), and a count only for a reader that has one. Asked as `EXISTS`, whether
/// anything was unread was planned as a sequential scan of the whole log (it expects a third
/// of the log past any position and the first match early), which finds nothing when every
/// reader is caught up: 107 ms a check on a log of 203,000 events.
pub async fn reader_lags(
    client: &impl GenericClient,
    counted_up_to: u32,
) -> Result<Vec<(String, i64, f64)>, tokio_postgres::Error> {
    let statement = client
        .prepare_cached(&reader_lags_sql(counted_up_to))
        .await?;
    let rows = client.query(&statement, &[]).await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// The statement of [`reader_lags`].
fn reader_lags_sql(counted_up_to: u32) -> String {
    let after = "(e.tx_id, e.seq) > (c.tx_id, c.seq)";
    format!(
        "SELECT c.name,
                CASE WHEN first.recorded_at IS NULL THEN 0
                     ELSE (SELECT count(*) FROM (SELECT 1 FROM events e WHERE {after}
                           ORDER BY e.tx_id, e.seq LIMIT {counted_up_to}) unread) END,
                coalesce(extract(epoch FROM clock_timestamp() - first.recorded_at)::float8, 0)
         FROM checkpoints c
         LEFT JOIN LATERAL (SELECT e.recorded_at FROM events e WHERE {after}
                            ORDER BY e.tx_id, e.seq LIMIT 1) first ON true
         ORDER BY c.name"
    )
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

#[cfg(test)]
mod tests {
    use events::catalogue::{Event, Metadata};
    use events::payloads::AgentLost;
    use events::store::{self, EventStore, ExpectedVersion, ProposedEvent};

    use super::*;

    /// A fresh database with the log, the checkpoints and the gateway's schemas.
    async fn fresh_database() -> deadpool_postgres::Pool {
        let base = std::env::var("BERTH_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://berth@127.0.0.1:55432/berth".into());
        let (prefix, _) = base.rsplit_once('/').expect("a database in the url");
        let url = format!("{prefix}/test_{}", uuid::Uuid::new_v4().simple());
        store::ensure_database(&url).await.expect("database");
        let pool = store::pool(&url, 2).expect("pool");
        store::migrate(&pool, crate::MIGRATIONS)
            .await
            .expect("migrate");
        pool
    }

    /// The plan nodes of an `EXPLAIN (ANALYZE, FORMAT JSON)` that read `relation` by a
    /// sequential scan and ran.
    fn sequential_scans_of(plan: &serde_json::Value, relation: &str) -> usize {
        let own = usize::from(
            plan["Node Type"] == "Seq Scan"
                && plan["Relation Name"] == relation
                && plan["Actual Loops"].as_u64() > Some(0),
        );
        let below = plan["Plans"].as_array().map_or(0, |plans| {
            plans.iter().map(|p| sequential_scans_of(p, relation)).sum()
        });
        own + below
    }

    /// On a log of 5,000 events with its statistics up to date, a check with every reader
    /// caught up reads the log by its index alone (a sequential scan would read all of it
    /// every second), and it counts right: nothing for readers at the log's head, what is
    /// past the checkpoint for one behind.
    #[tokio::test]
    async fn the_readers_lags_are_read_through_the_index_and_counted_from_each_checkpoint() {
        let pool = fresh_database().await;
        let store = EventStore::new(pool.clone());
        for stream in 0..5 {
            let lost: Vec<ProposedEvent> = (0..1_000)
                .map(|i| {
                    let event = Event::AgentLost(AgentLost {
                        agent_id: format!("a{stream}"),
                        reason: i.to_string(),
                        last_heard: None,
                    });
                    ProposedEvent::new(&event, Metadata::default())
                })
                .collect();
            store
                .append(&format!("agent-a{stream}"), ExpectedVersion::Any, &lost)
                .await
                .unwrap();
        }
        let client = pool.get().await.unwrap();
        client
            .batch_execute(
                "INSERT INTO checkpoints (name, tx_id, seq)
                   SELECT reader, tx_id, seq FROM unnest(ARRAY['relay', 'projection:p']) reader,
                     (SELECT tx_id, seq FROM events ORDER BY tx_id DESC, seq DESC LIMIT 1) head;
                 ANALYZE events; ANALYZE checkpoints;",
            )
            .await
            .unwrap();

        let sql = reader_lags_sql(10_000);
        let plan: serde_json::Value = client
            .query_one(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            sequential_scans_of(&plan[0]["Plan"], "events"),
            0,
            "{plan:#}"
        );
        // Each reader's name and the events it has not read.
        let unread = |lags: &[(String, i64, f64)]| -> Vec<(String, i64)> {
            lags.iter().map(|r| (r.0.clone(), r.1)).collect()
        };
        let caught_up = reader_lags(&client, 10_000).await.unwrap();
        assert_eq!(
            unread(&caught_up),
            [("projection:p".to_owned(), 0), ("relay".to_owned(), 0)]
        );
        assert!(caught_up.iter().all(|r| r.2 == 0.0), "{caught_up:?}");

        // One reader 1,500 events behind the head.
        client
            .execute(
                "UPDATE checkpoints SET (tx_id, seq) = (SELECT tx_id, seq FROM events
                   ORDER BY tx_id DESC, seq DESC OFFSET 1500 LIMIT 1) WHERE name = 'relay'",
                &[],
            )
            .await
            .unwrap();
        let behind = reader_lags(&client, 10_000).await.unwrap();
        assert_eq!(
            unread(&behind),
            [("projection:p".to_owned(), 0), ("relay".to_owned(), 1_500)]
        );
        assert!(
            behind[1].2 > 0.0,
            "the oldest unread event has waited: {behind:?}"
        );
    }
}
