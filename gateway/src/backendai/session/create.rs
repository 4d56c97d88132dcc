//! `POST /session` (and `/session/_/create`): Backend.AI's get-or-create. The body is read
//! and translated ([`super::body`]), the owner settled (an admin may name another keypair's),
//! and a live session of the owner's with the same name answered instead of a new one when
//! it runs the same image (`created: false`; another image is `session-already-exists`).
//! Otherwise the launcher records the session, exactly as for `/v1`, and, unless
//! `enqueueOnly`, the answer waits until the session runs or ends, or `maxWaitSeconds` pass
//! (`TIMEOUT`; the session goes on starting). The wait follows the session's own events on
//! NATS and reads its status from the ledger at each one; the answer then waits (briefly)
//! for berth's views to show what it says, so the info and lists asked next agree with it.

use std::time::Duration;

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use chrono::Utc;
use events::ledger::KeyOwner;
use events::payloads::{Role, SessionStatus};
use futures::StreamExt;
use launcher::launch::{self, LaunchError};
use serde_json::{json, Value};
use tokio::time::Instant;
use uuid::Uuid;

use super::body::{self, CreateBody};
use super::{service_ports, session_detail};
use events::authorization::Action;

use crate::backendai::{acting_owner, BackendAiCaller, Problem};
use crate::db;
use crate::error::ApiError;
use crate::state::AppState;

/// The longest a create waits for its session to start, whatever `maxWaitSeconds` asks (0
/// asks for no limit, and Backend.AI's client reads without a timeout): a request is not
/// held open longer than this. The answer is then `TIMEOUT`, as for a shorter wait, and the
/// session goes on starting.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// How often the ledger is read again while the session's events are followed: a backstop
/// for an event NATS did not deliver (its plain subscriptions deliver at most once).
const BACKSTOP: Duration = Duration::from_secs(2);

/// How often the ledger is read while NATS is away, when no event says when to.
const POLL: Duration = Duration::from_millis(200);

/// The longest an answer waits for berth's views to show what it says (see
/// [`await_views`]); past it the answer goes anyway.
const VIEW_PATIENCE: Duration = Duration::from_secs(2);

/// 400 `session-already-exists`: the owner has a live session of that name which this
/// request may not reuse; the client prints `existingSessionId`.
fn already_exists(name: &str, existing: Uuid, why: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "session-already-exists",
        "The session already exists but you requested to create a new one.",
    )
    .msg(format!("a live session named `{name}` exists; {why}"))
    .data(json!({"existingSessionId": existing}))
}

/// The answer to a create: the session, its status, whether this request made it, and its
/// apps once it runs.
fn answer(id: Uuid, name: &str, status: &str, created: bool, ports: Value) -> Json<Value> {
    Json(json!({
        "sessionId": id,
        "sessionName": name,
        "status": status,
        "created": created,
        "servicePorts": ports,
    }))
}

/// The session's apps when `status` is RUNNING, none otherwise.
async fn ports_if_running(
    state: &AppState,
    owner: &KeyOwner,
    id: Uuid,
    status: &str,
) -> Result<Value, Problem> {
    if status != SessionStatus::Running.as_str() {
        return Ok(json!([]));
    }
    Ok(service_ports(&session_detail(state, owner, id).await?))
}

/// Get-or-create's "get": the owner's live session named `name`, answered as it stands when
/// the request may reuse it (same image), refused when it may not; `None` when there is none.
async fn existing(
    state: &AppState,
    owner: &KeyOwner,
    name: &str,
    body: &CreateBody,
) -> Result<Option<Json<Value>>, Problem> {
    let Some(&id) = db::backendai::sessions_named(&state.pool, owner.user_id, name, false)
        .await?
        .first()
    else {
        return Ok(None);
    };
    if !body.reuse {
        return Err(already_exists(name, id, "reuseIfExists is false"));
    }
    let image = db::backendai::session_image(&state.pool, id).await?;
    if image.as_deref() != Some(body.request.image.as_str()) {
        return Err(already_exists(
            name,
            id,
            &format!(
                "it runs `{}`, not `{}`",
                image.unwrap_or_default(),
                body.request.image
            ),
        ));
    }
    let status = db::sessions::ledger_owner_status(&state.pool, id)
        .await?
        .map(|(_, status)| status)
        .unwrap_or_default();
    let ports = ports_if_running(state, owner, id, &status).await?;
    Ok(Some(answer(id, name, &status, false, ports)))
}

/// Waits until session `id` runs or has ended, for at most `limit`: its status then, or
/// `None` when the time ran out first. It listens on the session's own NATS subject before it
/// reads the ledger, so no move between the read and the wait passes unheard, and reads the
/// ledger (exact: written with each event) again at each event; without NATS it polls.
async fn wait_started(
    state: &AppState,
    id: Uuid,
    limit: Duration,
) -> Result<Option<SessionStatus>, Problem> {
    let deadline = Instant::now() + limit;
    let mut events = match state.bus("the create cannot follow its session") {
        Ok(nats) => {
            let subject = state
                .topology
                .stream_subject("session", &events::catalogue::stream_id("session", id));
            match nats.subscribe(subject).await {
                Ok(subscriber) => nats.flush().await.ok().map(|()| subscriber),
                Err(e) => {
                    tracing::warn!(error = %e, "a create polls its session: cannot subscribe");
                    None
                }
            }
        }
        Err(_) => None,
    };
    loop {
        let status = db::sessions::ledger_owner_status(&state.pool, id)
            .await?
            .and_then(|(_, status)| SessionStatus::parse(&status))
            .ok_or_else(|| ApiError::internal(format!("session {id} has no status")))?;
        if status == SessionStatus::Running || status.is_terminal() {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        match &mut events {
            Some(subscriber) => {
                let wake = (now + BACKSTOP).min(deadline);
                // An event (read again), the backstop or the deadline; a subscription that
                // ended leaves the wait to polling.
                if let Ok(None) = tokio::time::timeout_at(wake, subscriber.next()).await {
                    events = None;
                }
            }
            None => tokio::time::sleep_until((now + POLL).min(deadline)).await,
        }
    }
}

/// Read-your-writes for the calls that follow a create: the answer comes from the ledger,
/// and the views the info and the lists read lag it by milliseconds, so a client that is
/// told `RUNNING` (or `PENDING`) and asks at once would see the session still creating (or
/// not at all). Waits, up to [`VIEW_PATIENCE`], until the view has session `id` and, when
/// `status` is given, shows it or has moved past it to an end.
async fn await_views(state: &AppState, id: Uuid, status: Option<&str>) -> Result<(), Problem> {
    let deadline = Instant::now() + VIEW_PATIENCE;
    loop {
        let shown = db::backendai::view_status(&state.pool, id).await?;
        let caught_up = match (shown.as_deref(), status) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(shown), Some(status)) => {
                shown == status || SessionStatus::parse(shown).is_some_and(|s| s.is_terminal())
            }
        };
        if caught_up || Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `POST /session`: get-or-create, as Backend.AI's client asks for it.
pub(super) async fn create(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), Problem> {
    // berth's own reading of a body: JSON, an object, no NUL anywhere (named by its path).
    let value: Value = crate::api::parse_body(body)?;
    let mut body = body::read(value, Utc::now())?;
    // Any problem the launcher finds is named as the client named the field.
    let named = |e: ApiError, body: &CreateBody| -> Problem {
        let field = e.field.as_deref().map(|f| body.client_field(f));
        Problem::from(ApiError { field, ..e })
    };

    let owner = acting_owner(
        &state,
        &caller,
        body.owner_access_key.as_deref(),
        Action::CreateAs,
    )
    .await?;
    if owner.user_id != caller.owner.user_id {
        body.request.owner_email = Some(owner.email.clone());
    }
    if let Some(group) = &body.group {
        if db::backendai::is_project_member(&state.pool, owner.user_id, group).await? {
            body.request.project = Some(group.clone());
        }
    }
    if let Some(first) = body.agents.first() {
        // Backend.AI lets only admins place a session by hand.
        if caller.owner.role == Role::User {
            return Err(Problem::forbidden(
                "config.agentList",
                "only admins choose the agent of a session",
            ));
        }
        if body.agents.iter().any(|a| a != first) {
            return Err(Problem::invalid(
                "config.agentList",
                "berth places a session on one agent chosen by hand; name one",
            ));
        }
        body.request.agent = Some(first.clone());
    }

    if let Some(name) = body.request.name.clone() {
        if let Some(found) = existing(&state, &owner, &name, &body).await? {
            return Ok((StatusCode::CREATED, found));
        }
    }
    let launched = {
        let _place = state.admit_create()?;
        launch::launch(&state.pool, &caller.owner, body.request.clone()).await
    };
    let launched = match launched {
        Ok(sessions) => sessions
            .into_iter()
            .next()
            .ok_or_else(|| ApiError::internal("the launcher recorded no session for one asked"))?,
        // Another request made a session of this name meanwhile: get-or-create's "get".
        Err(LaunchError::NameTaken(f)) => {
            let name = body.request.name.clone().unwrap_or_default();
            return match existing(&state, &owner, &name, &body).await? {
                Some(found) => Ok((StatusCode::CREATED, found)),
                None => Err(named(LaunchError::NameTaken(f).into(), &body)),
            };
        }
        Err(e) => return Err(named(e.into(), &body)),
    };
    let (id, name) = (launched.session_id, launched.name);
    if body.enqueue_only {
        await_views(&state, id, None).await?;
        let pending = SessionStatus::Pending.as_str();
        return Ok((
            StatusCode::CREATED,
            answer(id, &name, pending, true, json!([])),
        ));
    }
    let limit = match body.max_wait_seconds {
        0 => MAX_WAIT,
        seconds => Duration::from_secs(seconds).min(MAX_WAIT),
    };
    let status = match wait_started(&state, id, limit).await? {
        Some(status) => {
            await_views(&state, id, Some(status.as_str())).await?;
            status.as_str()
        }
        None => {
            await_views(&state, id, None).await?;
            "TIMEOUT"
        }
    };
    let ports = ports_if_running(&state, &owner, id, status).await?;
    Ok((StatusCode::CREATED, answer(id, &name, status, true, ports)))
}
