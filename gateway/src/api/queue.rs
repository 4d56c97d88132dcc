//! The queue, for superadmins: each resource group's PENDING sessions in the order the
//! scheduler tries them, each with why it waits (its latest scheduling-history row) and what
//! it asks for. Backend.AI's users asked for exactly this page.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use events::payloads::Role;

use super::catalogue::{groups_to_read, GroupParams};
use super::query;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::Queue;
use crate::state::AppState;

/// Every resource group's queue (superadmins only): the PENDING sessions in the order the
/// scheduler will try them, each with its figures and the reason it waits.
#[utoipa::path(get, path = "/v1/queue", tag = "sessions", params(GroupParams),
    responses((status = 200, description = "the queues, by group", body = Queue)))]
pub async fn list_queue(
    State(state): State<AppState>,
    Caller(caller): Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<Queue>, ApiError> {
    if caller.role != Role::Superadmin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only superadmins see the queue",
        )
        .field("X-API-Key"));
    }
    let p: GroupParams = query::parse(query.as_deref())?;
    let groups = groups_to_read(&state.pool, &caller, p.resource_group.as_deref()).await?;
    Ok(Json(Queue {
        resource_groups: db::queue::queue(&state.pool, &groups).await?,
    }))
}
