//! Administration, for superadmins only (anyone else gets a 403 naming `X-API-Key` before
//! their body is read): users with roles and passwords, API keys and Backend.AI keypairs,
//! projects and members, resource groups and grants, resource policies, presets, idle checks,
//! and agents (admit, revoke, list). `berth admin ...` calls these. Each change is an event, recorded by the
//! same functions the CLI called when it wrote to the database itself
//! (`launcher::access`, `launcher::credentials`, `events::admission`); a NATS server whose
//! authorization berth keeps hears of an admission from the event (`berth::nats_authority`).

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::admission::{Admission, AdmissionError};
use events::fair_share::FairShareSettings;
use events::idleness::{IdleChecks, IdleScope, IdleVerdict};
use events::ledger::{KeyOwner, LedgerError};
use events::payloads::{
    AgentSelection, PresetSaved, QueuePolicy, ResourceGroupCreated, ResourceGroupSchedulingSet,
    ResourcePolicySet, ResourceSlots, Role, SessionPriority,
};
use launcher::access::{self, AccessError};
use serde::Deserialize;
use serde_json::json;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, ToSchema};

use super::{parse_body, Caller};
use crate::db;
use crate::error::ApiError;
use crate::model::{
    AdminGroups, AdminPolicies, AdminProjects, AdminUsers, AdmittedAgents, AgentCredential,
    ApiKeysListed, GroupShares, IdlePreview, IdleSettings, IssuedKey, IssuedKeypair, KeypairListed,
    KeypairsListed,
};
use crate::state::AppState;

/// The most cores or GPUs an amount may name: far above any host, and exact in milli-units.
const MOST_UNITS: f64 = 1_000_000.0;
/// The most bytes of memory an amount may name (64 TiB, as a create's sizes).
const MOST_BYTES: u64 = 64 << 40;
/// The most seconds a duration may be (ten years).
const MOST_SECS: u64 = 315_360_000;
/// The most of anything counted (sessions, attempts, images).
const MOST_COUNT: u32 = 1_000_000;
/// Names of projects, groups, policies and presets, as `launcher::access::check_object_name`
/// takes them (stated in each schema below as a literal).
const NAME_PATTERN: &str = "^[A-Za-z0-9_-]{1,64}$";

/// `projects`: names of projects.
fn name_list() -> RefOr<Schema> {
    let value = json!({"type": "array", "items": {"type": "string", "pattern": NAME_PATTERN}});
    RefOr::T(serde_json::from_value(value).expect("a schema"))
}

/// Emails as these endpoints take them: printable ASCII without spaces, one `@` with text on
/// either side, at most 254 characters (the schema's `^[!-?A-~]+@[!-?A-~]+$`); 422 naming
/// `field` otherwise.
fn checked_email(field: &'static str, email: &str) -> Result<(), ApiError> {
    let printable = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| (b'!'..=b'~').contains(&b) && b != b'@')
    };
    let ok = email.len() <= 254
        && email
            .split_once('@')
            .is_some_and(|(local, domain)| printable(local) && printable(domain));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            "an email: printable ASCII without spaces, `name@domain`, at most 254 characters",
        ))
    }
}

/// `value` within `range`, or a 422 naming `field`.
fn within<T: PartialOrd + std::fmt::Display>(
    field: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ApiError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::invalid(
            field,
            format!("{value} is not from {} to {}", range.start(), range.end()),
        ))
    }
}

/// 403 for anyone but a superadmin.
fn superadmin_only(caller: &KeyOwner) -> Result<(), ApiError> {
    if caller.role == Role::Superadmin {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        "only superadmins administer berth",
    )
    .field("X-API-Key"))
}

/// An access error as the API answers it; a name taken is a 409 naming `field`.
fn refused(e: AccessError, field: &str) -> ApiError {
    match e {
        AccessError::Ledger(LedgerError::Exists { what, name }) => ApiError::new(
            StatusCode::CONFLICT,
            "name_taken",
            format!("a {what} `{name}` exists"),
        )
        .field(field),
        other => other.into(),
    }
}

/// Resources as a request names them: cores and GPUs in units (fractions allowed), memory in
/// bytes.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AmountsIn {
    /// Cores, 0 to 1000000.
    #[schema(minimum = 0, maximum = 1000000)]
    pub cpu: f64,
    /// Bytes, 0 to 64 TiB.
    #[schema(minimum = 0, maximum = 70368744177664_i64)]
    pub memory_bytes: u64,
    /// GPUs, 0 to 1000000 (default 0).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1000000)]
    pub gpu: f64,
}

impl AmountsIn {
    /// As the log's slots, refusing an amount out of range by its field (`<at>.cpu`).
    fn slots(self, at: &str) -> Result<ResourceSlots, ApiError> {
        let milli = |name: &str, v: f64| {
            within(&format!("{at}.{name}"), v, 0.0..=MOST_UNITS)
                .map(|v| (v * 1000.0).round() as u64)
        };
        Ok(ResourceSlots {
            cpu_milli: milli("cpu", self.cpu)?,
            memory_bytes: within(
                &format!("{at}.memory_bytes"),
                self.memory_bytes,
                0..=MOST_BYTES,
            )?,
            gpu_milli: milli("gpu", self.gpu)?,
        })
    }
}

/// A preset's resources: CPU and memory above 0.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PresetAmounts {
    /// Cores, 0.001 to 1000000.
    #[schema(minimum = 0.001, maximum = 1000000)]
    pub cpu: f64,
    /// Bytes, 1 to 64 TiB.
    #[schema(minimum = 1, maximum = 70368744177664_i64)]
    pub memory_bytes: u64,
    /// GPUs, 0 to 1000000 (default 0).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1000000)]
    pub gpu: f64,
}

/// A project, group, policy or preset named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ObjectName {
    /// 1 to 64 letters, digits, `_` or `-`.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
}

/// An agent named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct AgentIdParam {
    /// 1 to 64 letters, digits, `-` and `_`.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub id: String,
}

fn checked_name(field: &'static str, name: &str) -> Result<(), ApiError> {
    Ok(access::check_object_name(field, name)?)
}

fn default_name() -> String {
    "default".to_owned()
}

fn default_projects() -> Vec<String> {
    vec![default_name()]
}

// ---- users and keys -----------------------------------------------------------------

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
#[derive(Debug, Deserialize, ToSchema)]
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
    checked_email("email", &user.email)?;
    checked_name("resource_policy", &user.resource_policy)?;
    for (i, project) in user.projects.iter().enumerate() {
        access::check_object_name("projects", project).map_err(|_| {
            ApiError::invalid(
                format!("projects[{i}]"),
                "1 to 64 letters, digits, `_` or `-`",
            )
        })?;
    }
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
        }),
    ))
}

/// `PUT /v1/admin/passwords`'s body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordSet {
    #[schema(max_length = 254, pattern = "^[!-?A-~]+@[!-?A-~]+$")]
    pub email: String,
    /// 8 to 256 characters.
    #[schema(min_length = 8, max_length = 256, pattern = r"^[^\u0000]*$")]
    pub password: String,
}

/// Set a user's password, with which they sign in to the web console (`UserPasswordSet`).
#[utoipa::path(put, path = "/v1/admin/passwords", tag = "admin", request_body = PasswordSet,
    responses((status = 204, description = "the password is set")))]
pub async fn admin_set_password(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    let PasswordSet { email, password } = parse_body(body)?;
    checked_email("email", &email)?;
    launcher::credentials::set_password(&state.pool, &email, &password).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every API key's first characters and owner (berth keeps no key itself).
#[utoipa::path(get, path = "/v1/admin/api-keys", tag = "admin",
    responses((status = 200, description = "the keys, by owner", body = ApiKeysListed)))]
pub async fn admin_list_keys(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<ApiKeysListed>, ApiError> {
    superadmin_only(&caller)?;
    Ok(Json(ApiKeysListed {
        api_keys: db::admin::api_keys(&state.pool).await?,
    }))
}

/// `POST /v1/admin/api-keys`'s body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyFor {
    /// The user to issue it to.
    #[schema(max_length = 254, pattern = "^[!-?A-~]+@[!-?A-~]+$")]
    pub email: String,
}

/// Issue another API key to a user; shown only in this answer (`ApiKeyIssued`).
#[utoipa::path(post, path = "/v1/admin/api-keys", tag = "admin", request_body = KeyFor,
    responses((status = 201, description = "the new key", body = IssuedKey)))]
pub async fn admin_issue_key(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<IssuedKey>), ApiError> {
    superadmin_only(&caller)?;
    let KeyFor { email } = parse_body(body)?;
    checked_email("email", &email)?;
    let api_key = access::issue_key(&state.pool, &email).await?;
    let client = state.pool.get().await?;
    let owner = events::ledger::key_owner(&client, &api_key)
        .await?
        .ok_or_else(|| ApiError::internal("a key just issued has no owner"))?;
    Ok((
        StatusCode::CREATED,
        Json(IssuedKey {
            user_id: owner.user_id,
            email,
            api_key,
        }),
    ))
}

// ---- Backend.AI keypairs ---------------------------------------------------------------

/// A Backend.AI access key named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct AccessKeyParam {
    /// 1 to 64 letters and digits (berth issues `AKIA` and 16 more).
    #[param(pattern = "^[A-Za-z0-9]{1,64}$")]
    pub access_key: String,
}

/// The compatibility router, or 409 when Backend.AI's API is off: a keypair it issued could
/// sign nothing.
fn backendai_on(state: &AppState) -> Result<&crate::backendai::BackendAi, ApiError> {
    state.backendai.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "backendai_off",
            "Backend.AI's API is switched off on this gateway (BERTH_BACKENDAI=off)",
        )
    })
}

/// Issue a Backend.AI keypair to a user, for Backend.AI's own client
/// (`BackendAiKeypairIssued`). The secret key is derived from the access key with the
/// gateway's master key, never stored: shown in this answer. 409 when Backend.AI's API is off.
#[utoipa::path(post, path = "/v1/admin/backendai-keypairs", tag = "admin", request_body = KeyFor,
    responses((status = 201, description = "the new keypair", body = IssuedKeypair)))]
pub async fn admin_issue_keypair(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<IssuedKeypair>), ApiError> {
    superadmin_only(&caller)?;
    let KeyFor { email } = parse_body(body)?;
    checked_email("email", &email)?;
    let backendai = backendai_on(&state)?;
    let (user_id, access_key) = access::issue_backendai_keypair(&state.pool, &email).await?;
    let secret_key = backendai.secret_of(&access_key);
    Ok((
        StatusCode::CREATED,
        Json(IssuedKeypair {
            user_id,
            email,
            access_key,
            secret_key,
        }),
    ))
}

/// Every Backend.AI keypair and its holder, revoked ones included (never a secret).
#[utoipa::path(get, path = "/v1/admin/backendai-keypairs", tag = "admin",
    responses((status = 200, description = "the keypairs, by access key", body = KeypairsListed)))]
pub async fn admin_list_keypairs(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<KeypairsListed>, ApiError> {
    superadmin_only(&caller)?;
    let client = state.pool.get().await?;
    let keypairs = events::ledger::backendai_keypairs(&client, None, None).await?;
    Ok(Json(KeypairsListed {
        keypairs: keypairs
            .into_iter()
            .map(|k| KeypairListed {
                access_key: k.access_key,
                user_id: k.user_id,
                email: k.email,
                active: k.active,
            })
            .collect(),
    }))
}

/// Revoke a Backend.AI keypair (`BackendAiKeypairRevoked`): from now on a request it signs is
/// refused (401). Revoking it again changes nothing; 404 naming `access_key` for a key never
/// issued.
#[utoipa::path(post, path = "/v1/admin/backendai-keypairs/{access_key}/revoke", tag = "admin",
    params(AccessKeyParam),
    responses((status = 204, description = "revoked")))]
pub async fn admin_revoke_keypair(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(AccessKeyParam { access_key }): Path<AccessKeyParam>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    if access_key.is_empty()
        || access_key.len() > 64
        || !access_key.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Err(ApiError::invalid(
            "access_key",
            "1 to 64 letters and digits",
        ));
    }
    access::revoke_backendai_keypair(&state.pool, &access_key)
        .await
        .map_err(|e| match e {
            e @ AccessError::Unknown { .. } => {
                ApiError::not_found(e.to_string()).field("access_key")
            }
            other => other.into(),
        })?;
    // This gateway forgets the holder at once; another keeps it for at most its cache's
    // lifetime (30 s), as a revoked API key.
    state
        .keys
        .forget(&crate::backendai::auth::cache_key(&access_key))
        .await;
    Ok(StatusCode::NO_CONTENT)
}

// ---- projects ------------------------------------------------------------------------

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

// ---- resource groups and grants ------------------------------------------------------

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
#[derive(Deserialize, ToSchema)]
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

/// Create a resource group, or change its scheduling settings (`ResourceGroupCreated`).
#[utoipa::path(post, path = "/v1/admin/resource-groups", tag = "admin", request_body = NewGroup,
    responses((status = 204, description = "the group exists with these settings")))]
pub async fn admin_create_group(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    let g: NewGroup = parse_body(body)?;
    checked_name("name", &g.name)?;
    let max_attempts = within("max_attempts", g.max_attempts.unwrap_or(5), 1..=MOST_COUNT)?;
    let skip_after = within("skip_after", g.skip_after.unwrap_or(3), 0..=MOST_COUNT)?;
    let pending_timeout_secs = within(
        "pending_timeout_secs",
        g.pending_timeout_secs.unwrap_or(3600),
        0..=MOST_SECS,
    )?;
    access::create_group(
        &state.pool,
        ResourceGroupCreated {
            name: g.name,
            queue_policy: g.queue_policy.unwrap_or(QueuePolicy::Fifo),
            agent_selection: g.agent_selection.unwrap_or(AgentSelection::Concentrated),
            max_attempts,
            skip_after,
            pending_timeout_secs,
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Fair share's resource weights: what one core, one GiB of memory and one GPU count for,
/// each per second.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
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
#[derive(Deserialize, ToSchema)]
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
    let g: GroupScheduling = parse_body(body)?;
    let defaults = FairShareSettings::default();
    let half_life_secs = within(
        "half_life_secs",
        g.half_life_secs.unwrap_or(defaults.half_life_secs),
        1..=MOST_SECS,
    )?;
    let lookback_secs = within(
        "lookback_secs",
        g.lookback_secs.unwrap_or(defaults.lookback_secs),
        0..=MOST_SECS,
    )?;
    let weights = g.weights.unwrap_or(WeightsIn {
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
        g.starve_after_secs.unwrap_or(0),
        0..=MOST_SECS,
    )?;
    access::set_group_scheduling(
        &state.pool,
        ResourceGroupSchedulingSet {
            name,
            queue_policy: g.queue_policy,
            half_life_secs,
            lookback_secs,
            weight_cpu_per_core: weights.cpu_per_core,
            weight_memory_per_gib: weights.memory_per_gib,
            weight_gpu_per_device: weights.gpu_per_device,
            starve_after_secs,
        },
    )
    .await
    .map_err(|e| match e {
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
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PriorityIn {
    /// 0 to 100; higher goes first within the group's queue policy.
    #[schema(minimum = 0, maximum = 100)]
    pub priority: i32,
}

/// A queued session's priority, after a change.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct PrioritySet {
    pub session_id: uuid::Uuid,
    pub priority: i32,
}

/// Change a queued (PENDING) session's priority (`SessionPriorityChanged`); 409 naming
/// `status` once it has left the queue.
#[utoipa::path(put, path = "/v1/admin/sessions/{id}/priority", tag = "admin",
    params(super::SessionId), request_body = PriorityIn,
    responses((status = 200, description = "the session's priority now", body = PrioritySet)))]
pub async fn admin_set_session_priority(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(super::SessionId { id }): Path<super::SessionId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<PrioritySet>, ApiError> {
    superadmin_only(&caller)?;
    let id = super::parse_id(&id)?;
    let PriorityIn { priority } = parse_body(body)?;
    within(
        "priority",
        priority,
        SessionPriority::MIN..=SessionPriority::MAX,
    )?;
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
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The project whose members may use the group.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub project: String,
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
    let Grant { project } = parse_body(body)?;
    checked_name("project", &project)?;
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

// ---- policies and presets ------------------------------------------------------------

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
#[derive(Deserialize, ToSchema)]
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
    let p: PolicyLimits = parse_body(body)?;
    within(
        "max_concurrent_sessions",
        p.max_concurrent_sessions,
        0..=MOST_COUNT,
    )?;
    if let Some(n) = p.max_custom_images {
        within("max_custom_images", n, 0..=MOST_COUNT)?;
    }
    if let Some(secs) = p.max_session_lifetime_secs {
        within("max_session_lifetime_secs", secs, 1..=MOST_SECS)?;
    }
    if let Some(most) = p.max_session_priority {
        within(
            "max_session_priority",
            most,
            0..=SessionPriority::MAX as u32,
        )?;
    }
    access::set_policy(
        &state.pool,
        ResourcePolicySet {
            name,
            max_concurrent_sessions: p.max_concurrent_sessions,
            max_total: p.max_total.slots("max_total")?,
            max_session_lifetime_secs: p.max_session_lifetime_secs,
            max_custom_images: p.max_custom_images,
            max_session_priority: p.max_session_priority,
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT /v1/admin/presets/{name}`'s body.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PresetIn {
    pub resources: PresetAmounts,
    /// Shared memory (`/dev/shm`), not above the memory (default 64 MiB, or the memory when
    /// less).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 70368744177664_i64)]
    pub shared_memory_bytes: Option<u64>,
}

/// Save a resource preset that create requests may name (`PresetSaved`); `GET /v1/presets`
/// lists them.
#[utoipa::path(put, path = "/v1/admin/presets/{name}", tag = "admin",
    params(ObjectName), request_body = PresetIn,
    responses((status = 204, description = "the preset is saved")))]
pub async fn admin_save_preset(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ObjectName { name }): Path<ObjectName>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    checked_name("name", &name)?;
    let p: PresetIn = parse_body(body)?;
    let r = p.resources;
    let resources = ResourceSlots {
        cpu_milli: (within("resources.cpu", r.cpu, 0.001..=MOST_UNITS)? * 1000.0).round() as u64,
        memory_bytes: within("resources.memory_bytes", r.memory_bytes, 1..=MOST_BYTES)?,
        gpu_milli: (within("resources.gpu", r.gpu, 0.0..=MOST_UNITS)? * 1000.0).round() as u64,
    };
    let shared_memory_bytes = match p.shared_memory_bytes {
        Some(bytes) => within("shared_memory_bytes", bytes, 0..=MOST_BYTES)?,
        None => resources.memory_bytes.min(64 << 20),
    };
    if shared_memory_bytes > resources.memory_bytes {
        return Err(ApiError::invalid(
            "shared_memory_bytes",
            "may not exceed the memory",
        ));
    }
    access::save_preset(
        &state.pool,
        PresetSaved {
            name,
            resources,
            shared_memory_bytes,
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- idle checks ---------------------------------------------------------------------

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
#[derive(Deserialize, ToSchema)]
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
#[derive(Deserialize, ToSchema)]
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
#[derive(Deserialize, ToSchema)]
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
#[derive(Deserialize, ToSchema)]
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

impl ChecksIn {
    /// As the idle-reaper keeps them, each figure checked against its bounds by its field.
    fn checks(self) -> Result<IdleChecks, ApiError> {
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
    let set: IdleChecksIn = parse_body(body)?;
    let scope = match (set.resource_group, set.resource_policy) {
        (Some(group), None) => {
            checked_name("resource_group", &group)?;
            IdleScope::ResourceGroup(group)
        }
        (None, Some(policy)) => {
            checked_name("resource_policy", &policy)?;
            IdleScope::ResourcePolicy(policy)
        }
        _ => {
            return Err(ApiError::invalid(
                "resource_group",
                "name exactly one of `resource_group` and `resource_policy`",
            ))
        }
    };
    let checks = set.checks.checks()?;
    if let Some((field, message)) = checks.problem() {
        return Err(ApiError::invalid(format!("checks.{field}"), message));
    }
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

// ---- agents --------------------------------------------------------------------------

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
