//! What a caller may choose from when they launch: the resource groups open to them and what
//! each holds, the agents of those groups with their free resources (one may be picked by
//! hand), and the image catalogue the agents offer. Superadmins see every group, and every
//! agent with its liveness and sessions.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use deadpool_postgres::Pool;
use events::ledger::KeyOwner;
use events::payloads::Role;
use serde::Deserialize;
use utoipa::IntoParams;

use super::query;
use crate::caller::Caller;
use crate::db;
use crate::db::agents::Audience;
use crate::error::ApiError;
use crate::model::{Agents, Environments, ResourceGroups};
use crate::state::AppState;

/// The `resource_group` parameter of the reads that cover some groups.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GroupParams {
    /// Only this resource group (default: every group open to the caller); a group that does
    /// not exist is a 404, one not open to the caller a 403.
    #[param(nullable = false, pattern = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    pub resource_group: Option<String>,
}

/// The resource groups a read covers for `caller`: every group open to them, or only
/// `named`; 404 for a group that does not exist and 403 for one not open to the caller,
/// each naming `resource_group`.
pub async fn groups_to_read(
    pool: &Pool,
    caller: &KeyOwner,
    named: Option<&str>,
) -> Result<Vec<String>, ApiError> {
    let open = db::resources::open_groups(pool, caller).await?;
    let Some(named) = named else {
        return Ok(open);
    };
    if open.iter().any(|g| g == named) {
        return Ok(vec![named.to_owned()]);
    }
    if !db::resources::group_exists(pool, named).await? {
        return Err(
            ApiError::not_found(format!("no resource group is named `{named}`"))
                .field("resource_group"),
        );
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!("`{named}` is not open to your projects"),
    )
    .field("resource_group"))
}

/// The resource groups open to me (all, for superadmins), each with what its live agents
/// hold in all, have used and have free.
#[utoipa::path(get, path = "/v1/resource-groups", tag = "resources",
    responses((status = 200, description = "the groups open to me, by name", body = ResourceGroups)))]
pub async fn list_resource_groups(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<ResourceGroups>, ApiError> {
    let groups = db::resources::open_groups(&state.pool, &caller).await?;
    Ok(Json(ResourceGroups {
        resource_groups: db::resources::resource_groups(&state.pool, &groups).await?,
    }))
}

/// The agents of the groups open to me, each with its capacity, what it holds and what it
/// has free (a create request's `agent` may name one). Superadmins see every agent, those
/// lost or gone too (`lost`), with how long each has gone unheard and how many sessions it
/// holds.
#[utoipa::path(get, path = "/v1/agents", tag = "resources", params(GroupParams),
    responses((status = 200, description = "the agents, by group and id", body = Agents)))]
pub async fn list_agents(
    State(state): State<AppState>,
    Caller(caller): Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<Agents>, ApiError> {
    let p: GroupParams = query::parse(query.as_deref())?;
    let groups = groups_to_read(&state.pool, &caller, p.resource_group.as_deref()).await?;
    let audience = if caller.role == Role::Superadmin {
        Audience::Superadmin
    } else {
        Audience::User
    };
    Ok(Json(Agents {
        agents: db::agents::agents(&state.pool, &groups, audience).await?,
    }))
}

/// The image catalogue: the images the live agents of the groups open to me offer, as
/// environments (repositories) and their versions (tags), each version naming the groups
/// that offer it; my own customized images among them, marked `customized`. A create
/// request's `image` names a version's `image`.
#[utoipa::path(get, path = "/v1/environments", tag = "images", params(GroupParams),
    responses((status = 200, description = "environments by name, mine last", body = Environments)))]
pub async fn list_environments(
    State(state): State<AppState>,
    Caller(caller): Caller,
    RawQuery(query): RawQuery,
) -> Result<Json<Environments>, ApiError> {
    let p: GroupParams = query::parse(query.as_deref())?;
    let groups = groups_to_read(&state.pool, &caller, p.resource_group.as_deref()).await?;
    Ok(Json(Environments {
        environments: db::environments::environments(&state.pool, caller.user_id, &groups).await?,
    }))
}
