//! The start estimates the scheduler recorded for waiting sessions (`SessionStartEstimated`,
//! read from the log), each with the session's placement that followed (`SessionScheduled`),
//! for `GET /v1/estimates`.

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::api::advice::EstimateOutcome;
use crate::error::ApiError;

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
            "SELECT (e.payload->>'session_id')::uuid, e.recorded_at,
                    (e.payload->'estimate'->>'wait_secs')::bigint,
                    coalesce(ARRAY(SELECT jsonb_array_elements_text(e.payload->'estimate'->'ahead')),
                             '{}'),
                    (SELECT extract(epoch FROM min(p.recorded_at) - e.recorded_at)::float8
                       FROM events p
                      WHERE p.stream_id = e.stream_id AND p.event_type = 'SessionScheduled'
                        AND p.stream_version > e.stream_version)
             FROM events e JOIN ledger.sessions s
               ON s.session_id = (e.payload->>'session_id')::uuid
             WHERE e.category = 'session' AND e.event_type = 'SessionStartEstimated'
               AND ($2 OR s.owner = $1)
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
