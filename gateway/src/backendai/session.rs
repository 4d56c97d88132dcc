//! Backend.AI's `session` calls: create (`POST /session`, also `/session/_/create`), info,
//! logs, rename, destroy, commit and the status history of a session named by its name or
//! its UUID (`/session/{ref}/...`). Each calls what `/v1` calls: the launcher, the session
//! lifecycle's commands (rename, terminate, commit through `api`'s shared functions) and the
//! same views; only the shapes are Backend.AI's. A session is found for its owner: the caller,
//! or the keypair an admin names with `owner_access_key` ([`super::acting_owner`],
//! [`super::resolve_session`]). Restart (`PATCH`) is not berth's: it answers
//! `not-implemented`.
//!
//! - `body`: the create body read and translated into berth's request (pure).
//! - `create`: the create handler, get-or-create, and the wait for the session to start.
//! - `files`: `session upload` and `download`, through the agent's door into the kernel.
//! - `execute`: the execute API (`run`): code and batch commands run in the kernel, over a
//!   WebSocket or one request.

pub(super) mod body;
mod create;
mod execute;
mod files;

use std::collections::HashMap;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use events::authorization::Action;
use events::ledger::KeyOwner;
use events::payloads::SessionStatus;
use launcher::domain::NameRule;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::{acting_owner, resolve_session, BackendAiCaller, Problem};
use crate::db;
use crate::db::history::{HistoryFilter, HistoryOrder};
use crate::error::ApiError;
use crate::model::SessionDetail;
use crate::state::AppState;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/session", post(create::create))
        .route("/session/_/create", post(create::create))
        .route(
            "/session/{reference}",
            get(info).delete(destroy).post(execute::execute),
        )
        .route(
            "/stream/session/{reference}/execute",
            get(execute::stream_execute),
        )
        .route("/session/{reference}/logs", get(logs))
        .route("/session/{reference}/upload", post(files::upload))
        .route("/session/{reference}/download", get(files::download))
        .route("/session/{reference}/rename", post(rename))
        .route("/session/{reference}/commit", post(commit))
        .route("/session/{reference}/status-history", get(status_history))
}

/// A call's query parameters: `owner_access_key` and `known`, each at most once. An empty
/// value is taken as absent (the client leaves out what it does not set; a hand-written call
/// may not). Any other parameter is refused by its name. `login_session_token` (the web
/// console's session mode, which berth does not serve) is accepted and not used.
fn query(raw: Option<&str>, known: &[&str]) -> Result<HashMap<String, String>, Problem> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| Problem::invalid("query", format!("is not a query string: {e}")))?;
    let mut params = HashMap::new();
    for (name, value) in pairs {
        let ours = name == "owner_access_key" || known.contains(&name.as_str());
        if !ours && name != "login_session_token" {
            return Err(Problem::invalid(
                &name,
                "is not a parameter of this call that berth knows",
            ));
        }
        if params.contains_key(&name) {
            return Err(Problem::invalid(&name, "is given more than once"));
        }
        if value.contains('\0') {
            return Err(Problem::invalid(&name, "may not contain a NUL character"));
        }
        if ours && !value.is_empty() {
            params.insert(name, value);
        }
    }
    Ok(params)
}

/// A flag in a query string (`forced=true`), as Backend.AI reads one.
fn flag(params: &HashMap<String, String>, name: &str) -> Result<bool, Problem> {
    match params.get(name).map(|v| v.to_ascii_lowercase()).as_deref() {
        None | Some("false" | "f" | "no" | "n" | "off" | "0") => Ok(false),
        Some("true" | "t" | "yes" | "y" | "on" | "1") => Ok(true),
        Some(other) => Err(Problem::invalid(
            name,
            format!("must be true or false, not `{other}`"),
        )),
    }
}

/// The session reference in the path (a name or a UUID).
fn reference(path: Result<Path<String>, PathRejection>) -> Result<String, Problem> {
    path.map(|Path(reference)| reference)
        .map_err(|e| Problem::invalid("session", e.body_text()))
}

/// Whose session the call is about and which: the owner (the caller, or the keypair an
/// admin names) and the session `reference` names among theirs.
async fn target(
    state: &AppState,
    caller: &BackendAiCaller,
    params: &HashMap<String, String>,
    reference: &str,
    ended_too: bool,
    action: Action,
) -> Result<(KeyOwner, Uuid), Problem> {
    let owner = acting_owner(
        state,
        caller,
        params.get("owner_access_key").map(String::as_str),
        action,
    )
    .await?;
    let id = resolve_session(state, &caller.owner, &owner, reference, ended_too).await?;
    Ok((owner, id))
}

/// The session's detail from berth's view, waited for when it was only just created
/// (read-your-writes, as `/v1`'s detail does). `owner` owns it.
async fn session_detail(
    state: &AppState,
    owner: &KeyOwner,
    id: Uuid,
) -> Result<SessionDetail, Problem> {
    let detail = match db::sessions::detail(&state.pool, id).await? {
        Some(detail) => detail,
        None => {
            crate::api::await_view(state, owner, id).await?;
            db::sessions::detail(&state.pool, id)
                .await?
                .ok_or_else(|| Problem::no_such_session(&id.to_string()))?
        }
    };
    Ok(serde_json::from_str(&detail.body).map_err(ApiError::internal)?)
}

/// A session's apps as Backend.AI lists service ports: `{name, protocol, ports}`.
fn service_ports(detail: &SessionDetail) -> Value {
    detail
        .request
        .apps
        .iter()
        .map(|app| json!({"name": app.name, "protocol": app.protocol, "ports": app.ports}))
        .collect()
}

/// Resource slots as Backend.AI writes them: amounts as decimal text by slot name.
fn slots(cpu_milli: u64, memory_bytes: u64, gpu_milli: u64) -> Value {
    let units = |milli: u64| {
        if milli.is_multiple_of(1000) {
            (milli / 1000).to_string()
        } else {
            (milli as f64 / 1000.0).to_string()
        }
    };
    let mut slots = Map::new();
    slots.insert("cpu".into(), units(cpu_milli).into());
    slots.insert("mem".into(), memory_bytes.to_string().into());
    if gpu_milli > 0 {
        slots.insert("cuda.shares".into(), units(gpu_milli).into());
    }
    Value::Object(slots)
}

/// A batch session's result as Backend.AI names it, from its exit code once it has ended.
fn result(detail: &SessionDetail) -> &'static str {
    match (detail.session_type.as_str(), detail.exit_code) {
        ("batch", Some(0)) => "SUCCESS",
        ("batch", Some(_)) => "FAILURE",
        _ => "UNDEFINED",
    }
}

/// What Backend.AI says of the status in `statusData`: a waiting session's scheduler tries
/// (from the scheduling history), an ended one's exit code.
async fn status_data(state: &AppState, detail: &SessionDetail) -> Result<Value, Problem> {
    match SessionStatus::parse(&detail.status) {
        Some(SessionStatus::Pending) => {
            let history = db::history::history(
                &state.pool,
                detail.session_id,
                &HistoryFilter::default(),
                HistoryOrder::UpdatedDescending,
            )
            .await?;
            let last = history.first();
            Ok(json!({"scheduler": {
                "retries": detail.scheduling_attempts,
                "last_try": last.map(|h| h.updated_at.to_rfc3339()),
                "msg": last.map(|h| h.message.clone()).or_else(|| detail.status_reason.clone()),
            }}))
        }
        Some(s) if s.is_terminal() => Ok(json!({"kernel": {"exit_code": detail.exit_code}})),
        _ => Ok(json!({})),
    }
}

/// `GET /session/{ref}`: the session in Backend.AI's words (its `get_info`), from berth's
/// detail. Kernels: the main one's id is the session's (Backend.AI's old convention).
fn info_body(detail: &SessionDetail, status_data: Value, now: DateTime<Utc>) -> Value {
    let per_kernel = detail.resources;
    let size = u64::from(detail.cluster_size.max(1));
    let requested = slots(
        per_kernel.cpu_milli * size,
        per_kernel.memory_bytes.saturating_mul(size),
        per_kernel.gpu_milli * size,
    );
    let holds = SessionStatus::parse(&detail.status).is_some_and(|s| s.holds_resources());
    let main = detail.containers.iter().min_by_key(|c| c.kernel);
    let running = detail.status == SessionStatus::Running.as_str();
    let mut agents: Vec<&str> = detail.kernels.iter().map(|k| k.agent_id.as_str()).collect();
    agents.sort_unstable();
    agents.dedup();
    json!({
        "sessionId": detail.session_id,
        "sessionName": detail.name,
        "type": detail.session_type,
        "domainName": "default",
        // berth's projects have names, not ids.
        "groupId": null,
        "groupName": detail.project,
        "userId": detail.owner.user_id,
        "userEmail": detail.owner.email,
        "lang": detail.image,
        "image": detail.image,
        "architecture": "x86_64",
        "registry": null,
        "tag": null,
        "mainKernelId": detail.session_id,
        "containerId": main.map(|c| c.container_id.clone()),
        "agentIds": agents,
        "scalingGroup": detail.resource_group,
        "clusterMode": detail.cluster_mode,
        "clusterSize": detail.cluster_size,
        "occupiedSlots": slots(per_kernel.cpu_milli, per_kernel.memory_bytes, per_kernel.gpu_milli),
        "occupyingSlots": if holds { requested.clone() } else { slots(0, 0, 0) },
        "requestedSlots": requested,
        "environ": detail.request.environment,
        "resourceOpts": {"shmem": detail.shared_memory_bytes},
        "mounts": detail.request.mounts,
        "startupCommand": detail.request.startup_command,
        "startsAt": detail.request.starts_at,
        "status": detail.status,
        "statusInfo": detail.status_reason,
        "statusData": status_data,
        "result": result(detail),
        "exitCode": detail.exit_code,
        "age": (now - detail.created_at).num_milliseconds(),
        "creationTime": detail.created_at.to_rfc3339(),
        "terminationTime": detail.ended_at.map(|t| t.to_rfc3339()),
        "servicePorts": if running { service_ports(detail) } else { json!([]) },
        "numQueriesExecuted": 0,
        "lastStat": detail.usage,
        "idleChecks": {},
    })
}

/// `GET /session/{ref}`: the session, in Backend.AI's camelCase.
async fn info(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, Problem> {
    let reference = reference(path)?;
    let params = query(raw.as_deref(), &[])?;
    let (owner, id) = target(&state, &caller, &params, &reference, false, Action::See).await?;
    let detail = session_detail(&state, &owner, id).await?;
    let data = status_data(&state, &detail).await?;
    Ok(Json(info_body(&detail, data, Utc::now())))
}

/// `GET /session/{ref}/logs`: the main kernel's output as kept (an ended session's too).
async fn logs(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, Problem> {
    let reference = reference(path)?;
    let params = query(raw.as_deref(), &[])?;
    let (_, id) = target(&state, &caller, &params, &reference, true, Action::See).await?;
    // The most recent output its cap keeps, as Backend.AI answers the whole log.
    let kernels = db::logs::logs(&state.pool, id, Default::default()).await?;
    let main = kernels
        .into_iter()
        .min_by_key(|k| k.kernel)
        .map(|k| k.content)
        .unwrap_or_default();
    Ok(Json(json!({"result": {"logs": main}})))
}

/// `POST /session/{ref}/rename?name=NEW`: renamed as `/v1` renames, the new name by
/// Backend.AI's rule (`pysdk-...` passes); 204.
async fn rename(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<StatusCode, Problem> {
    let reference = reference(path)?;
    let params = query(raw.as_deref(), &["name"])?;
    let name = params
        .get("name")
        .cloned()
        .ok_or_else(|| Problem::invalid("name", "is required: the new name"))?;
    NameRule::BackendAi
        .check("name", &name)
        .map_err(|e| Problem::invalid(&e.field, e.message))?;
    let (_, id) = target(&state, &caller, &params, &reference, true, Action::Act).await?;
    crate::api::sessions::rename(&state, &caller.owner, id, name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /session/{ref}?forced=`: terminated as `/v1` terminates (`forced` at once);
/// 200 `{"stats": {}}` (berth keeps no last statistics to give). `recursive` asks to end the
/// sessions depending on it too: berth's sessions depend on none, so it changes nothing.
async fn destroy(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, Problem> {
    let reference = reference(path)?;
    let params = query(raw.as_deref(), &["forced", "recursive"])?;
    let forced = flag(&params, "forced")?;
    flag(&params, "recursive")?;
    let (_, id) = target(&state, &caller, &params, &reference, false, Action::Act).await?;
    crate::api::sessions::terminate(&state, &caller.owner, id, forced).await?;
    Ok(Json(json!({"stats": {}})))
}

/// The name of an image committed from session `name` at `now`: Backend.AI's client names
/// none, so it is the session's name (what a customized image's name may hold of it, at
/// most 17 characters) and the time to the second, within the 32 characters a name may have.
fn commit_name(session: &str, now: DateTime<Utc>) -> String {
    let stem: String = session
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(17)
        .collect();
    format!("{stem}-{}", now.format("%Y%m%d%H%M%S"))
}

/// `POST /session/{ref}/commit`: a commit started as `/v1` starts one (an interactive
/// RUNNING session to a customized image of its owner's); 201 with the image it makes.
async fn commit(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<(StatusCode, Json<Value>), Problem> {
    let reference = reference(path)?;
    let params = query(raw.as_deref(), &[])?;
    let (_, id) = target(&state, &caller, &params, &reference, false, Action::Act).await?;
    let name = db::backendai::session_name(&state.pool, id)
        .await?
        .ok_or_else(|| Problem::no_such_session(&reference))?;
    let started =
        crate::api::images::start_commit(&state, &caller.owner, id, commit_name(&name, Utc::now()))
            .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "sessionId": started.session_id,
            "commitId": started.commit_id,
            "image": started.image,
        })),
    ))
}

/// `GET /session/{ref}/status-history`: when the session reached each status, from its log.
async fn status_history(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<Json<Value>, Problem> {
    let reference = reference(path)?;
    let params = query(raw.as_deref(), &[])?;
    let (_, id) = target(&state, &caller, &params, &reference, true, Action::See).await?;
    let history: Map<String, Value> = db::backendai::status_history(&state.pool, id)
        .await?
        .into_iter()
        .map(|(status, at)| (status, Value::String(at.to_rfc3339())))
        .collect();
    Ok(Json(json!({"result": history})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_read_by_name_and_others_refused() {
        let params = query(
            Some("forced=true&owner_access_key=&login_session_token=x"),
            &["forced"],
        )
        .unwrap();
        assert_eq!(params.get("forced").map(String::as_str), Some("true"));
        assert!(!params.contains_key("owner_access_key"), "empty is absent");
        assert!(!params.contains_key("login_session_token"));
        assert!(flag(&params, "forced").unwrap());
        assert!(!flag(&params, "recursive").unwrap());
        let unknown = query(Some("force=true"), &["forced"]).unwrap_err();
        assert_eq!(
            unknown.data,
            Some(json!({"force": "is not a parameter of this call that berth knows"}))
        );
        let twice = query(Some("forced=1&forced=0"), &["forced"]).unwrap_err();
        assert!(twice.data.unwrap().get("forced").is_some());
        let bad = HashMap::from([("forced".to_owned(), "perhaps".to_owned())]);
        assert_eq!(flag(&bad, "forced").unwrap_err().status, 400);
    }

    #[test]
    fn a_commit_is_named_after_its_session_within_the_image_name_rule() {
        let now = DateTime::parse_from_rfc3339("2026-11-22T08:04:25Z")
            .unwrap()
            .with_timezone(&Utc);
        let name = commit_name("pysdk-a.very.long.session.name", now);
        assert_eq!(name, "pysdk-a_very_long-20261122080425");
        assert!(domain::images::check_image_name(&name).is_ok());
        assert!(domain::images::check_image_name(&commit_name("abcd", now)).is_ok());
    }

    #[test]
    fn slots_are_decimal_text_by_slot_name() {
        assert_eq!(
            slots(1500, 1 << 30, 0),
            json!({"cpu": "1.5", "mem": "1073741824"})
        );
        assert_eq!(
            slots(2000, 0, 500),
            json!({"cpu": "2", "mem": "0", "cuda.shares": "0.5"})
        );
    }
}
