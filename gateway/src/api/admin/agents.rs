//! Agents: admitted (a credential for its NATS user), listed, revoked.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::admission::{Admission, AdmissionError};
use events::payloads::ResourceSlots;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::{checked_name, default_name, superadmin_only, AmountsIn};
use crate::api::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{AdmittedAgents, AgentCredential};
use crate::state::AppState;

/// An agent named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct AgentIdParam {
    /// 1 to 64 letters, digits, `-` and `_`.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub id: String,
}

/// Every agent ever admitted: its admission (group, most capacity, NATS key) or why it was
/// revoked, and since it registered, its capacity, what it has free, how long since it was
/// heard from, its sessions and its version.
#[utoipa::path(get, path = "/v1/admin/agents", tag = "admin",
    responses((status = 200, description = "the agents, by id", body = AdmittedAgents)))]
pub async fn admin_list_agents(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<AdmittedAgents>, ApiError> {
    superadmin_only(&caller)?;
    Ok(Json(AdmittedAgents {
        agents: db::admin::admitted_agents(&state.pool).await?,
    }))
}

/// `POST /v1/admin/agents`'s body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdmitAgent {
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub agent_id: String,
    /// The group it serves (default `default`).
    #[serde(default = "default_name")]
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub resource_group: String,
    /// The most it may offer (default 1024 cores, 16 TiB, 64 GPUs).
    #[serde(default)]
    pub max_capacity: Option<AmountsIn>,
}

/// Admit an agent into a resource group, up to a capacity (`AgentAdmitted`); answers with
/// its credential, an nkey seed, shown only now. Admitting it again gives it a new one.
#[utoipa::path(post, path = "/v1/admin/agents", tag = "admin", request_body = AdmitAgent,
    responses((status = 201, description = "admitted; its credential", body = AgentCredential)))]
pub async fn admin_admit_agent(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<AgentCredential>), ApiError> {
    superadmin_only(&caller)?;
    let a: AdmitAgent = parse_body(body)?;
    if !bus::subjects::is_valid_agent_id(&a.agent_id) {
        return Err(ApiError::invalid(
            "agent_id",
            "1 to 64 letters, digits, `-` and `_`",
        ));
    }
    checked_name("resource_group", &a.resource_group)?;
    if !db::resources::group_exists(&state.pool, &a.resource_group).await? {
        return Err(ApiError::not_found(format!(
            "no resource group is named `{}`",
            a.resource_group
        ))
        .field("resource_group"));
    }
    let max_capacity = match a.max_capacity {
        Some(amounts) => amounts.slots("max_capacity")?,
        None => ResourceSlots {
            cpu_milli: 1024 * 1000,
            memory_bytes: 16384 << 30,
            gpu_milli: 64 * 1000,
        },
    };
    let admission = Admission {
        agent_id: a.agent_id.clone(),
        resource_group: a.resource_group.clone(),
        max_capacity,
    };
    let by = format!("admin:{}", caller.user_id);
    let credential = events::admission::admit(&state.pool, &admission, &by).await?;
    Ok((
        StatusCode::CREATED,
        Json(AgentCredential {
            agent_id: a.agent_id,
            resource_group: a.resource_group,
            credential,
        }),
    ))
}

/// `POST /v1/admin/agents/{id}/revoke`'s body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Revocation {
    /// Kept with the event (default "revoked by an operator").
    #[serde(default)]
    #[schema(min_length = 1, max_length = 500, pattern = r"^[^\u0000]+$")]
    pub reason: Option<String>,
}

/// Revoke an agent (`AgentRevoked`): it may no longer register, and is offered to the
/// scheduler no more. 404 naming `id` for an agent not admitted now.
#[utoipa::path(post, path = "/v1/admin/agents/{id}/revoke", tag = "admin",
    params(AgentIdParam), request_body = Revocation,
    responses((status = 204, description = "revoked")))]
pub async fn admin_revoke_agent(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(AgentIdParam { id }): Path<AgentIdParam>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    if !bus::subjects::is_valid_agent_id(&id) {
        return Err(ApiError::invalid(
            "id",
            "1 to 64 letters, digits, `-` and `_`",
        ));
    }
    let Revocation { reason } = parse_body(body)?;
    let reason = reason.unwrap_or_else(|| "revoked by an operator".to_owned());
    if reason.is_empty() || reason.chars().count() > 500 {
        return Err(ApiError::invalid("reason", "1 to 500 characters"));
    }
    let by = format!("admin:{}", caller.user_id);
    events::admission::revoke(&state.pool, &id, &reason, &by).await?;
    Ok(StatusCode::NO_CONTENT)
}

impl From<AdmissionError> for ApiError {
    fn from(e: AdmissionError) -> Self {
        match e {
            AdmissionError::Invalid { field, message } => ApiError::invalid(field, message),
            e @ AdmissionError::NotAdmitted(_) => ApiError::not_found(e.to_string()).field("id"),
            AdmissionError::Ledger(e) => e.into(),
        }
    }
}
