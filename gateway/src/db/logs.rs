//! Logs: the kept output of a session's kernels (`recorder.session_logs`, written by the
//! recorder from the agents' chunks; logs are not events).

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::KernelLog;

/// The kept output of each of session `id`'s kernels, by kernel index.
pub async fn logs(pool: &Pool, id: Uuid) -> Result<Vec<KernelLog>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT kernel, content, complete, updated_at FROM recorder.session_logs
             WHERE session_id = $1 ORDER BY kernel",
            &[&id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| KernelLog {
            kernel: r.get(0),
            content: r.get(1),
            complete: r.get(2),
            updated_at: r.get(3),
        })
        .collect())
}
