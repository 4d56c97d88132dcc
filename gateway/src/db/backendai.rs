//! What Backend.AI's paths read besides berth's own views: a session by the name its owner
//! gave it (`ledger.sessions`, exact right after a create, written by `events::ledger`).

use deadpool_postgres::Pool;
use events::payloads::SessionStatus;
use uuid::Uuid;

use crate::error::ApiError;

/// The sessions of `owner` named `name`, live ones first, then ended ones newest first (with
/// `ended_too`; otherwise live ones only). A name is unique among an owner's live sessions,
/// so at most one live session comes first.
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

/// What Backend.AI's event stream says of a session besides each event's own payload: its
/// owner, name, project, whether it is a batch session, and its kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedSession {
    pub owner: Uuid,
    pub name: String,
    pub project: Option<String>,
    pub batch: bool,
    pub cluster_size: u32,
}

/// [`StreamedSession`] of session `id`, from the ledger (exact once its request committed).
pub async fn streamed_session(pool: &Pool, id: Uuid) -> Result<Option<StreamedSession>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT owner, name, project, session_type = 'batch', cluster_size
             FROM ledger.sessions WHERE session_id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|r| StreamedSession {
        owner: r.get(0),
        name: r.get(1),
        project: r.get(2),
        batch: r.get(3),
        cluster_size: u32::try_from(r.get::<_, i32>(4)).unwrap_or(1),
    }))
}
