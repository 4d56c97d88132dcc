//! What the caller may use: the resource summary of a group, the presets, and who the caller
//! is.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;

use super::{Caller, Params};
use crate::db;
use crate::error::ApiError;
use crate::model::{Presets, ResourceSummary, Whoami};
use crate::AppState;

pub async fn resource_summary(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<ResourceSummary>, ApiError> {
    let p = Params::new(query, &["resource_group"])?;
    let group = p.get("resource_group").unwrap_or("default").to_owned();
    if !db::group_exists(&state.pool, &group).await? {
        return Err(
            ApiError::not_found(format!("no resource group is named `{group}`"))
                .field("resource_group"),
        );
    }
    let summary =
        db::resource_summary(&state.pool, caller.user_id, &caller.resource_policy, &group).await?;
    Ok(Json(summary))
}

pub async fn presets(
    State(state): State<AppState>,
    Caller(_): Caller,
) -> Result<Json<Presets>, ApiError> {
    let presets = db::presets(&state.pool).await?;
    Ok(Json(Presets { presets }))
}

pub async fn whoami(Caller(caller): Caller) -> Json<Whoami> {
    Json(Whoami {
        user_id: caller.user_id,
        email: caller.email,
        role: caller.role,
        resource_policy: caller.resource_policy,
    })
}
