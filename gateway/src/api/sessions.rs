//! Sessions: create (one or N), list, detail, rename, terminate.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::authorization::{self, Action};
use events::ledger::KeyOwner;
use events::lifecycle;
use events::payloads::{SessionStatus, SessionType};
use launcher::domain;
use launcher::launch::{self, CreateSession};
use uuid::Uuid;

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::{check_may_act, parse_body, parse_id, query, SessionId};
use crate::caller::Caller;
use crate::db;
use crate::db::sessions::{Liveness, SessionFilter, SessionOrder};
use crate::error::ApiError;
use crate::model::{Created, Renamed, SessionDetail, SessionPage, Terminated};
use crate::state::AppState;

/// Create sessions (`count`: N; those that do not fit wait in the queue).
#[utoipa::path(post, path = "/v1/sessions", tag = "sessions",
    request_body(content = CreateSession, example = json!({
        "type": "batch", "image": "berth/shell:latest",
        "startup_command": "echo hello from berth", "resources": {"cpu": 0.5, "memory": "256m"}})),
    responses((status = 201, description = "recorded, each PENDING", body = Created),
              (status = 503, description = "PostgreSQL is unavailable (`database_unavailable`) or too many creates are in flight (`busy`): nothing was written; try again after `Retry-After` seconds", body = crate::error::ErrorBody)))]
pub async fn create_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let request: CreateSession = parse_body(body)?;
    let _place = state.admit_create()?;
    let sessions = launch::launch(&state.pool, &caller, request).await?;
    Ok((StatusCode::CREATED, Json(Created { sessions })))
}

/// `GET /v1/sessions`'s parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// The session type.
    #[serde(rename = "type")]
    #[param(rename = "type", inline, nullable = false)]
    session_type: Option<SessionType>,
    /// Running (not yet ended) or finished sessions.
    #[param(inline, nullable = false)]
    state: Option<Liveness>,
    /// One status.
    #[param(inline, nullable = false)]
    status: Option<SessionStatus>,
    /// The owner's email (superadmins; anyone else may name only themselves).
    #[param(nullable = false, min_length = 1, pattern = r"^[^\u0000]+$")]
    owner: Option<String>,
    /// Only sessions of this name (the CLI resolves a name through it; a superadmin may see
    /// several users' sessions of one name).
    #[param(nullable = false, min_length = 1, pattern = r"^[^\u0000]+$")]
    name: Option<String>,
    /// How many sessions a page holds (default 50).
    #[param(nullable = false, minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// How many matching sessions to skip (default 0).
    #[param(nullable = false, minimum = 0)]
    offset: Option<i64>,
    /// The order (default `-created_at`, newest first).
    #[param(inline, nullable = false)]
    sort: Option<SessionOrder>,
}

/// List my sessions (all, for superadmins).
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", params(ListParams),
    responses((status = 200, description = "a page of sessions", body = SessionPage)))]
pub async fn list_sessions(
    State(state): State<AppState>,
    Caller(caller): Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<SessionPage>, ApiError> {
    let p: ListParams = query::parse(query.as_deref())?;
    let mut filter = SessionFilter {
        session_type: p.session_type,
        liveness: p.state,
        status: p.status,
        name: p.name,
        ..SessionFilter::default()
    };
    if authorization::lists_everyone(caller.role) {
        filter.owner_email = p.owner;
    } else {
        filter.owner = Some(match p.owner.filter(|o| *o != caller.email) {
            None => caller.user_id,
            Some(email) => listed_owner(&state, &caller, &email).await?,
        });
    }
    let limit = p.limit.unwrap_or(50);
    let offset = p.offset.unwrap_or(0);
    let order = p.sort.unwrap_or_default();
    let (total, sessions) =
        db::sessions::list_sessions(&state.pool, &filter, order, limit, offset).await?;
    Ok(Json(SessionPage {
        sessions,
        total,
        limit,
        offset,
    }))
}

/// The user whose sessions `caller` asked to list by naming their `email`, when the one
/// authorization rule lets them see that user's sessions; otherwise one refusal, the same
/// whether or not someone has that email.
async fn listed_owner(state: &AppState, caller: &KeyOwner, email: &str) -> Result<Uuid, ApiError> {
    let refused = || {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "you may list your own sessions and, as an admin, those of your projects' members",
        )
        .field("owner")
    };
    if !authorization::may_name_others(caller.role) {
        return Err(refused());
    }
    let owner = db::sessions::user_id_by_email(&state.pool, email)
        .await?
        .ok_or_else(refused)?;
    match crate::authorize::may(state, caller, Action::See, owner).await? {
        Ok(()) => Ok(owner),
        Err(_) => Err(refused()),
    }
}

/// The response header that says whether a detail came from memory (`hit`) or from the view
/// (`miss`).
pub const CACHE_HEADER: &str = "x-berth-cache";

type Headers = [(axum::http::HeaderName, &'static str); 2];

/// Session detail.
#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions", params(SessionId),
    responses((status = 200, description = "the session", body = SessionDetail,
        headers(("x-berth-cache" = String, description = "`hit` when served from memory, `miss` when read from the view")))))]
pub async fn session_detail(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
) -> Result<(Headers, Bytes), ApiError> {
    let id = parse_id(&id)?;
    let headers = |cache: &'static str| -> Headers {
        [
            (axum::http::header::CONTENT_TYPE, "application/json"),
            (axum::http::HeaderName::from_static(CACHE_HEADER), cache),
        ]
    };
    if let Some(cached) = state.details.get(id) {
        super::allowed(&state, &caller, Action::See, cached.owner, id).await?;
        return Ok((headers("hit"), cached.body));
    }
    let detail = match db::sessions::detail(&state.pool, id).await? {
        Some(detail) => detail,
        None => {
            super::await_view(&state, &caller, id).await?;
            db::sessions::detail(&state.pool, id)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("no session {id}")))?
        }
    };
    let body = Bytes::from(detail.body);
    state
        .details
        .put(id, detail.owner, detail.version, body.clone());
    super::allowed(&state, &caller, Action::See, detail.owner, id).await?;
    Ok((headers("miss"), body))
}

/// `PATCH /v1/sessions/{id}`'s body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rename {
    /// 4 to 64 ASCII letters and digits, unique among the owner's live sessions.
    #[schema(pattern = "^[A-Za-z0-9]{4,64}$")]
    name: String,
}

/// Rename a session.
#[utoipa::path(patch, path = "/v1/sessions/{id}", tag = "sessions", params(SessionId),
    request_body = Rename,
    responses((status = 200, description = "renamed", body = Renamed)))]
pub async fn rename_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Renamed>, ApiError> {
    let id = parse_id(&id)?;
    let Rename { name } = parse_body(body)?;
    domain::check_name("name", &name)?;
    check_may_act(&state, &caller, id).await?;
    rename(&state, &caller, id, name).await.map(Json)
}

/// Renames session `id` for `actor` (whose right to was checked, and the name by the rule
/// of the API it came through): berth's API and Backend.AI's both rename through this.
pub(crate) async fn rename(
    state: &AppState,
    actor: &KeyOwner,
    id: Uuid,
    name: String,
) -> Result<Renamed, ApiError> {
    let metadata = events::trace::metadata(&actor.user_id.to_string(), None);
    let after = lifecycle::command(&state.pool, id, &metadata, |s| {
        if s.name == name {
            return Ok(Vec::new());
        }
        s.rename(name.clone()).map(|e| vec![e])
    })
    .await?;
    Ok(Renamed {
        session_id: id,
        name: after.name,
    })
}

/// `DELETE /v1/sessions/{id}`'s parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TerminateParams {
    /// `true` ends the session at once, without waiting for its container to stop.
    #[param(nullable = false)]
    force: Option<bool>,
}

/// Terminate a session (`force=true` ends it at once).
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions",
    params(SessionId, TerminateParams),
    responses((status = 202, description = "terminating, terminated or cancelled", body = Terminated)))]
pub async fn terminate_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
    RawQuery(query): RawQuery,
) -> Result<(StatusCode, Json<Terminated>), ApiError> {
    let id = parse_id(&id)?;
    let p: TerminateParams = query::parse(query.as_deref())?;
    let forced = p.force.unwrap_or(false);
    check_may_act(&state, &caller, id).await?;
    let terminated = terminate(&state, &caller, id, forced).await?;
    Ok((StatusCode::ACCEPTED, Json(terminated)))
}

/// Terminates session `id` for `actor` (whose right to was checked); `forced` ends it at
/// once. berth's API and Backend.AI's both terminate through this.
pub(crate) async fn terminate(
    state: &AppState,
    actor: &KeyOwner,
    id: Uuid,
    forced: bool,
) -> Result<Terminated, ApiError> {
    let who = if forced {
        "force-terminated"
    } else {
        "terminated"
    };
    let reason = format!("{who} by {}", actor.email);
    let metadata = events::trace::metadata(&actor.user_id.to_string(), None);
    let after = lifecycle::command(&state.pool, id, &metadata, |s| {
        s.terminate(forced, reason.clone())
    })
    .await?;
    Ok(Terminated {
        session_id: id,
        status: after.status,
        reason: after.status_reason,
    })
}
