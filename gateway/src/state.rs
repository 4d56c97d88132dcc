//! What every handler shares ([`AppState`]): the pool, the NATS client, where events and
//! the services' answers are found, the API-key cache, the detail cache, the app proxy, the
//! readiness report, the metrics exposition, Backend.AI's keys, the rate limits and the create
//! queue. Data only: it imports the ground floor (`error`, `handles`, `headers`, `throttle`) and
//! its own (`cache`, `proxy`, `serving`);
//! everything above (`caller`, `ready`, the surfaces, the router in `lib.rs`) is built over it.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use events::relay::Topology;

use crate::cache::KeyCache;
use crate::error::ApiError;
use crate::handles::{BackendAiKeys, MetricsRender, Readiness};
use crate::headers::CookiePolicy;
use crate::throttle::Throttle;
use crate::{cache, proxy, serving};

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
    /// The limits on sign-ins and on failed authentication (`crate::throttle`).
    pub(crate) throttle: Throttle,
    pub(crate) details: Arc<cache::DetailCache>,
    /// The app proxy, when this gateway serves one.
    pub proxy: Option<Arc<proxy::Proxy>>,
    /// The last check of PostgreSQL, NATS and the log's readers (`/readyz`).
    pub readiness: Readiness,
    /// Whether [`crate::run::serve`] keeps `readiness` checked ([`AppState::watch_readiness`]).
    pub(crate) watches_readiness: bool,
    /// Creates in flight: one beyond the queue is answered 503 `busy` rather than waiting
    /// for a connection PostgreSQL is slow to give.
    creates: Arc<tokio::sync::Semaphore>,
    /// The process's metrics as `GET /metrics` answers them, when metrics are on
    /// ([`AppState::with_metrics`]).
    pub metrics: Option<MetricsRender>,
    /// Backend.AI's API on its own paths, when it is on ([`AppState::with_backendai`]).
    pub backendai: Option<Arc<BackendAiKeys>>,
    /// Whether the gateway serves TLS ([`AppState::served_over_tls`]): its cookies are then
    /// `Secure` and `__Host-`, and every answer carries HSTS.
    pub(crate) tls: bool,
    /// Where users' webhooks may point (`BERTH_WEBHOOK_ALLOW`): a webhook whose host is a
    /// refused address is refused when it is set ([`AppState::with_webhook_policy`]).
    pub webhook_policy: Arc<domain::outbound::WebhookPolicy>,
    /// The volume a folder is made on when its request names none (`BERTH_DEFAULT_VOLUME`;
    /// [`domain::volumes::HOST_LOCAL`] unless set, [`AppState::with_default_volume`]).
    pub default_volume: String,
    /// The volumes mounted where this gateway runs, by name (`host-local`: the data directory
    /// of the agent on this host, on a one-host install): the folders on them have their files
    /// served here ([`AppState::with_file_roots`]; none unless set).
    pub file_roots: Arc<std::collections::BTreeMap<String, std::path::PathBuf>>,
    /// Cancelled when the gateway serving this state stops ([`crate::run::serve`]): the
    /// answers that never end by themselves (the event stream) end then, so a stop is not
    /// held up by them, and their clients resume elsewhere.
    pub(crate) stopping: tokio_util::sync::CancellationToken,
    /// The relay's events as the event stream's readers follow them, one follower for all.
    pub(crate) live: crate::live::LiveHub,
    /// The model endpoints this gateway serves, and their replicas' addresses.
    pub(crate) serving: Arc<serving::Serving>,
    /// The domain under which each endpoint also answers at a host name of its own,
    /// `<endpoint id>.<domain>` (`BERTH_SERVE_DOMAIN`; [`AppState::with_serve_domain`]).
    pub(crate) serve_domain: Option<String>,
}

/// Creates in flight at most, by default (`BERTH_CREATE_QUEUE`).
pub const DEFAULT_CREATE_QUEUE: usize = 64;

impl AppState {
    pub fn new(pool: Pool, nats: Option<async_nats::Client>, topology: Topology) -> AppState {
        AppState::with_detail_ttl(pool, nats, topology, cache::DEFAULT_TTL)
    }

    /// [`AppState::new`] with detail documents served from memory for at most `detail_ttl`
    /// when no event says they changed (while [`crate::run::serve`] follows the session
    /// events, with NATS).
    pub fn with_detail_ttl(
        pool: Pool,
        nats: Option<async_nats::Client>,
        topology: Topology,
        detail_ttl: Duration,
    ) -> AppState {
        AppState {
            pool,
            nats,
            topology,
            agent_bus: bus::Subjects::default(),
            keys: KeyCache::default(),
            throttle: Throttle::default(),
            details: Arc::new(cache::DetailCache::new(detail_ttl)),
            proxy: None,
            readiness: Readiness::default(),
            watches_readiness: false,
            creates: Arc::new(tokio::sync::Semaphore::new(DEFAULT_CREATE_QUEUE)),
            metrics: None,
            backendai: None,
            tls: false,
            webhook_policy: Arc::default(),
            default_volume: domain::volumes::HOST_LOCAL.to_owned(),
            file_roots: Arc::default(),
            stopping: tokio_util::sync::CancellationToken::new(),
            live: crate::live::LiveHub::default(),
            serving: Arc::default(),
            serve_domain: None,
        }
    }

    /// This state for a gateway that stops on `stop` ([`AppState::stopping`]).
    pub(crate) fn stopping_with(mut self, stop: tokio_util::sync::CancellationToken) -> AppState {
        self.stopping = stop;
        self
    }

    /// This state for a gateway that serves TLS: `Secure`, `__Host-` cookies, and HSTS on
    /// every answer.
    pub fn served_over_tls(mut self) -> AppState {
        self.tls = true;
        self
    }

    /// How the gateway's cookies are named and marked.
    pub(crate) fn cookies(&self) -> CookiePolicy {
        CookiePolicy { secure: self.tls }
    }

    /// This state with PostgreSQL, NATS and the log's readers checked every second while
    /// [`crate::run::serve`] runs, for `/readyz` and to answer writes 503 at once while
    /// PostgreSQL is down.
    pub fn watch_readiness(mut self) -> AppState {
        self.watches_readiness = true;
        self
    }

    /// At most `creates` create requests in flight; more are answered 503 `busy`.
    pub fn with_create_queue(mut self, creates: usize) -> AppState {
        self.creates = Arc::new(tokio::sync::Semaphore::new(creates));
        self
    }

    /// Forgets the keys kept for `user` here, and tells every other gateway to (at once, over
    /// NATS; one that misses the word hears the relayed event, or its cache's time-to-live
    /// ends).
    pub(crate) async fn forget_user(&self, user: uuid::Uuid) {
        self.keys.forget_user(user);
        if let Some(nats) = &self.nats {
            let said = nats
                .publish(self.agent_bus.keys_forget(), user.to_string().into())
                .await;
            if let Err(e) = said {
                tracing::warn!(error = %e, %user, "other gateways not told to forget a user's keys");
            }
        }
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

    /// This state with the app proxy serving circuits as `config` says; while
    /// [`crate::run::serve`] runs, the proxy follows session events (to close their
    /// circuits), reports the apps' activity and closes idle circuits.
    pub fn with_proxy(mut self, config: proxy::ProxyConfig) -> AppState {
        self.proxy = Some(proxy::Proxy::new(config, self.pool.clone()));
        self
    }

    /// This state answering each model endpoint also at a host name of its own,
    /// `<endpoint id>.<domain>` on the gateway's listener (`domain` in lower case, without a
    /// trailing dot), besides its path `/serve/<endpoint id>/`.
    pub fn with_serve_domain(mut self, domain: String) -> AppState {
        self.serve_domain = Some(domain);
        self
    }

    /// This state serving `render`'s exposition on `GET /metrics` and measuring every request
    /// (by route and status) for it; without it, `/metrics` is 404 and requests are not
    /// measured.
    pub fn with_metrics(mut self, render: MetricsRender) -> AppState {
        self.metrics = Some(render);
        self
    }

    /// This state serving Backend.AI's API beside berth's (`crate::backendai`), its keypairs'
    /// secret keys derived with `master_key`.
    pub fn with_backendai(mut self, master_key: Vec<u8>) -> AppState {
        self.backendai = Some(BackendAiKeys::new(master_key));
        self
    }

    /// This state with the services answering under `subjects` (a test's own root).
    pub fn with_agent_bus(mut self, subjects: bus::Subjects) -> AppState {
        self.agent_bus = subjects;
        self
    }

    /// This state with webhooks admitted where `policy` says (the special ranges its
    /// allow-list names; none by default).
    pub fn with_webhook_policy(mut self, policy: domain::outbound::WebhookPolicy) -> AppState {
        self.webhook_policy = Arc::new(policy);
        self
    }

    /// This state serving the files of folders on `roots` (volume → where it is mounted on
    /// this host).
    pub fn with_file_roots(
        mut self,
        roots: std::collections::BTreeMap<String, std::path::PathBuf>,
    ) -> AppState {
        self.file_roots = Arc::new(roots);
        self
    }

    /// This state making folders on `volume` when their request names none.
    /// Tells the idle-reaper that a user reached into session `id` (its files, a command run
    /// in it): use, as traffic through its apps is. Best effort: a lost report costs at
    /// most an early reap warning, never a session in use.
    pub async fn touched(&self, id: uuid::Uuid) {
        let Some(nats) = &self.nats else { return };
        let activity = bus::protocol::AppActivity {
            session_id: id,
            at: chrono::Utc::now(),
            bytes_in: 0,
            bytes_out: 0,
        };
        let body = serde_json::to_vec(&activity).expect("activity serialises");
        if let Err(e) = nats
            .publish(self.agent_bus.idle_activity(), body.into())
            .await
        {
            tracing::debug!(error = %e, "a session's use was not reported");
        }
    }

    pub fn with_default_volume(mut self, volume: String) -> AppState {
        self.default_volume = volume;
        self
    }
}
