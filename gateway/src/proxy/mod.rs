//! berth's app proxy: the only door into a session's apps (its image's apps and its preopen
//! ports; agents publish them on their own address alone).
//!
//! Opening an app opens a *circuit*: a port of the proxy's pool, listened on by this gateway
//! process, that leads to one container port of the session's main kernel, where the agent
//! published it (the terminal's port is the agent's own, which serves it). The circuit is an
//! event (`AppCircuitOpened`, stream `circuit-<id>`); the ledger keeps the open ones, one per
//! port. A private circuit lets through only a browser that redeemed a single-use ticket,
//! minted for the session's owner by the open call, for a cookie bound to that circuit; a
//! public one lets through anyone who reaches the port. Either may be narrowed to a list of
//! client address ranges. Circuits close on request, when their session ends (the proxy
//! follows session events on NATS), when idle (nobody connected and nothing moved for the
//! configured time), and at start for sessions that ended meanwhile.
//!
//! Several gateways may share one database and NATS. A circuit is then the whole control
//! plane's, not one gateway's: its port is taken once in the ledger (one open circuit per
//! port), and *every* gateway listens on that port number on its own proxy address, serving
//! it the same way (each hears circuits opened and closed on the bus, and serves again at
//! start those the ledger holds open). So a load balancer in front of the gateways may send a
//! browser to any of them, and asking any gateway to open an app already open reuses the
//! circuit. Tickets and cookies are kept in PostgreSQL (`proxy.tickets`, `proxy.cookies`, by
//! their SHA-256): a link made on one gateway is redeemed on another, once, and a cookie
//! outlives a gateway's restart. Gateways tell each other which circuits they saw in use
//! (`<root>.proxy.busy`), so none closes as idle a circuit another serves.
//!
//! An HTTP app (a web app, a preopen port, the terminal) is spoken to as HTTP. A raw TCP app
//! (SSH, VNC, RDP, any `tcp` app) is carried byte for byte: straight from the port when the
//! circuit is public (never HTTP: a connection that speaks it is closed unrelayed), and for a
//! private one through a tunnel, an HTTP upgrade to `tcp` that carries the circuit's cookie
//! (`berth session app tunnel` speaks it).
//!
//! Origins. Browsers keep cookies by host, not by port, so circuits on ports of the gateway's
//! host share their cookies with each other and with the console (the proxy strips berth's
//! from requests and from answers, but an app's own cookies, Jupyter's say, reach every other
//! app of the host). With an apps domain (`BERTH_APPS_DOMAIN`, the subdomain mode, as
//! Backend.AI's AppProxy and JupyterHub have it) each HTTP circuit is served instead on a
//! host of its own, `<circuit>.<apps domain>`, routed by `Host` on the gateway's own listener:
//! an origin, and a cookie jar, no other circuit and not the console shares. Raw TCP circuits
//! keep their ports. With TLS, the circuits' ports serve HTTPS too (public raw relays stay
//! raw), and berth's cookies are `Secure` and `__Host-`.
//!
//! - [`assets`]: the terminal page's scripts and styles, embedded.
//! - [`door`]: what one circuit's port serves (login, cookie check, HTTP and WebSocket
//!   forwarding, tunnels, raw relays, byte and connection counts).

pub mod assets;
mod door;

pub(crate) use door::drop_hop_by_hop;
pub use door::{LOGIN_PATH, TUNNEL_PATH, TUNNEL_PROTOCOL};

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::Pool;
use domain::apps::{self, Admission, CircuitCloseReason, PoolExhausted};
use domain::payloads::{AppCircuitClosed, AppCircuitOpened, SessionStatus};
use events::catalogue::Event;
use events::ledger::{self, LedgerError};
use events::store::ExpectedVersion;
use futures::StreamExt;
use rand::Rng;
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::db;
use crate::error::ApiError;
use crate::headers::CookiePolicy;
use crate::model::SessionDetail;

/// How long a ticket minted by an open call may be redeemed.
pub const TICKET_TTL: Duration = Duration::from_secs(60);

/// How often the proxy tells the idle-reaper which sessions' circuits carried bytes.
pub const ACTIVITY_EVERY: Duration = Duration::from_secs(5);

/// Where circuits listen.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The address circuits' ports are bound on (`BERTH_PROXY_ADDRESS`).
    pub listen: IpAddr,
    /// The pool of ports, first and last (`BERTH_PROXY_PORTS`, e.g. `10200-10299`).
    pub ports: (u16, u16),
    /// How long a circuit with nobody connected and nothing moving stays open
    /// (`BERTH_PROXY_IDLE_SECS`; none: until its session ends or it is closed).
    pub idle_after: Option<Duration>,
    /// The gateway's TLS, when it has a certificate: the circuits' ports serve HTTPS with it,
    /// and berth's cookies are `Secure` and `__Host-`.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The subdomain mode's domain (`BERTH_APPS_DOMAIN`, lower case, e.g.
    /// `apps.example.com`): each HTTP circuit is served at `<circuit>.<domain>` on the
    /// gateway's listener, not on a port. None: every circuit on its port.
    pub apps_domain: Option<String>,
}

impl ProxyConfig {
    /// A proxy on `listen`, with the pool `ports`, plain HTTP, every circuit on its port,
    /// closing none as idle.
    pub fn new(listen: IpAddr, ports: (u16, u16)) -> ProxyConfig {
        ProxyConfig {
            listen,
            ports,
            idle_after: None,
            tls: None,
            apps_domain: None,
        }
    }
}

/// Why an app could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the session is {0}; apps open only while it is RUNNING")]
    NotRunning(String),
    #[error("the session has no app `{0}`")]
    UnknownApp(String),
    #[error("app `{app}` has no container port {port}")]
    UnknownPort { app: String, port: u16 },
    #[error("the session's main kernel has not published port {0} (is it on an agent that publishes ports?)")]
    NotPublished(u16),
    /// The agent reported an address the proxy does not dial (S17: a rogue agent pointing
    /// the proxy at the cloud metadata address or another host's service).
    #[error("the circuit is refused: {0}")]
    Undialable(domain::outbound::BadAgentAddress),
    #[error(transparent)]
    PoolExhausted(#[from] PoolExhausted),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("database: {0}")]
    Database(String),
}

impl From<ApiError> for ProxyError {
    fn from(e: ApiError) -> ProxyError {
        ProxyError::Database(e.message)
    }
}

/// What a user asks for when opening an app.
#[derive(Debug, Clone)]
pub struct OpenRequest {
    pub app: String,
    /// One of the app's container ports; its first when none.
    pub container_port: Option<u16>,
    pub admission: Admission,
    pub preferred_port: Option<u16>,
}

/// An opened (or reused) circuit, and the ticket that lets its owner's browser in.
#[derive(Debug, Clone)]
pub struct Opened {
    pub circuit_id: Uuid,
    pub port: u16,
    pub preferred_honoured: bool,
    pub reused: bool,
    pub public: bool,
    pub protocol: domain::apps::AppProtocol,
    /// Redeemed at `/__berth/login?ticket=` on the circuit's port, once, within
    /// [`TICKET_TTL`]; none for a public circuit.
    pub ticket: Option<String>,
}

/// A circuit this process serves.
pub(crate) struct Live {
    opened: AppCircuitOpened,
    upstream: SocketAddr,
    /// The secret berth started the app with, handed to it on every request
    /// (`Authorization: token ...`), so its published port alone is useless.
    token: Option<String>,
    stop: CancellationToken,
    /// Bytes from clients, and to them.
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    /// Client connections open now.
    connections: AtomicUsize,
    /// The task serving the circuit's port; it ends (and frees the port) once `stop` fires.
    served: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// SHA-256 of the cookies found in `proxy.cookies` for it already (any gateway's
    /// logins hand them out), so each is looked up once.
    cookies: Mutex<HashSet<[u8; 32]>>,
}

impl Live {
    /// The circuit's cookie's name before the policy's prefix ([`Proxy::cookies`]).
    pub(crate) fn cookie_name(&self) -> String {
        format!("berth_app_{}", self.opened.circuit_id.simple())
    }
}

/// Bytes a circuit carried so far (since this process serves it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// The proxy: the circuits this gateway serves (all those open, where it can take their
/// port), with their tickets and cookies in the database.
pub struct Proxy {
    config: ProxyConfig,
    pool: Pool,
    circuits: Mutex<HashMap<Uuid, Arc<Live>>>,
    client: door::Upstream,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn random_token() -> String {
    hex::encode(rand::rng().random::<[u8; 32]>())
}

impl Proxy {
    pub fn new(config: ProxyConfig, pool: Pool) -> Arc<Proxy> {
        Arc::new(Proxy {
            config,
            pool,
            circuits: Mutex::default(),
            client: door::upstream_client(),
        })
    }

    /// Opens `request.app` of `session` for `actor`, or reuses an open circuit of the same
    /// app, port and admission; mints a ticket for a private one.
    pub async fn open(
        self: &Arc<Self>,
        session: &SessionDetail,
        actor: Uuid,
        request: OpenRequest,
    ) -> Result<Opened, ProxyError> {
        if session.status != SessionStatus::Running.as_str() {
            return Err(ProxyError::NotRunning(session.status.clone()));
        }
        let app = session
            .request
            .apps
            .iter()
            .find(|a| a.name == request.app)
            .ok_or_else(|| ProxyError::UnknownApp(request.app.clone()))?;
        let container_port = match request.container_port {
            Some(p) if app.ports.contains(&p) => p,
            Some(p) => {
                return Err(ProxyError::UnknownPort {
                    app: app.name.clone(),
                    port: p,
                })
            }
            None => app.ports[0],
        };
        let upstream = upstream_of(session, container_port)?;
        let reusable = lock(&self.circuits)
            .values()
            .find(|live| {
                apps::reusable(
                    &live.opened,
                    session.session_id,
                    &app.name,
                    container_port,
                    &request.admission,
                )
            })
            .cloned();
        if let Some(live) = reusable {
            return self.answer(&live, false, true).await;
        }

        let mut taken: BTreeSet<u16> = self.recorded_ports().await?;
        taken.extend(lock(&self.circuits).values().map(|l| l.opened.port));
        let mut preferred = request.preferred_port;
        let by_host = self.routes_by_host(app.protocol);
        loop {
            let choice = apps::choose_port(self.config.ports, &taken, preferred, rand::random())?;
            // A circuit routed by host holds its port in the ledger alone, never listening.
            let listener = match by_host {
                true => None,
                false => {
                    match tokio::net::TcpListener::bind((self.config.listen, choice.port)).await {
                        Ok(listener) => Some(listener),
                        Err(_) => {
                            // Something else on this host holds the port.
                            taken.insert(choice.port);
                            preferred = None;
                            continue;
                        }
                    }
                }
            };
            let opened = AppCircuitOpened {
                circuit_id: Uuid::now_v7(),
                session_id: session.session_id,
                owner: session.owner.user_id,
                opened_by: actor,
                app: app.name.clone(),
                protocol: app.protocol,
                container_port,
                port: choice.port,
                admission: request.admission.clone(),
            };
            match record_as(
                &self.pool,
                &actor.to_string(),
                Event::AppCircuitOpened(opened.clone()),
                ExpectedVersion::NoStream,
            )
            .await
            {
                Ok(()) => {}
                // Another gateway recorded a circuit on this port first.
                Err(LedgerError::Exists { .. }) => {
                    taken.insert(choice.port);
                    preferred = None;
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            let token = db::circuits::app_token(&self.pool, session.session_id, &app.name).await?;
            let live = self.serve(opened, upstream, token, listener);
            return self.answer(&live, choice.preferred_honoured, false).await;
        }
    }

    async fn answer(
        &self,
        live: &Live,
        preferred_honoured: bool,
        reused: bool,
    ) -> Result<Opened, ProxyError> {
        let public = live.opened.admission.public;
        let ticket = if public {
            None
        } else {
            let ticket = random_token();
            let digest = Sha256::digest(ticket.as_bytes()).into();
            db::circuits::mint_ticket(&self.pool, &digest, live.opened.circuit_id, TICKET_TTL)
                .await?;
            Some(ticket)
        };
        Ok(Opened {
            circuit_id: live.opened.circuit_id,
            port: live.opened.port,
            preferred_honoured,
            reused,
            public,
            protocol: live.opened.protocol,
            ticket,
        })
    }

    /// Takes a ticket for `circuit_id`: true once, within its time, whichever gateway
    /// minted it.
    pub(crate) async fn redeem(&self, ticket: &str, circuit_id: Uuid) -> Result<bool, ProxyError> {
        let digest = Sha256::digest(ticket.as_bytes()).into();
        Ok(db::circuits::redeem_ticket(&self.pool, &digest, circuit_id).await?)
    }

    /// Hands out a new cookie secret for `live` (kept for every gateway).
    pub(crate) async fn issue_cookie(&self, live: &Live) -> Result<String, ProxyError> {
        let secret = random_token();
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        db::circuits::keep_cookie(&self.pool, &digest, live.opened.circuit_id).await?;
        lock(&live.cookies).insert(digest);
        Ok(secret)
    }

    /// Whether `secret` is a cookie handed out for `live`, by this gateway or another.
    pub(crate) async fn cookie_valid(&self, live: &Live, secret: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        if lock(&live.cookies).contains(&digest) {
            return true;
        }
        match db::circuits::cookie_issued(&self.pool, &digest, live.opened.circuit_id).await {
            Ok(true) => {
                lock(&live.cookies).insert(digest);
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!(error = %e.message, "a cookie could not be checked");
                false
            }
        }
    }

    /// How berth's cookies are named and marked: `Secure` and `__Host-` with TLS.
    pub(crate) fn cookies(&self) -> CookiePolicy {
        CookiePolicy {
            secure: self.config.tls.is_some(),
        }
    }

    /// Whether the proxy serves circuits by host (the subdomain mode).
    pub fn routes_hosts(&self) -> bool {
        self.config.apps_domain.is_some()
    }

    /// Whether circuits of `protocol` are served by host on the gateway's listener (the
    /// subdomain mode's HTTP circuits) rather than on their ports.
    fn routes_by_host(&self, protocol: domain::apps::AppProtocol) -> bool {
        self.config.apps_domain.is_some() && protocol.is_http()
    }

    /// The link to an opened circuit for a caller who reached the gateway at `host` (its
    /// `Host` header): on the circuit's own host in the subdomain mode, else on its port of
    /// the caller's host; `https://` with TLS.
    pub fn url(&self, opened: &Opened, host: &str) -> String {
        circuit_url(
            opened,
            host,
            self.config
                .apps_domain
                .as_deref()
                .filter(|_| opened.protocol.is_http()),
            self.config.tls.is_some(),
        )
    }

    /// Serves `request` when its `Host` is under the apps domain (the subdomain mode): the
    /// circuit it names, or a 404 page for one that is not open; any other request is handed
    /// back for the gateway's own routes.
    pub async fn serve_host(
        self: &Arc<Self>,
        peer: SocketAddr,
        request: Request,
    ) -> Result<Response, Request> {
        let Some(domain) = self.config.apps_domain.as_deref() else {
            return Err(request);
        };
        let host = request
            .headers()
            .get(axum::http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| request.uri().host());
        let Some(circuit) = host.and_then(|h| crate::headers::id_under_domain(h, domain)) else {
            return Err(request);
        };
        let live = circuit
            .and_then(|id| lock(&self.circuits).get(&id).cloned())
            .filter(|live| live.opened.protocol.is_http());
        match live {
            Some(live) => Ok(door::pass_by_host(self.clone(), live, peer, request).await),
            None => Ok(door::page(
                StatusCode::NOT_FOUND,
                "No such app",
                "No app is open at this address (it may have closed). Open it again from \
                 berth for a new link.",
            )),
        }
    }

    fn serve(
        self: &Arc<Self>,
        opened: AppCircuitOpened,
        upstream: SocketAddr,
        token: Option<String>,
        listener: Option<tokio::net::TcpListener>,
    ) -> Arc<Live> {
        let live = Arc::new(Live {
            opened,
            upstream,
            token,
            stop: CancellationToken::new(),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            connections: AtomicUsize::new(0),
            served: Mutex::default(),
            cookies: Mutex::default(),
        });
        let open = {
            let mut circuits = lock(&self.circuits);
            circuits.insert(live.opened.circuit_id, live.clone());
            circuits.len()
        };
        ::metrics::gauge!(crate::metrics::PROXY_CIRCUITS).set(open as f64);
        tracing::info!(circuit = %live.opened.circuit_id, port = live.opened.port,
            app = %live.opened.app, session = %live.opened.session_id, "circuit open");
        if let Some(listener) = listener {
            let served = tokio::spawn(door::serve(self.clone(), live.clone(), listener));
            *lock(&live.served) = Some(served);
        }
        live
    }

    /// Closes `circuit_id` (recorded), cutting its connections.
    pub async fn close(
        &self,
        circuit_id: Uuid,
        actor: &str,
        reason: CircuitCloseReason,
    ) -> Result<bool, ProxyError> {
        let recorded = db::circuits::circuit(&self.pool, circuit_id).await?;
        self.stop_serving(circuit_id).await;
        let Some((session_id, port)) = recorded else {
            return Ok(false);
        };
        let closed = AppCircuitClosed {
            circuit_id,
            session_id,
            port,
            reason,
        };
        // After its opening alone (version 0): two gateways closing it at once (both hear
        // its session end) record one close; the second finds it closed.
        match record_as(
            &self.pool,
            actor,
            Event::AppCircuitClosed(closed),
            ExpectedVersion::Exact(0),
        )
        .await
        {
            Ok(()) => {}
            Err(LedgerError::Store(events::store::StoreError::Conflict { .. })) => {
                return Ok(false)
            }
            Err(e) => return Err(e.into()),
        }
        db::circuits::forget_passes(&self.pool, circuit_id).await?;
        tracing::info!(circuit = %circuit_id, ?reason, "circuit closed");
        Ok(true)
    }

    /// Stops serving `circuit_id` here (closed, by this gateway or another), cutting its
    /// connections.
    async fn stop_serving(&self, circuit_id: Uuid) {
        let (live, open) = {
            let mut circuits = lock(&self.circuits);
            (circuits.remove(&circuit_id), circuits.len())
        };
        ::metrics::gauge!(crate::metrics::PROXY_CIRCUITS).set(open as f64);
        if let Some(live) = live {
            live.stop.cancel();
            let served = lock(&live.served).take();
            if let Some(served) = served {
                // Once its door has stopped, the port is free: a circuit opened right after
                // this one closed may take it.
                let _ = tokio::time::timeout(Duration::from_secs(2), served).await;
            }
        }
    }

    /// Closes every open circuit of `session_id` (of `app` only, when given).
    pub async fn close_session(
        &self,
        session_id: Uuid,
        app: Option<&str>,
        actor: &str,
        reason: CircuitCloseReason,
    ) -> Result<usize, ProxyError> {
        let open = db::circuits::circuits(&self.pool, Some(session_id), app).await?;
        let mut closed = 0;
        for circuit in open {
            if self.close(circuit.circuit_id, actor, reason).await? {
                closed += 1;
            }
        }
        Ok(closed)
    }

    /// Bytes each circuit this process serves carried so far.
    pub fn traffic(&self, circuit_id: Uuid) -> Option<Traffic> {
        lock(&self.circuits).get(&circuit_id).map(|l| Traffic {
            bytes_in: l.bytes_in.load(Ordering::Relaxed),
            bytes_out: l.bytes_out.load(Ordering::Relaxed),
        })
    }

    async fn recorded_ports(&self) -> Result<BTreeSet<u16>, ProxyError> {
        Ok(db::circuits::circuit_ports(&self.pool)
            .await?
            .into_iter()
            .collect())
    }

    /// Serves the circuits the ledger holds open that this gateway does not serve yet (at
    /// start, after a restart, or opened by another gateway while this one did not listen),
    /// and closes those whose session ended or whose app is no longer published. Cookies
    /// handed out before are in the database, so their browsers get in again.
    pub async fn restore(self: &Arc<Self>) -> Result<(), ProxyError> {
        for row in db::circuits::circuits(&self.pool, None, None).await? {
            self.serve_recorded(row).await?;
        }
        Ok(())
    }

    /// Serves one circuit of the ledger here, unless it is served already; closes it when
    /// its session ended or its app is no longer published. A port something else holds on
    /// this host is left to the other gateways (and tried again at the next restore).
    async fn serve_recorded(
        self: &Arc<Self>,
        row: db::circuits::CircuitRow,
    ) -> Result<(), ProxyError> {
        let circuit_id = row.circuit_id;
        if lock(&self.circuits).contains_key(&circuit_id) {
            return Ok(());
        }
        let session_id = row.session_id;
        if row.session_status.as_deref() != Some(SessionStatus::Running.as_str()) {
            self.close(circuit_id, "gateway", CircuitCloseReason::SessionEnded)
                .await?;
            return Ok(());
        }
        let detail = db::sessions::detail(&self.pool, session_id)
            .await
            .ok()
            .flatten()
            .and_then(|d| serde_json::from_str::<SessionDetail>(&d.body).ok());
        let (port, container_port) = (row.port, row.container_port);
        let upstream = detail
            .as_ref()
            .and_then(|d| upstream_of(d, container_port).ok());
        let app = detail
            .as_ref()
            .and_then(|d| d.request.apps.iter().find(|a| a.name == row.app).cloned());
        let (Some(upstream), Some(app)) = (upstream, app) else {
            self.close(circuit_id, "gateway", CircuitCloseReason::Requested)
                .await?;
            return Ok(());
        };
        let listener = match self.routes_by_host(app.protocol) {
            true => None,
            false => match tokio::net::TcpListener::bind((self.config.listen, port)).await {
                Ok(listener) => Some(listener),
                Err(e) => {
                    tracing::warn!(error = %e, circuit = %circuit_id, port,
                        "a circuit's port is held by something else on this host; other gateways serve it");
                    return Ok(());
                }
            },
        };
        let opened = AppCircuitOpened {
            circuit_id,
            session_id,
            owner: row.owner,
            opened_by: row.owner,
            app: app.name.clone(),
            protocol: app.protocol,
            container_port,
            port,
            admission: row.admission,
        };
        let token = db::circuits::app_token(&self.pool, session_id, &row.app).await?;
        // Another task may have begun serving it meanwhile (this gateway's own open).
        if lock(&self.circuits).contains_key(&circuit_id) {
            return Ok(());
        }
        self.serve(opened, upstream, token, listener);
        Ok(())
    }

    /// Every [`ACTIVITY_EVERY`], tells the idle-reaper (on `subject`) of each session whose
    /// circuits carried bytes since the last time, until `stop`: a session in use through
    /// its apps is never network-idle, and an open tab that moves nothing is not use.
    pub async fn report_activity(
        self: Arc<Self>,
        nats: async_nats::Client,
        subject: String,
        stop: CancellationToken,
    ) {
        let mut seen: HashMap<Uuid, u64> = HashMap::new();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(ACTIVITY_EVERY) => {}
            }
            let mut moved: HashMap<Uuid, (u64, u64)> = HashMap::new();
            for live in lock(&self.circuits).values() {
                let (bytes_in, bytes_out) = (
                    live.bytes_in.load(Ordering::Relaxed),
                    live.bytes_out.load(Ordering::Relaxed),
                );
                let before = seen.insert(live.opened.circuit_id, bytes_in + bytes_out);
                if before != Some(bytes_in + bytes_out) && bytes_in + bytes_out > 0 {
                    let sum = moved.entry(live.opened.session_id).or_default();
                    sum.0 += bytes_in;
                    sum.1 += bytes_out;
                }
            }
            let at = chrono::Utc::now();
            for (session_id, (bytes_in, bytes_out)) in moved {
                let activity = bus::protocol::AppActivity {
                    session_id,
                    at,
                    bytes_in,
                    bytes_out,
                };
                let body = serde_json::to_vec(&activity).expect("activity serialises");
                if let Err(e) = nats.publish(subject.clone(), body.into()).await {
                    tracing::debug!(error = %e, "app activity not sent");
                }
            }
        }
    }

    /// Closes each circuit that has had no client connected and no byte through it for the
    /// configured idle time (checked every tenth of it, at most every minute), until `stop`.
    /// The time counts from when this process began to serve the circuit. With `busy` (the
    /// bus and its `circuits_busy` subject), it tells the other gateways at each check which
    /// circuits it saw in use, and counts a circuit they saw in use as in use here.
    pub async fn close_idle(
        self: Arc<Self>,
        busy: Option<(async_nats::Client, String)>,
        stop: CancellationToken,
    ) {
        let Some(idle_after) = self.config.idle_after else {
            return;
        };
        let every = (idle_after / 10).clamp(Duration::from_millis(200), Duration::from_secs(60));
        let mut heard = match &busy {
            Some((nats, subject)) => match nats.subscribe(subject.clone()).await {
                Ok(subscriber) => Some(subscriber),
                Err(e) => {
                    tracing::warn!(error = %e, "the proxy cannot hear other gateways' circuits in use");
                    None
                }
            },
            None => None,
        };
        // Each circuit's bytes when last seen, and since when they have not changed.
        let mut quiet: HashMap<Uuid, (u64, Instant)> = HashMap::new();
        loop {
            let message = tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => None,
                m = async {
                    match heard.as_mut() {
                        Some(subscriber) => subscriber.next().await,
                        None => std::future::pending().await,
                    }
                } => match m {
                    Some(m) => Some(m),
                    None => {
                        heard = None;
                        continue;
                    }
                },
            };
            if let Some(message) = message {
                if let Ok(busy) =
                    serde_json::from_slice::<bus::protocol::CircuitsBusy>(&message.payload)
                {
                    let now = Instant::now();
                    for circuit in busy.circuits {
                        if let Some(since) = quiet.get_mut(&circuit) {
                            since.1 = now;
                        }
                    }
                }
                continue;
            }
            let now = Instant::now();
            let mut idle = Vec::new();
            let mut in_use = Vec::new();
            {
                let circuits = lock(&self.circuits);
                quiet.retain(|id, _| circuits.contains_key(id));
                for live in circuits.values() {
                    let moved = live.bytes_in.load(Ordering::Relaxed)
                        + live.bytes_out.load(Ordering::Relaxed);
                    let since = quiet.entry(live.opened.circuit_id).or_insert((moved, now));
                    let connections = live.connections.load(Ordering::Relaxed);
                    if since.0 != moved {
                        *since = (moved, now);
                        in_use.push(live.opened.circuit_id);
                    } else if connections > 0 {
                        in_use.push(live.opened.circuit_id);
                    }
                    if apps::circuit_is_idle(connections, now - since.1, idle_after) {
                        idle.push(live.opened.circuit_id);
                    }
                }
            }
            if let (Some((nats, subject)), false) = (&busy, in_use.is_empty()) {
                let body = bus::protocol::CircuitsBusy { circuits: in_use };
                let body = serde_json::to_vec(&body).expect("circuits serialise");
                if let Err(e) = nats.publish(subject.clone(), body.into()).await {
                    tracing::debug!(error = %e, "circuits in use not told");
                }
            }
            for circuit in idle {
                if let Err(e) = self
                    .close(circuit, "gateway", CircuitCloseReason::Idle)
                    .await
                {
                    tracing::warn!(error = %e, %circuit, "an idle circuit was not closed");
                }
            }
        }
    }

    /// Closes a session's circuits as soon as its end crosses the bus (`sessions`, the
    /// session events' subject), and serves each circuit another gateway opens and stops
    /// serving each one another closes (`circuits`, the circuit events'), until `stop`.
    pub async fn follow_sessions(
        self: Arc<Self>,
        nats: async_nats::Client,
        sessions: String,
        circuits: String,
        stop: CancellationToken,
    ) {
        loop {
            let subscribed = async {
                let sessions = nats.subscribe(sessions.clone()).await?;
                let circuits = nats.subscribe(circuits.clone()).await?;
                Ok::<_, async_nats::SubscribeError>(futures::stream::select(sessions, circuits))
            };
            let mut subscriber = match subscribed.await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "the proxy cannot follow sessions; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            // Whatever ended while nobody listened.
            if let Err(e) = self.restore().await {
                tracing::warn!(error = %e, "circuits not restored");
            }
            loop {
                let message = tokio::select! {
                    _ = stop.cancelled() => {
                        for live in lock(&self.circuits).drain().map(|(_, l)| l) {
                            live.stop.cancel();
                        }
                        return;
                    }
                    m = subscriber.next() => m,
                };
                let Some(message) = message else { break };
                let Ok(event) = serde_json::from_slice::<events::RecordedEvent>(&message.payload)
                else {
                    continue;
                };
                match &event.event {
                    Event::AppCircuitOpened(opened) => {
                        self.follow_opened(opened.session_id, opened.circuit_id)
                            .await;
                    }
                    Event::AppCircuitClosed(closed) => {
                        self.stop_serving(closed.circuit_id).await;
                    }
                    Event::SessionStatusChanged(e) if e.to.is_terminal() => {
                        let session = e.session_id;
                        if let Err(e) = self
                            .close_session(
                                session,
                                None,
                                "gateway",
                                CircuitCloseReason::SessionEnded,
                            )
                            .await
                        {
                            tracing::warn!(error = %e, %session, "circuits not closed");
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Serves a circuit the bus says was opened (by this gateway, which serves it already,
    /// or by another).
    async fn follow_opened(self: &Arc<Self>, session_id: Uuid, circuit_id: Uuid) {
        if lock(&self.circuits).contains_key(&circuit_id) {
            return;
        }
        let rows = match db::circuits::circuits(&self.pool, Some(session_id), None).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e.message, %circuit_id, "a circuit opened elsewhere is not served here");
                return;
            }
        };
        // Not there: closed meanwhile.
        if let Some(row) = rows.into_iter().find(|r| r.circuit_id == circuit_id) {
            if let Err(e) = self.serve_recorded(row).await {
                tracing::warn!(error = %e, %circuit_id, "a circuit opened elsewhere is not served here");
            }
        }
    }
}

/// The link to `opened` for a caller who reached the gateway at `host`: at
/// `<circuit>.<apps_domain>` (on the caller's port) when routed by host, else on the
/// circuit's port of the caller's host name; a public raw circuit as `tcp://`.
fn circuit_url(opened: &Opened, host: &str, apps_domain: Option<&str>, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    let path = match &opened.ticket {
        Some(ticket) => format!("{LOGIN_PATH}?ticket={ticket}"),
        None => "/".to_owned(),
    };
    let (name, port) = crate::headers::split_host(host);
    let name = if name.is_empty() { "127.0.0.1" } else { name };
    match apps_domain {
        Some(domain) => {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            format!(
                "{scheme}://{}.{domain}{port}{path}",
                opened.circuit_id.simple()
            )
        }
        None if opened.ticket.is_none() && !opened.protocol.is_http() => {
            format!("tcp://{name}:{}", opened.port)
        }
        None => format!("{scheme}://{name}:{}{path}", opened.port),
    }
}

/// The agent's door into session `session`'s main kernel (its terminal's listener, which also
/// moves files in and out: the agent's `transfer`): asked `method` at `path_and_query` with
/// `body`, behind the terminal's `token`, over a connection of its own. The answer streams.
pub(crate) async fn through_kernel_door(
    session: &SessionDetail,
    token: &str,
    method: axum::http::Method,
    path_and_query: &str,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<axum::http::Response<hyper::body::Incoming>, KernelDoorError> {
    static CLIENT: std::sync::OnceLock<door::Upstream> = std::sync::OnceLock::new();
    let address = upstream_of(session, domain::apps::TERMINAL_PORT)?;
    let mut request = axum::http::Request::builder()
        .method(method)
        .uri(format!("http://{address}{path_and_query}"))
        .header(axum::http::header::AUTHORIZATION, format!("token {token}"))
        .body(body)
        .map_err(|e| KernelDoorError::Unreachable(e.to_string()))?;
    request.headers_mut().extend(headers);
    CLIENT
        .get_or_init(door::upstream_client)
        .request(request)
        .await
        .map_err(|e| KernelDoorError::Unreachable(e.to_string()))
}

/// Why the agent's door into a main kernel was not reached.
#[derive(Debug, thiserror::Error)]
pub enum KernelDoorError {
    #[error(transparent)]
    NotServed(#[from] ProxyError),
    #[error("the session's agent did not answer: {0}")]
    Unreachable(String),
}

/// Where the main kernel publishes `container_port`: at its agent's address, which the
/// recorder checked against the agent's registration, and only if it is an address a host
/// can have (never the cloud metadata address, multicast or unspecified).
pub(crate) fn upstream_of(
    session: &SessionDetail,
    container_port: u16,
) -> Result<SocketAddr, ProxyError> {
    let main = session.containers.iter().find(|c| c.kernel == 0);
    let (Some(address), Some(port)) = (
        main.and_then(|c| c.address.as_deref()),
        main.and_then(|c| c.ports.iter().find(|p| p.container == container_port)),
    ) else {
        return Err(ProxyError::NotPublished(container_port));
    };
    let address: IpAddr =
        domain::outbound::check_agent_address(address).map_err(ProxyError::Undialable)?;
    Ok(SocketAddr::new(address, port.host))
}

async fn record_as(
    pool: &Pool,
    actor: &str,
    event: Event,
    expected: ExpectedVersion,
) -> Result<(), LedgerError> {
    let id = match &event {
        Event::AppCircuitOpened(e) => e.circuit_id,
        Event::AppCircuitClosed(e) => e.circuit_id,
        _ => unreachable!("the proxy records circuits only"),
    };
    let stream = events::catalogue::stream_id("circuit", id);
    let metadata = events::trace::metadata(actor, None);
    ledger::record_now(pool, &stream, expected, &[event], &metadata).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::apps::AppProtocol;

    fn opened(protocol: AppProtocol, ticket: Option<&str>) -> Opened {
        Opened {
            circuit_id: Uuid::parse_str("0191e0a4-7a2b-7c3d-8e4f-0123456789ab").unwrap(),
            port: 10201,
            preferred_honoured: true,
            reused: false,
            public: ticket.is_none(),
            protocol,
            ticket: ticket.map(str::to_owned),
        }
    }

    #[test]
    fn a_host_under_the_apps_domain_names_its_circuit_and_nothing_else_does() {
        let id = Uuid::parse_str("0191e0a4-7a2b-7c3d-8e4f-0123456789ab").unwrap();
        let domain = "apps.example.com";
        for host in [
            "0191e0a47a2b7c3d8e4f0123456789ab.apps.example.com",
            "0191E0A47A2B7C3D8E4F0123456789AB.Apps.Example.com:8443",
            "0191e0a47a2b7c3d8e4f0123456789ab.apps.example.com.",
        ] {
            assert_eq!(
                crate::headers::id_under_domain(host, domain),
                Some(Some(id)),
                "{host}"
            );
        }
        for host in [
            "nope.apps.example.com",
            "a.0191e0a47a2b7c3d8e4f0123456789ab.apps.example.com",
            "0191e0a4-7a2b-7c3d-8e4f-0123456789ab.apps.example.com",
        ] {
            assert_eq!(
                crate::headers::id_under_domain(host, domain),
                Some(None),
                "{host}"
            );
        }
        for host in [
            "example.com",
            "apps.example.com",
            "gw.example.com:8080",
            "0191e0a47a2b7c3d8e4f0123456789abapps.example.com",
            "0191e0a47a2b7c3d8e4f0123456789ab.apps.example.com.evil.net",
            "127.0.0.1:8080",
        ] {
            assert_eq!(
                crate::headers::id_under_domain(host, domain),
                None,
                "{host}"
            );
        }
    }

    #[test]
    fn links_name_the_circuits_own_host_in_the_subdomain_mode_and_its_port_otherwise() {
        let private = opened(AppProtocol::Http, Some("t1"));
        let public = opened(AppProtocol::Preopen, None);
        let raw = opened(AppProtocol::Tcp, None);
        let raw_private = opened(AppProtocol::Tcp, Some("t2"));
        let domain = Some("apps.localhost");
        assert_eq!(
            circuit_url(&private, "gw.example.com:8080", None, false),
            "http://gw.example.com:10201/__berth/login?ticket=t1"
        );
        assert_eq!(
            circuit_url(&public, "gw.example.com", None, true),
            "https://gw.example.com:10201/"
        );
        assert_eq!(
            circuit_url(&raw, "[::1]:8080", None, true),
            "tcp://[::1]:10201"
        );
        assert_eq!(
            circuit_url(&raw_private, "gw:8080", None, true),
            "https://gw:10201/__berth/login?ticket=t2"
        );
        assert_eq!(
            circuit_url(&private, "localhost:8443", domain, true),
            "https://0191e0a47a2b7c3d8e4f0123456789ab.apps.localhost:8443/__berth/login?ticket=t1"
        );
        assert_eq!(
            circuit_url(
                &public,
                "berth.example.com",
                Some("apps.example.com"),
                false
            ),
            "http://0191e0a47a2b7c3d8e4f0123456789ab.apps.example.com/"
        );
    }

    /// A RUNNING session whose main kernel publishes container port 8080 on host port
    /// 32768 at `address`.
    fn published_at(address: &str) -> SessionDetail {
        serde_json::from_value(serde_json::json!({
            "session_id": Uuid::nil(), "name": "job1",
            "owner": {"user_id": Uuid::nil(), "email": "a@b.c"},
            "type": "interactive", "status": "RUNNING", "status_reason": null, "image": "i",
            "resource_group": "default", "agent_id": "a1",
            "created_at": "2026-11-23T00:00:00Z", "status_changed_at": "2026-11-23T00:00:01Z",
            "requested_by": null, "project": null,
            "resources": {"cpu_milli": 1000, "memory_bytes": 1, "gpu_milli": 0},
            "shared_memory_bytes": 1, "cluster_mode": "single-node", "cluster_size": 1,
            "kernels": [{"agent_id": "a1", "resources": {"cpu_milli": 1000, "memory_bytes": 1, "gpu_milli": 0}}],
            "containers": [{"kernel": 0, "agent_id": "a1", "container_id": "c", "hostname": null,
                            "ports": [{"container": 8080, "host": 32768}], "address": address}],
            "request": {"environment": {}, "mounts": [], "preopen_ports": [8080],
                        "startup_command": null, "starts_at": null, "batch_timeout_secs": null,
                        "omp_num_threads": 1, "max_lifetime_secs": null, "wanted_agent": null},
            "reserved_at": "2026-11-23T00:00:00Z", "scheduled_at": null, "started_at": null,
            "ended_at": null, "elapsed_secs": null, "exit_code": null, "scheduling_attempts": 1,
            "priority": 10, "termination_requested": false, "usage": null,
        }))
        .unwrap()
    }

    #[test]
    fn the_proxy_dials_an_agents_address_and_refuses_what_no_host_has() {
        let upstream = upstream_of(&published_at("10.0.0.5"), 8080).unwrap();
        assert_eq!(upstream, "10.0.0.5:32768".parse().unwrap());
        assert!(matches!(
            upstream_of(&published_at("10.0.0.5"), 9999),
            Err(ProxyError::NotPublished(9999))
        ));
        for rogue in [
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "metadata.internal",
        ] {
            let refused = upstream_of(&published_at(rogue), 8080).unwrap_err();
            assert!(
                matches!(refused, ProxyError::Undialable(_)),
                "{rogue}: {refused}"
            );
            let answer = ApiError::from(refused);
            assert_eq!(answer.status, axum::http::StatusCode::CONFLICT, "{rogue}");
            assert!(
                answer.message.contains("refused") && answer.message.contains(rogue),
                "{}",
                answer.message
            );
        }
    }
}
