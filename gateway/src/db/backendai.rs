//! What Backend.AI's paths read besides berth's own views: a session by the name its owner
//! gave it (`ledger.sessions`, exact right after a create, written by `events::ledger`).

use deadpool_postgres::Pool;
use events::payloads::SessionStatus;
use uuid::Uuid;

use crate::error::ApiError;

/// The sessions of `owner` named `name`, live ones first, then ended ones newest first (with
/// `ended_too`; otherwise live ones only). A name is unique among an owner's live sessions,
/// so at most one live session comes first.
#[allow(dead_code)] // until the routes that use it land (issue 30)
pub async fn sessions_named(
    pool: &Pool,
    owner: Uuid,
    name: &str,
    ended_too: bool,
) -> Result<Vec<Uuid>, ApiError> {
    let client = pool.get().await?;
    let ended: Vec<&str> = SessionStatus::TERMINAL.iter().map(|s| s.as_str()).collect();
    let rows = client
        .query(
            "SELECT session_id FROM ledger.sessions
             WHERE owner = $1 AND name = $2 AND ($3 OR status <> ALL($4))
             ORDER BY status = ANY($4), created_at DESC
             LIMIT 20",
            &[&owner, &name, &ended_too, &ended],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
