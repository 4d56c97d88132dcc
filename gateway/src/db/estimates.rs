//! The start estimates the scheduler recorded for waiting sessions (`SessionStartEstimated`,
//! read from each session's stream), each with the session's placement that followed
//! (`SessionScheduled`), for `GET /v1/estimates`; and the shapes a user watches
//! (`ledger.fit_watches`, written by `events::ledger`), for `GET /v1/fit-watches`.

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::{EstimateOutcome, FitWatch};

/// The most estimates listed.
const MOST: i64 = 500;

/// The estimates of `user`'s sessions (everyone's with `everyone`), newest first.
pub async fn outcomes(
    pool: &Pool,
    user: Uuid,
    everyone: bool,
) -> Result<Vec<EstimateOutcome>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT s.session_id, e.recorded_at,
                    (e.payload->'estimate'->>'wait_secs')::bigint,
                    coalesce(ARRAY(SELECT jsonb_array_elements_text(e.payload->'estimate'->'ahead')),
                             '{}'),
                    (SELECT extract(epoch FROM min(p.recorded_at) - e.recorded_at)::float8
                       FROM events p
                      WHERE p.stream_id = e.stream_id AND p.event_type = 'SessionScheduled'
                        AND p.stream_version > e.stream_version)
             FROM ledger.sessions s
             JOIN events e ON e.stream_id = 'session-' || replace(s.session_id::text, '-', '')
                          AND e.event_type = 'SessionStartEstimated'
             WHERE $2 OR s.owner = $1
             ORDER BY e.recorded_at DESC LIMIT $3",
            &[&user, &everyone, &MOST],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let estimated: Option<i64> = r.get(2);
            let actual: Option<f64> = r.get(4);
            let ahead: Vec<String> = r.get(3);
            EstimateOutcome {
                session_id: r.get(0),
                estimated_at: r.get(1),
                estimated_wait_secs: estimated.map(|s| s.max(0) as u64),
                ahead: ahead
                    .iter()
                    .filter_map(|a| Uuid::parse_str(a).ok())
                    .collect(),
                actual_wait_secs: actual,
                error_secs: actual.zip(estimated).map(|(a, e)| a - e as f64),
            }
        })
        .collect())
}

/// The shapes `owner` watches, oldest first.
pub async fn fit_watches(pool: &Pool, owner: Uuid) -> Result<Vec<FitWatch>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT watch_id, resource_group, shape, label, requested_at
             FROM ledger.fit_watches WHERE owner = $1 ORDER BY requested_at",
            &[&owner],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(FitWatch {
                watch_id: r.get(0),
                resource_group: r.get(1),
                shape: serde_json::from_value(r.get(2)).ok()?,
                label: r.get(3),
                requested_at: r.get(4),
            })
        })
        .collect())
}

/// The start estimate the scheduler recorded for session `id` at its first wait, with when.
pub async fn of_session(
    pool: &Pool,
    id: Uuid,
) -> Result<Option<(domain::advice::Estimate, chrono::DateTime<chrono::Utc>)>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT payload->'estimate', recorded_at FROM events
             WHERE stream_id = 'session-' || replace($1::uuid::text, '-', '')
               AND event_type = 'SessionStartEstimated'
             ORDER BY stream_version DESC LIMIT 1",
            &[&id],
        )
        .await?;
    Ok(row.and_then(|r| {
        let estimate = serde_json::from_value(r.get(0)).ok()?;
        Some((estimate, r.get(1)))
    }))
}
