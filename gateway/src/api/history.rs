//! A session's scheduling history: every phase with its result, filtered and sorted as the
//! seeds' history panel does.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use uuid::Uuid;

use super::{check_may_see, parse_id, status_param, Caller, Params};
use crate::db::{self, HistoryFilter, HistoryOrder};
use crate::error::ApiError;
use crate::model::History;
use crate::openapi::RESULTS;
use crate::AppState;

pub async fn session_history(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<History>, ApiError> {
    let id = parse_id(&id)?;
    check_may_see(&state, &caller, id).await?;
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
    let filter = HistoryFilter {
        id: p
            .get("id")
            .map(|row| Uuid::parse_str(row).map_err(|_| ApiError::invalid("id", "must be a UUID")))
            .transpose()?,
        phase: p.get("phase").map(str::to_owned),
        result: p.one_of("result", RESULTS)?.map(str::to_owned),
        from_status: p
            .get("from_status")
            .map(|s| status_param("from_status", s))
            .transpose()?,
        to_status: p
            .get("to_status")
            .map(|s| status_param("to_status", s))
            .transpose()?,
        error_code: p.get("error_code").map(str::to_owned),
        message: p.get("message").map(str::to_owned),
    };
    let order = match p.one_of(
        "sort",
        &["created_at", "-created_at", "updated_at", "-updated_at"],
    )? {
        Some("-created_at") => HistoryOrder::CreatedDescending,
        Some("updated_at") => HistoryOrder::UpdatedAscending,
        Some("-updated_at") => HistoryOrder::UpdatedDescending,
        _ => HistoryOrder::CreatedAscending,
    };
    let history = db::history(&state.pool, id, &filter, order).await?;
    Ok(Json(History {
        session_id: id,
        history,
    }))
}
