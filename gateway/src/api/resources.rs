//! What the caller may use: the resource summary of a group, the presets, and who the caller
//! is.

use axum::extract::{RawQuery, State};
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use super::query;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{Presets, ResourceSummary, Whoami};
use crate::state::AppState;

/// `GET /v1/resources`'s parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ResourceParams {
    /// The resource group (default `default`); an unknown group is a 404.
    #[param(nullable = false, pattern = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    resource_group: Option<String>,
}

/// My limits, my usage in a group, and the group's total, used and free resources.
#[utoipa::path(get, path = "/v1/resources", tag = "resources", params(ResourceParams),
    responses((status = 200, description = "the summary", body = ResourceSummary)))]
pub async fn resource_summary(
    State(state): State<AppState>,
    Caller(caller): Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<ResourceSummary>, ApiError> {
    let p: ResourceParams = query::parse(query.as_deref())?;
    let group = p.resource_group.unwrap_or_else(|| "default".into());
    if !db::resources::group_exists(&state.pool, &group).await? {
        return Err(
            ApiError::not_found(format!("no resource group is named `{group}`"))
                .field("resource_group"),
        );
    }
    let summary = db::resources::resource_summary(
        &state.pool,
        caller.user_id,
        &caller.resource_policy,
        &group,
    )
    .await?;
    Ok(Json(summary))
}

/// The saved resource presets.
#[utoipa::path(get, path = "/v1/presets", tag = "resources",
    responses((status = 200, description = "the presets", body = Presets)))]
pub async fn presets(
    State(state): State<AppState>,
    Caller(_): Caller,
) -> Result<Json<Presets>, ApiError> {
    let presets = db::resources::presets(&state.pool).await?;
    Ok(Json(Presets { presets }))
}

/// The caller.
#[utoipa::path(get, path = "/v1/whoami", tag = "resources",
    responses((status = 200, description = "who the API key belongs to", body = Whoami)))]
pub async fn whoami(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Whoami>, ApiError> {
    let client = state.pool.get().await?;
    let password_set = events::ledger::credentials::has_password(&client, caller.user_id).await?;
    Ok(Json(Whoami {
        user_id: caller.user_id,
        email: caller.email,
        role: caller.role,
        resource_policy: caller.resource_policy,
        password_set,
    }))
}
