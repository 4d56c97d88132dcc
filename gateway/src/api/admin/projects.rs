//! Projects: the list, a new project, a member added.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use launcher::access::{self, AccessError};
use serde::Deserialize;
use utoipa::ToSchema;

use super::{checked_email, checked_name, superadmin_only, ObjectName};
use crate::api::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::AdminProjects;
use crate::state::AppState;

/// Every project, with its members and the resource groups granted to it.
#[utoipa::path(get, path = "/v1/admin/projects", tag = "admin",
    responses((status = 200, description = "the projects, by name", body = AdminProjects)))]
pub async fn admin_list_projects(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<AdminProjects>, ApiError> {
    superadmin_only(&caller)?;
    Ok(Json(AdminProjects {
        projects: db::admin::projects(&state.pool).await?,
    }))
}

/// `POST /v1/admin/projects`'s body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewProject {
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
    #[serde(default)]
    #[schema(max_length = 1000, pattern = r"^[^\u0000]*$")]
    pub description: String,
}

/// Create a project, or change its description (`ProjectCreated`).
#[utoipa::path(post, path = "/v1/admin/projects", tag = "admin", request_body = NewProject,
    responses((status = 204, description = "the project exists as described")))]
pub async fn admin_create_project(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    let NewProject { name, description } = parse_body(body)?;
    checked_name("name", &name)?;
    if description.chars().count() > 1000 {
        return Err(ApiError::invalid("description", "at most 1000 characters"));
    }
    access::create_project(&state.pool, &name, &description).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/admin/projects/{name}/members`'s body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Member {
    /// The user who joins.
    #[schema(max_length = 254, pattern = "^[!-?A-~]+@[!-?A-~]+$")]
    pub email: String,
}

/// Add a user to a project (`UserJoinedProject`).
#[utoipa::path(post, path = "/v1/admin/projects/{name}/members", tag = "admin",
    params(ObjectName), request_body = Member,
    responses((status = 204, description = "the user is a member")))]
pub async fn admin_add_member(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ObjectName { name }): Path<ObjectName>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    checked_name("name", &name)?;
    let Member { email } = parse_body(body)?;
    checked_email("email", &email)?;
    access::add_member(&state.pool, &name, &email)
        .await
        .map_err(|e| match e {
            e @ AccessError::Unknown { .. } => ApiError::not_found(e.to_string()).field("name"),
            other => other.into(),
        })?;
    Ok(StatusCode::NO_CONTENT)
}
