//! The endpoints' replicas, run: one gateway at a time holds the serving lock
//! ([`crate::db::serving::try_lead`]) and, every [`TICK`], checks the health of each replica
//! that is due (its definition's interval), records what changed (`EndpointRouteHealthy`,
//! `EndpointRouteUnhealthy`), scales the endpoints whose autoscaling rules say so on the calls
//! every gateway reported (`domain::serving::autoscale`, `EndpointScaled` with its figures),
//! then does what each endpoint needs (`domain::serving::reconcile`): drains the replicas it
//! has too many of or that an update replaced (`EndpointRouteDraining`), terminates and records
//! those that leave, and launches those it is short of, as inference sessions of the endpoint's
//! owner at its revision, checked by the launcher as any create is.
//! Another gateway takes over when the holder goes (its connection, and the lock, close).
//!
//! What is kept in memory only (how many checks a replica failed in a row, when the next is
//! due, when a failed launch may be tried again) starts over at a take-over: a replica is
//! then given its full retries again, which delays a removal, never causes one.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::Utc;
use deadpool_postgres::Pool;
use domain::payloads::{
    EndpointReplicaAdded, EndpointReplicaRemoved, EndpointRouteDraining, EndpointRouteHealthy,
    EndpointRouteUnhealthy, SessionStatus,
};
use domain::serving::{self as rules, CheckResult, Endpoint, Verdict};
use events::catalogue::Event;
use http_body_util::Empty;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use launcher::launch::CreateSession;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Recorded;
use crate::db;
use crate::error::ApiError;

/// How often the leader looks at every endpoint.
pub const TICK: Duration = Duration::from_millis(250);

/// How often a gateway that does not lead asks for the lock again.
const ASK_EVERY: Duration = Duration::from_secs(2);

/// How long after a launch failed the endpoint's next is tried.
const LAUNCH_RETRY: Duration = Duration::from_secs(5);

/// Who the controller's events and commands are recorded as.
const ACTOR: &str = "serving";

/// What the leader remembers between ticks.
#[derive(Default)]
struct Memory {
    /// Per replica: failed checks in a row, and when the next check is due.
    checks: HashMap<Uuid, (u32, Instant)>,
    /// Per endpoint: when a launch may be tried again after one failed.
    launch_after: HashMap<Uuid, Instant>,
}

type Probe = Client<HttpConnector, Empty<Bytes>>;

/// Leads the endpoints' replicas whenever this gateway holds the serving lock, until `stop`.
/// `hint`, poked by the endpoints' events, wakes a leader that has nothing to tend
/// ([`super::rest`]).
pub async fn run(pool: Pool, hint: Option<Arc<Notify>>, stop: CancellationToken) {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    let probe: Probe = Client::builder(TokioExecutor::new()).build(connector);
    loop {
        match lead(&pool, &probe, hint.as_deref(), &stop).await {
            Ok(()) => return,
            Err(e) => tracing::debug!(error = %e.message, "serving: not leading"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(ASK_EVERY) => {}
        }
    }
}

/// Takes the lock if it is free and leads until `stop` (`Ok`) or a failure (`Err`: the lock
/// is let go with its connection).
async fn lead(
    pool: &Pool,
    probe: &Probe,
    hint: Option<&Notify>,
    stop: &CancellationToken,
) -> Result<(), ApiError> {
    let holder = pool.get().await?;
    if !db::serving::try_lead(&holder).await? {
        return Err(ApiError::internal("another gateway leads"));
    }
    tracing::info!("serving: this gateway runs the endpoints' replicas");
    // The lock lives with the connection: detached from the pool, it closes when dropped,
    // never handed to another caller still holding it.
    let holder = deadpool_postgres::Object::take(holder);
    let mut memory = Memory::default();
    loop {
        let tending = match tick(pool, probe, &mut memory).await {
            Ok(tending) => tending,
            Err(e) => {
                tracing::warn!(error = %e.message, "serving: a pass failed");
                if holder.is_closed() {
                    return Err(e);
                }
                true
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = super::rest(tending, TICK, hint) => {}
        }
    }
}

/// One look at every endpoint: health checks that are due, then what each needs; whether any
/// endpoint is left to tend (live, or destroyed with replicas still to end).
async fn tick(pool: &Pool, probe: &Probe, memory: &mut Memory) -> Result<bool, ApiError> {
    let endpoints = super::all(pool).await?;
    if !endpoints.iter().any(needs_tending) {
        memory.checks.clear();
        return Ok(false);
    }
    let mut statuses = HashMap::new();
    for endpoint in &endpoints {
        for id in endpoint.routes.keys() {
            let status = db::sessions::ledger_owner_status(pool, *id)
                .await?
                .map(|(_, s)| SessionStatus::parse(&s).unwrap_or(SessionStatus::Pending));
            statuses.insert(*id, status);
        }
    }
    let mut changed = false;
    for endpoint in endpoints.iter().filter(|e| !e.destroyed) {
        changed |= check(pool, endpoint, &statuses, probe, memory).await?;
    }
    let scaled: Vec<&Endpoint> = endpoints
        .iter()
        .filter(|e| e.autoscaling.is_some())
        .collect();
    // The gateways' calls are read only when an endpoint scales on them.
    let traffic = match scaled.is_empty() {
        true => HashMap::new(),
        false => db::serving::traffic(pool, super::TRAFFIC_FRESH).await?,
    };
    for endpoint in scaled {
        let (requests_per_second, outstanding_requests) =
            traffic.get(&endpoint.id()).copied().unwrap_or_default();
        let serving: Vec<Uuid> = endpoint.healthy().map(|r| r.session_id).collect();
        let samples = db::serving::replica_use(pool, &serving, super::USE_FRESH).await?;
        let (cpu_utilization, gpu_utilization) = rules::utilization(endpoint, &samples);
        let figures = rules::Traffic {
            requests_per_second,
            outstanding_requests,
            cpu_utilization,
            gpu_utilization,
        };
        if let Some(scaled) = rules::autoscale(endpoint, figures, Utc::now()) {
            tracing::info!(endpoint = %endpoint.created.name, replicas = scaled.replicas, reason = %scaled.reason, "serving: autoscaled");
            super::record(pool, endpoint, vec![Event::EndpointScaled(scaled)], ACTOR).await?;
            changed = true;
        }
    }
    let endpoints = match changed {
        true => super::all(pool).await?,
        false => endpoints,
    };
    for endpoint in endpoints.iter().filter(|e| needs_tending(e)) {
        let replicas: BTreeMap<Uuid, Option<SessionStatus>> = endpoint
            .routes
            .keys()
            .map(|id| (*id, statuses.get(id).copied().flatten()))
            .collect();
        let ended = rules::ended_among(&replicas);
        let plan = rules::reconcile(endpoint, &ended, Utc::now());
        apply(pool, endpoint, plan, memory).await?;
    }
    // Replicas gone from every endpoint are forgotten.
    memory.checks.retain(|id, _| statuses.contains_key(id));
    Ok(true)
}

/// Whether the controller has anything to do for `endpoint`: it is live, or destroyed with
/// replicas still to end.
fn needs_tending(endpoint: &Endpoint) -> bool {
    !(endpoint.destroyed && endpoint.routes.is_empty())
}

/// Checks the replicas of `endpoint` that are due and records what changed; whether
/// anything was recorded.
async fn check(
    pool: &Pool,
    endpoint: &Endpoint,
    statuses: &HashMap<Uuid, Option<SessionStatus>>,
    probe: &Probe,
    memory: &mut Memory,
) -> Result<bool, ApiError> {
    let spec = &endpoint.created.model.health_check;
    let now = Instant::now();
    let mut due = Vec::new();
    for route in endpoint.routes.values() {
        if route.health == rules::RouteHealth::Draining {
            continue;
        }
        let (_, next) = memory.checks.entry(route.session_id).or_insert((0, now));
        if *next > now {
            continue;
        }
        *next = now + Duration::from_millis(spec.interval_ms);
        due.push(route.clone());
    }
    let results = futures::future::join_all(due.iter().map(|route| async move {
        let status = statuses.get(&route.session_id).copied().flatten();
        let result = match status {
            Some(SessionStatus::Running) => {
                match super::replica_address(pool, route.session_id, endpoint.created.model.port)
                    .await
                {
                    Ok(Some(address)) => ask(probe, address, spec).await,
                    _ => CheckResult::NoAnswer("its port is not published yet".into()),
                }
            }
            Some(other) => CheckResult::NoAnswer(format!("its session is {}", other.as_str())),
            None => CheckResult::NoAnswer("its session is unknown".into()),
        };
        (route, result)
    }))
    .await;
    let mut events = Vec::new();
    for (route, result) in results {
        let failures = memory.checks.get(&route.session_id).map_or(0, |c| c.0);
        let verdict = rules::after_check(route, spec, failures, &result, Utc::now());
        let entry = memory.checks.entry(route.session_id).or_insert((0, now));
        match verdict {
            Verdict::Unchanged { failures } => entry.0 = failures,
            Verdict::Healthy => {
                entry.0 = 0;
                events.push(Event::EndpointRouteHealthy(EndpointRouteHealthy {
                    endpoint_id: endpoint.id(),
                    session_id: route.session_id,
                }));
            }
            Verdict::Unhealthy(reason) => {
                entry.0 = 0;
                events.push(Event::EndpointRouteUnhealthy(EndpointRouteUnhealthy {
                    endpoint_id: endpoint.id(),
                    session_id: route.session_id,
                    reason,
                }));
            }
        }
    }
    if events.is_empty() {
        return Ok(false);
    }
    super::record(pool, endpoint, events, ACTOR).await?;
    Ok(true)
}

/// One health check: `GET` the check's path at `address`, within its wait.
async fn ask(
    probe: &Probe,
    address: std::net::SocketAddr,
    spec: &domain::payloads::HealthCheck,
) -> CheckResult {
    let Ok(uri) = format!("http://{address}{}", spec.path).parse::<axum::http::Uri>() else {
        return CheckResult::NoAnswer("its path is no URI".into());
    };
    let wait = Duration::from_millis(spec.max_wait_ms);
    match tokio::time::timeout(wait, probe.get(uri)).await {
        Ok(Ok(answer)) => CheckResult::Answered(answer.status().as_u16()),
        Ok(Err(e)) if e.is_connect() => CheckResult::NoAnswer("connection refused".into()),
        Ok(Err(e)) => CheckResult::NoAnswer(e.to_string()),
        Err(_) => CheckResult::NoAnswer(format!("no answer within {wait:?}")),
    }
}

/// Does what `plan` says for `endpoint`: the leaving replicas' sessions terminated and their
/// removal recorded, then the replicas it is short of launched and recorded.
async fn apply(
    pool: &Pool,
    endpoint: &Endpoint,
    plan: rules::Plan,
    memory: &mut Memory,
) -> Result<(), ApiError> {
    let metadata = events::trace::metadata(ACTOR, None);
    let mut removed = Vec::new();
    for removal in plan.remove {
        if removal.terminate {
            let reason = format!("endpoint `{}`: {}", endpoint.created.name, removal.reason);
            let ended = events::lifecycle::command(pool, removal.session_id, &metadata, |s| {
                s.terminate(false, reason.clone())
            })
            .await;
            if let Err(e) = ended {
                tracing::debug!(session = %removal.session_id, error = %e, "a replica's session was not terminated (it may have ended)");
            }
        }
        memory.checks.remove(&removal.session_id);
        removed.push(Event::EndpointReplicaRemoved(EndpointReplicaRemoved {
            endpoint_id: endpoint.id(),
            session_id: removal.session_id,
            reason: removal.reason,
            failed: removal.failed,
        }));
    }
    removed.extend(plan.drain.into_iter().map(|(session_id, reason)| {
        Event::EndpointRouteDraining(EndpointRouteDraining {
            endpoint_id: endpoint.id(),
            session_id,
            reason,
        })
    }));
    let destroyed_and_empty = endpoint.destroyed && !removed.is_empty();
    if let Recorded::Moved = super::record(pool, endpoint, removed, ACTOR).await? {
        return Ok(());
    }
    if destroyed_and_empty {
        db::serving::forget_tokens(pool, endpoint.id()).await?;
    }
    if plan.start == 0 {
        return Ok(());
    }
    if memory
        .launch_after
        .get(&endpoint.id())
        .is_some_and(|after| *after > Instant::now())
    {
        return Ok(());
    }
    let Some(owner) =
        launcher::db::user_by_email(&pool.get().await?, &endpoint.created.owner.email)
            .await
            .map_err(ApiError::from)?
    else {
        tracing::warn!(endpoint = %endpoint.id(), "serving: the endpoint's owner is gone");
        memory
            .launch_after
            .insert(endpoint.id(), Instant::now() + LAUNCH_RETRY);
        return Ok(());
    };
    let mut added = Vec::new();
    for _ in 0..plan.start {
        match launcher::launch::launch(pool, &owner, replica_request(endpoint)).await {
            Ok(launched) => added.extend(launched.into_iter().map(|l| l.session_id)),
            Err(e) => {
                tracing::warn!(endpoint = %endpoint.created.name, error = %e, "serving: a replica could not be launched");
                memory
                    .launch_after
                    .insert(endpoint.id(), Instant::now() + LAUNCH_RETRY);
                break;
            }
        }
    }
    // Recorded against the stream as it is now (the removals above moved it); what lands
    // between is retried on, so a launched replica is never left out.
    for _ in 0..10 {
        let Some(now) = super::one(pool, endpoint.id()).await? else {
            break;
        };
        let events = added
            .iter()
            .map(|session_id| {
                Event::EndpointReplicaAdded(EndpointReplicaAdded {
                    endpoint_id: endpoint.id(),
                    session_id: *session_id,
                    revision: endpoint.revision,
                })
            })
            .collect();
        if let Recorded::Done = super::record(pool, &now, events, ACTOR).await? {
            return Ok(());
        }
    }
    tracing::warn!(endpoint = %endpoint.created.name, replicas = ?added, "serving: launched replicas could not be recorded");
    Ok(())
}

/// The create request of one replica of `endpoint`: an inference session of its owner's
/// ([`super::replica_session`]), told which model it serves.
pub fn replica_request(endpoint: &Endpoint) -> CreateSession {
    let created = &endpoint.created;
    let replica = super::replica_session(
        created.image.clone(),
        Some(created.resource_group.clone()),
        super::asked_resources(&created.resources),
        &created.model_folder,
        &created.model,
    );
    CreateSession {
        project: created.owner.project.clone(),
        // `BERTH_*` names are berth's own; these are the model's.
        environment: BTreeMap::from([
            ("MODEL_NAME".to_owned(), created.model.model_name.clone()),
            ("MODEL_PATH".to_owned(), created.model.model_path.clone()),
            ("ENDPOINT_ID".to_owned(), created.endpoint_id.to_string()),
        ]),
        ..replica
    }
}
