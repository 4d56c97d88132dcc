//! Administration, for superadmins only (anyone else gets a 403 naming `X-API-Key` before
//! their body is read): users with roles and passwords, API keys and Backend.AI keypairs,
//! projects and members, resource groups and grants, resource policies, presets, idle checks,
//! agents (admit, revoke, list), registries' credentials and the catalogue's listings, one
//! module per resource; this
//! file holds what they share (the limits, the name and email checks, the superadmin check).
//!
//! Each request body is a public type that carries its own rules: `check` (or `into_*`)
//! refuses a value out of bounds with a [`FieldError`] naming its JSON field, as
//! `launcher::domain` checks a create request, and hands back what is recorded. The handlers
//! call those and then record; `berth admin ...` builds the same types from its flags and
//! sends them here. Each change is an event, recorded by `launcher::access`,
//! `launcher::credentials` and `events::admission`; a NATS server whose authorization berth
//! keeps hears of an admission from the event (`berth::nats_authority`).

pub mod agents;
pub mod groups;
pub mod idle;
pub mod images;
pub mod keypairs;
pub mod keys;
pub mod policies;
pub mod presets;
pub mod projects;
pub mod registries;
pub mod users;

use axum::http::StatusCode;
use events::ledger::{KeyOwner, LedgerError};
use events::payloads::{ResourceSlots, Role};
use launcher::access::{self, AccessError};
use launcher::domain::FieldError;
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;

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
pub(crate) fn checked_email(field: &'static str, email: &str) -> Result<(), FieldError> {
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
        Err(invalid(
            field,
            "an email: printable ASCII without spaces, `name@domain`, at most 254 characters",
        ))
    }
}

/// `message` about `field` (a 422 naming it, once it is an [`ApiError`]).
fn invalid(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// `value` within `range`, or a problem naming `field`.
fn within<T: PartialOrd + std::fmt::Display>(
    field: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, FieldError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(invalid(
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
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
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
    pub fn slots(self, at: &str) -> Result<ResourceSlots, FieldError> {
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

/// A project, group, policy or preset named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ObjectName {
    /// 1 to 64 letters, digits, `_` or `-`.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub name: String,
}

/// A project, group, policy or preset name, by `launcher::access`'s rule.
pub(crate) fn checked_name(field: &'static str, name: &str) -> Result<(), FieldError> {
    access::check_object_name(field, name).map_err(|e| match e {
        AccessError::Invalid { field, message } => invalid(field, message),
        other => invalid(field, other.to_string()),
    })
}

/// An agent's id, as its NATS subjects take it.
fn checked_agent_id(field: &str, id: &str) -> Result<(), FieldError> {
    if bus::subjects::is_valid_agent_id(id) {
        Ok(())
    } else {
        Err(invalid(field, "1 to 64 letters, digits, `-` and `_`"))
    }
}

fn default_name() -> String {
    "default".to_owned()
}

fn default_projects() -> Vec<String> {
    vec![default_name()]
}
