//! What Backend.AI's GraphQL subset (`POST /admin/gql`) reads: sessions with everything
//! Backend.AI's session fields are made of, a page in one statement whatever it holds, and
//! what a keypair's owner has. Tables: the gateway's own projection
//! (`proj_sessions.sessions`, and `proj_sessions.history` for a waiting session's latest
//! scheduling attempt; written by [`crate::projection`]), and the ledger (`ledger.users` for
//! who created a session for its owner, `ledger.backendai_keypairs` for the owner's access
//! key, `ledger.sessions` and `ledger.project_members` for a keypair's owner; written by
//! `events::ledger`).

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use events::payloads::SessionStatus;
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::ApiError;

/// A session as the GraphQL subset answers it: the view's columns as they are (the JSON ones
/// still JSON), the creator's email, the owner's access key and, while it waits, its latest
/// scheduling attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct GqlSession {
    pub session_id: Uuid,
    pub name: String,
    pub owner: Uuid,
    pub owner_email: String,
    /// The user who asked for it, when an admin created it for its owner.
    pub requested_by: Option<Uuid>,
    pub requested_by_email: Option<String>,
    pub project: Option<String>,
    /// `interactive`, `batch`, ... (berth's spelling).
    pub session_type: String,
    pub status: String,
    pub status_reason: Option<String>,
    pub image: String,
    pub resource_group: String,
    /// Each kernel's resources (`ResourceSlots`).
    pub resources: Value,
    pub shared_memory_bytes: i64,
    pub cluster_mode: String,
    pub cluster_size: i32,
    /// Where each kernel was placed (`[KernelPlacement]`), empty before it was.
    pub kernels: Value,
    /// The kernels' started containers (`[{kernel, agent_id, container_id, hostname, ports}]`).
    pub containers: Value,
    /// What the request asked beyond resources (startup command, mounts, apps, ...).
    pub request: Value,
    pub created_at: DateTime<Utc>,
    pub status_changed_at: DateTime<Utc>,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i32>,
    /// One active Backend.AI access key of the owner (the first by name), if they hold any.
    pub owner_access_key: Option<String>,
    /// A PENDING session's latest scheduling attempt.
    pub last_try: Option<LastTry>,
}

/// A waiting session's latest scheduling attempt, as its history row has it.
#[derive(Debug, Clone, PartialEq)]
pub struct LastTry {
    pub attempts: i32,
    pub at: DateTime<Utc>,
    pub message: String,
}

/// Which sessions a list shows.
#[derive(Debug, Clone, Default)]
pub struct GqlFilter {
    /// Only this owner's.
    pub owner: Option<Uuid>,
    /// Only sessions in one of these statuses (none at all when empty).
    pub statuses: Option<Vec<SessionStatus>>,
}

/// What a list may be ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderKey {
    CreatedAt,
    Name,
    Status,
    StatusChanged,
}

impl OrderKey {
    fn column(self) -> &'static str {
        match self {
            OrderKey::CreatedAt => "created_at",
            OrderKey::Name => "name",
            OrderKey::Status => "status",
            OrderKey::StatusChanged => "status_changed_at",
        }
    }
}

/// One key of a list's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderBy {
    pub key: OrderKey,
    pub descending: bool,
}

/// The `ORDER BY` text of `order` on the table `alias`, newest first when it is empty, the
/// session id last so that pages never overlap.
fn order_sql(order: &[OrderBy], alias: &str) -> String {
    let newest_first = [OrderBy {
        key: OrderKey::CreatedAt,
        descending: true,
    }];
    let order = if order.is_empty() {
        &newest_first[..]
    } else {
        order
    };
    let mut keys: Vec<String> = order
        .iter()
        .map(|o| {
            let direction = if o.descending { "DESC" } else { "ASC" };
            format!("{alias}.{} {direction}", o.key.column())
        })
        .collect();
    keys.push(format!("{alias}.session_id"));
    keys.join(", ")
}

/// The WHERE text of `filter` and its parameters.
fn where_sql(filter: &GqlFilter) -> (String, Vec<Box<dyn ToSql + Sync + Send>>) {
    let mut clauses = Vec::new();
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    if let Some(owner) = filter.owner {
        params.push(Box::new(owner));
        clauses.push(format!("owner = ${}", params.len()));
    }
    if let Some(statuses) = &filter.statuses {
        let names: Vec<String> = statuses.iter().map(|s| s.as_str().to_owned()).collect();
        params.push(Box::new(names));
        clauses.push(format!("status = ANY(${})", params.len()));
    }
    if clauses.is_empty() {
        clauses.push("true".into());
    }
    (clauses.join(" AND "), params)
}

fn refs(params: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    params
        .iter()
        .map(|p| p.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// The columns of [`GqlSession`], over the page `s`, in its field order.
const COLUMNS: &str = "s.session_id, s.name, s.owner, s.owner_email, s.requested_by, cu.email,
    s.project, s.session_type, s.status, s.status_reason, s.image, s.resource_group,
    s.resources, s.shared_memory_bytes, s.cluster_mode, s.cluster_size, s.kernels, s.containers,
    s.request, s.created_at, s.status_changed_at, s.scheduled_at, s.started_at, s.ended_at,
    s.exit_code,
    (SELECT min(k.access_key) FROM ledger.backendai_keypairs k
      WHERE k.user_id = s.owner AND k.active),
    h.attempts, h.updated_at, h.message";

/// What joins the page `s`: the creator, and a waiting session's latest scheduling attempt.
const JOINS: &str = "LEFT JOIN ledger.users cu ON cu.user_id = s.requested_by
    LEFT JOIN LATERAL (SELECT attempts, updated_at, message FROM proj_sessions.history
      WHERE session_id = s.session_id AND s.status = 'PENDING'
      ORDER BY created_at DESC, id DESC LIMIT 1) h ON true";

fn gql_session(r: &Row) -> GqlSession {
    let last_try = match (r.get(26), r.get(27), r.get(28)) {
        (Some(attempts), Some(at), Some(message)) => Some(LastTry {
            attempts,
            at,
            message,
        }),
        _ => None,
    };
    GqlSession {
        session_id: r.get(0),
        name: r.get(1),
        owner: r.get(2),
        owner_email: r.get(3),
        requested_by: r.get(4),
        requested_by_email: r.get(5),
        project: r.get(6),
        session_type: r.get(7),
        status: r.get(8),
        status_reason: r.get(9),
        image: r.get(10),
        resource_group: r.get(11),
        resources: r.get(12),
        shared_memory_bytes: r.get(13),
        cluster_mode: r.get(14),
        cluster_size: r.get(15),
        kernels: r.get(16),
        containers: r.get(17),
        request: r.get(18),
        created_at: r.get(19),
        status_changed_at: r.get(20),
        scheduled_at: r.get(21),
        started_at: r.get(22),
        ended_at: r.get(23),
        exit_code: r.get(24),
        owner_access_key: r.get(25),
        last_try,
    }
}

/// How many sessions match `filter`.
pub async fn count_sessions(pool: &Pool, filter: &GqlFilter) -> Result<i64, ApiError> {
    let (where_sql, params) = where_sql(filter);
    let client = pool.get().await?;
    Ok(client
        .query_one(
            &format!("SELECT count(*) FROM proj_sessions.sessions WHERE {where_sql}"),
            &refs(&params),
        )
        .await?
        .get(0))
}

/// A page of the sessions matching `filter` in `order`, in one statement: the page is cut
/// first, and only its rows are joined with what else they show.
pub async fn session_page(
    pool: &Pool,
    filter: &GqlFilter,
    order: &[OrderBy],
    limit: i64,
    offset: i64,
) -> Result<Vec<GqlSession>, ApiError> {
    let (where_sql, params) = where_sql(filter);
    let (inner, outer) = (order_sql(order, "p"), order_sql(order, "s"));
    let sql = format!(
        "SELECT {COLUMNS}
         FROM (SELECT * FROM proj_sessions.sessions p WHERE {where_sql}
               ORDER BY {inner} LIMIT {limit} OFFSET {offset}) s
         {JOINS}
         ORDER BY {outer}"
    );
    let client = pool.get().await?;
    let rows = client.query(&sql, &refs(&params)).await?;
    Ok(rows.iter().map(gql_session).collect())
}

/// Session `id`, if the view has it.
pub async fn session(pool: &Pool, id: Uuid) -> Result<Option<GqlSession>, ApiError> {
    let client = pool.get().await?;
    let statement = client
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM proj_sessions.sessions s {JOINS} WHERE s.session_id = $1"
        ))
        .await?;
    Ok(client
        .query_opt(&statement, &[&id])
        .await?
        .as_ref()
        .map(gql_session))
}

/// What a keypair's owner has: the projects they belong to and how many sessions they have
/// live (exact: from the ledger).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerFacts {
    pub projects: Vec<String>,
    pub live_sessions: i64,
}

/// [`OwnerFacts`] of user `user_id`.
pub async fn owner_facts(pool: &Pool, user_id: Uuid) -> Result<OwnerFacts, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_one(
            &format!(
                "SELECT coalesce((SELECT array_agg(project ORDER BY project)
                                  FROM ledger.project_members WHERE user_id = $1), '{{}}'),
                        (SELECT count(*) FROM ledger.sessions WHERE owner = $1 AND {})",
                events::sql::is_live("status")
            ),
            &[&user_id],
        )
        .await?;
    Ok(OwnerFacts {
        projects: row.get(0),
        live_sessions: row.get(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_newest_first_unless_ordered_and_ends_on_the_session_id() {
        assert_eq!(order_sql(&[], "s"), "s.created_at DESC, s.session_id");
        let order = [
            OrderBy {
                key: OrderKey::StatusChanged,
                descending: false,
            },
            OrderBy {
                key: OrderKey::Name,
                descending: true,
            },
        ];
        assert_eq!(
            order_sql(&order, "p"),
            "p.status_changed_at ASC, p.name DESC, p.session_id"
        );
    }

    #[test]
    fn the_filter_numbers_its_parameters() {
        let (sql, params) = where_sql(&GqlFilter::default());
        assert_eq!((sql.as_str(), params.len()), ("true", 0));
        let (sql, params) = where_sql(&GqlFilter {
            owner: Some(Uuid::nil()),
            statuses: Some(vec![SessionStatus::Running]),
        });
        assert_eq!(sql, "owner = $1 AND status = ANY($2)");
        assert_eq!(params.len(), 2);
    }
}
