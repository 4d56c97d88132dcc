//! Projects: the list, a new project, a member added.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use launcher::access::{self, AccessError};
use launcher::domain::FieldError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{checked_email, checked_name, invalid, superadmin_only, ObjectName};
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
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewProject {
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
    #[serde(default)]
    #[schema(max_length = 1000, pattern = r"^[^\u0000]*$")]
    pub description: String,
}

impl NewProject {
    /// The name, and a description of at most 1000 characters.
    pub fn check(&self) -> Result<(), FieldError> {
        checked_name("name", &self.name)?;
        if self.description.chars().count() > 1000 {
            return Err(invalid("description", "at most 1000 characters"));
        }
        Ok(())
    }
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
    let project: NewProject = parse_body(body)?;
    project.check()?;
    let NewProject { name, description } = project;
    access::create_project(&state.pool, &name, &description).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/admin/projects/{name}/members`'s body.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Member {
    /// The user who joins.
    #[schema(max_length = 254, pattern = "^[!-?A-~]+@[!-?A-~]+$")]
    pub email: String,
}

impl Member {
    /// The email, by its rule.
    pub fn check(&self) -> Result<(), FieldError> {
        checked_email("email", &self.email)
    }
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
    let member: Member = parse_body(body)?;
    member.check()?;
    let Member { email } = member;
    access::add_member(&state.pool, &name, &email)
        .await
        .map_err(|e| match e {
            e @ AccessError::Unknown { .. } => ApiError::not_found(e.to_string()).field("name"),
            other => other.into(),
        })?;
    Ok(StatusCode::NO_CONTENT)
}
