//! Resource policies: the list, and a policy set (its limits).

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::payloads::{ContainerFence, ResourcePolicySet, SessionPriority};
use launcher::access;
use launcher::domain::FieldError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{checked_name, superadmin_only, within, AmountsIn, ObjectName, MOST_COUNT, MOST_SECS};
use crate::api::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::AdminPolicies;
use crate::state::AppState;

/// Every resource policy's limits, with how many users each bounds.
#[utoipa::path(get, path = "/v1/admin/policies", tag = "admin",
    responses((status = 200, description = "the policies, by name", body = AdminPolicies)))]
pub async fn admin_list_policies(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<AdminPolicies>, ApiError> {
    superadmin_only(&caller)?;
    Ok(Json(AdminPolicies {
        policies: db::admin::policies(&state.pool).await?,
    }))
}

/// `PUT /v1/admin/policies/{name}`'s body: the policy's limits, whole.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyLimits {
    #[schema(minimum = 0, maximum = 1000000)]
    pub max_concurrent_sessions: u32,
    /// The most a user's sessions hold together.
    pub max_total: AmountsIn,
    /// Seconds a session may live (absent: no limit).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315360000)]
    pub max_session_lifetime_secs: Option<u64>,
    /// The most customized images (committed sessions) a user may keep (absent: no limit).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1000000)]
    pub max_custom_images: Option<u32>,
    /// The highest priority a user may ask for a session, 0 to 100 (absent: 100).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 100)]
    pub max_session_priority: Option<u32>,
    /// The most processes (threads count) in each container of a user's sessions: a fork
    /// bomb stops there (absent: 4096).
    #[serde(default)]
    #[schema(minimum = 16, maximum = 4194304)]
    pub max_pids: Option<u32>,
    /// The most bytes of each kernel's output kept, the most recent (absent: 1 MiB).
    #[serde(default)]
    #[schema(minimum = 4096, maximum = 67108864)]
    pub max_log_bytes: Option<u64>,
    /// The most bytes each folder of its users may hold: uploads past it are refused
    /// (absent: no limit).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 9223372036854775807_i64)]
    pub max_folder_bytes: Option<u64>,
}

impl PolicyLimits {
    /// Policy `name`'s limits as recorded, each within its bounds.
    pub fn check(self, name: String) -> Result<ResourcePolicySet, FieldError> {
        within(
            "max_concurrent_sessions",
            self.max_concurrent_sessions,
            0..=MOST_COUNT,
        )?;
        if let Some(n) = self.max_custom_images {
            within("max_custom_images", n, 0..=MOST_COUNT)?;
        }
        if let Some(secs) = self.max_session_lifetime_secs {
            within("max_session_lifetime_secs", secs, 1..=MOST_SECS)?;
        }
        if let Some(most) = self.max_session_priority {
            within(
                "max_session_priority",
                most,
                0..=SessionPriority::MAX as u32,
            )?;
        }
        if let Some(n) = self.max_pids {
            within(
                "max_pids",
                n,
                ContainerFence::LEAST_PIDS..=ContainerFence::MOST_PIDS,
            )?;
        }
        if let Some(n) = self.max_log_bytes {
            within(
                "max_log_bytes",
                n,
                ContainerFence::LEAST_LOG_BYTES..=ContainerFence::MOST_LOG_BYTES,
            )?;
        }
        if let Some(n) = self.max_folder_bytes {
            // Kept as a signed 64-bit figure, as every byte count of the ledger.
            within("max_folder_bytes", n, 0..=i64::MAX as u64)?;
        }
        Ok(ResourcePolicySet {
            name,
            max_concurrent_sessions: self.max_concurrent_sessions,
            max_total: self.max_total.slots("max_total")?,
            max_session_lifetime_secs: self.max_session_lifetime_secs,
            max_custom_images: self.max_custom_images,
            max_session_priority: self.max_session_priority,
            max_pids: self.max_pids,
            max_log_bytes: self.max_log_bytes,
            max_folder_bytes: self.max_folder_bytes,
        })
    }
}

/// Create a resource policy or change its limits (`ResourcePolicySet`).
#[utoipa::path(put, path = "/v1/admin/policies/{name}", tag = "admin",
    params(ObjectName), request_body = PolicyLimits,
    responses((status = 204, description = "the policy has these limits")))]
pub async fn admin_set_policy(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ObjectName { name }): Path<ObjectName>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    checked_name("name", &name)?;
    let policy = parse_body::<PolicyLimits>(body)?.check(name)?;
    access::set_policy(&state.pool, policy).await?;
    Ok(StatusCode::NO_CONTENT)
}
