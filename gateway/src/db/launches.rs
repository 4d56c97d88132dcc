//! Launches: a user's create requests, kept whole, their names and pins (the launcher's
//! "Recent History"). From the ledger (`ledger.launches`, written by `events::ledger` from
//! `LaunchRecorded`, `LaunchRenamed` and `LaunchPinned`).

use deadpool_postgres::Pool;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::Launch;

const LAUNCH_COLUMNS: &str = "launch_id, label, pinned, created_at, request, sessions";

/// A row as a [`Launch`]; `None` for a request kept by an older berth that this one no
/// longer reads as a create request (logged: it cannot be launched again as it stands).
fn launch_of(r: &Row) -> Option<Launch> {
    let launch_id: Uuid = r.get(0);
    let request = match serde_json::from_value(r.get(4)) {
        Ok(request) => request,
        Err(e) => {
            tracing::warn!(%launch_id, error = %e, "a kept launch is no create request now");
            return None;
        }
    };
    Some(Launch {
        launch_id,
        label: r.get(1),
        pinned: r.get(2),
        created_at: r.get(3),
        request,
        sessions: r.get(5),
    })
}

/// `user`'s recent launches, newest first: their newest `domain::launches::RECENT` and every
/// one they pinned.
pub async fn recent(pool: &Pool, user: Uuid) -> Result<Vec<Launch>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            &format!(
                "SELECT {LAUNCH_COLUMNS} FROM ledger.launches
                 WHERE user_id = $1 AND (pinned OR launch_id IN (
                   SELECT launch_id FROM ledger.launches WHERE user_id = $1
                   ORDER BY created_at DESC, launch_id DESC LIMIT $2))
                 ORDER BY created_at DESC, launch_id DESC"
            ),
            &[&user, &domain::launches::RECENT],
        )
        .await?;
    Ok(rows.iter().filter_map(launch_of).collect())
}

/// `user`'s launch `id`, if they have one so called.
pub async fn launch(pool: &Pool, user: Uuid, id: Uuid) -> Result<Option<Launch>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            &format!(
                "SELECT {LAUNCH_COLUMNS} FROM ledger.launches WHERE launch_id = $1 AND user_id = $2"
            ),
            &[&id, &user],
        )
        .await?;
    Ok(row.as_ref().and_then(launch_of))
}
