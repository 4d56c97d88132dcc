//! Resource presets: one saved (the list is `GET /v1/presets`).

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use bytes::Bytes;
use events::payloads::{PresetSaved, ResourceSlots};
use launcher::access;
use launcher::domain::FieldError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{checked_name, invalid, superadmin_only, within, ObjectName, MOST_BYTES, MOST_UNITS};
use crate::api::parse_body;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// A preset's resources: CPU and memory above 0.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
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

/// `PUT /v1/admin/presets/{name}`'s body.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PresetIn {
    pub resources: PresetAmounts,
    /// Shared memory (`/dev/shm`), not above the memory (default 64 MiB, or the memory when
    /// less).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 70368744177664_i64)]
    pub shared_memory_bytes: Option<u64>,
}

impl PresetIn {
    /// Preset `name` as recorded: CPU and memory above 0, shared memory not above the memory
    /// (64 MiB, or the memory when less, if left out).
    pub fn check(self, name: String) -> Result<PresetSaved, FieldError> {
        let r = self.resources;
        let resources = ResourceSlots {
            cpu_milli: (within("resources.cpu", r.cpu, 0.001..=MOST_UNITS)? * 1000.0).round()
                as u64,
            memory_bytes: within("resources.memory_bytes", r.memory_bytes, 1..=MOST_BYTES)?,
            gpu_milli: (within("resources.gpu", r.gpu, 0.0..=MOST_UNITS)? * 1000.0).round() as u64,
        };
        let shared_memory_bytes = match self.shared_memory_bytes {
            Some(bytes) => within("shared_memory_bytes", bytes, 0..=MOST_BYTES)?,
            None => resources.memory_bytes.min(64 << 20),
        };
        if shared_memory_bytes > resources.memory_bytes {
            return Err(invalid("shared_memory_bytes", "may not exceed the memory"));
        }
        Ok(PresetSaved {
            name,
            resources,
            shared_memory_bytes,
        })
    }
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
    let preset = parse_body::<PresetIn>(body)?.check(name)?;
    access::save_preset(&state.pool, preset).await?;
    Ok(StatusCode::NO_CONTENT)
}
