//! Agents: admitted (a credential for its NATS user), listed, revoked.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::admission::{Admission, AdmissionError};
use events::payloads::ResourceSlots;
use launcher::domain::FieldError;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{checked_agent_id, checked_name, default_name, invalid, superadmin_only, AmountsIn};
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
#[derive(Deserialize, Serialize, ToSchema)]
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

impl AdmitAgent {
    /// The admission as recorded: the agent's id and group name by their rules, its most
    /// capacity within bounds (1024 cores, 16 TiB, 64 GPUs if left out). Whether the group
    /// exists is the handler's to ask.
    pub fn check(self) -> Result<Admission, FieldError> {
        checked_agent_id("agent_id", &self.agent_id)?;
        checked_name("resource_group", &self.resource_group)?;
        let max_capacity = match self.max_capacity {
            Some(amounts) => amounts.slots("max_capacity")?,
            None => ResourceSlots {
                cpu_milli: 1024 * 1000,
                memory_bytes: 16384 << 30,
                gpu_milli: 64 * 1000,
            },
        };
        Ok(Admission {
            agent_id: self.agent_id,
            resource_group: self.resource_group,
            max_capacity,
        })
    }
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
    let admission = parse_body::<AdmitAgent>(body)?.check()?;
    if !db::resources::group_exists(&state.pool, &admission.resource_group).await? {
        return Err(ApiError::not_found(format!(
            "no resource group is named `{}`",
            admission.resource_group
        ))
        .field("resource_group"));
    }
    let by = format!("admin:{}", caller.user_id);
    let credential = events::admission::admit(&state.pool, &admission, &by).await?;
    Ok((
        StatusCode::CREATED,
        Json(AgentCredential {
            agent_id: admission.agent_id,
            resource_group: admission.resource_group,
            credential,
        }),
    ))
}

/// `POST /v1/admin/agents/{id}/revoke`'s body.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Revocation {
    /// Kept with the event (default "revoked by an operator").
    #[serde(default)]
    #[schema(min_length = 1, max_length = 500, pattern = r"^[^\u0000]+$")]
    pub reason: Option<String>,
}

impl Revocation {
    /// The reason kept with the event: 1 to 500 characters ("revoked by an operator" if
    /// left out).
    pub fn check(self) -> Result<String, FieldError> {
        let reason = self
            .reason
            .unwrap_or_else(|| "revoked by an operator".to_owned());
        if reason.is_empty() || reason.chars().count() > 500 {
            return Err(invalid("reason", "1 to 500 characters"));
        }
        Ok(reason)
    }
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
    checked_agent_id("id", &id)?;
    let reason = parse_body::<Revocation>(body)?.check()?;
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
