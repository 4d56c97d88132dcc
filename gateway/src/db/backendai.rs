//! What Backend.AI's paths read besides berth's own views: a session by the name its owner
//! gave it (`ledger.sessions`, exact right after a create, written by `events::ledger`), the
//! image it was requested with and its moves between statuses (the log itself), project
//! membership (the ledger), whether the view shows a session's status yet, and what the event
//! stream says of a session (the ledger).

use chrono::{DateTime, Utc};
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

/// The image session `id` was requested with, from its `SessionRequested` in the log (exact
/// right after a create, unlike the view): what get-or-create compares.
pub async fn session_image(pool: &Pool, id: Uuid) -> Result<Option<String>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT payload->>'image' FROM events
             WHERE stream_id = $1 AND event_type = 'SessionRequested'",
            &[&events::catalogue::stream_id("session", id)],
        )
        .await?;
    Ok(row.and_then(|r| r.get(0)))
}

/// Whether `user` is a member of the project named `project`: Backend.AI's `group` names one.
pub async fn is_project_member(pool: &Pool, user: Uuid, project: &str) -> Result<bool, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT 1 FROM ledger.project_members WHERE project = $1 AND user_id = $2",
            &[&project, &user],
        )
        .await?;
    Ok(row.is_some())
}

/// Each status session `id` has moved to and when, in the log's order: PENDING when it was
/// requested, then every move (at the time it happened where it happened, when the agent
/// said so).
pub async fn status_history(
    pool: &Pool,
    id: Uuid,
) -> Result<Vec<(String, DateTime<Utc>)>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT CASE event_type WHEN 'SessionRequested' THEN 'PENDING' ELSE payload->>'to' END,
                    coalesce((payload->>'occurred_at')::timestamptz, recorded_at)
             FROM events
             WHERE stream_id = $1
               AND event_type IN ('SessionRequested', 'SessionStatusChanged')
             ORDER BY stream_version",
            &[&events::catalogue::stream_id("session", id)],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Session `id`'s name now, from the ledger.
pub async fn session_name(pool: &Pool, id: Uuid) -> Result<Option<String>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT name FROM ledger.sessions WHERE session_id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Session `id`'s status in berth's view (`proj_sessions.sessions`), if the view has it.
pub async fn view_status(pool: &Pool, id: Uuid) -> Result<Option<String>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT status FROM proj_sessions.sessions WHERE session_id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
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
