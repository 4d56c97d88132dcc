//! Backend.AI's `service` calls (`backend.ai service create|info|rm|scale|generate-token|sync`
//! and the SDK's `Service`): `/services/...`, translated onto the functions `/v1/services`
//! calls (`crate::api::services`), so an endpoint made here is berth's own, each change an
//! event, and it answers at the same URL. The client's `service list`, `info` and
//! `get-endpoint` read GraphQL's `endpoint` and `endpoint_list` (`super::gql`).
//!
//! What berth cannot honour is refused by its field, never dropped: a cluster of more than
//! one container, environment variables and a start command (the model definition's start
//! command runs each replica), a model version, a mount point other than the client's
//! default (berth mounts the model folder at `/home/work/<folder>`, where the definition's
//! paths point), a tag, a bootstrap script, a callback, another domain or project.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use chrono::Utc;
use domain::serving::{Endpoint, RouteHealth};
use events::authorization::Action;
use launcher::launch::ByteSize;
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::session::body::{self, Fields};
use super::{acting_owner, BackendAiCaller, Problem};
use crate::api::services::{self as endpoints, ServiceIn};
use crate::db;
use crate::error::ApiError;
use crate::state::AppState;

/// The mount point Backend.AI's client sends unless told otherwise.
const CLIENT_MOUNT_POINT: &str = "/models";

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/services", get(list).post(create))
        .route("/services/{service_id}", get(info).delete(delete))
        .route("/services/{service_id}/scale", post(scale))
        .route("/services/{service_id}/token", post(token))
        .route("/services/{service_id}/sync", post(sync))
}

/// A create body, read: berth's endpoint request, the model folder as the client named it
/// (a name, or the id Backend.AI's folder calls give it), and the keypair it is made for.
#[derive(Debug)]
pub struct ServiceBody {
    pub asked: ServiceIn,
    pub model: String,
    pub owner_access_key: Option<String>,
}

/// Reads Backend.AI's create body (`POST /services`) as its server reads it (aliases, nulls
/// for fields left unset, numbers as text). Pure.
pub fn read(value: Value) -> Result<ServiceBody, Problem> {
    let mut root = Fields::new(value, "", "body")?;
    let (_, name) = root
        .string(&["name", "service_name", "clientSessionToken"])?
        .ok_or_else(|| Problem::invalid("name", "is required"))?;
    let (field, replicas) = root
        .whole(&["desired_session_count", "desiredSessionCount"])?
        .ok_or_else(|| Problem::invalid("desired_session_count", "is required"))?;
    let replicas = u32::try_from(replicas).map_err(|_| Problem::invalid(&field, "is too large"))?;
    let (_, image) = root
        .string(&["image", "lang"])?
        .ok_or_else(|| Problem::invalid("image", "is required"))?;
    // berth's agents run their own architecture: the image's is theirs.
    root.take(&["arch", "architecture"])?;
    for (aliases, what) in [
        (&["domain", "domainName", "domain_name"][..], "domain"),
        (&["group", "groupName", "group_name"][..], "project"),
    ] {
        if let Some((field, named)) = root.string(aliases)? {
            if named != "default" {
                return Err(Problem::invalid(
                    &field,
                    format!("berth's endpoints run in their owner's default {what}, `default`"),
                ));
            }
        }
    }
    if let Some((field, size)) = root.whole(&["cluster_size", "clusterSize"])? {
        if size != 1 {
            return Err(Problem::invalid(&field, "a replica is one container"));
        }
    }
    if let Some((field, mode)) = root.string(&["cluster_mode", "clusterMode"])? {
        if mode != "single-node" {
            return Err(Problem::invalid(&field, "a replica is one container"));
        }
    }
    root.refuse(
        &["startup_command", "startupCommand"],
        "the model definition's start command runs each replica",
    )?;
    root.refuse(&["tag"], "berth's endpoints take no tag")?;
    root.refuse(
        &["bootstrap_script", "bootstrapScript"],
        "berth's replicas run no bootstrap script",
    )?;
    root.refuse(
        &["callback_url", "callbackUrl", "callbackURL"],
        "berth calls no URL back; follow the endpoint's events instead",
    )?;
    let owner_access_key = root.string(&["owner_access_key"])?.map(|(_, k)| k);
    let open_to_public = root.flag(&["open_to_public"])?.unwrap_or(false);
    let (_, config) = root
        .take(&["config"])?
        .ok_or_else(|| Problem::invalid("config", "is required"))?;
    let mut config = Fields::new(config, "config.", "config")?;
    let (_, model) = config
        .string(&["model"])?
        .ok_or_else(|| Problem::invalid("config.model", "is required"))?;
    config.refuse(
        &["model_version", "modelVersion"],
        "berth serves a model folder as it is; it has no versions",
    )?;
    if let Some((field, at)) =
        config.string(&["model_mount_destination", "modelMountDestination"])?
    {
        if at != CLIENT_MOUNT_POINT {
            return Err(Problem::invalid(
                &field,
                format!(
                    "berth mounts a model folder at `/home/work/<folder>`, where its \
                     definition's paths point; only the client's default, \
                     `{CLIENT_MOUNT_POINT}`, is taken"
                ),
            ));
        }
    }
    config.refuse(
        &["environ"],
        "the model definition's start command runs each replica; set its variables there",
    )?;
    let resource_group = config
        .string(&["scaling_group", "scalingGroup"])?
        .map(|(_, g)| g);
    let mut resources = match config.take(&["resources"])? {
        None => Default::default(),
        Some((field, Value::Object(map))) => body::resources(&field, map)?.0,
        Some((field, _)) => return Err(Problem::invalid(&field, "must be a JSON object")),
    };
    match config.take(&["resource_opts", "resourceOpts"])? {
        None => {}
        Some((field, Value::Object(map))) => {
            for (key, value) in map.into_iter().filter(|(_, v)| !v.is_null()) {
                let at = format!("{field}.{key}");
                match key.as_str() {
                    "shmem" => resources.shared_memory = Some(body::size(&at, &value)?),
                    _ => return Err(Problem::invalid(&at, "berth knows only shmem")),
                }
            }
        }
        Some((field, _)) => return Err(Problem::invalid(&field, "must be a JSON object")),
    }
    config.finish()?;
    root.finish()?;
    // As Backend.AI fills them from its stock images' minimum (see `body::DEFAULT_CPU`).
    resources.cpu.get_or_insert(body::DEFAULT_CPU);
    resources
        .memory
        .get_or_insert_with(|| ByteSize::Text(body::DEFAULT_MEMORY.into()));
    Ok(ServiceBody {
        asked: ServiceIn {
            name,
            model_folder: model.clone(),
            model_definition_path: None,
            image: Some(image),
            resource_group,
            resources,
            replicas: Some(replicas),
            open_to_public,
        },
        model,
        owner_access_key,
    })
}

/// The field of the client's create body that `/v1`'s field `berth` came from.
pub fn client_field(berth: &str) -> String {
    match berth {
        "model_folder" | "model_definition_path" => "config.model".into(),
        "replicas" => "desired_session_count".into(),
        "resource_group" => "config.scaling_group".into(),
        "resources.memory" => "config.resources.mem".into(),
        "resources.shared_memory" => "config.resource_opts.shmem".into(),
        "resources.gpu" => "config.resources.cuda.shares".into(),
        other => match other.strip_prefix("resources") {
            Some(rest) => format!("config.resources{rest}"),
            None => other.to_owned(),
        },
    }
}

/// Where endpoint `id` answers, for a caller who reached the gateway at `host`: its own host
/// under the serving domain when there is one, else its path on the caller's host.
pub(crate) fn endpoint_url(state: &AppState, host: Option<&str>, id: Uuid) -> String {
    let scheme = if state.tls { "https" } else { "http" };
    let host = host.unwrap_or("127.0.0.1");
    match state.serve_domain.as_deref() {
        Some(domain) => {
            // The caller's port, if the host it reached names one.
            let port = crate::headers::split_host(host)
                .1
                .map(|port| format!(":{port}"))
                .unwrap_or_default();
            format!("{scheme}://{}{port}/", crate::serving::host_of(id, domain))
        }
        None => format!("{scheme}://{host}/serve/{id}/"),
    }
}

fn host_of(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::HOST).and_then(|h| h.to_str().ok())
}

/// An endpoint's healthy replicas.
fn active_routes(endpoint: &Endpoint) -> usize {
    endpoint
        .routes
        .values()
        .filter(|r| r.health == RouteHealth::Healthy)
        .count()
}

/// `GET /services?name=`: the caller's endpoints (of that name).
#[derive(Deserialize)]
struct ListQuery {
    name: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>, Problem> {
    let mine: Vec<Value> = endpoints::visible(&state, &caller.owner)
        .await?
        .iter()
        .filter(|e| e.created.owner.user_id == caller.owner.user_id)
        .filter(|e| query.name.as_deref().is_none_or(|n| e.created.name == n))
        .map(|e| {
            json!({
                "id": e.id().to_string(),
                "name": e.created.name,
                "desired_session_count": e.replicas,
                "active_route_count": active_routes(e),
                "service_endpoint": endpoint_url(&state, host_of(&headers), e.id()),
                "is_public": e.created.open_to_public,
            })
        })
        .collect();
    Ok(Json(Value::Array(mine)))
}

/// `POST /services`: an endpoint made from a model folder, as `/v1/services` makes it.
async fn create(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Problem> {
    let value: Value = crate::api::parse_body(body)?;
    let ServiceBody {
        mut asked,
        model,
        owner_access_key,
    } = read(value)?;
    let owner = acting_owner(
        &state,
        &caller,
        owner_access_key.as_deref(),
        Action::CreateAs,
    )
    .await?;
    // A folder named by the id Backend.AI's folder calls give it.
    if let Ok(id) = Uuid::parse_str(&model) {
        let folders = db::folders::folders(&state.pool, owner.user_id).await?;
        asked.model_folder = folders
            .iter()
            .map(|f| &f.name)
            .find(|name| super::folders::folder_id(owner.user_id, name) == id)
            .cloned()
            .ok_or_else(|| Problem::invalid("config.model", "no folder of yours has that id"))?;
    }
    let made = endpoints::make(&state, &owner, asked)
        .await
        .map_err(|e: ApiError| {
            let field = e.field.as_deref().map(client_field);
            Problem::from(ApiError { field, ..e })
        })?;
    Ok(Json(json!({"endpoint_id": made.id().to_string()})))
}

/// `GET /services/{id}`: the endpoint and its healthy replicas.
async fn info(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let endpoint = endpoints::seen(&state, &caller.owner, &id).await?;
    let active: Vec<Value> = endpoint
        .routes
        .values()
        .filter(|r| r.health == RouteHealth::Healthy)
        .map(|r| {
            json!({
                "route_id": r.session_id.to_string(),
                "session_id": r.session_id.to_string(),
                "traffic_ratio": 1.0,
            })
        })
        .collect();
    Ok(Json(json!({
        "endpoint_id": endpoint.id().to_string(),
        "model_id": super::folders::folder_id(
            endpoint.created.owner.user_id,
            &endpoint.created.model_folder,
        )
        .to_string(),
        "extra_mounts": [],
        "name": endpoint.created.name,
        "desired_session_count": endpoint.replicas,
        "active_routes": active,
        "service_endpoint": endpoint_url(&state, host_of(&headers), endpoint.id()),
        "is_public": endpoint.created.open_to_public,
    })))
}

/// `DELETE /services/{id}`: destroyed; its replicas end.
async fn delete(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    endpoints::destroy(&state, &caller.owner, &id).await?;
    Ok(Json(json!({"success": true})))
}

/// `POST /services/{id}/scale {"to"}`: the replicas wanted from now on.
async fn scale(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Problem> {
    let value: Value = crate::api::parse_body(body)?;
    let mut fields = Fields::new(value, "", "body")?;
    let to = match fields.take(&["to"])? {
        Some((_, Value::Number(n))) => n
            .as_i64()
            .ok_or_else(|| Problem::invalid("to", "must be a whole number"))?,
        Some(_) => return Err(Problem::invalid("to", "must be a whole number")),
        None => return Err(Problem::invalid("to", "is required")),
    };
    fields.finish()?;
    let to = u32::try_from(to).map_err(|_| {
        Problem::invalid(
            "to",
            "Amount of desired session count cannot be a negative number",
        )
    })?;
    let before = endpoints::seen(&state, &caller.owner, &id).await?;
    endpoints::scale_to(&state, &caller.owner, &id, to)
        .await
        .map_err(|e| {
            let field = e.field.as_ref().map(|_| "to".to_owned());
            Problem::from(ApiError { field, ..e })
        })?;
    Ok(Json(json!({
        "current_route_count": before.routes.len(),
        "target_count": to,
    })))
}

/// How long a token asked with `{"duration"}` or `{"valid_until"}` lasts, in seconds. Pure.
pub fn token_lifetime(value: Value, now: i64) -> Result<u64, Problem> {
    let mut fields = Fields::new(value, "", "body")?;
    let duration = fields.string(&["duration"])?;
    let until = fields.whole(&["valid_until"])?;
    fields.finish()?;
    let seconds = match (until, duration) {
        (Some((field, until)), _) => {
            let left = i64::try_from(until).unwrap_or(i64::MAX).saturating_sub(now);
            if left <= 0 {
                return Err(Problem::invalid(&field, "valid_until is older than now"));
            }
            left
        }
        (None, Some((field, text))) => body::parse_span(&text)
            .map(|span| span.num_seconds())
            .filter(|s| *s > 0)
            .ok_or_else(|| {
                Problem::invalid(&field, "must be a span such as `30m`, `12h` or `7d`")
            })?,
        (None, None) => {
            return Err(Problem::invalid(
                "duration",
                "valid_until and duration can't be both unspecified",
            ))
        }
    };
    Ok(seconds as u64)
}

/// `POST /services/{id}/token`: a token for the endpoint, shown this once.
async fn token(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, Problem> {
    let value: Value = crate::api::parse_body(body)?;
    let seconds = token_lifetime(value, Utc::now().timestamp())?;
    let made = endpoints::new_token(&state, &caller.owner, &id, seconds)
        .await
        .map_err(|e| {
            let field = e.field.as_ref().map(|_| "duration".to_owned());
            Problem::from(ApiError { field, ..e })
        })?;
    Ok(Json(json!({"token": made.token})))
}

/// `POST /services/{id}/sync`: berth's balancer follows the replicas' health as it changes;
/// there is nothing to bring up to date.
async fn sync(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<Value>), Problem> {
    endpoints::seen(&state, &caller.owner, &id).await?;
    Ok((StatusCode::OK, Json(json!({"success": true}))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field a problem names.
    fn field_of(problem: &Problem) -> Option<String> {
        let data = problem.data.as_ref()?.as_object()?;
        data.keys().next().cloned()
    }

    /// What `backend.ai service create IMAGE models 2 -t iris-bai -r cpu=0.25 -r mem=128m`
    /// sends.
    fn sent() -> Value {
        json!({
            "name": "iris-bai", "desired_session_count": 2, "image": "berth/python:latest",
            "arch": "x86_64", "group": "default", "domain": "default", "cluster_size": 1,
            "cluster_mode": "single-node", "tag": null, "startup_command": null,
            "bootstrap_script": null, "owner_access_key": null, "open_to_public": false,
            "config": {"model": "models", "model_version": null,
                       "model_mount_destination": "/models", "environ": {},
                       "scaling_group": "default",
                       "resources": {"cpu": "0.25", "mem": "128m"}, "resource_opts": {}}
        })
    }

    #[test]
    fn the_clients_create_body_becomes_berths_endpoint_request() {
        let read = read(sent()).unwrap();
        assert_eq!(read.asked.name, "iris-bai");
        assert_eq!(read.asked.model_folder, "models");
        assert_eq!(read.asked.replicas, Some(2));
        assert_eq!(read.asked.image.as_deref(), Some("berth/python:latest"));
        assert_eq!(read.asked.resource_group.as_deref(), Some("default"));
        assert_eq!(read.asked.resources.cpu, Some(0.25));
        assert_eq!(
            read.asked.resources.memory,
            Some(ByteSize::Text("128m".into()))
        );
        assert!(!read.asked.open_to_public);
        assert_eq!(read.owner_access_key, None);
    }

    #[test]
    fn what_berth_cannot_honour_is_refused_by_its_field() {
        for (change, field) in [
            (json!({"cluster_size": 2}), "cluster_size"),
            (
                json!({"startup_command": "python serve.py"}),
                "startup_command",
            ),
            (json!({"group": "research"}), "group"),
            (json!({"colour": "blue"}), "colour"),
            (
                json!({"config": {"model": "m", "environ": {"A": "1"}}}),
                "config.environ",
            ),
            (
                json!({"config": {"model": "m", "model_mount_destination": "/data"}}),
                "config.model_mount_destination",
            ),
            (
                json!({"config": {"model": "m", "resources": {"tpu": 1}}}),
                "config.resources.tpu",
            ),
            (json!({"config": {}}), "config.model"),
        ] {
            let mut body = sent();
            for (k, v) in change.as_object().unwrap() {
                body[k] = v.clone();
            }
            let refused = read(body).unwrap_err();
            assert_eq!(
                field_of(&refused).as_deref(),
                Some(field),
                "{change}: {refused:?}"
            );
        }
    }

    #[test]
    fn a_refusal_of_berths_names_the_clients_field() {
        assert_eq!(client_field("model_folder"), "config.model");
        assert_eq!(client_field("replicas"), "desired_session_count");
        assert_eq!(client_field("resources.cpu"), "config.resources.cpu");
        assert_eq!(client_field("resources.memory"), "config.resources.mem");
        assert_eq!(client_field("name"), "name");
    }

    #[test]
    fn a_token_lasts_its_span_or_until_its_time() {
        let now = 1_000_000;
        assert_eq!(
            token_lifetime(json!({"duration": "2h"}), now).unwrap(),
            7200
        );
        assert_eq!(
            token_lifetime(json!({"valid_until": now + 60}), now).unwrap(),
            60
        );
        for (body, field) in [
            (json!({"valid_until": now - 1}), "valid_until"),
            (json!({"duration": "soon"}), "duration"),
            (json!({}), "duration"),
        ] {
            let refused = token_lifetime(body.clone(), now).unwrap_err();
            assert_eq!(field_of(&refused).as_deref(), Some(field), "{body}");
        }
    }
}
