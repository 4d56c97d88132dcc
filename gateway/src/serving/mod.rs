//! Model serving: endpoints whose replicas are inference sessions of their owner's, served
//! at one URL that outlives the replicas, `/serve/<endpoint id>/...` on every gateway, and,
//! when the operator sets a serving domain (`BERTH_SERVE_DOMAIN`), at a host name of each
//! endpoint's own, `<endpoint id>.<domain>` ([`endpoint_of_host`]): the model's paths at the
//! root, as clients that cannot take a path prefix want them.
//!
//! What an endpoint is, what its stream says and what it needs next are the domain's
//! (`domain::serving`); here they meet the world:
//!
//! - [`Serving`]: every gateway's table of the live endpoints and the address of each healthy
//!   replica, refreshed from the log and the session views ([`Serving::follow`]), and the
//!   tokens recently found good.
//! - [`balancer`]: a call of an endpoint's URL, checked (its token) and sent to the healthy
//!   replica with the fewest requests outstanding; a replica that refuses the connection is
//!   passed over, and the request, whose body is not yet sent, goes to the next. Bodies stream
//!   both ways (server-sent events and chunked answers pass through as they come).
//! - [`controller`]: one gateway at a time (a PostgreSQL advisory lock) starts and ends the
//!   replicas as the endpoints ask, checks their health, and records what changes.
//!
//! Endpoints are recorded in streams of their own, read from the log (no table keeps them);
//! their tokens' digests are kept in `serving.tokens` ([`crate::db::serving`]). While there is
//! no endpoint, the table and the controller rest until an endpoint's event is heard on NATS
//! ([`rest`]), so a gateway that serves no model does not read the log several times a second.

pub mod balancer;
pub mod controller;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use domain::payloads::{ResourceSlots, ServedModel, SessionStatus, SessionType};
use domain::serving::{self as rules, Endpoint};
use events::catalogue::Event;
use events::ledger::{self, LedgerError};
use events::store::{ExpectedVersion, StoreError};
use events::EventStore;
use launcher::launch::{ByteSize, CreateSession, ResourceRequest};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::db;
use crate::error::ApiError;
use crate::model::SessionDetail;

/// How often every gateway reads the endpoints and their replicas' addresses again.
pub const REFRESH_EVERY: Duration = Duration::from_millis(500);

/// With no endpoint to serve or tend, how often the table and the controller look again when
/// the endpoints' events wake them: the safety net for a hint lost while NATS was away.
pub const QUIET_LOOK_EVERY: Duration = Duration::from_secs(5);

/// How long a token found good is honoured without asking the database again (never past
/// its expiry).
const TOKEN_CACHE: Duration = Duration::from_secs(10);

/// A replica as the balancer reaches it.
pub struct Upstream {
    pub session_id: Uuid,
    pub address: SocketAddr,
    /// Requests sent to it whose answer has not ended.
    pub outstanding: Arc<AtomicUsize>,
}

/// An endpoint as the balancer serves it.
pub struct Served {
    pub endpoint_id: Uuid,
    pub name: String,
    pub open_to_public: bool,
    /// Its healthy replicas.
    pub upstreams: Vec<Arc<Upstream>>,
    /// Calls this gateway has balanced for it since it started.
    pub requests: Arc<AtomicU64>,
}

/// A replica of `model`, served from folder `folder`, as a session's create asks for it: an
/// inference session running the definition's start command, its port published and the
/// folder mounted. Made, updated and launched replicas all ask this way.
pub fn replica_session(
    image: String,
    resource_group: Option<String>,
    resources: ResourceRequest,
    folder: &str,
    model: &ServedModel,
) -> CreateSession {
    CreateSession {
        session_type: Some(SessionType::Inference),
        image,
        resource_group,
        resources,
        preopen_ports: vec![u32::from(model.port)],
        mounts: vec![folder.to_owned()],
        startup_command: Some(model.start_command.clone()),
        ..CreateSession::default()
    }
}

/// `slots` as a create asks for them.
pub fn asked_resources(slots: &ResourceSlots) -> ResourceRequest {
    ResourceRequest {
        cpu: Some(slots.cpu_milli as f64 / 1000.0),
        memory: Some(ByteSize::Bytes(slots.memory_bytes)),
        shared_memory: None,
        gpu: (slots.gpu_milli > 0).then(|| slots.gpu_milli as f64 / 1000.0),
    }
}

/// The host name endpoint `id` answers at under the serving domain `domain`.
pub fn host_of(id: Uuid, domain: &str) -> String {
    format!("{}.{domain}", id.simple())
}

/// The endpoint a request's `Host` names under the serving domain `domain` (lower case):
/// `Some(None)` for a host under the domain that names no endpoint, `None` for a host outside
/// it (the gateway's own routes serve it). Any port and a trailing dot are allowed; case does
/// not matter.
pub fn endpoint_of_host(host: &str, domain: &str) -> Option<Option<Uuid>> {
    crate::headers::id_under_domain(host, domain)
}

/// How far back a gateway's rate of calls per endpoint is measured.
const RATE_WINDOW: Duration = Duration::from_secs(3);

/// How long a gateway's report of its calls counts for autoscaling.
pub const TRAFFIC_FRESH: Duration = Duration::from_secs(5);

/// How recent a replica's use sample must be to count for autoscaling: a few of the agents'
/// sampling periods.
pub const USE_FRESH: Duration = Duration::from_secs(30);

/// Every gateway's view of the endpoints it serves.
pub struct Serving {
    /// This gateway, as its reports of calls name it.
    gateway: Uuid,
    table: RwLock<HashMap<Uuid, Arc<Served>>>,
    /// Calls balanced per endpoint, kept across refreshes.
    requests: Mutex<HashMap<Uuid, Arc<AtomicU64>>>,
    /// Per endpoint, the count of calls lately, for its rate.
    samples: Mutex<HashMap<Uuid, VecDeque<(Instant, u64)>>>,
    /// Requests outstanding per replica, kept across refreshes.
    outstanding: Mutex<HashMap<Uuid, Arc<AtomicUsize>>>,
    /// Replicas that refused a connection lately, passed over until then.
    refused_until: Mutex<HashMap<SocketAddr, Instant>>,
    /// Tokens found good lately: digest → (endpoint, honoured until).
    tokens: Mutex<HashMap<[u8; 32], (Uuid, Instant)>>,
    pub(crate) connections: balancer::Connections,
}

impl Default for Serving {
    fn default() -> Serving {
        Serving {
            gateway: Uuid::now_v7(),
            table: RwLock::default(),
            requests: Mutex::default(),
            samples: Mutex::default(),
            outstanding: Mutex::default(),
            refused_until: Mutex::default(),
            tokens: Mutex::default(),
            connections: balancer::Connections::default(),
        }
    }
}

impl Serving {
    /// The endpoint `id` as this gateway serves it, if it is live.
    pub fn served(&self, id: Uuid) -> Option<Arc<Served>> {
        read(&self.table).get(&id).cloned()
    }

    /// Reads the endpoints and their healthy replicas' addresses again.
    pub async fn refresh(&self, pool: &Pool) -> Result<(), ApiError> {
        let endpoints = all(pool).await?;
        let mut table = HashMap::new();
        let mut outstanding = HashMap::new();
        for endpoint in endpoints.iter().filter(|e| !e.destroyed) {
            let mut upstreams = Vec::new();
            for route in endpoint.healthy() {
                let Some(address) =
                    replica_address(pool, route.session_id, endpoint.created.model.port).await?
                else {
                    continue;
                };
                let counter = lock(&self.outstanding)
                    .get(&route.session_id)
                    .cloned()
                    .unwrap_or_default();
                outstanding.insert(route.session_id, counter.clone());
                upstreams.push(Arc::new(Upstream {
                    session_id: route.session_id,
                    address,
                    outstanding: counter,
                }));
            }
            let counted = lock(&self.requests)
                .entry(endpoint.id())
                .or_default()
                .clone();
            table.insert(
                endpoint.id(),
                Arc::new(Served {
                    endpoint_id: endpoint.id(),
                    name: endpoint.created.name.clone(),
                    open_to_public: endpoint.created.open_to_public,
                    upstreams,
                    requests: counted,
                }),
            );
        }
        let addresses = table
            .values()
            .flat_map(|served| served.upstreams.iter().map(|u| u.address))
            .collect();
        self.connections.keep_only(&addresses);
        lock(&self.requests).retain(|id, _| table.contains_key(id));
        lock(&self.samples).retain(|id, _| table.contains_key(id));
        *lock(&self.outstanding) = outstanding;
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = table;
        Ok(())
    }

    /// This gateway's calls of each endpoint lately: (endpoint, requests per second, under
    /// way), measured over [`RATE_WINDOW`].
    pub fn traffic(&self) -> Vec<(Uuid, f64, i32)> {
        let now = Instant::now();
        let table = read(&self.table);
        let mut samples = lock(&self.samples);
        table
            .values()
            .map(|served| {
                let count = served.requests.load(Ordering::Relaxed);
                let kept = samples.entry(served.endpoint_id).or_default();
                kept.push_back((now, count));
                while kept.len() > 2 && now - kept[0].0 > RATE_WINDOW {
                    kept.pop_front();
                }
                let (since, then) = kept[0];
                let seconds = (now - since).as_secs_f64();
                let rate = match seconds > 0.0 {
                    true => (count - then) as f64 / seconds,
                    false => 0.0,
                };
                let outstanding: usize = served
                    .upstreams
                    .iter()
                    .map(|u| u.outstanding.load(Ordering::Relaxed))
                    .sum();
                (served.endpoint_id, rate, outstanding as i32)
            })
            .collect()
    }

    /// Keeps the table fresh, and this gateway's calls reported, until `stop`. `hint`, poked
    /// by the endpoints' events, wakes it while it serves none ([`rest`]).
    pub async fn follow(
        self: Arc<Self>,
        pool: Pool,
        hint: Option<Arc<Notify>>,
        stop: CancellationToken,
    ) {
        loop {
            if let Err(e) = self.refresh(&pool).await {
                tracing::debug!(error = %e.message, "the serving table was not refreshed");
            }
            let serving = !read(&self.table).is_empty();
            let traffic = self.traffic();
            if let Err(e) = db::serving::report_traffic(&pool, self.gateway, &traffic).await {
                tracing::debug!(error = %e.message, "this gateway's calls were not reported");
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = rest(serving, REFRESH_EVERY, hint.as_deref()) => {}
            }
        }
    }

    /// Whether `token` lets a caller through to endpoint `endpoint` now.
    pub async fn token_admits(
        &self,
        pool: &Pool,
        endpoint: Uuid,
        token: &str,
    ) -> Result<bool, ApiError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some((id, until)) = lock(&self.tokens).get(&digest) {
            if *until > now {
                return Ok(*id == endpoint);
            }
        }
        let Some((id, expires_at)) = db::serving::token(pool, &digest).await? else {
            return Ok(false);
        };
        let left = (expires_at - Utc::now()).to_std().unwrap_or_default();
        if left.is_zero() {
            return Ok(false);
        }
        lock(&self.tokens).insert(digest, (id, now + left.min(TOKEN_CACHE)));
        Ok(id == endpoint)
    }

    /// Passes over the replica at `address` for a while: it refused a connection.
    pub(crate) fn refused(&self, address: SocketAddr) {
        lock(&self.refused_until).insert(address, Instant::now() + Duration::from_secs(2));
    }

    /// Whether the replica at `address` refused a connection lately.
    pub(crate) fn passed_over(&self, address: SocketAddr) -> bool {
        let mut refused = lock(&self.refused_until);
        match refused.get(&address) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                refused.remove(&address);
                false
            }
            None => false,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}

/// Where replica `session` serves `port`: its main kernel's published port, while it runs.
pub async fn replica_address(
    pool: &Pool,
    session: Uuid,
    port: u16,
) -> Result<Option<SocketAddr>, ApiError> {
    let Some(detail) = db::sessions::detail(pool, session).await? else {
        return Ok(None);
    };
    let Ok(detail) = serde_json::from_str::<SessionDetail>(&detail.body) else {
        return Ok(None);
    };
    if detail.status != SessionStatus::Running.as_str() {
        return Ok(None);
    }
    Ok(crate::proxy::upstream_of(&detail, port).ok())
}

/// Waits between two looks at the endpoints: `busy` while there is one to serve or tend
/// (`busy_with`); with none, until `hint` is poked (an endpoint's event was published) or
/// [`QUIET_LOOK_EVERY`]. So an installation that serves no model does not read the log every
/// few hundred milliseconds, and a new endpoint is looked at as soon as its event is heard.
/// Without hints (no NATS) nothing would wake it, so it keeps to `busy`.
pub async fn rest(busy_with: bool, busy: Duration, hint: Option<&Notify>) {
    match hint {
        Some(hint) if !busy_with => {
            tokio::select! {
                _ = hint.notified() => {}
                _ = tokio::time::sleep(QUIET_LOOK_EVERY) => {}
            }
        }
        _ => tokio::time::sleep(busy).await,
    }
}

/// Every endpoint the log holds (destroyed ones too), by name.
pub async fn all(pool: &Pool) -> Result<Vec<Endpoint>, ApiError> {
    let client = pool.get().await?;
    let events = events::store::read_streams_with_prefix(&client, rules::CATEGORY, rules::CATEGORY)
        .await
        .map_err(LedgerError::from)?;
    Ok(rules::among(&events))
}

/// Endpoint `id`, if the log holds it.
pub async fn one(pool: &Pool, id: Uuid) -> Result<Option<Endpoint>, ApiError> {
    let stream = EventStore::new(pool.clone())
        .read_stream(&rules::stream_of(id))
        .await
        .map_err(LedgerError::from)?;
    Ok(rules::fold(&stream))
}

/// Why recording on an endpoint's stream did not happen.
#[derive(Debug)]
pub enum Recorded {
    Done,
    /// Something else was recorded on it first: fold it again and decide again.
    Moved,
}

/// Records `events` on `endpoint`'s stream, as `actor`, against the version it was folded at.
pub async fn record(
    pool: &Pool,
    endpoint: &Endpoint,
    events: Vec<Event>,
    actor: &str,
) -> Result<Recorded, ApiError> {
    if events.is_empty() {
        return Ok(Recorded::Done);
    }
    let metadata = events::trace::metadata(actor, None);
    match ledger::record_now(
        pool,
        &rules::stream_of(endpoint.id()),
        ExpectedVersion::Exact(endpoint.version),
        &events,
        &metadata,
    )
    .await
    {
        Ok(_) => Ok(Recorded::Done),
        Err(LedgerError::Store(StoreError::Conflict { .. })) => Ok(Recorded::Moved),
        Err(e) => Err(e.into()),
    }
}

/// A new token: 32 random bytes, URL-safe base64 behind `bst_`; what is kept is its digest.
pub fn new_token() -> (String, [u8; 32]) {
    use base64::Engine;
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let token = format!(
        "bst_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    );
    let digest = Sha256::digest(token.as_bytes()).into();
    (token, digest)
}

/// When a token made now for `seconds` expires.
pub fn expiry(seconds: u64) -> DateTime<Utc> {
    Utc::now() + chrono::TimeDelta::seconds(seconds.min(i64::MAX as u64) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Busy, a look every `busy`; with nothing to serve, a hint wakes it at once, and without
    /// one it looks again at the safety net's interval; with no hints at all it stays busy.
    #[tokio::test(start_paused = true)]
    async fn with_nothing_to_serve_a_hint_wakes_the_next_look_and_the_safety_net_bounds_it() {
        let busy = Duration::from_millis(250);
        let hint = Notify::new();
        let rested = |busy_with, hint| async move {
            let started = Instant::now();
            rest(busy_with, busy, hint).await;
            started.elapsed()
        };
        assert_eq!(
            rested(true, Some(&hint)).await,
            busy,
            "serving: the busy pace"
        );
        assert_eq!(rested(false, None).await, busy, "no hints: the busy pace");
        assert_eq!(
            rested(false, Some(&hint)).await,
            QUIET_LOOK_EVERY,
            "quiet, no hint: the safety net"
        );
        hint.notify_one();
        assert_eq!(
            rested(false, Some(&hint)).await,
            Duration::ZERO,
            "quiet, an endpoint's event heard: at once"
        );
    }

    #[test]
    fn a_host_under_the_serving_domain_names_its_endpoint_and_nothing_else_does() {
        let id = Uuid::now_v7();
        let domain = "serve.example.com";
        let host = host_of(id, domain);
        assert_eq!(endpoint_of_host(&host, domain), Some(Some(id)));
        let upper = format!("{}:8443", host.to_ascii_uppercase());
        assert_eq!(
            endpoint_of_host(&upper, domain),
            Some(Some(id)),
            "port, case"
        );
        assert_eq!(
            endpoint_of_host(&format!("{host}."), domain),
            Some(Some(id))
        );
        assert_eq!(
            endpoint_of_host("nope.serve.example.com", domain),
            Some(None)
        );
        assert_eq!(
            endpoint_of_host("serve.example.com", domain),
            None,
            "the domain itself"
        );
        assert_eq!(endpoint_of_host("evilserve.example.com", domain), None);
        assert_eq!(endpoint_of_host("127.0.0.1:8080", domain), None);
        assert_eq!(endpoint_of_host("[::1]:8080", domain), None);
    }
}
