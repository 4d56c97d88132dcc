//! Backend.AI's API for its official client (`backend-ai-client`, CLI `backend.ai`), on
//! Backend.AI's own paths beside berth's (they do not collide with `/v1`), switched on with
//! [`AppState::with_backendai`]. Each call is translated onto the same launcher, lifecycle
//! commands and views as `/v1`: there is no second write path, and every change is still an
//! event. Requests are signed with Backend.AI keypairs ([`auth`]); every error is Backend.AI's
//! problem JSON ([`problem`]), so the client prints it.
//!
//! - [`auth`]: the signature check and [`BackendAiCaller`].
//! - [`problem`]: [`Problem`], every error as Backend.AI shapes it.
//! - `session`: `/session/...`: create, info, logs, rename, destroy, commit.
//! - `gql`: `POST /admin/gql`, the GraphQL subset the CLI's `ps` and `info` ask.
//! - `stream`: `GET /events/session`, the lifecycle as Backend.AI names it (SSE).
//! - `services`: `/services/...` (`service create`, info, rm, scale, generate-token, sync),
//!   onto `/v1/services`' own functions; `service list` and `info` read `gql`'s `endpoint`s.
//! - `folders`: `/folders/...` (`vfolder` create, list, info, ls, mkdir, upload, download)
//! - `folder_changes`: `vfolder` delete (to the trash), rename, mv, rename-file, rm, share,
//!   unshare
//!   and the storage proxy's `/upload` (tus) and `/download` (a signed token).
//!
//! Everything else on Backend.AI's paths is a clean `not-implemented` ([`fallback`]).

pub mod auth;
mod folder_changes;
mod folders;
mod gql;
pub mod problem;
mod services;
mod session;
mod stream;

pub use auth::{BackendAiCaller, API_VERSION};
pub use problem::Problem;

use axum::extract::OriginalUri;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::db;
use crate::state::AppState;
use events::authorization::{self, Action, Refusal};
use events::ledger::KeyOwner;
use uuid::Uuid;

/// Backend.AI's paths this gateway serves.
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(hello))
        .route("/manager/announcement", get(announcement))
        .merge(session::routes())
        .merge(folders::routes())
        .merge(folder_changes::routes())
        .merge(services::routes())
        .merge(gql::routes())
        .merge(stream::routes())
        .method_not_allowed_fallback(not_implemented_method)
}

/// The version handshake every CLI call begins with (unsigned): the API version berth speaks
/// and what answers. A browser opening the gateway's address is sent to the console instead.
async fn hello(headers: axum::http::HeaderMap) -> Response {
    if crate::console::wants_page(&headers) {
        return crate::console::front_door().into_response();
    }
    Json(json!({
        "version": API_VERSION,
        "manager": concat!("berth ", env!("CARGO_PKG_VERSION")),
    }))
    .into_response()
}

/// The manager's announcement: berth has none.
async fn announcement(_caller: BackendAiCaller) -> Json<Value> {
    Json(json!({"enabled": false, "message": ""}))
}

/// A method Backend.AI has on a path berth serves (execute is a POST to a session, restart a
/// PATCH): not implemented.
async fn not_implemented_method(method: Method, OriginalUri(uri): OriginalUri) -> Problem {
    Problem::not_implemented(format!("{method} {}", uri.path()))
}

/// The answer to a path no route serves: berth's own 404 under berth's paths, and on any
/// other path (Backend.AI's), `not-implemented` as problem JSON, which its client prints.
pub(crate) async fn fallback(method: Method, OriginalUri(uri): OriginalUri) -> Response {
    let path = uri.path();
    let berths = [
        "/v1/",
        "/console",
        "/openapi.json",
        "/healthz",
        "/readyz",
        "/metrics",
    ];
    if berths.iter().any(|p| path.starts_with(p)) {
        return crate::error::no_such_route().await.into_response();
    }
    Problem::not_implemented(format!("{method} {path}")).into_response()
}

/// The user a call acts for: the caller, or the holder of `owner_access_key` when it names
/// another keypair and the one authorization rule lets the caller do `action` as them (403
/// `insufficient-privilege` naming the field when it forbids; 400 for an access key nobody
/// holds, and the same for one whose holder is out of the caller's reach, so an admin
/// cannot probe other people's keys).
pub(crate) async fn acting_owner(
    state: &AppState,
    caller: &BackendAiCaller,
    owner_access_key: Option<&str>,
    action: Action,
) -> Result<KeyOwner, Problem> {
    let named = match owner_access_key.filter(|k| !k.is_empty()) {
        None => return Ok(caller.owner.clone()),
        Some(key) if key == caller.access_key => return Ok(caller.owner.clone()),
        Some(key) => key,
    };
    if !authorization::may_name_others(caller.owner.role) {
        return Err(Problem::forbidden(
            "owner_access_key",
            "only admins act for another keypair's owner",
        ));
    }
    let unknown = || Problem::invalid("owner_access_key", "no active keypair has this access key");
    let client = state.pool.get().await?;
    let owner = events::ledger::backendai_key_owner(&client, named)
        .await?
        .ok_or_else(unknown)?;
    match crate::authorize::may(state, &caller.owner, action, owner.user_id).await? {
        Ok(()) => Ok(owner),
        Err(Refusal::Hidden) => Err(unknown()),
        Err(Refusal::Forbidden(why)) => Err(Problem::forbidden("owner_access_key", why)),
    }
}

/// The session `reference` names for `owner`: a UUID (the owner's, or any other the one
/// authorization rule lets the caller see), else a name among the owner's live sessions
/// (and, with `ended_too`, their ended ones, newest first), as Backend.AI resolves it. 404
/// `No such session.` otherwise, whoever owns it.
pub(crate) async fn resolve_session(
    state: &AppState,
    caller: &KeyOwner,
    owner: &KeyOwner,
    reference: &str,
    ended_too: bool,
) -> Result<Uuid, Problem> {
    if let Ok(id) = Uuid::parse_str(reference) {
        let seen = match db::sessions::ledger_owner(&state.pool, id).await? {
            Some(o) if o == owner.user_id => true,
            Some(o) => crate::authorize::may(state, caller, Action::See, o)
                .await?
                .is_ok(),
            None => false,
        };
        return if seen {
            Ok(id)
        } else {
            Err(Problem::no_such_session(reference))
        };
    }
    db::backendai::sessions_named(&state.pool, owner.user_id, reference, ended_too)
        .await?
        .first()
        .copied()
        .ok_or_else(|| Problem::no_such_session(reference))
}
