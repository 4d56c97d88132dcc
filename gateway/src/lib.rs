//! The gateway: berth's HTTP API (axum) over the projections, its event stream, the web
//! console, Backend.AI's API, the app proxy and the OpenAPI document.
//!
//! Its modules stand in floors, each importing only from its own floor or below
//! (`tests/tidy.rs` checks it), so the surfaces never reach into one another:
//!
//! 0. [`error`] (every error as a status and JSON naming the field), [`model`] (every body
//!    the API answers with, as types the CLI reads back), [`handles`] (the readiness report,
//!    the metrics exposition, Backend.AI's keys), `headers` (cookies), [`metrics`] (the
//!    metrics' names), [`tls`] (the rustls server configuration).
//! 1. `state` ([`AppState`], what every handler shares), `db` (the reads, one module per
//!    resource, the crate's only SQL besides the projection), [`cache`] (session-detail
//!    documents, evicted by the events), [`projection`] (the sessions view), [`proxy`] (the
//!    app proxy, the only door into a session's apps).
//! 2. [`caller`] (who is calling: an API key or the console's cookie), [`ready`] (`/readyz`
//!    and its checks).
//! 3. [`api`] (the REST handlers, one module per resource), [`sse`] (`GET /v1/events`).
//! 4. [`console`] (the web console under `/console`, pages over the handlers), [`backendai`]
//!    (Backend.AI's API on its own paths, for its official client, translated onto the same
//!    handlers and reads).
//! 5. This file (the router over all of it, `/metrics` and each request measured),
//!    [`run`] ([`run::serve`], the API on a listener kept across restarts, with the work
//!    behind it on tasks it owns), [`openapi`] (`GET /openapi.json`).

pub mod api;
mod authorize;
pub mod backendai;
pub mod cache;
pub mod caller;
pub mod console;
mod db;
pub mod error;
pub mod files;
pub mod handles;
mod headers;
pub mod live;
pub mod metrics;
pub mod model;
pub mod openapi;
pub mod projection;
pub mod proxy;
pub mod ready;
pub mod run;
pub mod serving;
pub mod sse;
mod state;
pub mod throttle;
pub mod tls;
pub mod uploads;

pub use handles::MetricsRender;
pub use metrics::{describe_metrics, METRICS_CONTENT_TYPE};
pub use state::{AppState, DEFAULT_CREATE_QUEUE};

/// The gateway's own schemas (`proxy`: the app proxy's tickets and cookies; `feeds`: how far
/// each durable subscription was acknowledged; `serving`: the digests of model endpoints'
/// tokens; all shared by every gateway on the database), as a component of
/// `events::store::migrate`.
pub const MIGRATIONS: &[events::store::Migration] = &[
    (
        "gateway",
        1,
        include_str!("../migrations/0001_app_passes.sql"),
    ),
    (
        "gateway",
        2,
        include_str!("../migrations/0002_subscription_acks.sql"),
    ),
    ("gateway", 3, include_str!("../migrations/0003_serving.sql")),
];

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 64 * 1024;

/// Every route, registered once here, each with the description its handler's
/// `#[utoipa::path]` gives; [`openapi::document`] is generated from the same list.
fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(
            api::sessions::list_sessions,
            api::sessions::create_session
        ))
        .routes(routes!(
            api::sessions::session_detail,
            api::sessions::rename_session,
            api::sessions::terminate_session
        ))
        .routes(routes!(api::history::session_history))
        .routes(routes!(api::idle::session_idle))
        .routes(routes!(api::idle::exempt_session))
        .routes(routes!(api::advice::advise))
        .routes(routes!(api::usage::session_usage))
        .routes(routes!(api::advice::list_estimates))
        .routes(routes!(
            api::advice::watch_fit,
            api::advice::list_fit_watches
        ))
        .routes(routes!(api::images::commit_session))
        .routes(routes!(api::images::list_images))
        .routes(routes!(api::images::remove_image))
        .routes(routes!(api::notifications::list_notifications))
        .routes(routes!(api::notifications::mark_read))
        .routes(routes!(api::notifications::notification_stream))
        .routes(routes!(api::notifications::set_webhook))
        .routes(routes!(api::notifications::rotate_webhook_secret))
        .routes(routes!(
            api::files::list_files,
            api::files::upload_file,
            api::files::remove_file
        ))
        .routes(routes!(api::files::download_file))
        .routes(routes!(api::files::make_directory))
        .routes(routes!(api::uploads::make_upload))
        .routes(routes!(
            api::uploads::upload_offset,
            api::uploads::send_upload
        ))
        .routes(routes!(api::apps::list_apps))
        .routes(routes!(api::apps::ssh_key))
        .routes(routes!(api::apps::open_app))
        .routes(routes!(api::apps::start_app))
        .routes(routes!(api::apps::close_app))
        .routes(routes!(api::logs::session_logs))
        .routes(routes!(
            api::session_files::download_session_files,
            api::session_files::upload_session_file
        ))
        .routes(routes!(api::session_exec::exec_in_session))
        .routes(routes!(
            api::folders::list_folders,
            api::folders::create_folder
        ))
        .routes(routes!(
            api::folders::rename_folder,
            api::folders::trash_folder
        ))
        .routes(routes!(api::folders::restore_folder))
        .routes(routes!(api::folders::start_upload_session))
        .routes(routes!(api::folders::clone_folder))
        .routes(routes!(api::folders::purge_folder))
        .routes(routes!(api::files::move_file))
        .routes(routes!(
            api::folders::share_with_user,
            api::folders::unshare_with_user
        ))
        .routes(routes!(
            api::folders::share_with_project,
            api::folders::unshare_with_project
        ))
        .routes(routes!(api::resources::resource_summary))
        .routes(routes!(api::resources::presets))
        .routes(routes!(api::catalogue::list_resource_groups))
        .routes(routes!(api::catalogue::list_agents))
        .routes(routes!(api::catalogue::list_environments))
        .routes(routes!(api::launches::list_launches))
        .routes(routes!(api::launches::update_launch))
        .routes(routes!(api::queue::list_queue))
        .routes(routes!(api::resources::whoami))
        .routes(routes!(api::password::set_my_password))
        .routes(routes!(
            api::admin::users::admin_list_users,
            api::admin::users::admin_create_user
        ))
        .routes(routes!(api::admin::users::admin_set_password))
        .routes(routes!(api::admin::users::admin_disable_user))
        .routes(routes!(api::admin::users::admin_enable_user))
        .routes(routes!(api::admin::users::admin_set_role))
        .routes(routes!(api::admin::keys::admin_revoke_key))
        .routes(routes!(
            api::admin::keys::admin_list_keys,
            api::admin::keys::admin_issue_key
        ))
        .routes(routes!(
            api::admin::keypairs::admin_list_keypairs,
            api::admin::keypairs::admin_issue_keypair
        ))
        .routes(routes!(api::admin::keypairs::admin_revoke_keypair))
        .routes(routes!(
            api::admin::projects::admin_list_projects,
            api::admin::projects::admin_create_project
        ))
        .routes(routes!(api::admin::projects::admin_add_member))
        .routes(routes!(
            api::admin::groups::admin_list_groups,
            api::admin::groups::admin_create_group
        ))
        .routes(routes!(api::admin::groups::admin_grant_group))
        .routes(routes!(api::admin::groups::admin_set_group_scheduling))
        .routes(routes!(api::admin::groups::admin_set_group_defaults))
        .routes(routes!(api::admin::groups::admin_group_shares))
        .routes(routes!(api::admin::groups::admin_set_session_priority))
        .routes(routes!(api::admin::policies::admin_list_policies))
        .routes(routes!(api::admin::policies::admin_set_policy))
        .routes(routes!(api::admin::presets::admin_save_preset))
        .routes(routes!(
            api::admin::idle::admin_list_idle_checks,
            api::admin::idle::admin_set_idle_checks
        ))
        .routes(routes!(api::admin::idle::admin_idle_preview))
        .routes(routes!(
            api::admin::agents::admin_list_agents,
            api::admin::agents::admin_admit_agent
        ))
        .routes(routes!(api::admin::agents::admin_revoke_agent))
        .routes(routes!(api::admin::registries::admin_list_registries))
        .routes(routes!(api::admin::images::admin_list_images))
        .routes(routes!(api::admin::images::admin_set_image_listing))
        .routes(routes!(
            api::admin::registries::admin_set_registry,
            api::admin::registries::admin_remove_registry
        ))
        .routes(routes!(sse::events))
        .routes(routes!(
            api::subscriptions::list_subscriptions,
            api::subscriptions::create_subscription
        ))
        .routes(routes!(
            api::subscriptions::get_subscription,
            api::subscriptions::delete_subscription
        ))
        .routes(routes!(api::subscriptions::read_subscription))
        .routes(routes!(api::subscriptions::acknowledge))
        .routes(routes!(
            api::services::list_services,
            api::services::create_service
        ))
        .routes(routes!(
            api::services::get_service,
            api::services::update_service,
            api::services::destroy_service
        ))
        .routes(routes!(api::services::set_autoscaling))
        .routes(routes!(api::services::scale_service))
        .routes(routes!(api::services::issue_token))
        .routes(routes!(events_schema))
        .routes(routes!(openapi_json))
        .routes(routes!(asyncapi_json))
        .routes(routes!(healthz))
        .routes(routes!(ready::readyz))
}

/// This document (OpenAPI 3.1).
#[utoipa::path(get, path = "/openapi.json", tag = "meta",
    responses((status = 200, description = "OpenAPI 3.1", body = Object)))]
async fn openapi_json() -> Json<&'static serde_json::Value> {
    Json(openapi::document())
}

/// The JSON Schemas of the events `/v1/events` serves: each type's payload at its current
/// schema version, and the envelope around it, generated from the catalogue's Rust types.
#[utoipa::path(get, path = "/v1/events/schema", tag = "events",
    responses((status = 200, description = "`events`: each event type's `version` and `payload` schema (JSON Schema 2020-12); `envelope`: a recorded event's", body = Object)))]
async fn events_schema(
    crate::caller::Caller(_): crate::caller::Caller,
) -> Json<&'static serde_json::Value> {
    Json(openapi::events_schema())
}

/// The event stream described for its consumers (AsyncAPI 3.0): the server-sent events of
/// `/v1/events` and the relay's NATS subjects, each event type a message.
#[utoipa::path(get, path = "/asyncapi.json", tag = "meta",
    responses((status = 200, description = "AsyncAPI 3.0", body = Object)))]
async fn asyncapi_json() -> Json<&'static serde_json::Value> {
    Json(openapi::asyncapi())
}

/// Liveness: answers `ok` while the process serves.
#[utoipa::path(get, path = "/healthz", tag = "meta",
    responses((status = 200, description = "ok", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok"
}

/// The whole API, and `/metrics` beside it (for a scraper, not in the document, without a
/// key like `/readyz`).
pub fn router(state: AppState) -> Router {
    let (router, _) = routes().split_for_parts();
    let measured = state.metrics.is_some();
    let router = router
        .merge(console::router())
        .route("/metrics", axum::routing::get(metrics_page))
        // The endpoints' own URLs: the model's API, not berth's (not in the document).
        .route("/serve/{id}", axum::routing::any(api::services::serve_root))
        .route(
            "/serve/{id}/",
            axum::routing::any(api::services::serve_root),
        )
        .route(
            "/serve/{id}/{*rest}",
            axum::routing::any(api::services::serve),
        );
    // Backend.AI's paths do not collide with berth's; off, they are berth's 404s.
    let router = if state.backendai.is_some() {
        router
            .merge(backendai::router())
            .fallback(backendai::fallback)
    } else {
        // Without Backend.AI's handshake at the root, a browser there still finds the console.
        router
            .route(
                "/",
                axum::routing::get(|headers: axum::http::HeaderMap| async move {
                    match console::wants_page(&headers) {
                        true => console::front_door().into_response(),
                        false => error::no_such_route().await.into_response(),
                    }
                }),
            )
            .fallback(error::no_such_route)
    };
    let router = router.layer(axum::middleware::from_fn_with_state(
        state.clone(),
        ready::refuse_writes_while_down,
    ));
    // The subdomain mode's circuits, by `Host`, before any of the gateway's own routes.
    let router = match state.proxy.as_ref().is_some_and(|p| p.routes_hosts()) {
        true => router.layer(axum::middleware::from_fn_with_state(
            state.clone(),
            apps_by_host,
        )),
        false => router,
    };
    // Endpoints at host names of their own under the serving domain, likewise.
    let router = match state.serve_domain.is_some() {
        true => router.layer(axum::middleware::from_fn_with_state(
            state.clone(),
            endpoints_by_host,
        )),
        false => router,
    };
    // Only a process that records metrics pays for measuring each request.
    let router = if measured {
        router.layer(axum::middleware::from_fn(measure))
    } else {
        router
    };
    // With TLS, browsers are told to come back over it only (the host's every port).
    let router = match state.tls {
        true => router.layer(axum::middleware::map_response(strict_transport)),
        false => router,
    };
    router
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                // A 5xx is logged where it is made (a failure of berth by
                // `ApiError::internal`, an outage once by its watch), not per response.
                .on_failure(
                    tower_http::trace::DefaultOnFailure::new().level(tracing::Level::DEBUG),
                ),
        )
        .with_state(state)
}

/// What HSTS says: HTTPS only for this host, for a year.
pub const STRICT_TRANSPORT: &str = "max-age=31536000";

async fn strict_transport(mut response: Response) -> Response {
    response.headers_mut().insert(
        header::STRICT_TRANSPORT_SECURITY,
        header::HeaderValue::from_static(STRICT_TRANSPORT),
    );
    response
}

/// A request whose `Host` is under the apps domain goes to the app proxy's circuit (the
/// subdomain mode); any other to the gateway's routes.
async fn apps_by_host(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(proxy) = &state.proxy else {
        return next.run(request).await;
    };
    // Without the client's address (a router served without it), no allowed range admits it.
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<throttle::Peer>>()
        .map_or(std::net::SocketAddr::from(([0, 0, 0, 0], 0)), |c| c.0 .0);
    match proxy.serve_host(peer, request).await {
        Ok(answered) => answered,
        Err(request) => next.run(request).await,
    }
}

/// A request whose `Host` is under the serving domain goes to the endpoint it names,
/// balanced as its path `/serve/<id>/` is; any other to the gateway's routes.
async fn endpoints_by_host(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(domain) = state.serve_domain.as_deref() else {
        return next.run(request).await;
    };
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().host());
    match host.and_then(|h| serving::endpoint_of_host(h, domain)) {
        None => next.run(request).await,
        Some(None) => {
            error::ApiError::not_found("no endpoint answers at this host name").into_response()
        }
        Some(Some(id)) => {
            let rest = request.uri().path().trim_start_matches('/').to_owned();
            serving::balancer::forward(&state.serving, &state.pool, id, &rest, request).await
        }
    }
}

/// `GET /metrics`: the process's metrics; 404 when metrics are off.
pub async fn metrics_page(State(state): State<AppState>) -> Response {
    match &state.metrics {
        Some(render) => (
            [(header::CONTENT_TYPE, metrics::METRICS_CONTENT_TYPE)],
            render(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "metrics are off (BERTH_METRICS=off)").into_response(),
    }
}

/// Counts each request by method, route and status, and times it. A request no route
/// matched counts under `route="unmatched"`.
pub async fn measure(request: Request, next: Next) -> Response {
    let began = tokio::time::Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    ::metrics::histogram!(metrics::HTTP_DURATION, "method" => method.clone(), "route" => route.clone())
        .record(began.elapsed().as_secs_f64());
    ::metrics::counter!(metrics::HTTP_REQUESTS, "method" => method, "route" => route, "status" => status)
        .increment(1);
    response
}

/// A span per request, named by its route, continuing the caller's trace when the request
/// carries a W3C `traceparent` header: what the request records joins the caller's journey.
fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or(request.uri().path(), |p| p.as_str());
    let span = tracing::info_span!("http", method = %request.method(), route = %route);
    let traceparent = request
        .headers()
        .get(events::trace::headers::TRACEPARENT)
        .and_then(|v| v.to_str().ok());
    events::trace::follow(&span, traceparent);
    span
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    /// Every `$ref` in `value`.
    fn refs<'a>(value: &'a Value, found: &mut BTreeSet<&'a str>) {
        match value {
            Value::Object(fields) => {
                if let Some(Value::String(target)) = fields.get("$ref") {
                    found.insert(target);
                }
                fields.values().for_each(|v| refs(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
            _ => {}
        }
    }

    /// The router and the document come from one list; this holds the list to the API berth
    /// promises (every route, both ways), and the document to itself: each `$ref` names a
    /// schema it defines, and each authenticated operation states the key and its errors.
    #[test]
    fn the_document_describes_exactly_the_routes_served_and_refers_only_to_what_it_defines() {
        let doc = super::openapi::document();
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, methods)| {
                methods
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(move |m| (m.clone(), path.clone()))
            })
            .collect();
        let promised: BTreeSet<(String, String)> = [
            ("get", "/v1/sessions"),
            ("post", "/v1/sessions"),
            ("get", "/readyz"),
            ("get", "/v1/sessions/{id}"),
            ("patch", "/v1/sessions/{id}"),
            ("delete", "/v1/sessions/{id}"),
            ("get", "/v1/sessions/{id}/history"),
            ("get", "/v1/sessions/{id}/idle"),
            ("post", "/v1/sessions/{id}/idle-exemption"),
            ("post", "/v1/sessions/{id}/commit"),
            ("get", "/v1/sessions/{id}/apps"),
            ("post", "/v1/sessions/{id}/apps/{app}/open"),
            ("post", "/v1/sessions/{id}/apps/{app}/start"),
            ("post", "/v1/sessions/{id}/apps/{app}/close"),
            ("get", "/v1/images"),
            ("delete", "/v1/images/{name}"),
            ("get", "/v1/notifications"),
            ("post", "/v1/notifications/read"),
            ("get", "/v1/notifications/stream"),
            ("put", "/v1/notifications/webhook"),
            ("post", "/v1/notifications/webhook/secret"),
            ("get", "/v1/sessions/{id}/logs"),
            ("get", "/v1/folders"),
            ("post", "/v1/folders"),
            ("get", "/v1/resources"),
            ("get", "/v1/presets"),
            ("get", "/v1/resource-groups"),
            ("get", "/v1/agents"),
            ("get", "/v1/environments"),
            ("get", "/v1/launches"),
            ("patch", "/v1/launches/{id}"),
            ("get", "/v1/queue"),
            ("get", "/v1/whoami"),
            ("put", "/v1/whoami/password"),
            ("get", "/v1/events"),
            ("get", "/v1/admin/users"),
            ("post", "/v1/admin/users"),
            ("put", "/v1/admin/passwords"),
            ("post", "/v1/admin/users/{email}/disable"),
            ("post", "/v1/admin/users/{email}/enable"),
            ("put", "/v1/admin/users/{email}/role"),
            ("post", "/v1/admin/api-keys/{prefix}/revoke"),
            ("get", "/v1/admin/api-keys"),
            ("post", "/v1/admin/api-keys"),
            ("get", "/v1/admin/backendai-keypairs"),
            ("post", "/v1/admin/backendai-keypairs"),
            ("post", "/v1/admin/backendai-keypairs/{access_key}/revoke"),
            ("get", "/v1/admin/projects"),
            ("post", "/v1/admin/projects"),
            ("post", "/v1/admin/projects/{name}/members"),
            ("get", "/v1/admin/resource-groups"),
            ("post", "/v1/admin/resource-groups"),
            ("post", "/v1/admin/resource-groups/{name}/grants"),
            ("put", "/v1/admin/resource-groups/{name}/scheduling"),
            ("put", "/v1/admin/resource-groups/{name}/defaults"),
            ("get", "/v1/admin/resource-groups/{name}/shares"),
            ("put", "/v1/admin/sessions/{id}/priority"),
            ("get", "/v1/admin/policies"),
            ("put", "/v1/admin/policies/{name}"),
            ("put", "/v1/admin/presets/{name}"),
            ("get", "/v1/admin/idle-checks"),
            ("put", "/v1/admin/idle-checks"),
            ("get", "/v1/admin/idle-preview"),
            ("get", "/v1/admin/agents"),
            ("post", "/v1/admin/agents"),
            ("post", "/v1/admin/agents/{id}/revoke"),
            ("get", "/v1/sessions/{id}/ssh-key"),
            ("get", "/v1/folders/{name}/files"),
            ("put", "/v1/folders/{name}/files"),
            ("delete", "/v1/folders/{name}/files"),
            ("get", "/v1/folders/{name}/download"),
            ("post", "/v1/folders/{name}/directories"),
            ("post", "/v1/folders/{name}/moves"),
            ("get", "/v1/sessions/{id}/files"),
            ("put", "/v1/sessions/{id}/files"),
            ("post", "/v1/sessions/{id}/exec"),
            ("patch", "/v1/folders/{name}"),
            ("delete", "/v1/folders/{name}"),
            ("post", "/v1/folders/{name}/restore"),
            ("post", "/v1/upload-sessions"),
            ("post", "/v1/folders/{name}/clone"),
            ("post", "/v1/folders/{name}/purge"),
            ("post", "/v1/folders/{name}/uploads"),
            ("head", "/v1/uploads/{token}"),
            ("patch", "/v1/uploads/{token}"),
            ("put", "/v1/folders/{name}/shares/users/{email}"),
            ("delete", "/v1/folders/{name}/shares/users/{email}"),
            ("put", "/v1/folders/{name}/shares/projects/{project}"),
            ("delete", "/v1/folders/{name}/shares/projects/{project}"),
            ("get", "/v1/admin/registries"),
            ("put", "/v1/admin/registries/{registry}"),
            ("delete", "/v1/admin/registries/{registry}"),
            ("get", "/v1/admin/images"),
            ("post", "/v1/advice"),
            ("get", "/v1/sessions/{id}/usage"),
            ("get", "/v1/estimates"),
            ("post", "/v1/fit-watches"),
            ("get", "/v1/fit-watches"),
            ("put", "/v1/admin/images/listing"),
            ("get", "/openapi.json"),
            ("get", "/asyncapi.json"),
            ("get", "/v1/events/schema"),
            ("get", "/v1/subscriptions"),
            ("post", "/v1/subscriptions"),
            ("get", "/v1/subscriptions/{name}"),
            ("delete", "/v1/subscriptions/{name}"),
            ("get", "/v1/subscriptions/{name}/events"),
            ("post", "/v1/subscriptions/{name}/ack"),
            ("get", "/v1/services"),
            ("post", "/v1/services"),
            ("get", "/v1/services/{id}"),
            ("delete", "/v1/services/{id}"),
            ("patch", "/v1/services/{id}"),
            ("put", "/v1/services/{id}/autoscaling"),
            ("post", "/v1/services/{id}/scale"),
            ("post", "/v1/services/{id}/tokens"),
            ("get", "/healthz"),
        ]
        .into_iter()
        .map(|(m, p)| (m.to_owned(), p.to_owned()))
        .collect();
        assert_eq!(documented, promised);

        let mut found = BTreeSet::new();
        refs(doc, &mut found);
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for target in &found {
            let name = target.strip_prefix("#/components/schemas/").unwrap();
            assert!(schemas.contains_key(name), "{target} is not defined");
        }
        for (method, path) in documented.iter().filter(|(_, p)| p.starts_with("/v1/")) {
            let operation = &doc["paths"][path][method];
            assert_eq!(operation["security"][0]["apiKey"], serde_json::json!([]));
            for status in ["401", "422", "503"] {
                assert!(
                    operation["responses"].get(status).is_some(),
                    "{method} {path} lacks {status}"
                );
            }
        }
    }

    /// What the server enforces is stated: statuses from the domain's one list, the page size
    /// range, the name pattern, the port range, unknown fields refused.
    #[test]
    fn the_document_states_the_constraints_the_server_enforces() {
        let doc = super::openapi::document();
        let text = doc.to_string();
        let schemas = &doc["components"]["schemas"];
        let statuses: Vec<&str> = events::payloads::SessionStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        assert_eq!(
            schemas["SessionStatus"]["enum"],
            serde_json::json!(statuses)
        );
        let list = &doc["paths"]["/v1/sessions"]["get"]["parameters"];
        let limit = list
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap();
        assert_eq!(
            (
                limit["schema"]["minimum"].as_i64(),
                limit["schema"]["maximum"].as_i64()
            ),
            (Some(1), Some(500)),
            "{limit}"
        );
        // A run is code or a command, exactly one of the two.
        let run = &schemas["RunRequest"];
        assert_eq!(
            (
                &run["minProperties"],
                &run["maxProperties"],
                &run["additionalProperties"]
            ),
            (
                &serde_json::json!(1),
                &serde_json::json!(1),
                &Value::Bool(false)
            ),
            "{run}"
        );
        let create = &schemas["CreateSession"];
        assert_eq!(
            create["additionalProperties"],
            Value::Bool(false),
            "{create}"
        );
        // Nothing is required: a request that names no image gets its group's default.
        assert_eq!(create["required"], Value::Null, "{create}");
        assert!(text.contains(launcher::schema::NAME_PATTERN));
        assert!(text.contains(r#""minimum":1024"#) && text.contains(r#""maximum":65535"#));
        assert!(create["allOf"]
            .as_array()
            .is_some_and(|rules| rules.len() == 2));
        let label = &schemas["LaunchChange"]["properties"]["label"];
        assert_eq!(
            (label["pattern"].as_str(), label["maxLength"].as_u64()),
            (
                Some(domain::launches::LABEL_PATTERN),
                Some(domain::launches::MAX_LABEL_CHARS as u64)
            ),
            "{label}"
        );
    }
}
