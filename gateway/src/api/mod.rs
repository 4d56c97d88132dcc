//! The REST handlers: sessions (create, list, detail, rename, terminate), scheduling history,
//! resource summary and presets. Reads come from the `proj_sessions` projection; commands go
//! through the launcher and the session lifecycle. A caller sees and acts on only their own
//! sessions (a superadmin on all); anyone else's session is a 404, so names do not leak.

use std::collections::HashMap;

use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use chrono::Utc;
use events::ledger::{self, KeyOwner};
use events::lifecycle;
use events::payloads::Role;
use launcher::domain;
use launcher::launch::{self, CreateSession};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::error::ApiError;
use crate::AppState;

/// The caller, from the `X-API-Key` header (or `Authorization: Bearer <key>`).
pub struct Caller(pub KeyOwner);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let key = header("x-api-key")
            .or_else(|| header("authorization").and_then(|a| a.strip_prefix("Bearer ")))
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthenticated",
                    "send your API key in the X-API-Key header",
                )
                .field("X-API-Key")
            })?;
        state.authenticate(key).await.map(Caller)
    }
}

/// Parses a JSON body, naming the field at fault: 413 above the size limit, 400 when it is
/// not JSON, 422 when a field is missing or of the wrong type.
pub fn parse_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|e| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body could not be read: {e}"),
        )
        .field("body")
    })?;
    let mut deserializer = serde_json::Deserializer::from_slice(&body);
    serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_json",
                format!("the body is not JSON: {inner}"),
            )
            .field("body");
        }
        let field = if path == "." {
            // A missing field is reported at the parent; name it from the message.
            inner
                .to_string()
                .split('`')
                .nth(1)
                .map(str::to_owned)
                .unwrap_or_else(|| "body".into())
        } else {
            path
        };
        ApiError::invalid(field, inner.to_string())
    })
}

fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| ApiError::not_found(format!("no session {id}")))
}

/// Query parameters, each known by name; an unknown one is refused by name.
struct Params(HashMap<String, String>);

impl Params {
    fn new(query: HashMap<String, String>, known: &[&str]) -> Result<Params, ApiError> {
        if let Some(bad) = query.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(ApiError::invalid(
                bad.clone(),
                format!("unknown parameter; known: {}", known.join(", ")),
            ));
        }
        Ok(Params(query))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn number(&self, name: &str, default: i64, max: i64) -> Result<i64, ApiError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse::<i64>()
                .ok()
                .filter(|n| (0..=max).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid(name, format!("must be a number from 0 to {max}"))
                }),
        }
    }

    fn one_of<'a>(&self, name: &str, allowed: &[&'a str]) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => allowed
                .iter()
                .find(|a| a.eq_ignore_ascii_case(v))
                .copied()
                .map(Some)
                .ok_or_else(|| {
                    ApiError::invalid(name, format!("must be one of {}", allowed.join(", ")))
                }),
        }
    }
}

/// WHERE clauses with their parameters, numbered as they are added.
#[derive(Default)]
struct Filter {
    clauses: Vec<String>,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Filter {
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

const SESSION_COLUMNS: &str = "session_id, name, owner, owner_email, requested_by, project,
    session_type, status, status_reason, image, resource_group, agent_id, resources,
    shared_memory_bytes, cluster_mode, cluster_size, kernels, request, created_at,
    status_changed_at, scheduled_at, started_at, ended_at, exit_code, attempts,
    termination_requested";

fn session_json(r: &tokio_postgres::Row, detail: bool) -> Value {
    let created: chrono::DateTime<Utc> = r.get(18);
    let started: Option<chrono::DateTime<Utc>> = r.get(21);
    let ended: Option<chrono::DateTime<Utc>> = r.get(22);
    let elapsed =
        started.map(|s| (ended.unwrap_or_else(Utc::now) - s).num_milliseconds() as f64 / 1000.0);
    let mut v = json!({
        "session_id": r.get::<_, Uuid>(0),
        "name": r.get::<_, String>(1),
        "owner": {"user_id": r.get::<_, Uuid>(2), "email": r.get::<_, String>(3)},
        "type": r.get::<_, String>(6),
        "status": r.get::<_, String>(7),
        "status_reason": r.get::<_, Option<String>>(8),
        "image": r.get::<_, String>(9),
        "resource_group": r.get::<_, String>(10),
        "agent_id": r.get::<_, Option<String>>(11),
        "created_at": created,
        "status_changed_at": r.get::<_, chrono::DateTime<Utc>>(19),
    });
    if detail {
        let extra = json!({
            "requested_by": r.get::<_, Option<Uuid>>(4),
            "project": r.get::<_, Option<String>>(5),
            "resources": r.get::<_, Value>(12),
            "shared_memory_bytes": r.get::<_, i64>(13),
            "cluster_mode": r.get::<_, String>(14),
            "cluster_size": r.get::<_, i32>(15),
            "kernels": r.get::<_, Value>(16),
            "request": r.get::<_, Value>(17),
            "reserved_at": created,
            "scheduled_at": r.get::<_, Option<chrono::DateTime<Utc>>>(20),
            "started_at": started,
            "ended_at": ended,
            "elapsed_secs": elapsed,
            "exit_code": r.get::<_, Option<i32>>(23),
            "scheduling_attempts": r.get::<_, i32>(24),
            "termination_requested": r.get::<_, bool>(25),
            "usage": Value::Null,
        });
        if let (Value::Object(base), Value::Object(more)) = (&mut v, extra) {
            base.extend(more);
        }
    }
    v
}

/// The session `id` if the caller may see it (a 404 otherwise, whoever owns it).
async fn visible_session(
    state: &AppState,
    caller: &KeyOwner,
    id: Uuid,
) -> Result<tokio_postgres::Row, ApiError> {
    let client = state.pool.get().await?;
    let sql = format!("SELECT {SESSION_COLUMNS} FROM proj_sessions.sessions WHERE session_id = $1");
    let statement = client.prepare_cached(&sql).await?;
    let mut row = client.query_opt(&statement, &[&id]).await?;
    if row.is_none() {
        await_view(state, caller, id).await?;
        row = client.query_opt(&statement, &[&id]).await?;
    }
    match row {
        Some(r) if caller.role == Role::Superadmin || r.get::<_, Uuid>(2) == caller.user_id => {
            Ok(r)
        }
        _ => Err(ApiError::not_found(format!("no session {id}"))),
    }
}

/// Read-your-writes for the views: the projection lags the log by milliseconds, so a session
/// just created may not be in it yet. When the ledger (exact) has a session the caller may
/// see and the view does not, waits for the view, up to 2 s; 404 when there is no such
/// session of the caller's.
async fn await_view(state: &AppState, caller: &KeyOwner, id: Uuid) -> Result<(), ApiError> {
    check_may_act(state, caller, id).await?;
    let client = state.pool.get().await?;
    for _ in 0..100 {
        if client
            .query_opt(
                "SELECT 1 FROM proj_sessions.sessions WHERE session_id = $1",
                &[&id],
            )
            .await?
            .is_some()
        {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "view_lagging",
        format!("session {id} is recorded but its view is not ready yet; try again"),
    ))
}

/// The owner of a session from the ledger (exact, unlike the projection, so a session just
/// created is there), checked against the caller; the session's status.
async fn check_may_act(state: &AppState, caller: &KeyOwner, id: Uuid) -> Result<String, ApiError> {
    let client = state.pool.get().await?;
    let row = client
        .query_opt(
            "SELECT owner, status FROM ledger.sessions WHERE session_id = $1",
            &[&id],
        )
        .await?;
    match row {
        Some(r) if caller.role == Role::Superadmin || r.get::<_, Uuid>(0) == caller.user_id => {
            Ok(r.get(1))
        }
        _ => Err(ApiError::not_found(format!("no session {id}"))),
    }
}

pub async fn create_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let request: CreateSession = parse_body(body)?;
    let launched = launch::launch(&state.pool, &caller, request).await?;
    state.wake_scheduler.notify_one();
    Ok((StatusCode::CREATED, Json(json!({ "sessions": launched }))))
}

pub async fn list_sessions(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let p = Params::new(
        query,
        &[
            "type", "state", "status", "owner", "limit", "offset", "sort",
        ],
    )?;
    let mut filter = Filter::default();
    if caller.role == Role::Superadmin {
        if let Some(owner) = p.get("owner") {
            filter.add("owner_email = ?", owner.to_owned());
        }
    } else {
        if p.get("owner").is_some_and(|o| o != caller.email) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "only superadmins list other users' sessions",
            )
            .field("owner"));
        }
        filter.add("owner = ?", caller.user_id);
    }
    if let Some(t) = p.one_of("type", &["interactive", "batch", "inference", "system"])? {
        filter.add("session_type = ?", t.to_owned());
    }
    match p.one_of("state", &["running", "finished"])? {
        Some("running") => filter
            .clauses
            .push("status NOT IN ('TERMINATED','ERROR','CANCELLED')".into()),
        Some(_) => filter
            .clauses
            .push("status IN ('TERMINATED','ERROR','CANCELLED')".into()),
        None => {}
    }
    if let Some(s) = p.get("status") {
        let status = s.to_ascii_uppercase();
        if serde_json::from_value::<events::payloads::SessionStatus>(Value::String(status.clone()))
            .is_err()
        {
            return Err(ApiError::invalid(
                "status",
                format!("`{s}` is not a session status"),
            ));
        }
        filter.add("status = ?", status);
    }
    let limit = p.number("limit", 50, 500)?.max(1);
    let offset = p.number("offset", 0, i64::MAX)?;
    let order = match p.one_of(
        "sort",
        &[
            "created_at",
            "-created_at",
            "name",
            "-name",
            "status",
            "-status",
        ],
    )? {
        Some("created_at") => "created_at ASC, session_id",
        Some("name") => "name ASC, session_id",
        Some("-name") => "name DESC, session_id",
        Some("status") => "status ASC, created_at DESC",
        Some("-status") => "status DESC, created_at DESC",
        _ => "created_at DESC, session_id",
    };
    let where_sql = filter.sql();
    let client = state.pool.get().await?;
    let params = filter.refs();
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
                 ORDER BY {order} LIMIT {limit} OFFSET {offset}"
            ),
            &params,
        )
        .await?;
    let sessions: Vec<Value> = rows.iter().map(|r| session_json(r, false)).collect();
    Ok(Json(
        json!({"sessions": sessions, "total": total, "limit": limit, "offset": offset}),
    ))
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

pub async fn session_detail(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<([(axum::http::HeaderName, &'static str); 1], Bytes), ApiError> {
    let id = parse_id(&id)?;
    let visible = |owner: Uuid| caller.role == Role::Superadmin || owner == caller.user_id;
    let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
    if let Some(cached) = state.details.get(id) {
        return if visible(cached.owner) {
            Ok((json, cached.body))
        } else {
            Err(ApiError::not_found(format!("no session {id}")))
        };
    }
    let client = state.pool.get().await?;
    let statement = client.prepare_cached(DETAIL_SQL).await?;
    let row = match client.query_opt(&statement, &[&id]).await? {
        Some(row) => row,
        None => {
            await_view(&state, &caller, id).await?;
            client
                .query_opt(&statement, &[&id])
                .await?
                .ok_or_else(|| ApiError::not_found(format!("no session {id}")))?
        }
    };
    let owner: Uuid = row.get(0);
    let body = Bytes::from(row.get::<_, String>(1));
    state.details.put(id, owner, row.get(2), body.clone());
    if visible(owner) {
        Ok((json, body))
    } else {
        Err(ApiError::not_found(format!("no session {id}")))
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rename {
    name: String,
}

pub async fn rename_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let Rename { name } = parse_body(body)?;
    domain::check_name("name", &name)?;
    check_may_act(&state, &caller, id).await?;
    let metadata = events::trace::metadata(&caller.user_id.to_string(), None);
    let after = lifecycle::command(&state.pool, id, &metadata, |s| {
        if s.name == name {
            return Ok(Vec::new());
        }
        s.rename(name.clone()).map(|e| vec![e])
    })
    .await?;
    Ok(Json(json!({"session_id": id, "name": after.name})))
}

pub async fn terminate_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let id = parse_id(&id)?;
    let p = Params::new(query, &["force"])?;
    let forced = matches!(p.one_of("force", &["true", "false"])?, Some("true"));
    check_may_act(&state, &caller, id).await?;
    let who = if forced {
        "force-terminated"
    } else {
        "terminated"
    };
    let reason = format!("{who} by {}", caller.email);
    let metadata = events::trace::metadata(&caller.user_id.to_string(), None);
    let after = lifecycle::command(&state.pool, id, &metadata, |s| {
        s.terminate(forced, reason.clone())
    })
    .await?;
    state.wake_scheduler.notify_one();
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"session_id": id, "status": after.status, "reason": after.status_reason})),
    ))
}

pub async fn session_history(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    visible_session(&state, &caller, id).await?;
    let p = Params::new(
        query,
        &[
            "id",
            "phase",
            "result",
            "from_status",
            "to_status",
            "error_code",
            "message",
            "sort",
        ],
    )?;
    let mut filter = Filter::default();
    filter.add("session_id = ?", id);
    if let Some(row_id) = p.get("id") {
        let row_id =
            Uuid::parse_str(row_id).map_err(|_| ApiError::invalid("id", "must be a UUID"))?;
        filter.add("id = ?", row_id);
    }
    if let Some(phase) = p.get("phase") {
        filter.add("phase = ?", phase.to_owned());
    }
    const RESULTS: &[&str] = &[
        "SUCCESS",
        "FAILURE",
        "STALE",
        "NEED_RETRY",
        "EXPIRED",
        "GIVE_UP",
        "SKIPPED",
    ];
    if let Some(result) = p.one_of("result", RESULTS)? {
        filter.add("result = ?", result.to_owned());
    }
    for field in ["from_status", "to_status"] {
        if let Some(s) = p.get(field) {
            let s = s.to_ascii_uppercase();
            if serde_json::from_value::<events::payloads::SessionStatus>(Value::String(s.clone()))
                .is_err()
            {
                return Err(ApiError::invalid(
                    field,
                    format!("`{s}` is not a session status"),
                ));
            }
            filter.add(&format!("{field} = ?"), s);
        }
    }
    if let Some(code) = p.get("error_code") {
        filter.add("error_code = ?", code.to_owned());
    }
    if let Some(message) = p.get("message") {
        let escaped = message
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        filter.add("message ILIKE ?", format!("%{escaped}%"));
    }
    let order = match p.one_of(
        "sort",
        &["created_at", "-created_at", "updated_at", "-updated_at"],
    )? {
        Some("-created_at") => "created_at DESC",
        Some("updated_at") => "updated_at ASC",
        Some("-updated_at") => "updated_at DESC",
        _ => "created_at ASC",
    };
    let client = state.pool.get().await?;
    let rows = client
        .query(
            &format!(
                "SELECT id, phase, result, from_status, to_status, attempts, message, error_code,
                        steps, created_at, updated_at
                 FROM proj_sessions.history WHERE {} ORDER BY {order}",
                filter.sql()
            ),
            &filter.refs(),
        )
        .await?;
    let history: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "id": r.get::<_, Uuid>(0),
                "phase": r.get::<_, String>(1),
                "result": r.get::<_, String>(2),
                "from_status": r.get::<_, String>(3),
                "to_status": r.get::<_, String>(4),
                "attempts": r.get::<_, i32>(5),
                "message": r.get::<_, String>(6),
                "error_code": r.get::<_, Option<String>>(7),
                "sub_steps": r.get::<_, Value>(8),
                "created_at": r.get::<_, chrono::DateTime<Utc>>(9),
                "updated_at": r.get::<_, chrono::DateTime<Utc>>(10),
            })
        })
        .collect();
    Ok(Json(json!({"session_id": id, "history": history})))
}

fn slots_json(r: &tokio_postgres::Row, first: usize) -> Value {
    json!({
        "cpu": r.get::<_, i64>(first) as f64 / 1000.0,
        "memory_bytes": r.get::<_, i64>(first + 1),
        "gpu": r.get::<_, i64>(first + 2) as f64 / 1000.0,
    })
}

pub async fn resource_summary(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let p = Params::new(query, &["resource_group"])?;
    let group = p.get("resource_group").unwrap_or("default").to_owned();
    let client = state.pool.get().await?;
    if client
        .query_opt(
            "SELECT 1 FROM ledger.resource_groups WHERE name = $1",
            &[&group],
        )
        .await?
        .is_none()
    {
        return Err(ApiError::invalid(
            "resource_group",
            format!("no resource group is named `{group}`"),
        ));
    }
    let limits = client
        .query_one(
            "SELECT max_concurrent_sessions, max_cpu_milli, max_memory_bytes, max_gpu_milli,
                    max_session_lifetime_secs, name FROM ledger.policies WHERE name = $1",
            &[&caller.resource_policy],
        )
        .await?;
    let mine = client
        .query_one(
            "SELECT count(*)::int,
               coalesce(sum((resources->>'cpu_milli')::bigint * cluster_size), 0)::bigint,
               coalesce(sum((resources->>'memory_bytes')::bigint * cluster_size), 0)::bigint,
               coalesce(sum((resources->>'gpu_milli')::bigint * cluster_size), 0)::bigint
             FROM proj_sessions.sessions WHERE owner = $1 AND resource_group = $2
               AND status IN ('SCHEDULED','PREPARING','PULLING','PREPARED','CREATING','RUNNING',
                              'RESTARTING','TERMINATING')",
            &[&caller.user_id, &group],
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
    Ok(Json(json!({
        "resource_group": group,
        "my_limits": {
            "resource_policy": limits.get::<_, String>(5),
            "max_concurrent_sessions": limits.get::<_, i32>(0),
            "max_total": slots_json(&limits, 1),
            "max_session_lifetime_secs": limits.get::<_, Option<i64>>(4),
        },
        "my_usage": {"sessions": mine.get::<_, i32>(0), "resources": slots_json(&mine, 1)},
        "group": {
            "agents": total.get::<_, i32>(0),
            "total": slots_json(&total, 1),
            "used": slots_json(&total, 4),
            "free": slots_json(&total, 7),
        },
    })))
}

pub async fn presets(
    State(state): State<AppState>,
    Caller(_): Caller,
) -> Result<Json<Value>, ApiError> {
    let client = state.pool.get().await?;
    let rows = client
        .query(
            "SELECT name, cpu_milli, memory_bytes, gpu_milli, shared_memory_bytes
             FROM ledger.presets ORDER BY name",
            &[],
        )
        .await?;
    let presets: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "name": r.get::<_, String>(0),
                "resources": slots_json(r, 1),
                "shared_memory_bytes": r.get::<_, i64>(4),
            })
        })
        .collect();
    Ok(Json(json!({ "presets": presets })))
}

pub async fn whoami(Caller(caller): Caller) -> Json<Value> {
    Json(
        json!({"user_id": caller.user_id, "email": caller.email, "role": caller.role, "resource_policy": caller.resource_policy}),
    )
}

/// Looks a key up in the ledger.
pub async fn lookup_key(state: &AppState, key: &str) -> Result<Option<KeyOwner>, ApiError> {
    let client = state.pool.get().await?;
    Ok(ledger::key_owner(&client, key).await?)
}

/// The output of each kernel's container: kept every second while it runs, whole once it ends.
/// With `follow=true`, a server-sent event stream of new output (`event: log`, data
/// `{"kernel", "text"}`) until every kernel's output is complete.
pub async fn session_logs(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let id = parse_id(&id)?;
    let p = Params::new(query, &["follow"])?;
    let follow = matches!(p.one_of("follow", &["true", "false"])?, Some("true"));
    let status = check_may_act(&state, &caller, id).await?;
    if follow {
        return Ok(follow_logs(state.pool.clone(), id).into_response());
    }
    let client = state.pool.get().await?;
    let rows = client
        .query(
            "SELECT kernel, content, complete, updated_at FROM session_logs
             WHERE session_id = $1 ORDER BY kernel",
            &[&id],
        )
        .await?;
    let kernels: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "kernel": r.get::<_, i32>(0),
                "content": r.get::<_, String>(1),
                "complete": r.get::<_, bool>(2),
                "updated_at": r.get::<_, chrono::DateTime<Utc>>(3),
            })
        })
        .collect();
    Ok(Json(json!({"session_id": id, "status": status, "kernels": kernels})).into_response())
}

/// New output of a session's kernels, as kept by its agent, until all of it is complete.
fn follow_logs(
    pool: deadpool_postgres::Pool,
    id: Uuid,
) -> axum::response::sse::Sse<
    impl futures::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>,
> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    struct Tail {
        pool: deadpool_postgres::Pool,
        sent: HashMap<i32, usize>,
        pending: std::collections::VecDeque<Event>,
        done: bool,
    }
    let start = Tail {
        pool,
        sent: HashMap::new(),
        pending: Default::default(),
        done: false,
    };
    let stream = futures::stream::unfold(start, move |mut tail| async move {
        loop {
            if let Some(event) = tail.pending.pop_front() {
                return Some((Ok(event), tail));
            }
            if tail.done {
                return None;
            }
            let (ended, rows) = match tail.pool.get().await {
                Ok(client) => {
                    let ended = client
                        .query_opt(
                            "SELECT status IN ('TERMINATED','ERROR','CANCELLED')
                             FROM ledger.sessions WHERE session_id = $1",
                            &[&id],
                        )
                        .await
                        .ok()
                        .flatten()
                        .is_none_or(|r| r.get::<_, bool>(0));
                    let rows = client
                        .query(
                            "SELECT kernel, content, complete FROM session_logs
                             WHERE session_id = $1 ORDER BY kernel",
                            &[&id],
                        )
                        .await
                        .unwrap_or_default();
                    (ended, rows)
                }
                Err(_) => (false, Vec::new()),
            };
            for r in &rows {
                let kernel: i32 = r.get(0);
                let content: String = r.get(1);
                let from = tail
                    .sent
                    .get(&kernel)
                    .copied()
                    .unwrap_or(0)
                    .min(content.len());
                if content.len() > from && content.is_char_boundary(from) {
                    let text = &content[from..];
                    tail.pending.push_back(
                        Event::default()
                            .event("log")
                            .data(json!({"kernel": kernel, "text": text}).to_string()),
                    );
                    tail.sent.insert(kernel, content.len());
                }
            }
            // Once the session has ended, what is kept is all there will be.
            let all_complete =
                ended || (!rows.is_empty() && rows.iter().all(|r| r.get::<_, bool>(2)));
            if all_complete {
                tail.done = true;
                tail.pending
                    .push_back(Event::default().event("end").data("{}"));
                continue;
            }
            if tail.pending.is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewFolder {
    name: String,
}

pub async fn create_folder(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let NewFolder { name } = parse_body(body)?;
    launch::create_folder(&state.pool, &caller, &name).await?;
    Ok((StatusCode::CREATED, Json(json!({"name": name}))))
}

pub async fn list_folders(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Value>, ApiError> {
    let client = state.pool.get().await?;
    let rows = client
        .query(
            "SELECT name, created_at FROM ledger.folders WHERE owner = $1 ORDER BY name",
            &[&caller.user_id],
        )
        .await?;
    let folders: Vec<Value> = rows
        .iter()
        .map(|r| json!({"name": r.get::<_, String>(0), "created_at": r.get::<_, chrono::DateTime<Utc>>(1)}))
        .collect();
    Ok(Json(json!({ "folders": folders })))
}
