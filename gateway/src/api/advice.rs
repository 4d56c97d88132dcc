//! Advice no other scheduler gives: when a launch would start, and what would start sooner
//! (`POST /v1/advice`: the scheduler runs its live queue forward, `scheduler::advice`), how
//! right the estimates recorded for waiting sessions turned out (`GET /v1/estimates`), and
//! "notify me when it fits" (`POST /v1/fit-watches`: the scheduler tells the owner once, when
//! the shape would be placed at once).

use std::time::Duration;

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use domain::advice::{Advice, AdviceAsked, Shape};
use launcher::launch::{self, CreateSession};

use crate::api::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{Estimates, FitWatches, Watching};
use crate::state::AppState;

/// How long the scheduler has to answer.
const ASK_SCHEDULER: Duration = Duration::from_secs(5);

/// When the sessions this create would request are expected to start in their group (the
/// queue as it stands run forward through the scheduler's own decisions, every session
/// holding for the group's typical hold), and the smaller shapes or other groups open to the
/// owner that would start sooner. The body is a create's, checked as a create is (its
/// defaults filled in, its preset resolved); nothing is recorded.
#[utoipa::path(post, path = "/v1/advice", tag = "sessions",
    request_body = CreateSession,
    responses((status = 200, description = "the estimate and what starts sooner", body = Advice),
              (status = 503, description = "the scheduler does not answer", body = crate::error::ErrorBody)))]
pub async fn advise(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Advice>, ApiError> {
    let request: CreateSession = parse_body(body)?;
    let sessions = launch::resolve(&state.pool, &caller, &request).await?;
    let first = sessions
        .first()
        .ok_or_else(|| ApiError::invalid("count", "asks for no session"))?;
    let other_groups = db::resources::open_groups(&state.pool, &caller).await?;
    let asked = AdviceAsked {
        owner: first.owner.user_id,
        resource_group: first.resource_group.clone(),
        shape: Shape {
            per_kernel: first.resources,
            cluster_size: first.cluster_size,
        },
        priority: first.priority,
        project: first.owner.project.clone(),
        other_groups,
    };
    Ok(Json(ask_scheduler(&state, &asked).await?))
}

/// The scheduler's answer to `asked`.
pub async fn ask_scheduler(state: &AppState, asked: &AdviceAsked) -> Result<Advice, ApiError> {
    let away = || {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the scheduler does not answer; try again",
        )
    };
    let nats = state.bus("the scheduler cannot be asked")?;
    let body = serde_json::to_vec(asked).expect("a question serialises");
    let answer = tokio::time::timeout(
        ASK_SCHEDULER,
        nats.request(state.agent_bus.scheduler_advice(), body.into()),
    )
    .await
    .map_err(|_| away())?
    .map_err(|_| away())?;
    let answered: Result<Advice, String> =
        serde_json::from_slice(&answer.payload).map_err(ApiError::internal)?;
    answered.map_err(|why| ApiError::new(StatusCode::CONFLICT, "no_advice", why))
}

/// The start estimates recorded for my waiting sessions (everyone's, for superadmins), each
/// next to the start that happened: the error of berth's advice, measured.
#[utoipa::path(get, path = "/v1/estimates", tag = "sessions",
    responses((status = 200, description = "estimates and their errors, newest first", body = Estimates)))]
pub async fn list_estimates(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Estimates>, ApiError> {
    let everyone = caller.role == events::payloads::Role::Superadmin;
    let estimates = db::estimates::outcomes(&state.pool, caller.user_id, everyone).await?;
    let mut errors: Vec<f64> = estimates
        .iter()
        .filter_map(|e| e.error_secs.map(f64::abs))
        .collect();
    errors.sort_by(f64::total_cmp);
    let median_abs_error_secs = (!errors.is_empty()).then(|| errors[errors.len() / 2]);
    Ok(Json(Estimates {
        estimates,
        median_abs_error_secs,
    }))
}

/// "Notify me when it fits": watch the shape this create would launch in its group (the body
/// is a create's, checked as a create is; nothing is launched). The scheduler tells the owner
/// once, with a notification (and their webhook), when a session of that shape would be
/// placed at once (`FitWatchRequested`, `FitWatchFired`).
#[utoipa::path(post, path = "/v1/fit-watches", tag = "sessions",
    request_body = CreateSession,
    responses((status = 201, description = "watching", body = Watching)))]
pub async fn watch_fit(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Watching>), ApiError> {
    let request: CreateSession = parse_body(body)?;
    let watch_id = launch::watch_fit(&state.pool, &caller, &request).await?;
    Ok((StatusCode::CREATED, Json(Watching { watch_id })))
}

/// The shapes I watch that have not fitted yet.
#[utoipa::path(get, path = "/v1/fit-watches", tag = "sessions",
    responses((status = 200, description = "my open watches, oldest first", body = FitWatches)))]
pub async fn list_fit_watches(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<FitWatches>, ApiError> {
    Ok(Json(FitWatches {
        fit_watches: db::estimates::fit_watches(&state.pool, caller.user_id).await?,
    }))
}
