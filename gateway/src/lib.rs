//! The gateway: berth's HTTP API (axum) over the projections, the SSE stream of events and
//! the OpenAPI document.
//!
//! - [`projection`]: the `sessions` read model it serves.
//! - [`api`]: REST handlers, one module per resource, and the API-key extractor.
//! - `db`: the reads the handlers make, one module per resource, the crate's only SQL besides
//!   the projection.
//! - [`model`]: the bodies the API answers with, as types the CLI reads back.
//! - [`cache`]: session-detail documents kept in memory, evicted by the events.
//! - [`proxy`]: the app proxy, the only door into a session's apps.
//! - [`sse`]: `GET /v1/events`.
//! - [`openapi`]: `GET /openapi.json`.
//! - [`error`]: every error as a status and JSON naming the field.

pub mod api;
pub mod cache;
mod db;
pub mod error;
pub mod model;
pub mod openapi;
pub mod projection;
pub mod proxy;
pub mod ready;
pub mod sse;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use axum::extract::DefaultBodyLimit;
use axum::{Json, Router};
use deadpool_postgres::Pool;
use events::ledger::KeyOwner;
use events::relay::Topology;
use tokio::sync::RwLock;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;

/// Largest request body accepted.
pub const BODY_LIMIT: usize = 64 * 1024;
/// How long a looked-up API key is trusted before it is looked up again.
const KEY_CACHE_TTL: Duration = Duration::from_secs(30);

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub pool: Pool,
    pub nats: Option<async_nats::Client>,
    pub topology: Topology,
    /// Where the control plane's services answer on NATS (the idle-reaper's readings).
    pub agent_bus: bus::Subjects,
    keys: Arc<RwLock<HashMap<String, (KeyOwner, Instant)>>>,
    pub(crate) details: Arc<cache::DetailCache>,
    /// The app proxy, when this gateway serves one.
    pub proxy: Option<Arc<proxy::Proxy>>,
    /// The last check of PostgreSQL, NATS and the log's readers (`/readyz`).
    pub readiness: ready::Readiness,
    /// Creates in flight: one beyond the queue is answered 503 `busy` rather than waiting
    /// for a connection PostgreSQL is slow to give.
    creates: Arc<tokio::sync::Semaphore>,
}

/// Creates in flight at most, by default (`BERTH_CREATE_QUEUE`).
pub const DEFAULT_CREATE_QUEUE: usize = 64;

impl AppState {
    pub fn new(pool: Pool, nats: Option<async_nats::Client>, topology: Topology) -> AppState {
        AppState::with_detail_ttl(pool, nats, topology, cache::DEFAULT_TTL)
    }

    /// [`AppState::new`] with detail documents served from memory for at most `detail_ttl`
    /// when no event says they changed.
    pub fn with_detail_ttl(
        pool: Pool,
        nats: Option<async_nats::Client>,
        topology: Topology,
        detail_ttl: Duration,
    ) -> AppState {
        let details = Arc::new(cache::DetailCache::new(detail_ttl));
        if let Some(client) = &nats {
            let subject = topology.category_subject("session");
            tokio::spawn(details.clone().follow(client.clone(), subject));
        }
        AppState {
            pool,
            nats,
            topology,
            agent_bus: bus::Subjects::default(),
            keys: Arc::default(),
            details,
            proxy: None,
            readiness: ready::Readiness::default(),
            creates: Arc::new(tokio::sync::Semaphore::new(DEFAULT_CREATE_QUEUE)),
        }
    }

    /// Checks PostgreSQL, NATS and the log's readers every second until `stop`, for
    /// `/readyz` and to answer writes 503 at once while PostgreSQL is down.
    pub fn watch_readiness(self, stop: tokio_util::sync::CancellationToken) -> AppState {
        let watch = self
            .readiness
            .clone()
            .watch(self.pool.clone(), self.nats.clone(), stop);
        tokio::spawn(watch);
        self
    }

    /// At most `creates` create requests in flight; more are answered 503 `busy`.
    pub fn with_create_queue(mut self, creates: usize) -> AppState {
        self.creates = Arc::new(tokio::sync::Semaphore::new(creates));
        self
    }

    /// The NATS client while it is connected; otherwise 503 `bus_unavailable`, saying that
    /// `what` cannot be done now.
    pub(crate) fn bus(&self, what: &str) -> Result<&async_nats::Client, ApiError> {
        match &self.nats {
            Some(client)
                if client.connection_state() == async_nats::connection::State::Connected =>
            {
                Ok(client)
            }
            _ => Err(ApiError::bus_unavailable(what)),
        }
    }

    /// A place among the creates in flight, or 503 `busy` when the queue is full.
    pub(crate) fn admit_create(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ApiError> {
        self.creates.clone().try_acquire_owned().map_err(|_| {
            ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "too many sessions are being created at once; try again",
            )
        })
    }

    /// This state with the app proxy serving circuits as `config` says, following session
    /// events (to close their circuits) and closing idle circuits until `stop`.
    pub fn with_proxy(
        mut self,
        config: proxy::ProxyConfig,
        stop: tokio_util::sync::CancellationToken,
    ) -> AppState {
        let proxy = proxy::Proxy::new(config, self.pool.clone());
        tokio::spawn(proxy.clone().close_idle(stop.clone()));
        if let Some(nats) = &self.nats {
            let subject = self.topology.category_subject("session");
            tokio::spawn(
                proxy
                    .clone()
                    .follow_sessions(nats.clone(), subject, stop.clone()),
            );
            let activity = self.agent_bus.idle_activity();
            tokio::spawn(proxy.clone().report_activity(nats.clone(), activity, stop));
        }
        self.proxy = Some(proxy);
        self
    }

    /// This state with the services answering under `subjects` (a test's own root).
    pub fn with_agent_bus(mut self, subjects: bus::Subjects) -> AppState {
        self.agent_bus = subjects;
        self
    }

    async fn authenticate(&self, key: &str) -> Result<KeyOwner, ApiError> {
        let digest = events::ledger::key_digest(key);
        if let Some((owner, at)) = self.keys.read().await.get(&digest) {
            if at.elapsed() < KEY_CACHE_TTL {
                return Ok(owner.clone());
            }
        }
        let owner = api::lookup_key(self, key).await?.ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "unknown API key",
            )
            .field("X-API-Key")
        })?;
        self.keys
            .write()
            .await
            .insert(digest, (owner.clone(), Instant::now()));
        Ok(owner)
    }
}

/// Every route, registered once here, each with the description its handler's
/// `#[utoipa::path]` gives; [`openapi::document`] is generated from the same list.
fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(api::list_sessions, api::create_session))
        .routes(routes!(
            api::session_detail,
            api::rename_session,
            api::terminate_session
        ))
        .routes(routes!(api::session_history))
        .routes(routes!(api::session_idle))
        .routes(routes!(api::exempt_session))
        .routes(routes!(api::commit_session))
        .routes(routes!(api::list_images))
        .routes(routes!(api::remove_image))
        .routes(routes!(api::list_notifications))
        .routes(routes!(api::mark_read))
        .routes(routes!(api::notification_stream))
        .routes(routes!(api::set_webhook))
        .routes(routes!(api::list_apps))
        .routes(routes!(api::open_app))
        .routes(routes!(api::start_app))
        .routes(routes!(api::close_app))
        .routes(routes!(api::session_logs))
        .routes(routes!(api::list_folders, api::create_folder))
        .routes(routes!(api::resource_summary))
        .routes(routes!(api::presets))
        .routes(routes!(api::whoami))
        .routes(routes!(sse::events))
        .routes(routes!(openapi_json))
        .routes(routes!(healthz))
        .routes(routes!(ready::readyz))
}

/// This document (OpenAPI 3.1).
#[utoipa::path(get, path = "/openapi.json", tag = "meta",
    responses((status = 200, description = "OpenAPI 3.1", body = Object)))]
async fn openapi_json() -> Json<&'static serde_json::Value> {
    Json(openapi::document())
}

/// Liveness: answers `ok` while the process serves.
#[utoipa::path(get, path = "/healthz", tag = "meta",
    responses((status = 200, description = "ok", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok"
}

/// The whole API.
pub fn router(state: AppState) -> Router {
    let (router, _) = routes().split_for_parts();
    router
        .fallback(|| async { ApiError::not_found("no such route; see /openapi.json") })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            ready::refuse_writes_while_down,
        ))
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

/// Serves the API on `listener` until `stop`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
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
            ("get", "/v1/sessions/{id}/logs"),
            ("get", "/v1/folders"),
            ("post", "/v1/folders"),
            ("get", "/v1/resources"),
            ("get", "/v1/presets"),
            ("get", "/v1/whoami"),
            ("get", "/v1/events"),
            ("get", "/openapi.json"),
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
        let create = &schemas["CreateSession"];
        assert_eq!(
            create["additionalProperties"],
            Value::Bool(false),
            "{create}"
        );
        assert_eq!(create["required"], serde_json::json!(["image"]));
        assert!(text.contains(launcher::schema::NAME_PATTERN));
        assert!(text.contains(r#""minimum":1024"#) && text.contains(r#""maximum":65535"#));
        assert!(create["allOf"]
            .as_array()
            .is_some_and(|rules| rules.len() == 3));
    }
}
