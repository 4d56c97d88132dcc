//! What every handler shares ([`AppState`]): the pool, the NATS client, where events and
//! the services' answers are found, the API-key cache, the detail cache, the app proxy, the
//! readiness report and the create queue. The bottom of the crate: `api/`, `ready`, `sse`
//! and `openapi` import it; the router in `lib.rs` is built over it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use deadpool_postgres::Pool;
use events::ledger::KeyOwner;
use events::relay::Topology;
use tokio::sync::RwLock;

use crate::error::ApiError;
use crate::{cache, proxy, ready};

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
    /// API keys looked up lately (see [`KeyCache`]).
    pub(crate) keys: KeyCache,
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
            keys: KeyCache::default(),
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
}

/// The owners of API keys looked up lately, by the key's digest, each trusted for
/// [`KEY_CACHE_TTL`] before it is looked up again.
#[derive(Clone, Default)]
pub(crate) struct KeyCache(Arc<RwLock<HashMap<String, (KeyOwner, Instant)>>>);

impl KeyCache {
    /// The owner of the key with `digest`, when it was looked up less than
    /// [`KEY_CACHE_TTL`] ago.
    pub(crate) async fn fresh(&self, digest: &str) -> Option<KeyOwner> {
        match self.0.read().await.get(digest) {
            Some((owner, at)) if at.elapsed() < KEY_CACHE_TTL => Some(owner.clone()),
            _ => None,
        }
    }

    /// Keeps `owner` as the owner of the key with `digest`, looked up now.
    pub(crate) async fn keep(&self, digest: String, owner: KeyOwner) {
        self.0.write().await.insert(digest, (owner, Instant::now()));
    }
}
