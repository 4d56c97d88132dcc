//! A session's usage series (`recorder.usage_series`, written by the recorder as samples
//! come, bounded by `domain::usage`).

use deadpool_postgres::Pool;
use domain::usage::{series as merged, SeriesPoint};
use uuid::Uuid;

use crate::error::ApiError;

/// Session `id`'s series, oldest first.
pub async fn series(pool: &Pool, id: Uuid) -> Result<Vec<SeriesPoint>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT width_secs, sampled_at, cpu_percent, memory_bytes, network_bytes, gpu_percent
             FROM recorder.usage_series WHERE session_id = $1",
            &[&id],
        )
        .await?;
    Ok(merged(
        rows.iter()
            .map(|r| {
                (
                    r.get(0),
                    SeriesPoint {
                        at: r.get(1),
                        cpu_percent: r.get(2),
                        memory_bytes: r.get(3),
                        network_bytes: r.get(4),
                        gpu_percent: r.get(5),
                    },
                )
            })
            .collect(),
    ))
}
