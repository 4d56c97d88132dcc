//! A session's idle checks: what each checker says of it now (the idle-reaper answers over
//! NATS from what it folded), and an exemption by its owner or an admin (an event).

use std::time::Duration;

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::idleness::SessionReadings;
use events::lifecycle;
use serde::Deserialize;
use utoipa::ToSchema;

use super::{check_may_act, parse_body, parse_id, SessionId};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::model::Exempted;
use crate::state::AppState;

/// How long the gateway waits for the idle-reaper's answer.
const ASK_REAPER: Duration = Duration::from_secs(2);

/// What each idle checker (lifetime, network idle, utilization) says of a session now: its
/// figures, thresholds and the seconds left before it fires. A session that has ended, or is
/// being terminated, is watched no more and has no readings.
#[utoipa::path(get, path = "/v1/sessions/{id}/idle", tag = "sessions", params(SessionId),
    responses((status = 200, description = "the idle checkers' readings", body = SessionReadings),
              (status = 503, description = "the idle-reaper does not answer", body = crate::error::ErrorBody)))]
pub async fn session_idle(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
) -> Result<Json<SessionReadings>, ApiError> {
    let id = parse_id(&id)?;
    check_may_act(&state, &caller, id).await?;
    let reaper_away = || {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the idle-reaper does not answer; try again",
        )
    };
    let nats = state.bus("the idle-reaper cannot be asked")?;
    let body = serde_json::to_vec(&id).expect("an id serialises");
    let answer = tokio::time::timeout(
        ASK_REAPER,
        nats.request(state.agent_bus.idle_readings(), body.into()),
    )
    .await
    .map_err(|_| reaper_away())?
    .map_err(|_| reaper_away())?;
    let found: Option<SessionReadings> =
        serde_json::from_slice(&answer.payload).map_err(ApiError::internal)?;
    Ok(Json(found.unwrap_or(SessionReadings {
        session_id: id,
        exempt: false,
        readings: Vec::new(),
    })))
}

/// Why a session is exempted from the idle checks.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Exemption {
    /// Kept with the event, for whoever wonders why the session was left alone.
    #[schema(min_length = 1, max_length = 500, pattern = r"^[^\u0000]+$")]
    reason: String,
}

/// Exempt a session from the idle checks (its owner or an admin; recorded). Its readings
/// still show; the idle-reaper never terminates it.
#[utoipa::path(post, path = "/v1/sessions/{id}/idle-exemption", tag = "sessions",
    params(SessionId), request_body = Exemption,
    responses((status = 200, description = "exempted", body = Exempted)))]
pub async fn exempt_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Exempted>, ApiError> {
    let id = parse_id(&id)?;
    let Exemption { reason } = parse_body(body)?;
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(ApiError::invalid("reason", "1 to 500 characters"));
    }
    check_may_act(&state, &caller, id).await?;
    let metadata = events::trace::metadata(&caller.user_id.to_string(), None);
    let after = lifecycle::command(&state.pool, id, &metadata, |s| {
        s.exempt_from_idleness(caller.user_id, reason.clone())
    })
    .await?;
    Ok(Json(Exempted {
        session_id: id,
        idle_exempt: after.idle_exempt,
    }))
}
