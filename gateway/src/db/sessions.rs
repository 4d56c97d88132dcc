//! Sessions: the list, the detail document and who owns a session. The list and the detail
//! read the gateway's own projection (`proj_sessions.sessions`, written by
//! [`crate::projection`]) and the recorder's latest usage sample
//! (`recorder.session_usage`); the owner and status that must be exact right after a write
//! read the ledger (`ledger.sessions`, written by `events::ledger`).

use deadpool_postgres::Pool;
use events::payloads::{SessionStatus, SessionType};
use tokio_postgres::Row;
use uuid::Uuid;

use super::Where;
use crate::error::ApiError;
use crate::model::{OwnerRef, SessionSummary};

/// Live or ended sessions (`state=running|finished`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    Running,
    Finished,
}

/// Which sessions a list shows.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Only this owner's (by id).
    pub owner: Option<Uuid>,
    /// Only this owner's (by email).
    pub owner_email: Option<String>,
    pub session_type: Option<SessionType>,
    pub liveness: Option<Liveness>,
    pub status: Option<SessionStatus>,
    /// Only sessions of this name (several users' sessions may share one).
    pub name: Option<String>,
}

/// The order of a session list (`sort=`, a leading `-` for descending).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
pub enum SessionOrder {
    #[default]
    #[serde(rename = "-created_at")]
    NewestFirst,
    #[serde(rename = "created_at")]
    OldestFirst,
    #[serde(rename = "name")]
    NameAscending,
    #[serde(rename = "-name")]
    NameDescending,
    #[serde(rename = "status")]
    StatusAscending,
    #[serde(rename = "-status")]
    StatusDescending,
}

impl SessionOrder {
    fn sql(self) -> &'static str {
        match self {
            SessionOrder::NewestFirst => "created_at DESC, session_id",
            SessionOrder::OldestFirst => "created_at ASC, session_id",
            SessionOrder::NameAscending => "name ASC, session_id",
            SessionOrder::NameDescending => "name DESC, session_id",
            SessionOrder::StatusAscending => "status ASC, created_at DESC",
            SessionOrder::StatusDescending => "status DESC, created_at DESC",
        }
    }
}

/// A row of the list: the view's columns, what the session's kernels ask for in all, and its
/// elapsed time (from its start to its end or now; null before it started, never below zero
/// though its start is the agent host's clock and now the database's; `greatest` alone would
/// turn a null into zero).
const SESSION_COLUMNS: &str = "session_id, name, owner, owner_email, requested_by, project,
    session_type, status, status_reason, image, resource_group, agent_id, created_at,
    status_changed_at,
    (resources->>'cpu_milli')::bigint * cluster_size,
    (resources->>'memory_bytes')::bigint * cluster_size,
    (resources->>'gpu_milli')::bigint * cluster_size, cluster_size,
    CASE WHEN started_at IS NOT NULL
      THEN greatest(extract(epoch FROM coalesce(ended_at, now()) - started_at)::float8, 0) END";

fn session_summary(r: &Row) -> SessionSummary {
    SessionSummary {
        session_id: r.get(0),
        name: r.get(1),
        owner: OwnerRef {
            user_id: r.get(2),
            email: r.get(3),
        },
        session_type: r.get(6),
        status: r.get(7),
        status_reason: r.get(8),
        image: r.get(9),
        resource_group: r.get(10),
        agent_id: r.get(11),
        created_at: r.get(12),
        status_changed_at: r.get(13),
        allocated: super::resources::amounts(r, 14),
        cluster_size: r.get::<_, i32>(17).max(0) as u32,
        elapsed_secs: r.get(18),
    }
}

/// A page of sessions matching `filter`, and how many match in all: one statement for the
/// count and one for the page, whatever the page holds.
pub async fn list_sessions(
    pool: &Pool,
    filter: &SessionFilter,
    order: SessionOrder,
    limit: i64,
    offset: i64,
) -> Result<(i64, Vec<SessionSummary>), ApiError> {
    let mut w = Where::default();
    if let Some(owner) = filter.owner {
        w.add("owner = ?", owner);
    }
    if let Some(email) = &filter.owner_email {
        w.add("owner_email = ?", email.clone());
    }
    if let Some(t) = filter.session_type {
        let name = serde_json::to_value(t).expect("a session type serialises");
        w.add(
            "session_type = ?",
            name.as_str().unwrap_or_default().to_owned(),
        );
    }
    match filter.liveness {
        Some(Liveness::Running) => w.clauses.push(events::sql::is_live("status")),
        Some(Liveness::Finished) => w.clauses.push(events::sql::has_ended("status")),
        None => {}
    }
    if let Some(status) = filter.status {
        w.add("status = ?", status.as_str().to_owned());
    }
    if let Some(name) = &filter.name {
        w.add("name = ?", name.clone());
    }
    let where_sql = w.sql();
    let params = w.refs();
    let client = pool.get().await?;
    let total: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM proj_sessions.sessions WHERE {where_sql}"),
            &params,
        )
        .await?
        .get(0);
    let rows = client
        .query(
            &format!(
                "SELECT {SESSION_COLUMNS} FROM proj_sessions.sessions WHERE {where_sql}
                 ORDER BY {} LIMIT {limit} OFFSET {offset}",
                order.sql()
            ),
            &params,
        )
        .await?;
    Ok((total, rows.iter().map(session_summary).collect()))
}

/// The detail document, built by PostgreSQL in one statement (the hottest read: no row is
/// decoded into Rust values and encoded again).
const DETAIL_SQL: &str = "SELECT owner, json_build_object(
    'session_id', session_id, 'name', name,
    'owner', json_build_object('user_id', owner, 'email', owner_email),
    'type', session_type, 'status', status, 'status_reason', status_reason, 'image', image,
    'resource_group', resource_group, 'agent_id', agent_id, 'created_at', created_at,
    'status_changed_at', status_changed_at, 'requested_by', requested_by, 'project', project,
    'resources', resources, 'shared_memory_bytes', shared_memory_bytes,
    'cluster_mode', cluster_mode, 'cluster_size', cluster_size, 'kernels', kernels,
    'containers', containers,
    'request', request, 'reserved_at', created_at, 'scheduled_at', scheduled_at,
    'started_at', started_at, 'ended_at', ended_at,
    'elapsed_secs', extract(epoch FROM coalesce(ended_at, now()) - started_at)::float8,
    'exit_code', exit_code, 'scheduling_attempts', attempts, 'priority', priority,
    'termination_requested', termination_requested,
    'usage', (SELECT json_build_object('cpu_seconds', u.cpu_seconds, 'cpu_percent', u.cpu_percent,
        'memory_bytes', u.memory_bytes, 'network_rx_bytes', u.rx_bytes,
        'network_tx_bytes', u.tx_bytes, 'gpu_percent', u.gpu_percent,
        'gpu_memory_percent', u.gpu_memory_percent, 'sampled_at', u.sampled_at)
      FROM recorder.session_usage u WHERE u.session_id = s.session_id))::text, version
  FROM proj_sessions.sessions s WHERE session_id = $1";

/// A session's detail document as the view has it.
pub struct Detail {
    pub owner: Uuid,
    /// The JSON document.
    pub body: String,
    /// The view's version of the session (for the cache).
    pub version: i64,
}

/// The view's detail of session `id`, if the view has it.
pub async fn detail(pool: &Pool, id: Uuid) -> Result<Option<Detail>, ApiError> {
    let client = pool.get().await?;
    let statement = client.prepare_cached(DETAIL_SQL).await?;
    Ok(client
        .query_opt(&statement, &[&id])
        .await?
        .map(|row| Detail {
            owner: row.get(0),
            body: row.get(1),
            version: row.get(2),
        }))
}

/// The owner of session `id` in the view, if the view has it.
pub async fn view_owner(pool: &Pool, id: Uuid) -> Result<Option<Uuid>, ApiError> {
    let client = pool.get().await?;
    let statement = client
        .prepare_cached("SELECT owner FROM proj_sessions.sessions WHERE session_id = $1")
        .await?;
    Ok(client
        .query_opt(&statement, &[&id])
        .await?
        .map(|r| r.get(0)))
}

/// What the ledger says of session `id` (exact, unlike the view).
pub struct LedgerSession {
    pub owner: Uuid,
    pub status: String,
    pub resource_group: String,
}

/// Session `id` as the ledger has it, if it has it.
pub async fn ledger_session(pool: &Pool, id: Uuid) -> Result<Option<LedgerSession>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT owner, status, resource_group FROM ledger.sessions WHERE session_id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|r| LedgerSession {
        owner: r.get(0),
        status: r.get(1),
        resource_group: r.get(2),
    }))
}

/// The owner and status of session `id` from the ledger (exact, unlike the view).
pub async fn ledger_owner_status(
    pool: &Pool,
    id: Uuid,
) -> Result<Option<(Uuid, String)>, ApiError> {
    Ok(ledger_session(pool, id).await?.map(|s| (s.owner, s.status)))
}

/// The owner of session `id` from the ledger.
pub async fn ledger_owner(pool: &Pool, id: Uuid) -> Result<Option<Uuid>, ApiError> {
    Ok(ledger_session(pool, id).await?.map(|s| s.owner))
}

/// The owner and name of each of `ids` the ledger knows.
pub async fn owners_and_names(
    pool: &Pool,
    ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, (Uuid, String)>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT session_id, owner, name FROM ledger.sessions WHERE session_id = ANY($1)",
            &[&ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect())
}

/// Whether session `id` has ended (or does not exist), from the ledger.
pub async fn has_ended(pool: &Pool, id: Uuid) -> Result<bool, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            &format!(
                "SELECT {} FROM ledger.sessions WHERE session_id = $1",
                events::sql::has_ended("status")
            ),
            &[&id],
        )
        .await?;
    Ok(row.is_none_or(|r| r.get::<_, bool>(0)))
}

/// The user whose email is `email`, from the ledger; `None` when nobody has it.
pub async fn user_id_by_email(pool: &Pool, email: &str) -> Result<Option<Uuid>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT user_id FROM ledger.users WHERE email = $1",
            &[&email],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}
