//! Idle checks: the settings, changed, and a preview of what they would reap now.

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::idleness::{IdleChecks, IdleScope, IdleVerdict};
use launcher::access;
use launcher::domain::FieldError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{checked_name, invalid, superadmin_only, within, MOST_SECS};
use crate::api::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{IdlePreview, IdleSettings};
use crate::state::AppState;

/// The idle checks set on each resource group and policy, as last set.
#[utoipa::path(get, path = "/v1/admin/idle-checks", tag = "admin",
    responses((status = 200, description = "groups' then policies' checks, by name", body = IdleSettings)))]
pub async fn admin_list_idle_checks(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<IdleSettings>, ApiError> {
    superadmin_only(&caller)?;
    Ok(Json(IdleSettings {
        idle_checks: db::admin::idle_settings(&state.pool).await?,
    }))
}

/// `PUT /v1/admin/idle-checks`'s body: where the checks apply (exactly one of
/// `resource_group` and `resource_policy`; a policy's checks replace the group's, checker by
/// checker, for its users) and the checks, whole (a checker left out is off).
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IdleChecksIn {
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub resource_group: Option<String>,
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub resource_policy: Option<String>,
    pub checks: ChecksIn,
}

/// The idle checks; each left out (or null) is off.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChecksIn {
    /// Seconds a session may live, counted from its creation.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315360000)]
    pub max_lifetime_secs: Option<u64>,
    /// Seconds without a byte in or out after which an interactive session is reaped.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315360000)]
    pub network_idle_timeout_secs: Option<u64>,
    #[serde(default)]
    pub utilization: Option<UtilizationIn>,
}

/// The utilization checker: averages over a window, below thresholds (at least one).
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UtilizationIn {
    /// Seconds after the start of RUNNING in which it never reaps.
    #[schema(minimum = 0, maximum = 315360000)]
    pub grace_period_secs: u64,
    /// Seconds the averages are taken over.
    #[schema(minimum = 1, maximum = 315360000)]
    pub window_secs: u64,
    pub thresholds: ThresholdsIn,
    /// `all` (the default): idle when every resource is below its threshold; `any`: when one is.
    #[serde(default)]
    pub combine: Option<events::idleness::Combine>,
}

/// Thresholds in percent of what the session holds, 0 to 100; at least one.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ThresholdsIn {
    #[serde(default)]
    #[schema(minimum = 0, maximum = 100)]
    pub cpu_percent: Option<f64>,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 100)]
    pub memory_percent: Option<f64>,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 100)]
    pub gpu_percent: Option<f64>,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 100)]
    pub gpu_memory_percent: Option<f64>,
}

impl IdleChecksIn {
    /// Where the checks apply (exactly one of `resource_group` and `resource_policy`, its
    /// name checked) and the checks as the idle-reaper keeps them, each figure within its
    /// bounds and the whole consistent.
    pub fn check(self) -> Result<(IdleScope, IdleChecks), FieldError> {
        let scope = match (self.resource_group, self.resource_policy) {
            (Some(group), None) => {
                checked_name("resource_group", &group)?;
                IdleScope::ResourceGroup(group)
            }
            (None, Some(policy)) => {
                checked_name("resource_policy", &policy)?;
                IdleScope::ResourcePolicy(policy)
            }
            _ => {
                return Err(invalid(
                    "resource_group",
                    "name exactly one of `resource_group` and `resource_policy`",
                ))
            }
        };
        let checks = self.checks.checks()?;
        if let Some((field, message)) = checks.problem() {
            return Err(invalid(format!("checks.{field}"), message));
        }
        Ok((scope, checks))
    }
}

impl ChecksIn {
    /// As the idle-reaper keeps them, each figure checked against its bounds by its field.
    fn checks(self) -> Result<IdleChecks, FieldError> {
        let secs = |field: &str, v: Option<u64>, least: u64| {
            v.map(|v| within(field, v, least..=MOST_SECS)).transpose()
        };
        let utilization = match self.utilization {
            None => None,
            Some(u) => {
                let t = u.thresholds;
                let percent = |field: &str, v: Option<f64>| {
                    v.map(|v| within(field, v, 0.0..=100.0)).transpose()
                };
                Some(events::idleness::UtilizationCheck {
                    grace_period_secs: within(
                        "checks.utilization.grace_period_secs",
                        u.grace_period_secs,
                        0..=MOST_SECS,
                    )?,
                    window_secs: within(
                        "checks.utilization.window_secs",
                        u.window_secs,
                        1..=MOST_SECS,
                    )?,
                    thresholds: events::idleness::Thresholds {
                        cpu_percent: percent(
                            "checks.utilization.thresholds.cpu_percent",
                            t.cpu_percent,
                        )?,
                        memory_percent: percent(
                            "checks.utilization.thresholds.memory_percent",
                            t.memory_percent,
                        )?,
                        gpu_percent: percent(
                            "checks.utilization.thresholds.gpu_percent",
                            t.gpu_percent,
                        )?,
                        gpu_memory_percent: percent(
                            "checks.utilization.thresholds.gpu_memory_percent",
                            t.gpu_memory_percent,
                        )?,
                    },
                    combine: u.combine.unwrap_or_default(),
                })
            }
        };
        Ok(IdleChecks {
            max_lifetime_secs: secs("checks.max_lifetime_secs", self.max_lifetime_secs, 1)?,
            network_idle_timeout_secs: secs(
                "checks.network_idle_timeout_secs",
                self.network_idle_timeout_secs,
                1,
            )?,
            utilization,
        })
    }
}

/// Set the idle-reaper's checks of a resource group or a resource policy (`IdleChecksSet`).
#[utoipa::path(put, path = "/v1/admin/idle-checks", tag = "admin", request_body = IdleChecksIn,
    responses((status = 204, description = "the checks are set")))]
pub async fn admin_set_idle_checks(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    let (scope, checks) = parse_body::<IdleChecksIn>(body)?.check()?;
    access::set_idle_checks(&state.pool, scope, checks).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The sessions the idle-reaper would reap now, and why, without reaping (it answers over
/// NATS from what it folded).
#[utoipa::path(get, path = "/v1/admin/idle-preview", tag = "admin",
    responses((status = 200, description = "what would be reaped now", body = IdlePreview),
              (status = 503, description = "the idle-reaper does not answer", body = crate::error::ErrorBody)))]
pub async fn admin_idle_preview(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<IdlePreview>, ApiError> {
    superadmin_only(&caller)?;
    let reaper_away = || {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the idle-reaper does not answer; try again",
        )
    };
    let nats = state.bus("the idle-reaper cannot be asked")?;
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        nats.request(state.agent_bus.idle_preview(), Vec::new().into()),
    )
    .await
    .map_err(|_| reaper_away())?
    .map_err(|_| reaper_away())?;
    let due: Vec<IdleVerdict> =
        serde_json::from_slice(&answer.payload).map_err(ApiError::internal)?;
    Ok(Json(IdlePreview { due }))
}
