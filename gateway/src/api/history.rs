//! A session's scheduling history: every phase with its result, filtered and sorted as the
//! seeds' history panel does.

use axum::extract::{Path, RawQuery, State};
use axum::Json;
use events::payloads::{SchedulingResult, SessionStatus};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use super::{check_may_see, parse_id, query, SessionId};
use crate::caller::Caller;
use crate::db;
use crate::db::history::{HistoryFilter, HistoryOrder};
use crate::error::ApiError;
use crate::model::History;
use crate::state::AppState;

/// `GET /v1/sessions/{id}/history`'s parameters: filters, each optional, and the order.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// One history row, by its id.
    #[param(nullable = false)]
    id: Option<Uuid>,
    /// The phase's name: `schedule`, `reconcile`, `prepare`, `pull`, `create`, `start`,
    /// `restart`, `terminate` or `cleanup`.
    #[param(nullable = false, min_length = 1, pattern = r"^[^\u0000]+$")]
    phase: Option<String>,
    /// The phase's result.
    #[param(inline, nullable = false)]
    result: Option<SchedulingResult>,
    /// The status before the phase.
    #[param(inline, nullable = false)]
    from_status: Option<SessionStatus>,
    /// The status after the phase.
    #[param(inline, nullable = false)]
    to_status: Option<SessionStatus>,
    /// The phase's error code.
    #[param(nullable = false, min_length = 1, pattern = r"^[^\u0000]+$")]
    error_code: Option<String>,
    /// Text the message contains, in any case.
    #[param(nullable = false, min_length = 1, pattern = r"^[^\u0000]+$")]
    message: Option<String>,
    /// The order (default `created_at`, oldest first).
    #[param(inline, nullable = false)]
    sort: Option<HistoryOrder>,
}

/// A session's scheduling history: every phase it went through (its placement, its agent's
/// preparation, pull, creation and start, its end and clean-up), in order, with its result
/// and sub-steps.
#[utoipa::path(get, path = "/v1/sessions/{id}/history", tag = "sessions",
    params(SessionId, HistoryParams),
    responses((status = 200, description = "history rows with sub-steps", body = History)))]
pub async fn session_history(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
    RawQuery(query): RawQuery,
) -> Result<Json<History>, ApiError> {
    let id = parse_id(&id)?;
    check_may_see(&state, &caller, id).await?;
    let p: HistoryParams = query::parse(query.as_deref())?;
    let filter = HistoryFilter {
        id: p.id,
        phase: p.phase,
        result: p.result,
        from_status: p.from_status,
        to_status: p.to_status,
        error_code: p.error_code,
        message: p.message,
    };
    let order = p.sort.unwrap_or_default();
    let history = db::history::history(&state.pool, id, &filter, order).await?;
    Ok(Json(History {
        session_id: id,
        history,
    }))
}
