//! Resource groups: the list, a new group, grants to projects, the group's scheduling (queue policy, fair-share weights), its launch defaults and its users' shares, a queued session's priority.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::fair_share::FairShareSettings;
use events::payloads::{
    AgentSelection, QueuePolicy, ResourceGroupCreated, ResourceGroupDefaultsSet,
    ResourceGroupSchedulingSet, SessionPriority,
};
use launcher::access::{self, AccessError};
use launcher::domain::FieldError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{checked_name, superadmin_only, within, ObjectName, MOST_COUNT, MOST_SECS, MOST_UNITS};
use crate::api::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{AdminGroups, GroupShares, PrioritySet};
use crate::state::AppState;

/// Every resource group's scheduling settings and the projects granted it (what each
/// holds: `GET /v1/resource-groups`).
#[utoipa::path(get, path = "/v1/admin/resource-groups", tag = "admin",
    responses((status = 200, description = "the groups, by name", body = AdminGroups)))]
pub async fn admin_list_groups(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<AdminGroups>, ApiError> {
    superadmin_only(&caller)?;
    Ok(Json(AdminGroups {
        resource_groups: db::admin::groups(&state.pool).await?,
    }))
}

/// `POST /v1/admin/resource-groups`'s body: the group's scheduling settings.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewGroup {
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
    /// `fifo` (the default), `backfill`, `lifo`, `drf` or `fair-share`
    /// (`PUT /v1/admin/resource-groups/{name}/scheduling` sets fair share's figures).
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^(fifo|backfill|lifo|drf|fair-share)$")]
    pub queue_policy: Option<QueuePolicy>,
    /// `concentrated` (the default) or `dispersed`.
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = "^(concentrated|dispersed)$")]
    pub agent_selection: Option<AgentSelection>,
    /// Counted scheduling attempts before a session is cancelled (default 5).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000000)]
    pub max_attempts: Option<u32>,
    /// Failed attempts after which a queue head stops holding back those behind it
    /// (default 3).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1000000)]
    pub skip_after: Option<u32>,
    /// Seconds a session may wait in PENDING before it is cancelled (0: no limit; default
    /// 3600).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 315360000)]
    pub pending_timeout_secs: Option<u64>,
}

impl NewGroup {
    /// The group as recorded: its name checked, each figure within its bounds, the ones
    /// left out at their defaults.
    pub fn check(self) -> Result<ResourceGroupCreated, FieldError> {
        checked_name("name", &self.name)?;
        Ok(ResourceGroupCreated {
            max_attempts: within(
                "max_attempts",
                self.max_attempts.unwrap_or(5),
                1..=MOST_COUNT,
            )?,
            skip_after: within("skip_after", self.skip_after.unwrap_or(3), 0..=MOST_COUNT)?,
            pending_timeout_secs: within(
                "pending_timeout_secs",
                self.pending_timeout_secs.unwrap_or(3600),
                0..=MOST_SECS,
            )?,
            name: self.name,
            queue_policy: self.queue_policy.unwrap_or(QueuePolicy::Fifo),
            agent_selection: self.agent_selection.unwrap_or(AgentSelection::Concentrated),
        })
    }
}

/// Create a resource group, or change its scheduling settings (`ResourceGroupCreated`).
#[utoipa::path(post, path = "/v1/admin/resource-groups", tag = "admin", request_body = NewGroup,
    responses((status = 204, description = "the group exists with these settings")))]
pub async fn admin_create_group(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    let group = parse_body::<NewGroup>(body)?.check()?;
    access::create_group(&state.pool, group).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Fair share's resource weights: what one core, one GiB of memory and one GPU count for,
/// each per second.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WeightsIn {
    #[schema(minimum = 0, maximum = 1000000)]
    pub cpu_per_core: f64,
    #[schema(minimum = 0, maximum = 1000000)]
    pub memory_per_gib: f64,
    #[schema(minimum = 0, maximum = 1000000)]
    pub gpu_per_device: f64,
}

/// `PUT /v1/admin/resource-groups/{name}/scheduling`'s body: how the group's queue is
/// ordered. Fields left out take their defaults.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupScheduling {
    /// `fifo`, `backfill`, `lifo`, `drf` or `fair-share`.
    #[schema(value_type = String, pattern = "^(fifo|backfill|lifo|drf|fair-share)$")]
    pub queue_policy: QueuePolicy,
    /// Fair share: seconds after which past use counts half (default 7 days).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 315360000)]
    pub half_life_secs: Option<u64>,
    /// Fair share: seconds of past use counted at all (default 30 days).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 315360000)]
    pub lookback_secs: Option<u64>,
    /// Fair share: default 1 per core, 0.25 per GiB, 10 per GPU.
    #[serde(default)]
    pub weights: Option<WeightsIn>,
    /// Longest a session may be passed over by higher priorities or policy ranks before it
    /// goes first (0, the default: no bound).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 315360000)]
    pub starve_after_secs: Option<u64>,
}

impl GroupScheduling {
    /// The settings of group `name` as recorded: each figure within its bounds, the ones
    /// left out at fair share's defaults.
    pub fn check(self, name: String) -> Result<ResourceGroupSchedulingSet, FieldError> {
        let defaults = FairShareSettings::default();
        let half_life_secs = within(
            "half_life_secs",
            self.half_life_secs.unwrap_or(defaults.half_life_secs),
            1..=MOST_SECS,
        )?;
        let lookback_secs = within(
            "lookback_secs",
            self.lookback_secs.unwrap_or(defaults.lookback_secs),
            0..=MOST_SECS,
        )?;
        let weights = self.weights.unwrap_or(WeightsIn {
            cpu_per_core: defaults.weights.cpu_per_core,
            memory_per_gib: defaults.weights.memory_per_gib,
            gpu_per_device: defaults.weights.gpu_per_device,
        });
        for (field, value) in [
            ("weights.cpu_per_core", weights.cpu_per_core),
            ("weights.memory_per_gib", weights.memory_per_gib),
            ("weights.gpu_per_device", weights.gpu_per_device),
        ] {
            within(field, value, 0.0..=MOST_UNITS)?;
        }
        let starve_after_secs = within(
            "starve_after_secs",
            self.starve_after_secs.unwrap_or(0),
            0..=MOST_SECS,
        )?;
        Ok(ResourceGroupSchedulingSet {
            name,
            queue_policy: self.queue_policy,
            half_life_secs,
            lookback_secs,
            weight_cpu_per_core: weights.cpu_per_core,
            weight_memory_per_gib: weights.memory_per_gib,
            weight_gpu_per_device: weights.gpu_per_device,
            starve_after_secs,
        })
    }
}

/// Set how a resource group's queue is ordered: its policy, fair share's half-life,
/// look-back and weights, and the starvation bound (`ResourceGroupSchedulingSet`).
#[utoipa::path(put, path = "/v1/admin/resource-groups/{name}/scheduling", tag = "admin",
    params(ObjectName), request_body = GroupScheduling,
    responses((status = 204, description = "the group's queue is ordered so")))]
pub async fn admin_set_group_scheduling(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ObjectName { name }): Path<ObjectName>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    checked_name("name", &name)?;
    let setting = parse_body::<GroupScheduling>(body)?.check(name)?;
    access::set_group_scheduling(&state.pool, setting)
        .await
        .map_err(|e| match e {
            e @ AccessError::Unknown { .. } => ApiError::not_found(e.to_string()).field("name"),
            other => other.into(),
        })?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /v1/admin/resource-groups/{name}/defaults`' body: what a launch there gets when it
/// names no environment or no resources; one left out (or null) falls back (the group's most used
/// environment, the smallest preset that fits).
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupDefaults {
    /// An image (`repository:tag`).
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 512,
        pattern = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"
    )]
    pub image: Option<String>,
    /// A preset's name.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub preset: Option<String>,
}

/// Set what a launch in a resource group gets when it names no environment or no resources
/// (`ResourceGroupDefaultsSet`): the console's "Skip to review" and an API create that names
/// neither launch with them. 404 naming `name` or `preset` for one that does not exist.
#[utoipa::path(put, path = "/v1/admin/resource-groups/{name}/defaults", tag = "admin",
    params(ObjectName), request_body = GroupDefaults,
    responses((status = 204, description = "the group's defaults are set")))]
pub async fn admin_set_group_defaults(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ObjectName { name }): Path<ObjectName>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    checked_name("name", &name)?;
    let GroupDefaults { image, preset } = parse_body(body)?;
    access::set_group_defaults(
        &state.pool,
        ResourceGroupDefaultsSet {
            name,
            image,
            preset,
        },
    )
    .await
    .map_err(|e| match e {
        AccessError::Unknown { what: "preset", .. } => {
            ApiError::not_found(e.to_string()).field("preset")
        }
        e @ AccessError::Unknown { .. } => ApiError::not_found(e.to_string()).field("name"),
        other => other.into(),
    })?;
    Ok(StatusCode::NO_CONTENT)
}

/// Where every user stands in a resource group's queue: decayed past use and fair-share
/// factor, dominant share of what runs now, what they wait with, the priority they may ask.
#[utoipa::path(get, path = "/v1/admin/resource-groups/{name}/shares", tag = "admin",
    params(ObjectName),
    responses((status = 200, description = "every user with use or a queued session", body = GroupShares)))]
pub async fn admin_group_shares(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ObjectName { name }): Path<ObjectName>,
) -> Result<Json<GroupShares>, ApiError> {
    superadmin_only(&caller)?;
    checked_name("name", &name)?;
    let shares = db::admin::group_shares(&state.pool, &name, chrono::Utc::now())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no resource group `{name}`")).field("name"))?;
    Ok(Json(shares))
}

/// `PUT /v1/admin/sessions/{id}/priority`'s body.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PriorityIn {
    /// 0 to 100; higher goes first within the group's queue policy.
    #[schema(minimum = 0, maximum = 100)]
    pub priority: i32,
}

impl PriorityIn {
    /// The priority, within the bounds a session's may take.
    pub fn check(&self) -> Result<i32, FieldError> {
        within(
            "priority",
            self.priority,
            SessionPriority::MIN..=SessionPriority::MAX,
        )
    }
}

/// Change a queued (PENDING) session's priority (`SessionPriorityChanged`); 409 naming
/// `status` once it has left the queue.
#[utoipa::path(put, path = "/v1/admin/sessions/{id}/priority", tag = "admin",
    params(crate::api::SessionId), request_body = PriorityIn,
    responses((status = 200, description = "the session's priority now", body = PrioritySet)))]
pub async fn admin_set_session_priority(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(crate::api::SessionId { id }): Path<crate::api::SessionId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PrioritySet>, ApiError> {
    superadmin_only(&caller)?;
    let id = crate::api::parse_id(&id)?;
    let priority = parse_body::<PriorityIn>(body)?.check()?;
    let metadata = events::trace::metadata(&caller.user_id.to_string(), None);
    let after =
        events::lifecycle::command(&state.pool, id, &metadata, |s| s.change_priority(priority))
            .await?;
    Ok(Json(PrioritySet {
        session_id: id,
        priority: after.request.priority,
    }))
}

/// `POST /v1/admin/resource-groups/{name}/grants`'s body.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The project whose members may use the group.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub project: String,
}

impl Grant {
    /// The project's name, by its rule.
    pub fn check(&self) -> Result<(), FieldError> {
        checked_name("project", &self.project)
    }
}

/// Let a project's members use a resource group (`ResourceGroupGranted`).
#[utoipa::path(post, path = "/v1/admin/resource-groups/{name}/grants", tag = "admin",
    params(ObjectName), request_body = Grant,
    responses((status = 204, description = "the project may use the group")))]
pub async fn admin_grant_group(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ObjectName { name }): Path<ObjectName>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    checked_name("name", &name)?;
    let grant: Grant = parse_body(body)?;
    grant.check()?;
    let Grant { project } = grant;
    access::grant_group(&state.pool, &name, &project)
        .await
        .map_err(|e| match e {
            e @ AccessError::Unknown {
                what: "resource group",
                ..
            } => ApiError::not_found(e.to_string()).field("name"),
            e @ AccessError::Unknown { .. } => ApiError::not_found(e.to_string()).field("project"),
            other => other.into(),
        })?;
    Ok(StatusCode::NO_CONTENT)
}
