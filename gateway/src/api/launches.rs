//! A caller's recent launches (the launcher's "Recent History"): their newest create
//! requests and the pinned ones, each kept whole so that it can be launched again; renamed
//! and pinned by events (`LaunchRenamed`, `LaunchPinned`).

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::Json;
use bytes::Bytes;
use deadpool_postgres::Pool;
use domain::launches::{check_label, label_of};
use events::catalogue::{stream_id, Event};
use events::ledger::KeyOwner;
use events::payloads::{LaunchPinned, LaunchRenamed};
use events::store::ExpectedVersion;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{Launch, Launches};
use crate::state::AppState;

/// A launch named in a path. Any text is taken, so an id that is not a UUID is a 404 like
/// any other unknown launch; the document says it is a UUID.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct LaunchId {
    /// The launch's id.
    #[param(value_type = Uuid)]
    pub id: String,
}

/// `PATCH /v1/launches/{id}`'s body: what to change, each optional (absent or null: left as
/// it is).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LaunchChange {
    /// Its name: at most 64 characters, no control characters; `""` takes the name away.
    #[schema(max_length = 64, pattern = r"^[^\u0000-\u001F\u007F]*$")]
    pub label: Option<String>,
    /// Pinned: kept among the recent launches however old.
    pub pinned: Option<bool>,
}

fn no_launch(id: &str) -> ApiError {
    ApiError::not_found(format!("you have no launch {id}")).field("id")
}

/// Renames or pins `caller`'s launch `id` as `change` says, recording only what changes,
/// and answers with the launch as it stands then. 422 naming `label` for a name it cannot
/// have, 404 naming `id` for a launch that is not the caller's.
pub async fn change_launch(
    pool: &Pool,
    caller: &KeyOwner,
    id: Uuid,
    change: LaunchChange,
) -> Result<Launch, ApiError> {
    if let Some(label) = &change.label {
        check_label(label).map_err(|e| ApiError::invalid("label", e.to_string()))?;
    }
    let current = db::launches::launch(pool, caller.user_id, id)
        .await?
        .ok_or_else(|| no_launch(&id.to_string()))?;
    let mut events = Vec::new();
    if let Some(label) = change.label.as_deref().map(label_of) {
        if label != current.label {
            events.push(Event::LaunchRenamed(LaunchRenamed {
                launch_id: id,
                user_id: caller.user_id,
                label,
            }));
        }
    }
    if let Some(pinned) = change.pinned.filter(|p| *p != current.pinned) {
        events.push(Event::LaunchPinned(LaunchPinned {
            launch_id: id,
            user_id: caller.user_id,
            pinned,
        }));
    }
    if events.is_empty() {
        return Ok(current);
    }
    let metadata = events::trace::metadata(&caller.user_id.to_string(), None);
    events::ledger::record_now(
        pool,
        &stream_id("launch", id),
        ExpectedVersion::Any,
        &events,
        &metadata,
    )
    .await?;
    db::launches::launch(pool, caller.user_id, id)
        .await?
        .ok_or_else(|| no_launch(&id.to_string()))
}

/// My recent launches, newest first: my five newest create requests and every one I
/// pinned, each as it was sent (`POST /v1/sessions` with its `request` launches it again).
#[utoipa::path(get, path = "/v1/launches", tag = "sessions",
    responses((status = 200, description = "my recent and pinned launches", body = Launches)))]
pub async fn list_launches(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Launches>, ApiError> {
    Ok(Json(Launches {
        launches: db::launches::recent(&state.pool, caller.user_id).await?,
    }))
}

/// Rename (`label`) or pin (`pinned`) one of my launches.
#[utoipa::path(patch, path = "/v1/launches/{id}", tag = "sessions", params(LaunchId),
    request_body = LaunchChange,
    responses((status = 200, description = "the launch as it stands now", body = Launch)))]
pub async fn update_launch(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(LaunchId { id }): Path<LaunchId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Launch>, ApiError> {
    let launch = Uuid::parse_str(&id).map_err(|_| no_launch(&id))?;
    let change: LaunchChange = parse_body(body)?;
    Ok(Json(
        change_launch(&state.pool, &caller, launch, change).await?,
    ))
}
