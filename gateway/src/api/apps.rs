//! A session's apps through berth's proxy: the list (the terminal, the image's apps, the
//! preopen ports, and the circuits open to them), opening one (a circuit and a single-use
//! link for its owner), and closing an app's circuits.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use bytes::Bytes;
use domain::apps::{AddressRange, Admission, CircuitCloseReason};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::{check_may_act, parse_body, parse_id};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::model::{Circuit, ClosedApp, OpenedApp, SessionApps, SessionDetail, StartedApp};
use crate::proxy::{OpenRequest, ProxyError};
use crate::state::AppState;
use events::ledger::KeyOwner;

/// A session and one of its apps.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SessionApp {
    /// The session's id.
    #[param(value_type = Uuid)]
    pub id: String,
    /// The app's name (`GET /v1/sessions/{id}/apps` lists them).
    #[param(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub app: String,
}

/// How to open an app.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenApp {
    /// Which of the app's container ports (its first when absent).
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(default)]
    pub port: Option<u16>,
    /// Let through anyone who reaches the proxy's port, not only the session's owner.
    #[serde(default)]
    pub public: bool,
    /// Only clients in these IPv4 ranges (`10.0.0.0/8`, `192.168.1.7`); all when empty.
    #[serde(default)]
    #[schema(max_items = 64, value_type = Vec<ClientRange>)]
    pub allowed_ips: Vec<String>,
    /// The proxy port wanted; another free one (and `preferred_port_honoured: false`) when
    /// it is taken or outside the pool.
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(default)]
    pub preferred_port: Option<u16>,
}

/// An IPv4 address, or an address and a prefix length: what `allowed_ips` holds.
pub struct ClientRange;

/// Dotted decimal as the address parser reads it (no leading zeros), with an optional
/// `/0` to `/32`.
const CLIENT_RANGE: &str = r"^((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(/([0-9]|[12][0-9]|3[0-2]))?$";

impl utoipa::PartialSchema for ClientRange {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(CLIENT_RANGE))
            .into()
    }
}

impl ToSchema for ClientRange {}

/// The app path parameter's rule, as the document states it.
fn check_app(app: &str) -> Result<(), ApiError> {
    let fits = (1..=64).contains(&app.len())
        && app
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if fits {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "app",
            "an app's name is 1 to 64 letters, digits, - or _",
        ))
    }
}

/// How to start an app.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartApp {
    /// Which of the app's container ports (its first when absent).
    #[schema(minimum = 1, maximum = 65535)]
    #[serde(default)]
    pub port: Option<u16>,
}

fn proxy_off() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "no_proxy",
        "this gateway runs without the app proxy (set BERTH_PROXY_PORTS)",
    )
}

impl From<ProxyError> for ApiError {
    fn from(e: ProxyError) -> ApiError {
        let message = e.to_string();
        match e {
            ProxyError::NotRunning(_) | ProxyError::NotPublished(_) | ProxyError::Undialable(_) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", message).field("app")
            }
            ProxyError::UnknownApp(_) => ApiError::not_found(message).field("app"),
            ProxyError::UnknownPort { .. } => ApiError::invalid("port", message),
            ProxyError::PoolExhausted(_) => {
                ApiError::new(StatusCode::CONFLICT, "pool_exhausted", message)
                    .field("preferred_port")
            }
            ProxyError::Ledger(e) => e.into(),
            ProxyError::Database(e) => ApiError::internal(e),
        }
    }
}

/// The session's detail from the view, waited for when the session was only just created
/// (read-your-writes, as the detail itself does).
async fn session(state: &AppState, caller: &KeyOwner, id: Uuid) -> Result<SessionDetail, ApiError> {
    let detail = match crate::db::sessions::detail(&state.pool, id).await? {
        Some(detail) => detail,
        None => {
            super::await_view(state, caller, id).await?;
            crate::db::sessions::detail(&state.pool, id)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("no session {id}")))?
        }
    };
    serde_json::from_str(&detail.body).map_err(ApiError::internal)
}

/// The session's apps (the terminal `ttyd`, its image's apps, its preopen ports) and the
/// circuits open to them.
#[utoipa::path(get, path = "/v1/sessions/{id}/apps", tag = "apps", params(super::SessionId),
    responses((status = 200, description = "the apps and open circuits", body = SessionApps)))]
pub async fn list_apps(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(super::SessionId { id }): Path<super::SessionId>,
) -> Result<Json<SessionApps>, ApiError> {
    let id = parse_id(&id)?;
    check_may_act(&state, &caller, id).await?;
    let detail = session(&state, &caller, id).await?;
    let circuits = crate::db::circuits::circuits(&state.pool, Some(id), None)
        .await?
        .into_iter()
        .map(|row| {
            let traffic = state.proxy.as_ref().and_then(|p| p.traffic(row.circuit_id));
            Circuit {
                circuit_id: row.circuit_id,
                app: row.app,
                container_port: row.container_port,
                port: row.port,
                public: row.admission.public,
                allowed_ips: row
                    .admission
                    .allowed
                    .into_iter()
                    .map(String::from)
                    .collect(),
                bytes_in: traffic.map(|t| t.bytes_in),
                bytes_out: traffic.map(|t| t.bytes_out),
            }
        })
        .collect();
    Ok(Json(SessionApps {
        session_id: id,
        apps: detail.request.apps,
        circuits,
    }))
}

/// The private half of the SSH key berth installed in the session (`/home/work/id_container`
/// inside; the public half in its `authorized_keys`), for its owner (or an admin who may act on
/// it) to log in with over the `sshd` app's circuit: OpenSSH's format, as a file to save. 409
/// `no_ssh_key` until the session runs with one, and again once it ended.
#[utoipa::path(get, path = "/v1/sessions/{id}/ssh-key", tag = "apps", params(super::SessionId),
    responses((status = 200, description = "the private key (OpenSSH)", body = String,
        content_type = "text/plain")))]
pub async fn ssh_key(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(super::SessionId { id }): Path<super::SessionId>,
) -> Result<([(header::HeaderName, &'static str); 3], String), ApiError> {
    let id = parse_id(&id)?;
    check_may_act(&state, &caller, id).await?;
    let key = crate::db::circuits::ssh_key(&state.pool, id)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::CONFLICT,
                "no_ssh_key",
                format!(
                    "session {id} has no SSH key now: an interactive session has one from its \
                     start until it ends"
                ),
            )
        })?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"id_container\"",
            ),
            (header::CACHE_CONTROL, "no-store"),
        ],
        key,
    ))
}

/// Open one of the session's apps through the proxy (its owner or an admin). The answer's
/// `url` is served by berth's proxy on a port of its pool: the preferred port when it is
/// free, otherwise another (and `preferred_port_honoured` says so); where the operator set
/// an apps domain, a web app's is a host of its own, `<circuit>.<apps domain>`, on the
/// gateway's port, and `https://` when the gateway serves TLS. A private circuit lets
/// in only a browser that followed the single-use link; a public one, anyone who reaches
/// the port (within `allowed_ips`, when given).
#[utoipa::path(post, path = "/v1/sessions/{id}/apps/{app}/open", tag = "apps",
    params(SessionApp), request_body = OpenApp,
    responses((status = 200, description = "the app's circuit", body = OpenedApp)))]
pub async fn open_app(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionApp { id, app }): Path<SessionApp>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<OpenedApp>, ApiError> {
    let id = parse_id(&id)?;
    check_app(&app)?;
    // Whose session comes first: someone else's is a 404 whatever the body says.
    check_may_act(&state, &caller, id).await?;
    let open: OpenApp = parse_body(body)?;
    let allowed = open
        .allowed_ips
        .iter()
        .enumerate()
        .map(|(i, text)| {
            AddressRange::try_from(text.clone())
                .ok()
                .filter(|r| r.address.is_ipv4())
                .ok_or_else(|| {
                    ApiError::invalid(
                        format!("allowed_ips[{i}]"),
                        format!("`{text}` is not an IPv4 address or address/prefix"),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if open.allowed_ips.len() > 64 {
        return Err(ApiError::invalid("allowed_ips", "at most 64 ranges"));
    }
    let proxy = state.proxy.clone().ok_or_else(proxy_off)?;
    let detail = session(&state, &caller, id).await?;
    let request = OpenRequest {
        app: app.clone(),
        container_port: open.port,
        admission: Admission {
            public: open.public,
            allowed,
        },
        preferred_port: open.preferred_port,
    };
    let opened = proxy.open(&detail, caller.user_id, request).await?;
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let url = proxy.url(&opened, host);
    Ok(Json(OpenedApp {
        circuit_id: opened.circuit_id,
        app,
        port: opened.port,
        preferred_port_honoured: opened.preferred_honoured,
        reused: opened.reused,
        public: opened.public,
        protocol: opened.protocol,
        url,
    }))
}

/// How long the gateway waits for an app to open its port (the longest an image's
/// definition may ask, and the bus's round trips).
const START_PATIENCE: std::time::Duration = std::time::Duration::from_secs(150);

/// Start one of the session's apps in its main kernel (the owner or an admin), from the
/// image's service definition, and answer once its port accepts connections. An app already
/// listening is not started twice; a preopen port is its user's to serve and answers at once.
/// A start that fails is a 409 with the app's reason.
#[utoipa::path(post, path = "/v1/sessions/{id}/apps/{app}/start", tag = "apps",
    params(SessionApp), request_body = StartApp,
    responses((status = 200, description = "the app listens", body = StartedApp)))]
pub async fn start_app(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionApp { id, app }): Path<SessionApp>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<StartedApp>, ApiError> {
    let id = parse_id(&id)?;
    check_app(&app)?;
    check_may_act(&state, &caller, id).await?;
    let StartApp { port } = parse_body(body)?;
    let detail = session(&state, &caller, id).await?;
    let declared = detail
        .request
        .apps
        .iter()
        .find(|a| a.name == app)
        .ok_or_else(|| ApiError::from(ProxyError::UnknownApp(app.clone())))?;
    let port = match (port, declared.ports.first()) {
        (Some(p), _) if declared.ports.contains(&p) => p,
        (Some(p), _) => {
            return Err(ProxyError::UnknownPort {
                app: app.clone(),
                port: p,
            }
            .into())
        }
        (None, Some(first)) => *first,
        (None, None) => return Err(ProxyError::UnknownApp(app.clone()).into()),
    };
    if declared.protocol == domain::apps::AppProtocol::Preopen {
        return Ok(Json(StartedApp {
            app,
            port,
            spawned: false,
        }));
    }
    let nats = state.nats.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no_bus",
            "this gateway is not on the bus, so it cannot hear the app start",
        )
    })?;
    // Listen before asking, so the end cannot pass unheard.
    let subject = state
        .topology
        .stream_subject("session", &events::catalogue::stream_id("session", id));
    let mut ends = nats.subscribe(subject).await.map_err(ApiError::internal)?;
    let start_id = Uuid::now_v7();
    let metadata = events::trace::metadata(&caller.user_id.to_string(), None);
    events::lifecycle::command(&state.pool, id, &metadata, |s| {
        s.request_app_start(start_id, app.clone(), port, caller.user_id)
    })
    .await?;
    let outcome = tokio::time::timeout(START_PATIENCE, async {
        use futures::StreamExt;
        while let Some(message) = ends.next().await {
            let Ok(event) = serde_json::from_slice::<events::RecordedEvent>(&message.payload)
            else {
                continue;
            };
            if let events::catalogue::Event::AppStartEnded(e) = event.event {
                if e.start_id == start_id {
                    return Some(e.outcome);
                }
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    match outcome {
        Some(domain::payloads::AppStartEnd::Started { token_kept }) => Ok(Json(StartedApp {
            app,
            port,
            spawned: token_kept,
        })),
        Some(domain::payloads::AppStartEnd::Failed { reason }) => {
            Err(ApiError::new(StatusCode::CONFLICT, "app_failed", reason).field("app"))
        }
        None => Err(ApiError::new(
            StatusCode::CONFLICT,
            "app_unanswered",
            format!(
                "the app's start was not answered within {} s; its agent may be away",
                START_PATIENCE.as_secs()
            ),
        )
        .field("app")),
    }
}

/// What reaches the agent's door into session `id`'s main kernel: its detail (where its
/// agent publishes the door) and the terminal's token, the terminal started first (a start of
/// one running already answers at once). Only a RUNNING interactive session has one.
pub(crate) async fn kernel_door(
    state: &AppState,
    caller: &KeyOwner,
    id: Uuid,
) -> Result<(SessionDetail, String), ApiError> {
    let detail = session(state, caller, id).await?;
    if detail.status != "RUNNING" {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_running",
            format!(
                "files and commands reach a session while it is RUNNING; this one is {}",
                detail.status
            ),
        ));
    }
    let attended = serde_json::from_value::<domain::payloads::SessionType>(serde_json::json!(
        detail.session_type
    ))
    .is_ok_and(|t| t.is_attended());
    if !attended {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_door",
            format!(
                "a {} session has no door into its kernel: files and commands reach an \
                 interactive session (or an upload session) while it runs",
                detail.session_type
            ),
        ));
    }
    let terminal = domain::apps::TERMINAL.to_owned();
    let _started = start_app(
        State(state.clone()),
        Caller(caller.clone()),
        Path(SessionApp {
            id: id.to_string(),
            app: terminal.clone(),
        }),
        Ok(Bytes::from_static(b"{}")),
    )
    .await?;
    let token = crate::db::circuits::app_token(&state.pool, id, &terminal)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::CONFLICT,
                "no_door",
                "the session's agent gave no token for its terminal",
            )
        })?;
    Ok((detail, token))
}

/// Close every circuit open to one of the session's apps (its owner or an admin): their
/// ports stop serving and their connections are cut.
#[utoipa::path(post, path = "/v1/sessions/{id}/apps/{app}/close", tag = "apps",
    params(SessionApp),
    responses((status = 200, description = "how many circuits closed", body = ClosedApp)))]
pub async fn close_app(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionApp { id, app }): Path<SessionApp>,
) -> Result<Json<ClosedApp>, ApiError> {
    let id = parse_id(&id)?;
    check_app(&app)?;
    check_may_act(&state, &caller, id).await?;
    let proxy = state.proxy.clone().ok_or_else(proxy_off)?;
    let actor = caller.user_id.to_string();
    let closed = proxy
        .close_session(id, Some(&app), &actor, CircuitCloseReason::Requested)
        .await?;
    Ok(Json(ClosedApp { closed }))
}
