//! Users: the list, a new user with a role and projects, a password set by a superadmin
//! (which signs them out everywhere), a user disabled and enabled again, a role changed.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::payloads::Role;
use launcher::access;
use launcher::domain::FieldError;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{
    checked_email, checked_name, default_name, default_projects, invalid, name_list, refused,
    superadmin_only,
};
use crate::api::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{AdminUsers, IssuedKey};
use crate::state::AppState;

/// Every user, with their role, policy, projects, how many keys they hold and whether they
/// have a password.
#[utoipa::path(get, path = "/v1/admin/users", tag = "admin",
    responses((status = 200, description = "the users, by email", body = AdminUsers)))]
pub async fn admin_list_users(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<AdminUsers>, ApiError> {
    superadmin_only(&caller)?;
    Ok(Json(AdminUsers {
        users: db::admin::users(&state.pool).await?,
    }))
}

/// `POST /v1/admin/users`'s body.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewUser {
    #[schema(max_length = 254, pattern = "^[!-?A-~]+@[!-?A-~]+$")]
    pub email: String,
    /// `user` (the default), `admin` or `superadmin`.
    #[serde(default)]
    pub role: Option<Role>,
    /// The resource policy that bounds them (default `default`).
    #[serde(default = "default_name")]
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub resource_policy: String,
    /// The projects they join (default `["default"]`).
    #[serde(default = "default_projects")]
    #[schema(schema_with = name_list)]
    pub projects: Vec<String>,
}

impl NewUser {
    /// The email, the policy's name and each project's name (`projects[i]`), by their rules.
    pub fn check(&self) -> Result<(), FieldError> {
        checked_email("email", &self.email)?;
        checked_name("resource_policy", &self.resource_policy)?;
        for (i, project) in self.projects.iter().enumerate() {
            checked_name("projects", project).map_err(|_| {
                invalid(
                    format!("projects[{i}]"),
                    "1 to 64 letters, digits, `_` or `-`",
                )
            })?;
        }
        Ok(())
    }
}

/// Create a user in some projects, with a role and a resource policy; answers with their
/// first API key, shown only now (`UserCreated`, `ApiKeyIssued`, `UserJoinedProject`).
#[utoipa::path(post, path = "/v1/admin/users", tag = "admin", request_body = NewUser,
    responses((status = 201, description = "the user and their first key", body = IssuedKey)))]
pub async fn admin_create_user(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<IssuedKey>), ApiError> {
    superadmin_only(&caller)?;
    let user: NewUser = parse_body(body)?;
    user.check()?;
    let (user_id, api_key) = access::create_user(
        &state.pool,
        &user.email,
        user.role.unwrap_or(Role::User),
        &user.resource_policy,
        &user.projects,
    )
    .await
    .map_err(|e| refused(e, "email"))?;
    Ok((
        StatusCode::CREATED,
        Json(IssuedKey {
            user_id,
            email: user.email,
            api_key,
            expires_at: None,
        }),
    ))
}

/// `PUT /v1/admin/passwords`'s body.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordSet {
    #[schema(max_length = 254, pattern = "^[!-?A-~]+@[!-?A-~]+$")]
    pub email: String,
    /// 8 to 256 characters.
    #[schema(min_length = 8, max_length = 256, pattern = r"^[^\u0000]*$")]
    pub password: String,
}

impl PasswordSet {
    /// The email (the password's own rules are `launcher::credentials`').
    pub fn check(&self) -> Result<(), FieldError> {
        checked_email("email", &self.email)
    }
}

/// Set a user's password, with which they sign in to the web console (`UserPasswordSet`);
/// every console sign-in of theirs ends (`ConsoleSignedOutEverywhere`).
#[utoipa::path(put, path = "/v1/admin/passwords", tag = "admin", request_body = PasswordSet,
    responses((status = 204, description = "the password is set")))]
pub async fn admin_set_password(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    let set: PasswordSet = parse_body(body)?;
    set.check()?;
    let PasswordSet { email, password } = set;
    launcher::credentials::set_password(&state.pool, &email, &password).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A user named in a path by their email.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct UserEmail {
    #[param(max_length = 254, pattern = "^[!-?A-~]+@[!-?A-~]+$")]
    pub email: String,
}

/// Disable a user (`UserDisabled`): from now on their API keys, Backend.AI keypairs and console
/// sign-ins are refused (401) on every gateway, their console sign-ins end and their sessions'
/// app circuits close; their sessions keep running (terminate them to end them). Disabling
/// one already disabled changes nothing; nobody disables themselves (403).
#[utoipa::path(post, path = "/v1/admin/users/{email}/disable", tag = "admin",
    params(UserEmail),
    responses((status = 204, description = "disabled")))]
pub async fn admin_disable_user(
    state: State<AppState>,
    caller: Caller,
    param: Path<UserEmail>,
) -> Result<StatusCode, ApiError> {
    set_disabled(state, caller, param, true).await
}

/// Enable a disabled user again (`UserEnabled`): their keys and keypairs are honoured again
/// (they sign in to the console anew). Enabling one not disabled changes nothing.
#[utoipa::path(post, path = "/v1/admin/users/{email}/enable", tag = "admin",
    params(UserEmail),
    responses((status = 204, description = "enabled")))]
pub async fn admin_enable_user(
    state: State<AppState>,
    caller: Caller,
    param: Path<UserEmail>,
) -> Result<StatusCode, ApiError> {
    set_disabled(state, caller, param, false).await
}

async fn set_disabled(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(param): Path<UserEmail>,
    disabled: bool,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    checked_email("email", &param.email)?;
    let user =
        access::set_user_disabled(&state.pool, caller.user_id, &param.email, disabled).await?;
    // This gateway at once; every other when the relayed event reaches it.
    state.forget_user(user).await;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /v1/admin/users/{email}/role`'s body.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleSet {
    /// `user`, `admin` or `superadmin`.
    pub role: Role,
}

/// Change a user's role (`UserRoleChanged`); it holds on every gateway at once. The same role
/// changes nothing; nobody changes their own (403).
#[utoipa::path(put, path = "/v1/admin/users/{email}/role", tag = "admin",
    params(UserEmail), request_body = RoleSet,
    responses((status = 204, description = "the role is set")))]
pub async fn admin_set_role(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(param): Path<UserEmail>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    checked_email("email", &param.email)?;
    let RoleSet { role } = parse_body(body)?;
    let user = access::set_role(&state.pool, caller.user_id, &param.email, role).await?;
    state.forget_user(user).await;
    Ok(StatusCode::NO_CONTENT)
}
