//! Customized images: a RUNNING interactive session committed to an image of its owner's
//! (the agent of its main kernel does it; progress arrives as events on `/v1/events`), and
//! the owner's images, listed and removed. The owner's policy bounds how many they keep,
//! checked before any work.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use events::catalogue::Event;
use events::images::{check_image_name, custom_image};
use events::lifecycle;
use events::payloads::CustomImageRemoved;
use events::store::ExpectedVersion;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::{check_may_act, parse_body, parse_id, SessionId};
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{CommitStarted, CustomImages};
use crate::state::AppState;

/// What to call the image.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
    /// 4 to 32 letters, digits, `-` and `_`; unique among the owner's images.
    #[schema(pattern = "^[A-Za-z0-9_-]{4,32}$")]
    name: String,
}

/// Commit a RUNNING interactive session to a customized image of its owner's. Mounted
/// folders and `/home/work` are left out. While it commits, the session can be terminated
/// only by force (the commit then fails). Progress: `SessionCommitProgressed` and
/// `SessionCommitEnded` on `/v1/events`.
#[utoipa::path(post, path = "/v1/sessions/{id}/commit", tag = "images", params(SessionId),
    request_body = CommitRequest,
    responses((status = 202, description = "the commit is under way", body = CommitStarted)))]
pub async fn commit_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<CommitStarted>), ApiError> {
    let id = parse_id(&id)?;
    let CommitRequest { name } = parse_body(body)?;
    check_image_name(&name).map_err(|e| ApiError::invalid("name", e.to_string()))?;
    check_may_act(&state, &caller, id).await?;
    let started = start_commit(&state, &caller, id, name).await?;
    Ok((StatusCode::ACCEPTED, Json(started)))
}

/// Starts committing session `id` to its owner's image `name` (a name checked by
/// `check_image_name`), for `actor`, whose right to was checked: the owner's allowance
/// first, then the commit recorded. berth's API and Backend.AI's both commit through this.
pub(crate) async fn start_commit(
    state: &AppState,
    actor: &events::ledger::KeyOwner,
    id: Uuid,
    name: String,
) -> Result<CommitStarted, ApiError> {
    let owner = db::sessions::ledger_owner(&state.pool, id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no session {id}")))?;
    let image = custom_image(owner, &name);
    let allowance = db::images::custom_image_allowance(&state.pool, owner).await?;
    if allowance.images.contains(&image) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "name_taken",
            format!("an image `{name}` exists; remove it first"),
        )
        .field("name"));
    }
    if let Some(most) = allowance.most {
        if allowance.images.len() as i64 >= most {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "the policy `{}` allows {most} customized image(s), and {} exist; remove one first",
                    allowance.policy,
                    allowance.images.len()
                ),
            )
            .field("name"));
        }
    }
    let commit_id = Uuid::now_v7();
    let metadata = events::trace::metadata(&actor.user_id.to_string(), None);
    lifecycle::command(&state.pool, id, &metadata, |s| {
        s.request_commit(commit_id, name.clone(), image.clone())
    })
    .await?;
    Ok(CommitStarted {
        session_id: id,
        commit_id,
        image,
    })
}

/// My customized images, newest first.
#[utoipa::path(get, path = "/v1/images", tag = "images",
    responses((status = 200, description = "my customized images", body = CustomImages)))]
pub async fn list_images(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<CustomImages>, ApiError> {
    Ok(Json(CustomImages {
        items: db::images::custom_images(&state.pool, caller.user_id).await?,
    }))
}

/// `/v1/images/{name}`'s path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ImageName {
    /// The name it was committed under.
    pub name: String,
}

/// Remove one of my customized images: offered no more, and removed from the agent's host.
#[utoipa::path(delete, path = "/v1/images/{name}", tag = "images", params(ImageName),
    responses((status = 204, description = "removed")))]
pub async fn remove_image(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ImageName { name }): Path<ImageName>,
) -> Result<StatusCode, ApiError> {
    let image = custom_image(caller.user_id, &name);
    let found = db::images::custom_images(&state.pool, caller.user_id)
        .await?
        .into_iter()
        .find(|i| i.image == image)
        .ok_or_else(|| ApiError::not_found(format!("you have no image `{name}`")).field("name"))?;
    let event = Event::CustomImageRemoved(CustomImageRemoved {
        owner: caller.user_id,
        image,
        session_id: Some(found.session_id),
        agent_id: found.agent_id,
    });
    let metadata = events::trace::metadata(&caller.user_id.to_string(), None);
    let stream = events::catalogue::stream_id("customimage", caller.user_id);
    events::ledger::record_now(
        &state.pool,
        &stream,
        ExpectedVersion::Any,
        &[event],
        &metadata,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
