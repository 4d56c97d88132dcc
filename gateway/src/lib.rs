//! The gateway: berth's HTTP API (axum) over the projections, the SSE stream of events and
//! the OpenAPI document.
//!
//! - [`projection`]: the `sessions` read model it serves.
//! - [`api`]: REST handlers, one module per resource, and the API-key extractor.
//! - `db`: the reads the handlers make, the crate's only SQL besides the projection.
//! - [`model`]: the bodies the API answers with, as types the CLI reads back.
//! - [`cache`]: session-detail documents kept in memory, evicted by the events.
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
pub mod sse;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::routing::{self, MethodRouter};
use axum::{Json, Router};
use deadpool_postgres::Pool;
use events::ledger::KeyOwner;
use events::relay::Topology;
use tokio::sync::{Notify, RwLock};
use tower_http::trace::TraceLayer;

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
    /// Poked after a create or terminate so the scheduler looks at once.
    pub wake_scheduler: Arc<Notify>,
    keys: Arc<RwLock<HashMap<String, (KeyOwner, Instant)>>>,
    pub(crate) details: Arc<cache::DetailCache>,
}

impl AppState {
    pub fn new(
        pool: Pool,
        nats: Option<async_nats::Client>,
        topology: Topology,
        wake_scheduler: Arc<Notify>,
    ) -> AppState {
        AppState::with_detail_ttl(pool, nats, topology, wake_scheduler, cache::DEFAULT_TTL)
    }

    /// [`AppState::new`] with detail documents served from memory for at most `detail_ttl`
    /// when no event says they changed.
    pub fn with_detail_ttl(
        pool: Pool,
        nats: Option<async_nats::Client>,
        topology: Topology,
        wake_scheduler: Arc<Notify>,
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
            wake_scheduler,
            keys: Arc::default(),
            details,
        }
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

/// The routes of the API as they are registered, each (method, path) listed, so a test can
/// hold the OpenAPI document to exactly what the router serves.
struct Routes {
    router: Router<AppState>,
    listed: Vec<(&'static str, &'static str)>,
}

impl Routes {
    fn new() -> Routes {
        Routes {
            router: Router::new(),
            listed: Vec::new(),
        }
    }

    fn add(
        mut self,
        method: &'static str,
        path: &'static str,
        route: MethodRouter<AppState>,
    ) -> Routes {
        self.router = self.router.route(path, route);
        self.listed.push((method, path));
        self
    }

    fn get<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Routes {
        self.add("get", path, routing::get(handler))
    }

    fn post<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Routes {
        self.add("post", path, routing::post(handler))
    }

    fn patch<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Routes {
        self.add("patch", path, routing::patch(handler))
    }

    fn delete<H: Handler<T, AppState>, T: 'static>(self, path: &'static str, handler: H) -> Routes {
        self.add("delete", path, routing::delete(handler))
    }
}

/// Every route, registered once here.
fn routes() -> Routes {
    Routes::new()
        .get("/v1/sessions", api::list_sessions)
        .post("/v1/sessions", api::create_session)
        .get("/v1/sessions/{id}", api::session_detail)
        .patch("/v1/sessions/{id}", api::rename_session)
        .delete("/v1/sessions/{id}", api::terminate_session)
        .get("/v1/sessions/{id}/history", api::session_history)
        .get("/v1/sessions/{id}/logs", api::session_logs)
        .get("/v1/folders", api::list_folders)
        .post("/v1/folders", api::create_folder)
        .get("/v1/resources", api::resource_summary)
        .get("/v1/presets", api::presets)
        .get("/v1/whoami", api::whoami)
        .get("/v1/events", sse::events)
        .get("/openapi.json", || async { Json(openapi::document()) })
        .get("/healthz", || async { "ok" })
}

/// The whole API.
pub fn router(state: AppState) -> Router {
    routes()
        .router
        .fallback(|| async { ApiError::not_found("no such route; see /openapi.json") })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
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

    /// The document and the router list the same (method, path) pairs, both ways.
    #[test]
    fn the_openapi_document_describes_exactly_the_routes_served() {
        let served: BTreeSet<(String, String)> = super::routes()
            .listed
            .into_iter()
            .map(|(m, p)| (m.to_owned(), p.to_owned()))
            .collect();
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
                    .filter(|m| m.as_str() != "parameters")
                    .map(move |m| (m.clone(), path.clone()))
            })
            .collect();
        let undocumented: Vec<_> = served.difference(&documented).collect();
        let unserved: Vec<_> = documented.difference(&served).collect();
        assert!(
            undocumented.is_empty(),
            "served but not documented: {undocumented:?}"
        );
        assert!(
            unserved.is_empty(),
            "documented but not served: {unserved:?}"
        );
        assert!(served.len() >= 15, "{served:?}");
    }
}
