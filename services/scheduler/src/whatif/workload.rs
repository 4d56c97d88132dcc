//! A resource group's recorded workload, read out of the log's events (pure: the events come
//! from [`super::db::logged_events`], in log order). What each field means, and what the log
//! cannot tell, is said on [`super::Workload`] and in the module docs of [`super`].

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use events::catalogue::Event;
use events::payloads::*;
use uuid::Uuid;

use super::{
    AgentChange, AgentOffer, Hold, OwnerLimits, Pacing, Placement, Request, Requeued, Silence,
    Workload,
};
use crate::core::{self, GroupRules};
use crate::fair_share::{FairShareSettings, ResourceWeights};

/// One event of the log, with the transaction that recorded it and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Logged {
    /// The recording transaction (one scheduler pass records its decisions in one).
    pub tx: String,
    pub at: DateTime<Utc>,
    pub event: Event,
}

/// The event types a workload is read from (the others are not read at all).
pub const EVENT_TYPES: &[&str] = &[
    "ResourceGroupCreated",
    "ResourcePolicySet",
    "UserCreated",
    "AgentRegistered",
    "AgentLost",
    "AgentReturned",
    "AgentDeparted",
    "AgentRevoked",
    "SessionRequested",
    "SchedulingAttempted",
    "SessionScheduled",
    "SessionStatusChanged",
    "SessionResourcesReleased",
    "SchedulerWakeupsMissed",
];

/// What the log says of one session of the group.
#[derive(Default)]
struct Told {
    request: Option<Request>,
    /// Each time it was placed, in order.
    placements: Vec<Placed>,
    withdrawn_at: Option<DateTime<Utc>>,
    cancelled_at: Option<DateTime<Utc>>,
    /// The reconciler's last row on it: its result and code.
    reconciled: Option<(SchedulingResult, Option<String>)>,
}

/// One placement of a session, and how it ended.
struct Placed {
    placement: Placement,
    released_at: Option<DateTime<Utc>>,
    /// It ended with the session back in the queue (its agent lost or gone before it ran,
    /// or its start stalled), not with the session: the reconciler's result and code.
    requeued: Option<(SchedulingResult, Option<String>)>,
}

/// The workload of `group` within `[from, to]` (`None`: from the log's first event, to its
/// last), read from `events` in log order; `None` when the log never created the group.
pub fn workload(
    events: &[Logged],
    group: &str,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) -> Option<Workload> {
    let from = from.or_else(|| events.iter().map(|e| e.at).min())?;
    let to = to.or_else(|| events.iter().map(|e| e.at).max())?;
    let mut rules: Option<GroupRules> = None;
    let mut policies: HashMap<String, (u32, ResourceSlots)> = HashMap::new();
    let mut user_policy: HashMap<Uuid, String> = HashMap::new();
    // Agents of the group now, with what they offer; and the last offer of each (a return).
    let mut in_group: HashSet<String> = HashSet::new();
    let mut offers: HashMap<String, AgentOffer> = HashMap::new();
    let mut agents: Vec<AgentChange> = Vec::new();
    let mut told: HashMap<Uuid, Told> = HashMap::new();
    let mut order: Vec<Uuid> = Vec::new();
    // Each pass (transaction) of the group: its moment, and whether it gave up or expired
    // a session (then its cancellation is the scheduler's, not the user's).
    let mut pass_at: HashMap<String, DateTime<Utc>> = HashMap::new();
    let mut scheduler_cancelled: HashSet<(String, Uuid)> = HashSet::new();
    let mut deaf: Vec<(DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    let mut silences: Vec<Silence> = Vec::new();
    let views = pass_views(events);

    for logged in events.iter().filter(|e| e.at <= to) {
        let at = logged.at;
        match &logged.event {
            Event::ResourceGroupCreated(g) if g.name == group => {
                rules = Some(GroupRules {
                    name: g.name.clone(),
                    queue_policy: g.queue_policy,
                    agent_selection: g.agent_selection,
                    max_attempts: g.max_attempts.max(1),
                    skip_after: g.skip_after,
                    pending_timeout_secs: g.pending_timeout_secs,
                    fair_share: Default::default(),
                    starve_after_secs: 0,
                });
            }
            // The group's scheduling as an admin last set it within the window: the policy
            // that really ran is the one in force at its end.
            Event::ResourceGroupSchedulingSet(g) if g.name == group => {
                if let Some(rules) = rules.as_mut() {
                    rules.queue_policy = g.queue_policy;
                    rules.fair_share = FairShareSettings {
                        half_life_secs: g.half_life_secs,
                        lookback_secs: g.lookback_secs,
                        weights: ResourceWeights {
                            cpu_per_core: g.weight_cpu_per_core,
                            memory_per_gib: g.weight_memory_per_gib,
                            gpu_per_device: g.weight_gpu_per_device,
                        },
                    };
                    rules.starve_after_secs = g.starve_after_secs;
                }
            }
            Event::SessionPriorityChanged(c) => {
                if let Some(request) = told.get_mut(&c.session_id).and_then(|t| t.request.as_mut())
                {
                    request.reprioritized.push((at, c.to));
                }
            }
            Event::ResourcePolicySet(p) => {
                policies.insert(p.name.clone(), (p.max_concurrent_sessions, p.max_total));
            }
            Event::UserCreated(u) => {
                user_policy.insert(u.user_id, u.resource_policy.clone());
            }
            Event::AgentRegistered(a) => {
                let offer = AgentOffer {
                    capacity: a.capacity,
                    network_scope: a
                        .network_scope
                        .clone()
                        .unwrap_or_else(|| format!("agent:{}", a.agent_id)),
                    volumes: a.volumes.clone(),
                };
                if a.resource_group == group {
                    in_group.insert(a.agent_id.clone());
                    offers.insert(a.agent_id.clone(), offer.clone());
                    agents.push(AgentChange {
                        at,
                        agent_id: a.agent_id.clone(),
                        joined: Some(offer),
                        wakes: true,
                    });
                } else if in_group.remove(&a.agent_id) {
                    offers.remove(&a.agent_id);
                    agents.push(AgentChange {
                        at,
                        agent_id: a.agent_id.clone(),
                        joined: None,
                        wakes: true,
                    });
                }
            }
            Event::AgentLost(AgentLost {
                agent_id,
                last_heard,
                ..
            }) if in_group.contains(agent_id) => {
                // Silent before it was lost: passed over from its silence on.
                if let Some(heard) = last_heard.filter(|h| *h < at) {
                    silences.push(Silence {
                        agent_id: agent_id.clone(),
                        heard,
                        lost: at,
                    });
                }
                agents.push(AgentChange {
                    at,
                    agent_id: agent_id.clone(),
                    joined: None,
                    wakes: true,
                });
            }
            Event::AgentDeparted(AgentDeparted { agent_id, .. })
            | Event::AgentRevoked(AgentRevoked { agent_id, .. })
                if in_group.contains(agent_id) =>
            {
                agents.push(AgentChange {
                    at,
                    agent_id: agent_id.clone(),
                    joined: None,
                    // A revocation is no wake-up of the live scheduler's; a departure is.
                    wakes: matches!(logged.event, Event::AgentDeparted(_)),
                });
            }
            // A return is no wake-up either: the live scheduler sees it at its next pass.
            Event::AgentReturned(AgentReturned { agent_id }) if in_group.contains(agent_id) => {
                if let Some(offer) = offers.get(agent_id) {
                    agents.push(AgentChange {
                        at,
                        agent_id: agent_id.clone(),
                        joined: Some(offer.clone()),
                        wakes: false,
                    });
                }
            }
            Event::SchedulerWakeupsMissed(m) => deaf.push((m.from, m.until)),
            Event::SessionRequested(r) if r.resource_group == group => {
                order.push(r.session_id);
                told.entry(r.session_id).or_default().request = Some(Request {
                    session_id: r.session_id,
                    owner: r.owner.user_id,
                    user: r.owner.email.clone(),
                    project: r.owner.project.clone(),
                    per_kernel: r.resources,
                    cluster_mode: r.cluster_mode,
                    cluster_size: r.cluster_size.max(1),
                    wanted_agent: r.agent_id.clone(),
                    starts_at: r.starts_at,
                    volumes: events::volumes::needed(&r.volumes),
                    priority: r.priority,
                    reprioritized: Vec::new(),
                    requested_at: at,
                    held_for: Some(chrono::TimeDelta::zero()),
                    requeued_after: Vec::new(),
                    withdrawn_at: None,
                    recorded: None,
                    recorded_cancel: None,
                });
            }
            // The reconciler's rows (phase `reconcile`) are no pass of the scheduler's; the
            // result and code of one that sends a session back to the queue are its own.
            Event::SchedulingAttempted(a) if a.phase != core::PHASE => {
                if let Some(t) = told.get_mut(&a.session_id) {
                    t.reconciled = Some((a.result, a.error_code.clone()));
                }
            }
            Event::SchedulingAttempted(a) if told.contains_key(&a.session_id) => {
                let moment = pass_moment(a, at);
                let pass = pass_at.entry(logged.tx.clone()).or_insert(moment);
                *pass = (*pass).min(moment);
                if matches!(
                    a.result,
                    SchedulingResult::GiveUp | SchedulingResult::Expired
                ) || a.status_after == SessionStatus::Cancelled
                {
                    scheduler_cancelled.insert((logged.tx.clone(), a.session_id));
                    if let Some(t) = told.get_mut(&a.session_id) {
                        t.cancelled_at.get_or_insert(moment);
                    }
                }
            }
            Event::SessionScheduled(s) => {
                if let Some(t) = told.get_mut(&s.session_id) {
                    t.placements.push(Placed {
                        placement: Placement {
                            at: pass_at.get(&logged.tx).copied().unwrap_or(at),
                            kernels: s.placements(),
                        },
                        released_at: None,
                        requeued: None,
                    });
                }
            }
            // Back in the queue from a placement (its agent gone before it ran, or its start
            // stalled): that placement ends in a requeue.
            Event::SessionStatusChanged(c)
                if c.to == SessionStatus::Pending && c.from != SessionStatus::Pending =>
            {
                if let Some(t) = told.get_mut(&c.session_id) {
                    let why = t
                        .reconciled
                        .take()
                        .unwrap_or((SchedulingResult::NeedRetry, None));
                    if let Some(last) = t.placements.last_mut() {
                        last.requeued = Some(why);
                    }
                }
            }
            Event::SessionStatusChanged(c)
                if c.from == SessionStatus::Pending
                    && c.to == SessionStatus::Cancelled
                    && !scheduler_cancelled.contains(&(logged.tx.clone(), c.session_id)) =>
            {
                if let Some(t) = told.get_mut(&c.session_id) {
                    t.withdrawn_at.get_or_insert(at);
                }
            }
            Event::SessionResourcesReleased(r) => {
                if let Some(last) = told
                    .get_mut(&r.session_id)
                    .and_then(|t| t.placements.last_mut())
                {
                    last.released_at
                        .get_or_insert(seen_from(&views, &logged.tx, at));
                }
            }
            _ => {}
        }
    }
    let rules = rules?;

    // Agents there at `from` join at `from`; later changes keep their moments.
    let agents = agents
        .into_iter()
        .map(|c| AgentChange {
            at: c.at.max(from),
            ..c
        })
        .collect();
    let mut requests = Vec::new();
    let mut background = Vec::new();
    for id in order {
        let Some(t) = told.remove(&id) else { continue };
        let Some(mut request) = t.request else {
            continue;
        };
        if request.requested_at < from {
            // Not replayed: what it held during the window is held as recorded.
            for placed in t.placements {
                if placed.released_at.is_none_or(|r| r > from) {
                    background.push(Hold {
                        owner: request.owner,
                        project: request.project.clone(),
                        kernels: placed.placement.kernels,
                        from: placed.placement.at,
                        until: placed.released_at,
                    });
                }
            }
            continue;
        }
        let within: Vec<Placed> = t
            .placements
            .into_iter()
            .filter(|p| p.placement.at <= to)
            .collect();
        // Each placement holds for as long as it really did; those that ended in a requeue
        // send the session back to the queue when they end.
        for placed in &within {
            let held = placed.released_at.map(|r| r - placed.placement.at);
            match &placed.requeued {
                Some((result, error_code)) => request.requeued_after.push(Requeued {
                    held: held.unwrap_or_default().max(chrono::TimeDelta::zero()),
                    result: *result,
                    error_code: error_code.clone(),
                }),
                None => request.held_for = held,
            }
        }
        request.recorded = within.into_iter().next().map(|p| p.placement);
        request.withdrawn_at = t.withdrawn_at;
        request.recorded_cancel = t.cancelled_at.filter(|at| *at <= to);
        requests.push(request);
    }
    let limits = requests
        .iter()
        .filter_map(|r| {
            let policy = user_policy.get(&r.owner)?;
            let (max_sessions, max_total) = policies.get(policy)?;
            Some((
                r.owner,
                OwnerLimits {
                    policy: policy.clone(),
                    max_sessions: *max_sessions,
                    max_total: *max_total,
                },
            ))
        })
        .collect();
    let mut passes: Vec<DateTime<Utc>> = pass_at
        .into_values()
        .filter(|p| *p >= from && *p <= to)
        .collect();
    passes.sort();
    passes.dedup();
    deaf.sort();
    Some(Workload {
        rules,
        from,
        to,
        agents,
        requests,
        background,
        limits,
        passes,
        silences,
        deaf,
        pacing: Pacing::default(),
    })
}

/// The moment of the scheduler pass that recorded `row` at `at`: its snapshot's `now`,
/// which every step carries.
fn pass_moment(row: &SchedulingAttempted, at: DateTime<Utc>) -> DateTime<Utc> {
    row.steps.first().map_or(at, |s| s.started_at)
}

/// Each scheduler pass's moment (any group's) and what its read of the agents saw of the
/// log, in time order; passes recorded before passes kept it are not among them.
fn pass_views(events: &[Logged]) -> Vec<(DateTime<Utc>, &LogView)> {
    let mut views: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::SchedulingAttempted(a) if a.phase == core::PHASE => {
                let view = a.read.as_ref()?;
                Some((pass_moment(a, e.at), view))
            }
            _ => None,
        })
        .collect();
    views.sort_by_key(|(moment, _)| *moment);
    views
}

/// When the scheduler could first see what transaction `tx` recorded at `at`: just after the
/// last of the passes from `at` on whose reads did not see it (its transaction was still
/// committing), else at `at`.
fn seen_from(views: &[(DateTime<Utc>, &LogView)], tx: &str, at: DateTime<Utc>) -> DateTime<Utc> {
    let Ok(tx) = tx.parse::<u64>() else {
        return at;
    };
    views[views.partition_point(|(moment, _)| *moment < at)..]
        .iter()
        .take_while(|(_, view)| !view.sees(tx))
        .last()
        .map_or(at, |(moment, _)| {
            *moment + chrono::TimeDelta::microseconds(1)
        })
}

/// The groups that requests of the log were made in, by name.
pub fn groups(events: &[Logged]) -> Vec<String> {
    let mut names: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::SessionRequested(r) => Some(r.resource_group.clone()),
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}
