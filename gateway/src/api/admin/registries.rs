//! Registries: the credential every agent pulls a registry's images with, stored by an admin
//! (`RegistryCredentialSet`; the password is kept apart from the log), listed without it, and
//! removed. An image of such a registry is offered to every user.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use launcher::registries;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::superadmin_only;
use crate::api::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::Registries;
use crate::state::AppState;

/// A registry named in a path: its host, with its port if any.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct RegistryParam {
    /// `cr.example.com`, `192.0.2.2:5000`, `localhost`: a host names a registry by a dot, a
    /// port or being `localhost`, as in an image reference.
    #[param(
        pattern = r"^(localhost|[A-Za-z0-9.:\[\]-]*[.:][A-Za-z0-9.:\[\]-]*)$",
        max_length = 253
    )]
    pub registry: String,
}

/// `PUT /v1/admin/registries/{registry}`'s body.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryCredentialIn {
    /// 1 to 1024 characters, no `:`, no control character.
    #[schema(
        min_length = 1,
        max_length = 1024,
        pattern = r"^[^:\u0000-\u001f\u007f-\u009f]+$"
    )]
    pub username: String,
    /// 1 to 1024 characters, no control character; kept apart from the log, never shown
    /// again.
    #[schema(
        min_length = 1,
        max_length = 1024,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]+$"
    )]
    pub password: String,
}

/// Every registry an admin stored a credential for: its user, never its password.
#[utoipa::path(get, path = "/v1/admin/registries", tag = "admin",
    responses((status = 200, description = "the registries, by name", body = Registries)))]
pub async fn admin_list_registries(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Registries>, ApiError> {
    superadmin_only(&caller)?;
    Ok(Json(Registries {
        registries: db::admin::registries(&state.pool).await?,
    }))
}

/// Store the credential agents pull `registry`'s images with, replacing any before
/// (`RegistryCredentialSet`, which names the user alone): its images are then offered to every
/// user, and an agent pulling one for a session it runs is handed the credential.
#[utoipa::path(put, path = "/v1/admin/registries/{registry}", tag = "admin",
    params(RegistryParam), request_body = RegistryCredentialIn,
    responses((status = 204, description = "stored")))]
pub async fn admin_set_registry(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(RegistryParam { registry }): Path<RegistryParam>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    let login = parse_body::<RegistryCredentialIn>(body)?;
    registries::set_credential(&state.pool, &registry, &login.username, &login.password).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Remove `registry`'s credential (`RegistryCredentialRemoved`): its images are offered no
/// more. 404 naming `registry` when none is stored.
#[utoipa::path(delete, path = "/v1/admin/registries/{registry}", tag = "admin",
    params(RegistryParam),
    responses((status = 204, description = "removed")))]
pub async fn admin_remove_registry(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(RegistryParam { registry }): Path<RegistryParam>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    registries::remove_credential(&state.pool, &registry).await?;
    Ok(StatusCode::NO_CONTENT)
}
