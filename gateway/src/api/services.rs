//! Model serving (`/v1/services`): endpoints made from a model folder holding a model
//! definition file, listed, shown with their replicas' health, scaled, given tokens and
//! destroyed; and their URL, `/serve/{id}/...`, balanced over the healthy replicas
//! ([`crate::serving`]). An endpoint is its owner's: others neither see nor call its
//! management; superadmins see and manage every endpoint.

use std::sync::Arc;

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use bytes::Bytes;
use domain::authorization::Action;
use domain::payloads::{
    Comparator, EndpointAutoscalingSet, EndpointCreated, EndpointDestroyed, EndpointScaled,
    EndpointTokenIssued, EndpointUpdated, Owner, ScalingMetric, ScalingRule,
};
use domain::serving::{self as rules, Endpoint, ModelDefinition};
use events::catalogue::Event;
use events::ledger::KeyOwner;
use events::store::ExpectedVersion;
use launcher::launch::{LaunchError, ResourceRequest};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::files::{folder, parsed, Use};
use super::parse_body;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::model::{
    ServiceAutoscaling, ServiceList, ServiceOut, ServiceRoute, ServiceScaling, ServiceToken,
};
use crate::serving::{self, Recorded};
use crate::state::AppState;
use crate::{db, files};

/// The largest model definition file read.
const MOST_DEFINITION_BYTES: u64 = 64 * 1024;

/// The longest a token may last: a year.
const LONGEST_TOKEN_SECS: u64 = 366 * 24 * 3600;

/// `POST /v1/services`' body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceIn {
    /// 1 to 64 lowercase letters, digits and `-`, starting with a letter or a digit; unique
    /// among my live endpoints.
    #[schema(pattern = r"^[a-z0-9][a-z0-9-]{0,63}$")]
    pub name: String,
    /// A folder of mine (or shared with me) holding the model and its definition; mounted in
    /// every replica at `/home/work/<folder>`.
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    pub model_folder: String,
    /// The definition's path in the folder (Backend.AI's format); `model-definition.yaml`
    /// when absent.
    #[schema(min_length = 1, max_length = 4096, pattern = r"^[^\u0000]+$")]
    pub model_definition_path: Option<String>,
    /// The replicas' image; the resource group's default when absent.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 512,
        pattern = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"
    )]
    pub image: Option<String>,
    /// `default` when absent.
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    pub resource_group: Option<String>,
    /// Each replica's resources, as a session's.
    #[serde(default)]
    pub resources: ResourceRequest,
    /// Replicas wanted (1 when absent).
    #[schema(minimum = 0, maximum = 16)]
    pub replicas: Option<u32>,
    /// Anyone may call it; otherwise a token of mine is needed.
    #[serde(default)]
    pub open_to_public: bool,
}

/// `PUT /v1/services/{id}/autoscaling`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AutoscalingIn {
    /// 0 scales to zero when the rules say so; the first call then waits for a replica.
    #[schema(minimum = 0, maximum = 16)]
    pub min_replicas: u32,
    #[schema(minimum = 0, maximum = 16)]
    pub max_replicas: u32,
    /// Tried in order; the first that holds, out of its cooldown, acts. None: no autoscaling.
    #[schema(max_items = 16)]
    pub rules: Vec<ScalingRuleIn>,
}

/// One autoscaling rule as a request states it (`domain::payloads::ScalingRule`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScalingRuleIn {
    /// Per healthy replica, over every gateway's last seconds.
    pub metric: ScalingMetric,
    pub comparator: Comparator,
    #[schema(minimum = 0)]
    pub threshold: f64,
    /// Replicas added (negative: removed) when it holds; 0 does nothing.
    #[schema(minimum = -16, maximum = 16)]
    pub step: i32,
    /// Seconds since the last change of the wanted replicas before it acts.
    #[schema(maximum = 86400)]
    pub cooldown_secs: u64,
}

impl From<ScalingRuleIn> for ScalingRule {
    fn from(r: ScalingRuleIn) -> ScalingRule {
        ScalingRule {
            metric: r.metric,
            comparator: r.comparator,
            threshold: r.threshold,
            step: r.step,
            cooldown_secs: r.cooldown_secs,
        }
    }
}

impl AutoscalingIn {
    /// The rules' own checks, each naming its field.
    fn check(&self) -> Result<(), ApiError> {
        if self.max_replicas > rules::MOST_AUTOSCALED {
            return Err(ApiError::invalid(
                "max_replicas",
                format!("at most {}", rules::MOST_AUTOSCALED),
            ));
        }
        if self.min_replicas > self.max_replicas {
            return Err(ApiError::invalid(
                "min_replicas",
                "must not be above max_replicas",
            ));
        }
        if self.rules.len() > 16 {
            return Err(ApiError::invalid("rules", "at most 16 rules"));
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if !rule.threshold.is_finite() || rule.threshold < 0.0 {
                return Err(ApiError::invalid(
                    format!("rules[{i}].threshold"),
                    "must be a number, 0 or more",
                ));
            }
            if rule.step.unsigned_abs() > rules::MOST_AUTOSCALED {
                return Err(ApiError::invalid(
                    format!("rules[{i}].step"),
                    format!("from -{0} to {0}", rules::MOST_AUTOSCALED),
                ));
            }
            if rule.cooldown_secs > 86_400 {
                return Err(ApiError::invalid(
                    format!("rules[{i}].cooldown_secs"),
                    "at most a day (86400)",
                ));
            }
        }
        Ok(())
    }
}

/// `PATCH /v1/services/{id}`'s body: what the replicas run from now on.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceUpdate {
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 512,
        pattern = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"
    )]
    pub image: Option<String>,
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    pub model_folder: Option<String>,
    #[schema(min_length = 1, max_length = 4096, pattern = r"^[^\u0000]+$")]
    pub model_definition_path: Option<String>,
    /// Each replica's resources; as before when absent.
    pub resources: Option<ResourceRequest>,
}

/// `POST /v1/services/{id}/scale`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScaleIn {
    #[schema(minimum = 0, maximum = 16)]
    pub replicas: u32,
}

/// `POST /v1/services/{id}/tokens`' body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenIn {
    /// Seconds it lasts: 1 to a year (366 days).
    #[schema(minimum = 1, maximum = 31622400)]
    pub expires_in: u64,
}

/// An endpoint named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ServiceId {
    /// The endpoint's id.
    pub id: String,
}

/// The URL of endpoint `id`, on the gateway the caller reached.
fn url_of(id: Uuid) -> String {
    format!("/serve/{id}/")
}

fn out(state: &AppState, endpoint: &Endpoint) -> ServiceOut {
    let created = &endpoint.created;
    ServiceOut {
        id: endpoint.id(),
        name: created.name.clone(),
        owner: created.owner.email.clone(),
        created_at: endpoint.created_at,
        url: url_of(endpoint.id()),
        host: state
            .serve_domain
            .as_deref()
            .map(|domain| serving::host_of(endpoint.id(), domain)),
        status: endpoint.status().to_owned(),
        degraded_reason: endpoint.degraded(),
        image: created.image.clone(),
        resource_group: created.resource_group.clone(),
        model_folder: created.model_folder.clone(),
        model_name: created.model.model_name.clone(),
        port: created.model.port,
        health_check_path: created.model.health_check.path.clone(),
        resources: created.resources,
        replicas: endpoint.replicas,
        healthy_replicas: endpoint.healthy().count() as u32,
        open_to_public: created.open_to_public,
        revision: endpoint.revision,
        autoscaling: endpoint.autoscaling.as_ref().map(|a| ServiceAutoscaling {
            min_replicas: a.min_replicas,
            max_replicas: a.max_replicas,
            rules: a.rules.clone(),
        }),
        scaling_history: endpoint
            .scalings
            .iter()
            .map(|s| ServiceScaling {
                at: s.at,
                replicas: s.scaled.replicas,
                previous: s.scaled.previous,
                reason: s.scaled.reason.clone(),
                figures: s.scaled.figures.clone(),
            })
            .collect(),
        routes: endpoint
            .routes
            .values()
            .map(|r| ServiceRoute {
                session_id: r.session_id,
                health: serde_json::to_value(r.health)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                revision: r.revision,
                added_at: r.added_at,
                since: r.since,
                reason: r.reason.clone(),
            })
            .collect(),
    }
}

/// Endpoint `id` as `caller` may see it (404 otherwise, as for one that does not exist).
pub(crate) async fn seen(
    state: &AppState,
    caller: &KeyOwner,
    id: &str,
) -> Result<Endpoint, ApiError> {
    let missing = || ApiError::not_found(format!("no endpoint {id}")).field("id");
    let parsed = Uuid::parse_str(id).map_err(|_| missing())?;
    let endpoint = serving::one(&state.pool, parsed)
        .await?
        .filter(|e| !e.destroyed)
        .ok_or_else(missing)?;
    match crate::authorize::may(state, caller, Action::See, endpoint.created.owner.user_id).await? {
        Ok(()) => Ok(endpoint),
        Err(_) => Err(missing()),
    }
}

/// Endpoint `id` as `caller` may change it.
async fn owned(state: &AppState, caller: &KeyOwner, id: &str) -> Result<Endpoint, ApiError> {
    let endpoint = seen(state, caller, id).await?;
    match crate::authorize::may(state, caller, Action::Act, endpoint.created.owner.user_id).await? {
        Ok(()) => Ok(endpoint),
        Err(why) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            why.to_string(),
        )),
    }
}

/// The model definition file `path` of folder `name` as `caller` reaches it, read and checked.
async fn definition(
    state: &AppState,
    caller: &KeyOwner,
    name: &str,
    path: &str,
) -> Result<domain::payloads::ServedModel, ApiError> {
    let dir = folder(state, caller, name, Use::Read)
        .await
        .map_err(|e| e.field("model_folder"))?;
    let file = files::readable(
        dir,
        parsed(path).map_err(|e| e.field("model_definition_path"))?,
    )
    .await
    .map_err(|e| ApiError::from(e).field("model_definition_path"))?;
    let size = tokio::fs::metadata(&file)
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    if size > MOST_DEFINITION_BYTES {
        return Err(ApiError::invalid(
            "model_definition_path",
            format!("`{path}` is larger than {MOST_DEFINITION_BYTES} bytes"),
        ));
    }
    let text = tokio::fs::read_to_string(&file)
        .await
        .map_err(|e| ApiError::invalid("model_definition_path", format!("`{path}`: {e}")))?;
    let parsed: ModelDefinition = serde_norway::from_str(&text).map_err(|e| {
        ApiError::invalid(
            "model_definition_path",
            format!("`{path}` is not a model definition: {e}"),
        )
    })?;
    parsed.served().map_err(|e| {
        ApiError::invalid(
            "model_definition_path",
            format!("`{path}`: {}: {}", e.field, e.message),
        )
    })
}

/// A launch error about a replica's request, named by the endpoint request's fields.
fn as_service_error(e: LaunchError) -> ApiError {
    let renamed = |field: &str| match field {
        "mounts" => "model_folder".to_owned(),
        "preopen_ports" | "startup_command" => "model_definition_path".to_owned(),
        other => other.to_owned(),
    };
    let mut e = ApiError::from(e);
    e.field = e.field.as_deref().map(renamed);
    e
}

/// Make a model-serving endpoint from a model folder: its definition file is read and
/// checked now, each replica's request checked as a session's create is; its replicas then
/// start as inference sessions of mine and receive traffic once their health check passes.
#[utoipa::path(post, path = "/v1/services", tag = "services",
    request_body = ServiceIn,
    responses((status = 201, description = "made; its replicas start", body = ServiceOut),
              (status = 404, description = "the folder, the definition file, the image or the group is not found", body = crate::error::ErrorBody),
              (status = 409, description = "an endpoint of mine has that `name`", body = crate::error::ErrorBody)))]
pub async fn create_service(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<ServiceOut>), ApiError> {
    let endpoint = make(&state, &caller, parse_body(body)?).await?;
    Ok((StatusCode::CREATED, Json(out(&state, &endpoint))))
}

/// Makes the endpoint `asked` describes, owned by `caller`: what `POST /v1/services` does,
/// and Backend.AI's `POST /services` after it translated its body.
pub(crate) async fn make(
    state: &AppState,
    caller: &KeyOwner,
    asked: ServiceIn,
) -> Result<Endpoint, ApiError> {
    if !rules::is_valid_name(&asked.name) {
        return Err(ApiError::invalid(
            "name",
            "1 to 64 lowercase letters, digits and `-`, starting with a letter or a digit",
        ));
    }
    let replicas = asked.replicas.unwrap_or(1);
    if replicas > rules::MOST_REPLICAS {
        return Err(ApiError::invalid(
            "replicas",
            format!("at most {}", rules::MOST_REPLICAS),
        ));
    }
    let path = asked
        .model_definition_path
        .as_deref()
        .unwrap_or("model-definition.yaml");
    let model = definition(state, caller, &asked.model_folder, path).await?;
    // A replica's request, checked as any create is (resources, image, group, folder).
    let probe = serving::replica_session(
        asked.image.clone().unwrap_or_default(),
        asked.resource_group.clone(),
        asked.resources.clone(),
        &asked.model_folder,
        &model,
    );
    let resolved = launcher::launch::resolve(&state.pool, caller, &probe)
        .await
        .map_err(as_service_error)?;
    let replica = resolved
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("a replica's request resolved to no session"))?;
    let taken = serving::all(&state.pool).await?.into_iter().any(|e| {
        !e.destroyed && e.created.owner.user_id == caller.user_id && e.created.name == asked.name
    });
    if taken {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "name_taken",
            format!("you already have an endpoint named `{}`", asked.name),
        )
        .field("name"));
    }
    let endpoint_id = Uuid::now_v7();
    let created = EndpointCreated {
        endpoint_id,
        name: asked.name,
        owner: Owner {
            user_id: caller.user_id,
            email: caller.email.clone(),
            project: replica.owner.project.clone(),
        },
        image: replica.image,
        resource_group: replica.resource_group,
        model_folder: asked.model_folder,
        resources: replica.resources,
        replicas,
        open_to_public: asked.open_to_public,
        model,
    };
    events::ledger::record_now(
        &state.pool,
        &rules::stream_of(endpoint_id),
        ExpectedVersion::NoStream,
        &[Event::EndpointCreated(created)],
        &events::trace::metadata(&caller.user_id.to_string(), None),
    )
    .await?;
    serving::one(&state.pool, endpoint_id)
        .await?
        .ok_or_else(|| ApiError::internal("an endpoint just made is not in the log"))
}

/// My endpoints (a superadmin's: everyone's), by name.
#[utoipa::path(get, path = "/v1/services", tag = "services",
    responses((status = 200, description = "the endpoints", body = ServiceList)))]
pub async fn list_services(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<ServiceList>, ApiError> {
    let services = visible(&state, &caller)
        .await?
        .iter()
        .map(|e| out(&state, e))
        .collect();
    Ok(Json(ServiceList { services }))
}

/// The live endpoints `caller` may see, by name.
pub(crate) async fn visible(
    state: &AppState,
    caller: &KeyOwner,
) -> Result<Vec<Endpoint>, ApiError> {
    let mut seen = Vec::new();
    for endpoint in serving::all(&state.pool).await? {
        if endpoint.destroyed {
            continue;
        }
        let owner = endpoint.created.owner.user_id;
        if crate::authorize::may(state, caller, Action::See, owner)
            .await?
            .is_ok()
        {
            seen.push(endpoint);
        }
    }
    Ok(seen)
}

/// An endpoint of mine with its replicas' health.
#[utoipa::path(get, path = "/v1/services/{id}", tag = "services", params(ServiceId),
    responses((status = 200, description = "the endpoint", body = ServiceOut),
              (status = 404, description = "no endpoint of mine has that id", body = crate::error::ErrorBody)))]
pub async fn get_service(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ServiceId { id }): Path<ServiceId>,
) -> Result<Json<ServiceOut>, ApiError> {
    Ok(Json(out(&state, &seen(&state, &caller, &id).await?)))
}

/// Records `event` on endpoint `id` as `caller` may, folded again and retried when something
/// else landed first (rule 3: a conflict is retried by re-reading).
async fn change(
    state: &AppState,
    caller: &KeyOwner,
    id: &str,
    event: impl Fn(&Endpoint) -> Option<Event>,
) -> Result<Endpoint, ApiError> {
    for _ in 0..10 {
        let endpoint = owned(state, caller, id).await?;
        let Some(event) = event(&endpoint) else {
            return Ok(endpoint);
        };
        let actor = caller.user_id.to_string();
        if let Recorded::Done = serving::record(&state.pool, &endpoint, vec![event], &actor).await?
        {
            return serving::one(&state.pool, endpoint.id())
                .await?
                .ok_or_else(|| ApiError::internal("an endpoint vanished from the log"));
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "busy",
        "the endpoint kept changing; try again",
    ))
}

/// Set how many replicas an endpoint of mine wants; it also lifts a degraded endpoint's hold
/// (its replicas are tried again).
#[utoipa::path(post, path = "/v1/services/{id}/scale", tag = "services", params(ServiceId),
    request_body = ScaleIn,
    responses((status = 200, description = "scaled", body = ServiceOut),
              (status = 404, description = "no endpoint of mine has that id", body = crate::error::ErrorBody)))]
pub async fn scale_service(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ServiceId { id }): Path<ServiceId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ServiceOut>, ApiError> {
    let ScaleIn { replicas } = parse_body(body)?;
    let endpoint = scale_to(&state, &caller, &id, replicas).await?;
    Ok(Json(out(&state, &endpoint)))
}

/// Endpoint `id` of `caller`'s wants `replicas` from now on (`replicas` named when too many).
pub(crate) async fn scale_to(
    state: &AppState,
    caller: &KeyOwner,
    id: &str,
    replicas: u32,
) -> Result<Endpoint, ApiError> {
    if replicas > rules::MOST_REPLICAS {
        return Err(ApiError::invalid(
            "replicas",
            format!("at most {}", rules::MOST_REPLICAS),
        ));
    }
    let reason = format!("user {}", caller.email);
    change(state, caller, id, |e| {
        Some(Event::EndpointScaled(EndpointScaled {
            endpoint_id: e.id(),
            replicas,
            previous: e.replicas,
            reason: reason.clone(),
            figures: Default::default(),
        }))
    })
    .await
}

/// Make a token for an endpoint of mine that is not public: shown in this answer only
/// (berth keeps its digest), valid until it expires.
#[utoipa::path(post, path = "/v1/services/{id}/tokens", tag = "services", params(ServiceId),
    request_body = TokenIn,
    responses((status = 201, description = "made; the token is shown this once", body = ServiceToken),
              (status = 404, description = "no endpoint of mine has that id", body = crate::error::ErrorBody)))]
pub async fn issue_token(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ServiceId { id }): Path<ServiceId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<ServiceToken>), ApiError> {
    let TokenIn { expires_in } = parse_body(body)?;
    let token = new_token(&state, &caller, &id, expires_in).await?;
    Ok((StatusCode::CREATED, Json(token)))
}

/// A token for endpoint `id` of `caller`'s, lasting `expires_in` seconds (`expires_in` named
/// when out of bounds); only its digest is kept.
pub(crate) async fn new_token(
    state: &AppState,
    caller: &KeyOwner,
    id: &str,
    expires_in: u64,
) -> Result<ServiceToken, ApiError> {
    if !(1..=LONGEST_TOKEN_SECS).contains(&expires_in) {
        return Err(ApiError::invalid(
            "expires_in",
            format!("from 1 to {LONGEST_TOKEN_SECS} seconds"),
        ));
    }
    let (token, digest) = serving::new_token();
    let issued = EndpointTokenIssued {
        endpoint_id: Uuid::nil(),
        token_id: Uuid::now_v7(),
        expires_at: serving::expiry(expires_in),
    };
    let metadata = events::trace::metadata(&caller.user_id.to_string(), None);
    // Recorded against the stream as folded; folded again when something landed first.
    for _ in 0..10 {
        let endpoint = owned(state, caller, id).await?;
        let issued = EndpointTokenIssued {
            endpoint_id: endpoint.id(),
            ..issued.clone()
        };
        let stream = rules::stream_of(endpoint.id());
        let kept = db::serving::keep_token(
            &state.pool,
            &stream,
            endpoint.version,
            issued.clone(),
            &digest,
            &metadata,
        )
        .await?;
        if kept {
            return Ok(ServiceToken {
                token_id: issued.token_id,
                token,
                expires_at: issued.expires_at,
            });
        }
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "busy",
        "the endpoint kept changing; try again",
    ))
}

/// Destroy an endpoint of mine: its URL answers no more, its replicas end, its tokens are
/// forgotten.
#[utoipa::path(delete, path = "/v1/services/{id}", tag = "services", params(ServiceId),
    responses((status = 202, description = "destroyed; its replicas end", body = ServiceOut),
              (status = 404, description = "no endpoint of mine has that id", body = crate::error::ErrorBody)))]
pub async fn destroy_service(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ServiceId { id }): Path<ServiceId>,
) -> Result<(StatusCode, Json<ServiceOut>), ApiError> {
    let endpoint = destroy(&state, &caller, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(out(&state, &endpoint))))
}

/// Destroys endpoint `id` of `caller`'s.
pub(crate) async fn destroy(
    state: &AppState,
    caller: &KeyOwner,
    id: &str,
) -> Result<Endpoint, ApiError> {
    change(state, caller, id, |e| {
        Some(Event::EndpointDestroyed(EndpointDestroyed {
            endpoint_id: e.id(),
        }))
    })
    .await
}

/// A call of an endpoint's URL, `/serve/{id}/{rest}`: balanced over its healthy replicas.
pub async fn serve(
    State(state): State<AppState>,
    Path((id, rest)): Path<(String, String)>,
    request: Request,
) -> Response {
    serve_path(state, id, rest, request).await
}

/// A call of an endpoint's URL at its root, `/serve/{id}/`.
pub async fn serve_root(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    serve_path(state, id, String::new(), request).await
}

async fn serve_path(state: AppState, id: String, rest: String, request: Request) -> Response {
    use axum::response::IntoResponse;
    let Ok(id) = Uuid::parse_str(&id) else {
        return ApiError::not_found(format!("no endpoint {id}")).into_response();
    };
    let serving: &Arc<serving::Serving> = &state.serving;
    serving::balancer::forward(serving, &state.pool, id, &rest, request).await
}

/// Set an endpoint's autoscaling: rules over its calls per healthy replica, each with a
/// threshold, a step and a cooldown, within `min_replicas..=max_replicas` (`EndpointAutoscalingSet`;
/// no rules: none). Each step it takes is recorded with the figures that decided it.
#[utoipa::path(put, path = "/v1/services/{id}/autoscaling", tag = "services", params(ServiceId),
    request_body = AutoscalingIn,
    responses((status = 200, description = "set", body = ServiceOut),
              (status = 404, description = "no endpoint of mine has that id", body = crate::error::ErrorBody)))]
pub async fn set_autoscaling(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ServiceId { id }): Path<ServiceId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ServiceOut>, ApiError> {
    let asked: AutoscalingIn = parse_body(body)?;
    // Whose endpoint first: a stranger learns nothing from the body's checks.
    owned(&state, &caller, &id).await?;
    asked.check()?;
    let endpoint = change(&state, &caller, &id, |e| {
        Some(Event::EndpointAutoscalingSet(EndpointAutoscalingSet {
            endpoint_id: e.id(),
            min_replicas: asked.min_replicas,
            max_replicas: asked.max_replicas,
            rules: asked.rules.iter().cloned().map(ScalingRule::from).collect(),
        }))
    })
    .await?;
    Ok(Json(out(&state, &endpoint)))
}

/// Update what an endpoint's replicas run (its image, model folder, definition or resources):
/// a rolling update. Replicas of the new revision start beside the old, which keep serving
/// until as many new ones serve as are wanted, and are then drained (no new calls; ended once
/// those under way had time to finish). The definition is read and the replicas' request
/// checked now, as at the making.
#[utoipa::path(patch, path = "/v1/services/{id}", tag = "services", params(ServiceId),
    request_body = ServiceUpdate,
    responses((status = 200, description = "updating", body = ServiceOut),
              (status = 404, description = "no endpoint of mine has that id", body = crate::error::ErrorBody)))]
pub async fn update_service(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(ServiceId { id }): Path<ServiceId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ServiceOut>, ApiError> {
    let asked: ServiceUpdate = parse_body(body)?;
    let endpoint = owned(&state, &caller, &id).await?;
    let current = &endpoint.created;
    let folder = asked
        .model_folder
        .clone()
        .unwrap_or_else(|| current.model_folder.clone());
    let path = asked
        .model_definition_path
        .as_deref()
        .unwrap_or("model-definition.yaml");
    let model = definition(&state, &caller, &folder, path).await?;
    let resources = asked
        .resources
        .clone()
        .unwrap_or_else(|| serving::asked_resources(&current.resources));
    let probe = serving::replica_session(
        asked.image.clone().unwrap_or_else(|| current.image.clone()),
        Some(current.resource_group.clone()),
        resources,
        &folder,
        &model,
    );
    let replica = launcher::launch::resolve(&state.pool, &caller, &probe)
        .await
        .map_err(as_service_error)?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("a replica's request resolved to no session"))?;
    let reason = format!("user {}", caller.email);
    let endpoint = change(&state, &caller, &id, |e| {
        Some(Event::EndpointUpdated(EndpointUpdated {
            endpoint_id: e.id(),
            revision: e.revision + 1,
            image: replica.image.clone(),
            model_folder: folder.clone(),
            resources: replica.resources,
            model: model.clone(),
            reason: reason.clone(),
        }))
    })
    .await?;
    Ok(Json(out(&state, &endpoint)))
}
