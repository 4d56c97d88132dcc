//! The gateway's reads, as typed functions: the only place in this crate, with
//! `projection.rs`, that writes SQL (the workspace's tidy test checks it). Handlers say what
//! they want ([`SessionFilter`], [`HistoryFilter`]); this module says how to fetch it. Views
//! come from the `proj_sessions` projection; what must be exact right after a write (who owns
//! a session, its status) comes from the ledger.

use deadpool_postgres::{GenericClient, Pool};
use events::payloads::{SchedulingResult, SessionStatus, SessionType};
use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::{
    Amounts, Folder, GroupResources, HistoryEntry, KernelLog, Limits, MyUsage, OwnerRef, Preset,
    ResourceSummary, SessionSummary,
};

/// WHERE clauses with their parameters, numbered as they are added.
#[derive(Default)]
struct Where {
    clauses: Vec<String>,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Where {
    fn add<T: ToSql + Sync + Send + 'static>(&mut self, clause: &str, value: T) {
        self.params.push(Box::new(value));
        self.clauses
            .push(clause.replace('?', &format!("${}", self.params.len())));
    }

    fn sql(&self) -> String {
        if self.clauses.is_empty() {
            "true".into()
        } else {
            self.clauses.join(" AND ")
        }
    }

    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

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

const SESSION_COLUMNS: &str = "session_id, name, owner, owner_email, requested_by, project,
    session_type, status, status_reason, image, resource_group, agent_id, created_at,
    status_changed_at";

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
    }
}

/// A page of sessions matching `filter`, and how many match in all.
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
    'exit_code', exit_code, 'scheduling_attempts', attempts,
    'termination_requested', termination_requested,
    'usage', (SELECT json_build_object('cpu_seconds', u.cpu_seconds, 'cpu_percent', u.cpu_percent,
        'memory_bytes', u.memory_bytes, 'network_rx_bytes', u.rx_bytes,
        'network_tx_bytes', u.tx_bytes, 'sampled_at', u.sampled_at)
      FROM session_usage u WHERE u.session_id = s.session_id))::text, version
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

/// The owner and status of session `id` from the ledger (exact, unlike the view).
pub async fn ledger_owner_status(
    pool: &Pool,
    id: Uuid,
) -> Result<Option<(Uuid, String)>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT owner, status FROM ledger.sessions WHERE session_id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// The owner of session `id` from the ledger, for the event stream's filter.
pub async fn ledger_owner(pool: &Pool, id: Uuid) -> Result<Option<Uuid>, ApiError> {
    Ok(ledger_owner_status(pool, id).await?.map(|(owner, _)| owner))
}

/// Which scheduling-history rows of one session to show.
#[derive(Debug, Clone, Default)]
pub struct HistoryFilter {
    pub id: Option<Uuid>,
    pub phase: Option<String>,
    pub result: Option<SchedulingResult>,
    pub from_status: Option<SessionStatus>,
    pub to_status: Option<SessionStatus>,
    pub error_code: Option<String>,
    /// Rows whose message contains this text, in any case.
    pub message: Option<String>,
}

/// The order of a history (`sort=`, a leading `-` for descending).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
pub enum HistoryOrder {
    #[default]
    #[serde(rename = "created_at")]
    CreatedAscending,
    #[serde(rename = "-created_at")]
    CreatedDescending,
    #[serde(rename = "updated_at")]
    UpdatedAscending,
    #[serde(rename = "-updated_at")]
    UpdatedDescending,
}

/// Session `session_id`'s scheduling history rows matching `filter`.
pub async fn history(
    pool: &Pool,
    session_id: Uuid,
    filter: &HistoryFilter,
    order: HistoryOrder,
) -> Result<Vec<HistoryEntry>, ApiError> {
    let mut w = Where::default();
    w.add("session_id = ?", session_id);
    if let Some(id) = filter.id {
        w.add("id = ?", id);
    }
    if let Some(phase) = &filter.phase {
        w.add("phase = ?", phase.clone());
    }
    if let Some(result) = filter.result {
        w.add("result = ?", result.as_str().to_owned());
    }
    if let Some(s) = filter.from_status {
        w.add("from_status = ?", s.as_str().to_owned());
    }
    if let Some(s) = filter.to_status {
        w.add("to_status = ?", s.as_str().to_owned());
    }
    if let Some(code) = &filter.error_code {
        w.add("error_code = ?", code.clone());
    }
    if let Some(message) = &filter.message {
        let escaped = message
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        w.add("message ILIKE ?", format!("%{escaped}%"));
    }
    let order = match order {
        HistoryOrder::CreatedAscending => "created_at ASC",
        HistoryOrder::CreatedDescending => "created_at DESC",
        HistoryOrder::UpdatedAscending => "updated_at ASC",
        HistoryOrder::UpdatedDescending => "updated_at DESC",
    };
    let client = pool.get().await?;
    let rows = client
        .query(
            &format!(
                "SELECT id, phase, result, from_status, to_status, attempts, message, error_code,
                        steps, created_at, updated_at
                 FROM proj_sessions.history WHERE {} ORDER BY {order}",
                w.sql()
            ),
            &w.refs(),
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| HistoryEntry {
            id: r.get(0),
            phase: r.get(1),
            result: r.get(2),
            from_status: r.get(3),
            to_status: r.get(4),
            attempts: r.get(5),
            message: r.get(6),
            error_code: r.get(7),
            // Written by the projection from the events' steps: always of this shape.
            sub_steps: serde_json::from_value(r.get::<_, Value>(8)).unwrap_or_default(),
            created_at: r.get(9),
            updated_at: r.get(10),
        })
        .collect())
}

fn amounts(r: &Row, first: usize) -> Amounts {
    Amounts {
        cpu: r.get::<_, i64>(first) as f64 / 1000.0,
        memory_bytes: r.get(first + 1),
        gpu: r.get::<_, i64>(first + 2) as f64 / 1000.0,
    }
}

/// Whether a resource group named `name` exists.
pub async fn group_exists(pool: &Pool, name: &str) -> Result<bool, ApiError> {
    let client = pool.get().await?;
    Ok(client
        .query_opt(
            "SELECT 1 FROM ledger.resource_groups WHERE name = $1",
            &[&name],
        )
        .await?
        .is_some())
}

/// The resource summary of the seeds: the caller's limits (from `policy`), the caller's
/// usage in `group`, and the group's total, used and free resources.
pub async fn resource_summary(
    pool: &Pool,
    user: Uuid,
    policy: &str,
    group: &str,
) -> Result<ResourceSummary, ApiError> {
    let client = pool.get().await?;
    let limits = client
        .query_one(
            "SELECT max_concurrent_sessions, max_cpu_milli, max_memory_bytes, max_gpu_milli,
                    max_session_lifetime_secs, name FROM ledger.policies WHERE name = $1",
            &[&policy],
        )
        .await?;
    let mine = client
        .query_one(
            &format!(
                "SELECT count(*)::int,
                   coalesce(sum((resources->>'cpu_milli')::bigint * cluster_size), 0)::bigint,
                   coalesce(sum((resources->>'memory_bytes')::bigint * cluster_size), 0)::bigint,
                   coalesce(sum((resources->>'gpu_milli')::bigint * cluster_size), 0)::bigint
                 FROM proj_sessions.sessions WHERE owner = $1 AND resource_group = $2 AND {}",
                events::sql::holds_resources("status")
            ),
            &[&user, &group],
        )
        .await?;
    let total = client
        .query_one(
            "SELECT count(*)::int, coalesce(sum(cpu_milli), 0)::bigint,
               coalesce(sum(memory_bytes), 0)::bigint, coalesce(sum(gpu_milli), 0)::bigint,
               coalesce(sum(used_cpu_milli), 0)::bigint, coalesce(sum(used_memory_bytes), 0)::bigint,
               coalesce(sum(used_gpu_milli), 0)::bigint,
               coalesce(sum(cpu_milli - used_cpu_milli), 0)::bigint,
               coalesce(sum(memory_bytes - used_memory_bytes), 0)::bigint,
               coalesce(sum(gpu_milli - used_gpu_milli), 0)::bigint
             FROM proj_sessions.agents WHERE resource_group = $1 AND lost IS NULL",
            &[&group],
        )
        .await?;
    Ok(ResourceSummary {
        resource_group: group.to_owned(),
        my_limits: Limits {
            resource_policy: limits.get(5),
            max_concurrent_sessions: limits.get(0),
            max_total: amounts(&limits, 1),
            max_session_lifetime_secs: limits.get(4),
        },
        my_usage: MyUsage {
            sessions: mine.get(0),
            resources: amounts(&mine, 1),
        },
        group: GroupResources {
            agents: total.get(0),
            total: amounts(&total, 1),
            used: amounts(&total, 4),
            free: amounts(&total, 7),
        },
    })
}

/// Every preset, by name.
pub async fn presets(pool: &Pool) -> Result<Vec<Preset>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT name, cpu_milli, memory_bytes, gpu_milli, shared_memory_bytes
             FROM ledger.presets ORDER BY name",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Preset {
            name: r.get(0),
            resources: amounts(r, 1),
            shared_memory_bytes: r.get(4),
        })
        .collect())
}

/// The kept output of each of session `id`'s kernels, by kernel index.
pub async fn logs(pool: &Pool, id: Uuid) -> Result<Vec<KernelLog>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT kernel, content, complete, updated_at FROM session_logs
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

/// `owner`'s folders, by name.
pub async fn folders(pool: &Pool, owner: Uuid) -> Result<Vec<Folder>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT name, created_at FROM ledger.folders WHERE owner = $1 ORDER BY name",
            &[&owner],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Folder {
            name: r.get(0),
            created_at: r.get(1),
        })
        .collect())
}

/// `user`'s notifications, newest first (only the unread with `unread_only`), and how many
/// are unread.
pub async fn notices(
    pool: &Pool,
    user: Uuid,
    unread_only: bool,
    limit: i64,
) -> Result<crate::model::NoticePage, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT notice_id, session_id, session_name, kind, message, at, read_at
             FROM notification.notices
             WHERE user_id = $1 AND (NOT $2 OR read_at IS NULL)
             ORDER BY at DESC, notice_id DESC LIMIT $3",
            &[&user, &unread_only, &limit],
        )
        .await?;
    let items = rows
        .iter()
        .map(|r| {
            let kind: String = r.get(3);
            crate::model::NoticeItem {
                notice_id: r.get(0),
                session_id: r.get(1),
                session_name: r.get(2),
                kind: serde_json::from_value(serde_json::Value::String(kind))
                    .expect("the service writes only known kinds"),
                message: r.get(4),
                at: r.get(5),
                read_at: r.get(6),
            }
        })
        .collect();
    Ok(crate::model::NoticePage {
        unread: unread_count(pool, user).await?,
        items,
    })
}

/// How many of `user`'s notifications are unread.
pub async fn unread_count(pool: &Pool, user: Uuid) -> Result<i64, ApiError> {
    let client = pool.get().await?;
    Ok(client
        .query_one(
            "SELECT count(*) FROM notification.notices WHERE user_id = $1 AND read_at IS NULL",
            &[&user],
        )
        .await?
        .get(0))
}

/// How many of `user`'s notifications `ids`, or (with `made_by`) of those made by then, are
/// still unread.
pub async fn unread(
    pool: &Pool,
    user: Uuid,
    ids: &[Uuid],
    made_by: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<i64, ApiError> {
    let client = pool.get().await?;
    Ok(client
        .query_one(
            "SELECT count(*) FROM notification.notices
             WHERE user_id = $1 AND read_at IS NULL AND (notice_id = ANY($2) OR at <= $3)",
            &[&user, &ids, &made_by],
        )
        .await?
        .get(0))
}

/// How many customized images `owner` may keep (their policy's most, `None`: no limit) and
/// those they keep.
pub struct Allowance {
    pub policy: String,
    pub most: Option<i64>,
    pub images: Vec<String>,
}

pub async fn custom_image_allowance(pool: &Pool, owner: Uuid) -> Result<Allowance, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT u.resource_policy, p.max_custom_images FROM ledger.users u
               LEFT JOIN ledger.policies p ON p.name = u.resource_policy
             WHERE u.user_id = $1",
            &[&owner],
        )
        .await?;
    let (policy, most) = match row {
        Some(r) => (r.get(0), r.get::<_, Option<i32>>(1).map(i64::from)),
        None => (String::new(), None),
    };
    let images = client
        .query(
            "SELECT image FROM ledger.custom_images WHERE owner = $1",
            &[&owner],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(Allowance {
        policy,
        most,
        images,
    })
}

/// `owner`'s customized images, newest first.
pub async fn custom_images(
    pool: &Pool,
    owner: Uuid,
) -> Result<Vec<crate::model::CustomImage>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT image, session_id, agent_id, image_id, size_bytes, created_at
             FROM ledger.custom_images WHERE owner = $1 ORDER BY created_at DESC, image",
            &[&owner],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let image: String = r.get(0);
            crate::model::CustomImage {
                name: image
                    .rsplit_once(':')
                    .map(|(_, n)| n.to_owned())
                    .unwrap_or_default(),
                image,
                session_id: r.get(1),
                agent_id: r.get(2),
                image_id: r.get(3),
                size_bytes: r.get(4),
                created_at: r.get(5),
            }
        })
        .collect())
}

/// An open circuit of the app proxy, as the ledger keeps it, with its session's status.
#[derive(Debug, Clone)]
pub struct CircuitRow {
    pub circuit_id: Uuid,
    pub session_id: Uuid,
    pub owner: Uuid,
    pub app: String,
    pub container_port: u16,
    pub port: u16,
    pub admission: domain::apps::Admission,
    /// `None` when the ledger has no such session.
    pub session_status: Option<String>,
}

/// Open circuits: all of them, or those of `session` (of `app` only, when given), oldest first.
pub async fn circuits(
    pool: &Pool,
    session: Option<Uuid>,
    app: Option<&str>,
) -> Result<Vec<CircuitRow>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT c.circuit_id, c.session_id, c.owner, c.app, c.container_port, c.port,
                    c.admission, s.status
             FROM ledger.circuits c LEFT JOIN ledger.sessions s USING (session_id)
             WHERE ($1::uuid IS NULL OR c.session_id = $1) AND ($2::text IS NULL OR c.app = $2)
             ORDER BY c.opened_at",
            &[&session, &app],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| CircuitRow {
            circuit_id: row.get(0),
            session_id: row.get(1),
            owner: row.get(2),
            app: row.get(3),
            container_port: row.get::<_, i32>(4) as u16,
            port: row.get::<_, i32>(5) as u16,
            // Written by the ledger's fold from a typed event: it reads back.
            admission: serde_json::from_value(row.get(6)).unwrap_or(domain::apps::Admission {
                public: false,
                allowed: Vec::new(),
            }),
            session_status: row.get(7),
        })
        .collect())
}

/// The proxy ports the ledger's open circuits hold (this gateway's and any other's).
pub async fn circuit_ports(pool: &Pool) -> Result<Vec<u16>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query("SELECT port FROM ledger.circuits", &[])
        .await?;
    Ok(rows.iter().map(|r| r.get::<_, i32>(0) as u16).collect())
}

/// The session and port of open circuit `id`.
pub async fn circuit(pool: &Pool, id: Uuid) -> Result<Option<(Uuid, u16)>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT session_id, port FROM ledger.circuits WHERE circuit_id = $1",
            &[&id],
        )
        .await?;
    Ok(row.map(|r| (r.get(0), r.get::<_, i32>(1) as u16)))
}

/// The secret app `app` of `session` was started with, if berth started it.
pub async fn app_token(pool: &Pool, session: Uuid, app: &str) -> Result<Option<String>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT token FROM ledger.app_services WHERE session_id = $1 AND app = $2",
            &[&session, &app],
        )
        .await?;
    Ok(row.and_then(|r| r.get(0)))
}

/// Each checkpointed reader of the log (the relay, the projections): its name, how many
/// events it has not read (counted up to `counted_up_to`) and how long the oldest of them
/// has waited, in seconds.
pub async fn reader_lags(
    client: &impl GenericClient,
    counted_up_to: i64,
) -> Result<Vec<(String, i64, f64)>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT c.name,
                    (SELECT count(*) FROM (SELECT 1 FROM events e
                       WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq) LIMIT $1) unread),
                    coalesce(extract(epoch FROM clock_timestamp() -
                      (SELECT e.recorded_at FROM events e WHERE (e.tx_id, e.seq) > (c.tx_id, c.seq)
                       ORDER BY e.tx_id, e.seq LIMIT 1))::float8, 0)
             FROM checkpoints c ORDER BY c.name",
            &[&counted_up_to],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}
