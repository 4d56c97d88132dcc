//! Sessions: create (one or N), list, detail, rename, terminate.

use std::collections::HashMap;

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::lifecycle;
use events::payloads::{Role, SessionType};
use launcher::domain;
use launcher::launch::{self, CreateSession};
use uuid::Uuid;

use super::{check_may_act, parse_body, parse_id, status_param, Caller, Params};
use crate::db::{self, Liveness, SessionFilter, SessionOrder};
use crate::error::ApiError;
use crate::model::{Created, Renamed, SessionPage, Terminated};
use crate::AppState;

pub async fn create_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let request: CreateSession = parse_body(body)?;
    let sessions = launch::launch(&state.pool, &caller, request).await?;
    state.wake_scheduler.notify_one();
    Ok((StatusCode::CREATED, Json(Created { sessions })))
}

pub async fn list_sessions(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<SessionPage>, ApiError> {
    let p = Params::new(
        query,
        &[
            "type", "state", "status", "owner", "limit", "offset", "sort",
        ],
    )?;
    let mut filter = SessionFilter::default();
    if caller.role == Role::Superadmin {
        filter.owner_email = p.get("owner").map(str::to_owned);
    } else {
        if p.get("owner").is_some_and(|o| o != caller.email) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "only superadmins list other users' sessions",
            )
            .field("owner"));
        }
        filter.owner = Some(caller.user_id);
    }
    filter.session_type =
        match p.one_of("type", &["interactive", "batch", "inference", "system"])? {
            Some("interactive") => Some(SessionType::Interactive),
            Some("batch") => Some(SessionType::Batch),
            Some("inference") => Some(SessionType::Inference),
            Some(_) => Some(SessionType::System),
            None => None,
        };
    filter.liveness = match p.one_of("state", &["running", "finished"])? {
        Some("running") => Some(Liveness::Running),
        Some(_) => Some(Liveness::Finished),
        None => None,
    };
    filter.status = p
        .get("status")
        .map(|s| status_param("status", s))
        .transpose()?;
    let limit = p.number("limit", 50, 1..=500)?;
    let offset = p.number("offset", 0, 0..=i64::MAX)?;
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
        Some("created_at") => SessionOrder::OldestFirst,
        Some("name") => SessionOrder::NameAscending,
        Some("-name") => SessionOrder::NameDescending,
        Some("status") => SessionOrder::StatusAscending,
        Some("-status") => SessionOrder::StatusDescending,
        _ => SessionOrder::NewestFirst,
    };
    let (total, sessions) = db::list_sessions(&state.pool, &filter, order, limit, offset).await?;
    Ok(Json(SessionPage {
        sessions,
        total,
        limit,
        offset,
    }))
}

/// The response header that says whether a detail came from memory (`hit`) or from the view
/// (`miss`).
pub const CACHE_HEADER: &str = "x-berth-cache";

type Headers = [(axum::http::HeaderName, &'static str); 2];

pub async fn session_detail(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> Result<(Headers, Bytes), ApiError> {
    let id = parse_id(&id)?;
    let visible = |owner: Uuid| caller.role == Role::Superadmin || owner == caller.user_id;
    let headers = |cache: &'static str| -> Headers {
        [
            (axum::http::header::CONTENT_TYPE, "application/json"),
            (axum::http::HeaderName::from_static(CACHE_HEADER), cache),
        ]
    };
    if let Some(cached) = state.details.get(id) {
        return if visible(cached.owner) {
            Ok((headers("hit"), cached.body))
        } else {
            Err(ApiError::not_found(format!("no session {id}")))
        };
    }
    let detail = match db::detail(&state.pool, id).await? {
        Some(detail) => detail,
        None => {
            super::await_view(&state, &caller, id).await?;
            db::detail(&state.pool, id)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("no session {id}")))?
        }
    };
    let body = Bytes::from(detail.body);
    state
        .details
        .put(id, detail.owner, detail.version, body.clone());
    if visible(detail.owner) {
        Ok((headers("miss"), body))
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
) -> Result<Json<Renamed>, ApiError> {
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
    Ok(Json(Renamed {
        session_id: id,
        name: after.name,
    }))
}

pub async fn terminate_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<(StatusCode, Json<Terminated>), ApiError> {
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
        Json(Terminated {
            session_id: id,
            status: after.status,
            reason: after.status_reason,
        }),
    ))
}
