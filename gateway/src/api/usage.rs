//! A session's usage over its whole life (`recorder.usage_series`, bounded by
//! `domain::usage`): what the detail panel's charts draw, from the session's start, not only
//! from when the panel was opened.

use axum::extract::{Path, State};
use axum::Json;
use domain::usage::SeriesPoint;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{check_may_see, parse_id, SessionId};
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::state::AppState;

/// `GET /v1/sessions/{id}/usage`: oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageSeries {
    pub points: Vec<SeriesPoint>,
}

/// The session's usage over its life: a point a minute over the last day, an hour apart
/// before that (at most 90 days), each the latest sample of its minute or hour.
#[utoipa::path(get, path = "/v1/sessions/{id}/usage", tag = "sessions", params(SessionId),
    responses((status = 200, description = "the usage series, oldest first", body = UsageSeries)))]
pub async fn session_usage(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
) -> Result<Json<UsageSeries>, ApiError> {
    let id = parse_id(&id)?;
    check_may_see(&state, &caller, id).await?;
    Ok(Json(UsageSeries {
        points: db::usage::series(&state.pool, id).await?,
    }))
}
