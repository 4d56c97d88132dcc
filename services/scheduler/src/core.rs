//! The scheduling core: given one resource group's queue, agents and owners' loads, decide
//! for each pending session whether it is placed (and where), waits, is skipped, or is given
//! up on, with the figures that decided it. Pure and deterministic (time comes in the
//! snapshot), so every choice is unit-tested and the I/O layer only loads and records.
//!
//! Three things Backend.AI users suffer from are designed out here:
//! - *PENDING with no visible reason*: every outcome carries a message with the figures
//!   (asked, free, limit) and an error code, recorded as scheduling history.
//! - *Head-of-line blocking*: under every policy but `backfill`, the first session of the
//!   pass's order (`crate::policy`) that does not fit holds those after it back for at most
//!   `skip_after` counted attempts; `backfill` never holds anyone back. Only
//!   a shortage of the group's resources blocks; an owner's own limit never blocks others.
//! - *Retry limits that never fire*: counted attempts end in GIVE_UP at `max_attempts`, and
//!   the group's pending timeout ends any wait in EXPIRED; both cancel the session with the
//!   reason.
//!
//! A multi-node cluster's kernels share a cluster network, so they go only to agents of one
//! *network scope* (the agents of one Docker engine, or of one overlay network): a cluster
//! no scope could ever hold is cancelled at once, saying so; one that a busy scope could hold
//! waits, saying which.
//!
//! Nothing is placed on an agent that has gone unheard for longer than the snapshot's
//! `silent_after` (two heartbeats missed), even before the reconciler calls it lost: it is
//! passed over, and every decision of the pass says which agents were and for how long they
//! had been silent.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use events::catalogue::Event;
use events::payloads::*;
use events::volumes;
use uuid::Uuid;

pub use crate::fair_share::{FairShareSettings, Usage};
use crate::policy::Order;

/// The phase name of placement in scheduling history.
pub const PHASE: &str = "schedule";

/// An agent of the group not marked lost, with what it has reserved so far.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentView {
    pub agent_id: String,
    pub capacity: ResourceSlots,
    pub used: ResourceSlots,
    /// How long since it was last heard from (a heartbeat, a registration); `None` while
    /// silence cannot be told apart from an outage of the bus (no recorder has listened
    /// without a break for long enough), so it is taken as live.
    pub unheard_for: Option<Duration>,
    /// The cluster network it shares with other agents (`engine:<Docker engine id>`, or
    /// `agent:<id>` for an agent that shares none): a multi-node cluster's kernels all go to
    /// agents of one scope.
    pub network_scope: String,
    /// The shared volumes it mounts: a session whose folders live on some goes only to an
    /// agent that mounts them all.
    pub volumes: Vec<String>,
}

impl AgentView {
    pub fn free(&self) -> ResourceSlots {
        self.capacity.saturating_sub(self.used)
    }

    /// Whether it has been silent for longer than `after`: nothing is placed on it then.
    pub fn is_silent(&self, after: Duration) -> bool {
        self.unheard_for.is_some_and(|unheard| unheard > after)
    }
}

/// A session waiting in the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingSession {
    pub session_id: Uuid,
    /// Stream version the decision is based on (the append expects it).
    pub version: u64,
    pub owner: Uuid,
    pub per_kernel: ResourceSlots,
    pub cluster_mode: ClusterMode,
    pub cluster_size: u32,
    pub wanted_agent: Option<String>,
    pub starts_at: Option<DateTime<Utc>>,
    /// When it last entered the queue: at its request, or when it came back (its placement
    /// stalled, or its agent went away). The group's pending timeout counts from here, so a
    /// session that ran for hours and is placed again is not expired at once.
    pub queued_at: DateTime<Utc>,
    pub attempts: u32,
    pub last_result: Option<SchedulingResult>,
    pub last_error_code: Option<String>,
    /// Higher goes first within the group's policy.
    pub priority: i32,
    /// The project it runs for, if any (fair share counts projects' use too).
    pub project: Option<String>,
    /// The shared volumes its folders live on: only agents that mount them all may hold it.
    pub volumes: Vec<String>,
    /// Its image, and the group's live agents that hold it now (the others pull it): said in
    /// the history row of its placement. Empty where nobody asks (a what-if replay).
    pub image: String,
    /// Shared by every session of the pass that asks for the same image.
    pub image_on: std::sync::Arc<[String]>,
}

impl PendingSession {
    pub fn total(&self) -> ResourceSlots {
        let n = self.cluster_size as u64;
        ResourceSlots {
            cpu_milli: self.per_kernel.cpu_milli * n,
            memory_bytes: self.per_kernel.memory_bytes.saturating_mul(n),
            gpu_milli: self.per_kernel.gpu_milli * n,
        }
    }
}

/// What an owner holds now and what their policy allows.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerLoad {
    pub policy: String,
    pub sessions: u32,
    pub used: ResourceSlots,
    pub max_sessions: u32,
    pub max_total: ResourceSlots,
}

/// A resource group's scheduling settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupRules {
    pub name: String,
    pub queue_policy: QueuePolicy,
    pub agent_selection: AgentSelection,
    pub max_attempts: u32,
    pub skip_after: u32,
    /// 0: no limit.
    pub pending_timeout_secs: u64,
    /// How past use is counted under `fair-share`.
    pub fair_share: FairShareSettings,
    /// Longest a session may be passed over by others of higher priority or policy rank
    /// before it goes first whatever its rank; 0: no bound.
    pub starve_after_secs: u64,
}

/// Everything one pass over a group decides on.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub group: GroupRules,
    /// Agents not marked lost, in a stable order (by id). [`plan`] leaves only the live ones
    /// (not silent for longer than `silent_after`), with what it placed on them.
    pub agents: Vec<AgentView>,
    /// How long an agent may go unheard before it is passed over (two heartbeats,
    /// `events::aggregate::SILENT_AFTER`, in service).
    pub silent_after: Duration,
    /// Pending sessions, oldest first.
    pub queue: Vec<PendingSession>,
    pub owners: HashMap<Uuid, OwnerLoad>,
    /// What each owner holds in this group now (DRF's shares are of these).
    pub held: HashMap<Uuid, ResourceSlots>,
    /// Decayed past use in this group (fair share's factors come from it).
    pub usage: Usage,
    pub now: DateTime<Utc>,
    /// Whether the group gained free resources since the last pass: only then is a wait for
    /// resources tried again as a counted attempt.
    pub capacity_grew: bool,
}

/// The decision on one session.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub session_id: Uuid,
    pub version: u64,
    pub result: SchedulingResult,
    pub error_code: Option<&'static str>,
    pub message: String,
    pub steps: Vec<SchedulingStep>,
    /// Counted attempts, this one included.
    pub attempts: u32,
    pub placement: Option<Vec<KernelPlacement>>,
    /// Set when the session is cancelled (gave up, expired).
    pub cancel_reason: Option<String>,
    /// Whether this decision is worth a history row (repeats of an unchanged wait are not).
    pub record: bool,
}

impl Decision {
    /// The events that record this decision on the session's stream.
    pub fn events(&self) -> Vec<Event> {
        let status_after = if self.placement.is_some() {
            SessionStatus::Scheduled
        } else if self.cancel_reason.is_some() {
            SessionStatus::Cancelled
        } else {
            SessionStatus::Pending
        };
        let mut events = vec![Event::SchedulingAttempted(SchedulingAttempted {
            read: None,
            session_id: self.session_id,
            phase: PHASE.into(),
            result: self.result,
            status_before: SessionStatus::Pending,
            status_after,
            attempts: self.attempts,
            message: self.message.clone(),
            error_code: self.error_code.map(str::to_owned),
            steps: self.steps.clone(),
        })];
        if let Some(kernels) = &self.placement {
            let resources = kernels.iter().fold(ResourceSlots::default(), |sum, k| {
                sum.saturating_add(k.resources)
            });
            events.push(Event::SessionScheduled(SessionScheduled {
                session_id: self.session_id,
                agent_id: kernels[0].agent_id.clone(),
                resources,
                kernels: kernels.clone(),
            }));
        }
        if self.placement.is_some() || self.cancel_reason.is_some() {
            events.push(Event::SessionStatusChanged(SessionStatusChanged {
                session_id: self.session_id,
                from: SessionStatus::Pending,
                to: status_after,
                reason: self.cancel_reason.clone(),
                exit_code: None,
                occurred_at: None,
            }));
        }
        events
    }
}

/// Resources in words, for messages.
pub fn describe(s: ResourceSlots) -> String {
    format!(
        "cpu {} cores, memory {} MiB, gpu {}",
        s.cpu_milli as f64 / 1000.0,
        s.memory_bytes >> 20,
        s.gpu_milli as f64 / 1000.0
    )
}

use crate::free_index::{key, FreeIndex};

/// Where a session can go.
#[derive(Debug, Clone, PartialEq)]
enum Selection {
    Placed(Vec<(usize, ResourceSlots)>),
    /// It would fit the group's agents, just not now.
    Busy {
        most_free: ResourceSlots,
    },
    /// No agent (or all of them together, for multi-node) could ever hold it.
    NeverFits {
        largest: ResourceSlots,
    },
    /// A multi-node cluster the group's agents could hold together, but no network scope
    /// could: how many of its kernels each scope could ever hold.
    NoSharedNetwork {
        scopes: Vec<(String, u64)>,
    },
    /// A multi-node cluster some scope could hold, but none can now: how many kernels each
    /// scope that could ever hold it has room for now.
    ScopesBusy {
        scopes: Vec<(String, u64)>,
    },
    NoAgents,
    /// Its folders' volumes: no live agent of the group mounts them all.
    NoVolume,
    /// The agent chosen by hand does not mount these volumes of its folders.
    WantedLacksVolumes {
        lacking: Vec<String>,
    },
    WantedUnknown,
    WantedTooSmall {
        capacity: ResourceSlots,
    },
    WantedBusy {
        free: ResourceSlots,
    },
}

/// The agent `need` goes on, by a scan of every agent: the reference [`FreeIndex::pick`]
/// must agree with, and the choice among a multi-node cluster's few agents.
pub(crate) fn pick(
    agents: &[AgentView],
    need: ResourceSlots,
    selection: AgentSelection,
) -> Option<usize> {
    let mut best: Option<(usize, (u64, u64, u64))> = None;
    for (i, agent) in agents.iter().enumerate() {
        let free = agent.free();
        if !need.fits_in(free) {
            continue;
        }
        let after = key(free.saturating_sub(need));
        let better = match (best, selection) {
            (None, _) => true,
            (Some((_, b)), AgentSelection::Concentrated) => after < b,
            (Some((_, b)), AgentSelection::Dispersed) => after > b,
        };
        if better {
            best = Some((i, after));
        }
    }
    best.map(|(i, _)| i)
}

/// Where `session` can go among `agents`: those that mount every volume of its folders, and
/// of them as [`select_among`] chooses.
fn select(
    agents: &[AgentView],
    index: &FreeIndex,
    session: &PendingSession,
    selection: AgentSelection,
) -> Selection {
    if agents.is_empty() {
        return Selection::NoAgents;
    }
    if session.volumes.is_empty() {
        return select_among(agents, index, session, selection);
    }
    let lacking = |agent: &AgentView| volumes::lacking(&session.volumes, &agent.volumes);
    if let Some(wanted) = agents
        .iter()
        .find(|a| Some(&a.agent_id) == session.wanted_agent.as_ref())
    {
        let lacking: Vec<String> = lacking(wanted).into_iter().map(str::to_owned).collect();
        if !lacking.is_empty() {
            return Selection::WantedLacksVolumes { lacking };
        }
    }
    // The agents that mount them all, placed among as if they were the group (a scan over a
    // few agents: sessions with shared folders are a part of the queue).
    let able: Vec<usize> = (0..agents.len())
        .filter(|&i| lacking(&agents[i]).is_empty())
        .collect();
    if able.is_empty() {
        return Selection::NoVolume;
    }
    let subset: Vec<AgentView> = able.iter().map(|&i| agents[i].clone()).collect();
    let subset_index = FreeIndex::new(&subset);
    match select_among(&subset, &subset_index, session, selection) {
        Selection::Placed(chosen) => Selection::Placed(
            chosen
                .into_iter()
                .map(|(i, resources)| (able[i], resources))
                .collect(),
        ),
        other => other,
    }
}

fn select_among(
    agents: &[AgentView],
    index: &FreeIndex,
    session: &PendingSession,
    selection: AgentSelection,
) -> Selection {
    let total = session.total();
    if let Some(wanted) = &session.wanted_agent {
        let Some(i) = agents.iter().position(|a| &a.agent_id == wanted) else {
            return Selection::WantedUnknown;
        };
        let agent = &agents[i];
        if !total.fits_in(agent.capacity) {
            return Selection::WantedTooSmall {
                capacity: agent.capacity,
            };
        }
        if !total.fits_in(agent.free()) {
            return Selection::WantedBusy { free: agent.free() };
        }
        return Selection::Placed(vec![(i, session.per_kernel); session.cluster_size as usize]);
    }
    let largest = index.largest();
    match session.cluster_mode {
        ClusterMode::SingleNode => {
            if !index.ever_fits(total) {
                return Selection::NeverFits { largest };
            }
            match index.pick(agents, total, selection) {
                Some(i) => {
                    Selection::Placed(vec![(i, session.per_kernel); session.cluster_size as usize])
                }
                None => Selection::Busy {
                    most_free: index.most_free(agents),
                },
            }
        }
        ClusterMode::MultiNode => {
            let all = agents.iter().fold(ResourceSlots::default(), |s, a| {
                s.saturating_add(a.capacity)
            });
            if !agents
                .iter()
                .any(|a| session.per_kernel.fits_in(a.capacity))
                || !total.fits_in(all)
            {
                return Selection::NeverFits { largest };
            }
            place_in_one_scope(agents, session)
        }
    }
}

/// How many kernels of `per_kernel` fit in `room`.
fn kernels_in(room: ResourceSlots, per_kernel: ResourceSlots) -> u64 {
    let fits = |room: u64, need: u64| room.checked_div(need).unwrap_or(u64::MAX);
    fits(room.cpu_milli, per_kernel.cpu_milli)
        .min(fits(room.memory_bytes, per_kernel.memory_bytes))
        .min(fits(room.gpu_milli, per_kernel.gpu_milli))
}

/// A multi-node cluster's kernels on the agents of one network scope: of the scopes that
/// could ever hold it (their agents' capacities), the first (by most room now, then name)
/// that can now, each kernel on the emptiest agent left.
fn place_in_one_scope(agents: &[AgentView], session: &PendingSession) -> Selection {
    let size = session.cluster_size as u64;
    // Each scope's agents, and the kernels they could hold in all and now.
    let mut scopes: std::collections::BTreeMap<&str, (Vec<usize>, u64, u64)> =
        std::collections::BTreeMap::new();
    for (i, agent) in agents.iter().enumerate() {
        let scope = scopes.entry(agent.network_scope.as_str()).or_default();
        scope.0.push(i);
        scope.1 = scope
            .1
            .saturating_add(kernels_in(agent.capacity, session.per_kernel));
        scope.2 = scope
            .2
            .saturating_add(kernels_in(agent.free(), session.per_kernel));
    }
    let mut able: Vec<(&str, Vec<usize>, u64)> = scopes
        .iter()
        .filter(|(_, (_, ever, _))| *ever >= size)
        .map(|(name, (members, _, now))| (*name, members.clone(), *now))
        .collect();
    if able.is_empty() {
        return Selection::NoSharedNetwork {
            scopes: scopes
                .iter()
                .map(|(name, (_, ever, _))| (name.to_string(), (*ever).min(size)))
                .collect(),
        };
    }
    able.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)));
    let Some((_, members, _)) = able.iter().find(|(_, _, now)| *now >= size) else {
        return Selection::ScopesBusy {
            scopes: able
                .iter()
                .map(|(name, _, now)| (name.to_string(), *now))
                .collect(),
        };
    };
    // Kernels are spread: each goes to the emptiest agent of the scope left, on a scratch copy.
    let mut scratch: Vec<AgentView> = members.iter().map(|&i| agents[i].clone()).collect();
    let mut placed = Vec::with_capacity(size as usize);
    for _ in 0..size {
        let i = pick(&scratch, session.per_kernel, AgentSelection::Dispersed)
            .expect("the scope has room for every kernel");
        scratch[i].used = scratch[i].used.saturating_add(session.per_kernel);
        placed.push((members[i], session.per_kernel));
    }
    Selection::Placed(placed)
}

/// What besides room decided a placement, for its history row: the agents a cluster's
/// kernels went to and the network scope they share, whether its image was there or is pulled
/// (and which agents held it), and the volumes its folders live on with the group's agents
/// that were passed over for lacking them (the first five named).
fn what_decided(
    agents: &[AgentView],
    chosen: &[(usize, ResourceSlots)],
    session: &PendingSession,
) -> String {
    let mut said = String::new();
    let mut on: Vec<&str> = chosen
        .iter()
        .map(|(i, _)| agents[*i].agent_id.as_str())
        .collect();
    on.sort_unstable();
    on.dedup();
    if on.len() > 1 {
        said.push_str(&format!(
            "; the cluster's kernels on {} share network scope `{}`",
            on.join(", "),
            agents[chosen[0].0].network_scope
        ));
    }
    if !session.image.is_empty() {
        let pulled: Vec<&str> = on
            .iter()
            .copied()
            .filter(|agent| !session.image_on.iter().any(|held| held == agent))
            .collect();
        if pulled.is_empty() {
            said.push_str(&format!("; its image `{}` is there", session.image));
        } else {
            said.push_str(&format!(
                "; its image `{}` is pulled on {}",
                session.image,
                pulled.join(", ")
            ));
            if !session.image_on.is_empty() {
                said.push_str(&format!(
                    " (held by {})",
                    names_at_most_five(&session.image_on[..])
                ));
            }
        }
    }
    if !session.volumes.is_empty() {
        let lacking: Vec<&str> = agents
            .iter()
            .filter(|a| !volumes::lacking(&session.volumes, &a.volumes).is_empty())
            .map(|a| a.agent_id.as_str())
            .collect();
        said.push_str(&format!(
            "; its folders' {} mounted there",
            volumes_in_words(&session.volumes)
        ));
        if !lacking.is_empty() {
            said.push_str(&format!(
                "; passed over for lacking them: {}",
                names_at_most_five(&lacking)
            ));
        }
    }
    said
}

/// Agents named in a message: five at most, then how many more.
fn names_at_most_five(agents: &[impl AsRef<str>]) -> String {
    let named: Vec<&str> = agents.iter().take(5).map(AsRef::as_ref).collect();
    match agents.len().saturating_sub(5) {
        0 => named.join(", "),
        more => format!("{} and {more} more", named.join(", ")),
    }
}

/// Volumes in words, for messages: ``volume `a` `` or ``volumes `a`, `b` ``.
fn volumes_in_words(volumes: &[String]) -> String {
    let named: Vec<String> = volumes.iter().map(|v| format!("`{v}`")).collect();
    match named.len() {
        1 => format!("volume {}", named[0]),
        _ => format!("volumes {}", named.join(", ")),
    }
}

/// Scopes and kernel counts in words, for messages.
fn scopes_in_words(scopes: &[(String, u64)]) -> String {
    scopes
        .iter()
        .map(|(name, kernels)| format!("`{name}` {kernels}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn step(
    now: DateTime<Utc>,
    name: &str,
    result: SchedulingResult,
    message: String,
    error_code: Option<&str>,
) -> SchedulingStep {
    SchedulingStep {
        step: name.to_owned(),
        result,
        message,
        error_code: error_code.map(str::to_owned),
        started_at: now,
        ended_at: now,
    }
}

/// An outcome before the attempt bookkeeping.
struct Verdict {
    result: SchedulingResult,
    code: Option<&'static str>,
    message: String,
    /// Whether it shows the group is short of resources (and so may hold the queue).
    group_short: bool,
    placement: Option<Vec<KernelPlacement>>,
}

/// What the history says of the agents passed over for their silence (`None`: none was).
fn passed_over(silent: &[AgentView], after: Duration) -> Option<String> {
    if silent.is_empty() {
        return None;
    }
    let agents: Vec<String> = silent
        .iter()
        .map(|a| {
            let unheard = a.unheard_for.unwrap_or_default().as_secs();
            format!("`{}` (last heard {unheard} s ago)", a.agent_id)
        })
        .collect();
    Some(format!(
        "passed over silent agent(s) {}: nothing is placed on an agent unheard for more than {} s",
        agents.join(", "),
        after.as_secs()
    ))
}

/// A session not placed, told again when only a silent agent stands in its way: the agent it
/// asked for by hand, or the only ones that could ever hold it. It then waits for them (they
/// may come back) instead of failing; `None` when silence is not the reason.
fn waiting_for_silent(
    session: &PendingSession,
    silent: &[AgentView],
    passed: &str,
    code: Option<&'static str>,
    message: &str,
) -> Option<(SchedulingResult, Option<&'static str>, String)> {
    let total = session.total();
    let wanted_silent = session
        .wanted_agent
        .as_ref()
        .is_some_and(|w| silent.iter().any(|a| &a.agent_id == w));
    let fits_silent = match session.cluster_mode {
        ClusterMode::SingleNode => silent.iter().any(|a| total.fits_in(a.capacity)),
        ClusterMode::MultiNode => silent
            .iter()
            .any(|a| session.per_kernel.fits_in(a.capacity)),
    };
    match code {
        Some("AGENT_UNKNOWN") if wanted_silent => Some((
            SchedulingResult::NeedRetry,
            Some("AGENT_SILENT"),
            format!(
                "agent `{}` was asked for, but it is silent; {passed}",
                session.wanted_agent.as_deref().unwrap_or_default()
            ),
        )),
        Some("NEVER_FITS") if fits_silent => Some((
            SchedulingResult::NeedRetry,
            Some("AGENT_SILENT"),
            format!("{message}, and only silent agents could hold it; {passed}"),
        )),
        _ => None,
    }
}

/// The earliest moment after `snapshot.now` at which a decision on its queue changes with
/// nothing but time passing: a reserved start time arriving, a wait reaching the group's
/// pending timeout, or its starvation bound (the session then goes first). Every other change comes with an event, which wakes the scheduler.
pub fn next_deadline(snapshot: &Snapshot) -> Option<DateTime<Utc>> {
    let now = snapshot.now;
    let timeout = snapshot.group.pending_timeout_secs;
    let starve = snapshot.group.starve_after_secs;
    snapshot
        .queue
        .iter()
        .flat_map(|session| {
            let expires = (timeout > 0).then(|| {
                // `plan` expires a wait longer than the timeout, counted in whole seconds.
                session.queued_at + chrono::Duration::seconds(timeout as i64 + 1)
            });
            // A session starts starving (and goes first) when it has waited past the bound.
            let starves = (starve > 0)
                .then(|| session.queued_at + chrono::Duration::seconds(starve as i64 + 1));
            [session.starts_at, expires, starves]
        })
        .flatten()
        .filter(|t| *t > now)
        .min()
}

/// Decides every session of the snapshot's queue, in the order of the group's policy and the
/// sessions' priorities ([`crate::policy`]); the decisions come in that order. Placements are
/// applied to the snapshot's agents, owners and holdings as they are made, so later sessions
/// (and DRF's shares) see them.
pub fn plan(snapshot: &mut Snapshot) -> Vec<Decision> {
    use SchedulingResult::*;
    let now = snapshot.now;
    let rules = snapshot.group.clone();
    // Silent agents are passed over: only the live ones are chosen from, and stay.
    let after = snapshot.silent_after;
    let (live, silent): (Vec<AgentView>, Vec<AgentView>) = std::mem::take(&mut snapshot.agents)
        .into_iter()
        .partition(|a| !a.is_silent(after));
    snapshot.agents = live;
    let passed_over = passed_over(&silent, after);
    let mut index = FreeIndex::new(&snapshot.agents);
    let capacity = snapshot
        .agents
        .iter()
        .fold(ResourceSlots::default(), |sum, a| {
            sum.saturating_add(a.capacity)
        });
    let mut order = Order::new(snapshot, capacity);
    let order_step = crate::policy::step_name(rules.queue_policy);
    let mut blocker: Option<(Uuid, String)> = None;
    let mut decisions = Vec::with_capacity(snapshot.queue.len());
    let queue = std::mem::take(&mut snapshot.queue);
    while let Some(turn) = order.next_turn() {
        let session = &queue[turn.index];
        let mut steps = Vec::with_capacity(4);
        steps.push(step(now, &order_step, Success, turn.message, None));
        let total = session.total();
        let waited = (now - session.queued_at).num_seconds().max(0) as u64;

        let verdict =
            'verdict: {
                if rules.pending_timeout_secs > 0 && waited > rules.pending_timeout_secs {
                    break 'verdict Verdict {
                        result: Expired,
                        code: Some("PENDING_TIMEOUT"),
                        message: format!(
                            "waited {waited} s in the queue; resource group `{}` allows {} s",
                            rules.name, rules.pending_timeout_secs
                        ),
                        group_short: false,
                        placement: None,
                    };
                }
                if let Some(starts_at) = session.starts_at.filter(|t| *t > now) {
                    let message = format!("reserved to start at {starts_at}; it is {now}");
                    steps.push(step(
                        now,
                        "check reserved start time",
                        Skipped,
                        message.clone(),
                        Some("RESERVED_START"),
                    ));
                    break 'verdict Verdict {
                        result: Skipped,
                        code: Some("RESERVED_START"),
                        message,
                        group_short: false,
                        placement: None,
                    };
                }
                if let Some((head, why)) = &blocker {
                    let message = format!(
                    "not attempted: session {head} ahead in the queue waits for resources ({why})"
                );
                    break 'verdict Verdict {
                        result: Skipped,
                        code: Some("BEHIND_HEAD"),
                        message,
                        group_short: false,
                        placement: None,
                    };
                }
                if let Some(owner) = snapshot.owners.get(&session.owner) {
                    let policy = &owner.policy;
                    let limit = owner.max_total;
                    let (result, code, message) = if !total.fits_in(limit) {
                        (
                            Failure,
                            Some("POLICY_MAX"),
                            format!(
                                "asked {} in all; resource policy `{policy}` allows at most {}",
                                describe(total),
                                describe(limit)
                            ),
                        )
                    } else if owner.sessions >= owner.max_sessions {
                        (
                            NeedRetry,
                            Some("POLICY_CONCURRENCY"),
                            format!(
                        "the owner holds {} sessions; resource policy `{policy}` allows {} at once",
                        owner.sessions, owner.max_sessions),
                        )
                    } else if !owner.used.saturating_add(total).fits_in(limit) {
                        (
                            NeedRetry,
                            Some("POLICY_TOTAL"),
                            format!(
                        "asked {}; the owner holds {} of at most {} (resource policy `{policy}`)",
                        describe(total), describe(owner.used), describe(limit)),
                        )
                    } else {
                        (
                            Success,
                            None,
                            format!(
                                "asked {}; the owner holds {} sessions and {} of at most {}",
                                describe(total),
                                owner.sessions,
                                describe(owner.used),
                                describe(limit)
                            ),
                        )
                    };
                    steps.push(step(
                        now,
                        "check resource policy",
                        result,
                        message.clone(),
                        code,
                    ));
                    if result != Success {
                        break 'verdict Verdict {
                            result,
                            code,
                            message,
                            group_short: false,
                            placement: None,
                        };
                    }
                }
                let strategy = match (session.wanted_agent.is_some(), rules.agent_selection) {
                    (true, _) => "select agent (chosen by hand)",
                    (false, AgentSelection::Concentrated) => "select agent (concentrated)",
                    (false, AgentSelection::Dispersed) => "select agent (dispersed)",
                };
                let asked = describe(session.per_kernel);
                let kernels = session.cluster_size;
                if let Some(passed) = &passed_over {
                    steps.push(step(
                        now,
                        "pass over silent agents",
                        Skipped,
                        passed.clone(),
                        Some("AGENT_SILENT"),
                    ));
                }
                let (result, code, message, group_short, chosen) =
                    match select(&snapshot.agents, &index, session, rules.agent_selection) {
                        Selection::Placed(chosen) => {
                            let agent = &snapshot.agents[chosen[0].0];
                            let message = format!(
                                "{kernels} kernel(s) of {asked} on {}; it had {} free of {}{}",
                                agent.agent_id,
                                describe(agent.free()),
                                describe(agent.capacity),
                                what_decided(&snapshot.agents, &chosen, session)
                            );
                            (Success, None, message, false, Some(chosen))
                        }
                        Selection::Busy { most_free } => (
                            NeedRetry,
                            Some("NO_CAPACITY"),
                            format!(
                        "{kernels} kernel(s) of {asked} fit the group's agents, but not now: \
                         the most free on one agent is {}", describe(most_free)),
                            true,
                            None,
                        ),
                        Selection::NeverFits { largest } => (
                            Failure,
                            Some("NEVER_FITS"),
                            format!(
                        "{kernels} kernel(s) of {asked} can never fit: the largest agent of \
                         `{}` has {}", rules.name, describe(largest)),
                            false,
                            None,
                        ),
                        Selection::NoSharedNetwork { scopes } => (
                            Failure,
                            Some("NO_SHARED_NETWORK"),
                            format!(
                        "{kernels} kernel(s) of {asked} must share one cluster network, and no \
                         network scope of `{}` could ever hold them all (kernels each could \
                         hold: {}); agents of different Docker engines share none",
                                rules.name,
                                scopes_in_words(&scopes)
                            ),
                            false,
                            None,
                        ),
                        Selection::ScopesBusy { scopes } => (
                            NeedRetry,
                            Some("NO_CAPACITY"),
                            format!(
                        "{kernels} kernel(s) of {asked} must share one cluster network; the \
                         network scopes that could hold them have room for too few now \
                         (kernels each has room for: {})",
                                scopes_in_words(&scopes)
                            ),
                            true,
                            None,
                        ),
                        Selection::NoAgents => (
                            NeedRetry,
                            Some("NO_AGENTS"),
                            format!("resource group `{}` has no live agent", rules.name),
                            true,
                            None,
                        ),
                        Selection::NoVolume => (
                            NeedRetry,
                            Some("NO_VOLUME"),
                            format!(
                                "its folders live on {}, which no live agent of `{}` mounts \
                                 (all of them); it waits for one that does",
                                volumes_in_words(&session.volumes),
                                rules.name
                            ),
                            false,
                            None,
                        ),
                        Selection::WantedLacksVolumes { lacking } => (
                            Failure,
                            Some("AGENT_LACKS_VOLUME"),
                            format!(
                                "agent `{}` does not mount {}, where the session's folders live",
                                session.wanted_agent.as_deref().unwrap_or_default(),
                                volumes_in_words(&lacking)
                            ),
                            false,
                            None,
                        ),
                        Selection::WantedUnknown => (
                            Failure,
                            Some("AGENT_UNKNOWN"),
                            format!(
                                "agent `{}` is not a live agent of `{}`",
                                session.wanted_agent.as_deref().unwrap_or_default(),
                                rules.name
                            ),
                            false,
                            None,
                        ),
                        Selection::WantedTooSmall { capacity } => (
                            Failure,
                            Some("AGENT_TOO_SMALL"),
                            format!(
                                "asked {} in all; agent `{}` has {} in all",
                                describe(total),
                                session.wanted_agent.as_deref().unwrap_or_default(),
                                describe(capacity)
                            ),
                            false,
                            None,
                        ),
                        Selection::WantedBusy { free } => (
                            NeedRetry,
                            Some("AGENT_BUSY"),
                            format!(
                                "asked {} in all; agent `{}` has {} free",
                                describe(total),
                                session.wanted_agent.as_deref().unwrap_or_default(),
                                describe(free)
                            ),
                            false,
                            None,
                        ),
                    };
                let (result, code, message, group_short) = match &passed_over {
                    None => (result, code, message, group_short),
                    Some(passed) => match chosen
                        .is_none()
                        .then(|| waiting_for_silent(session, &silent, passed, code, &message))
                        .flatten()
                    {
                        Some((result, code, message)) => (result, code, message, false),
                        None => (result, code, format!("{message}; {passed}"), group_short),
                    },
                };
                steps.push(step(now, strategy, result, message.clone(), code));
                let placement = chosen.map(|chosen| {
                    chosen
                        .into_iter()
                        .map(|(i, resources)| {
                            let agent = &mut snapshot.agents[i];
                            let before = agent.free();
                            agent.used = agent.used.saturating_add(resources);
                            index.update(i, before, agent.free());
                            KernelPlacement {
                                agent_id: agent.agent_id.clone(),
                                resources,
                            }
                        })
                        .collect::<Vec<_>>()
                });
                if placement.is_some() {
                    if let Some(owner) = snapshot.owners.get_mut(&session.owner) {
                        owner.sessions += 1;
                        owner.used = owner.used.saturating_add(total);
                    }
                    let held = snapshot.held.entry(session.owner).or_default();
                    *held = held.saturating_add(total);
                    order.placed(session.owner, total);
                    steps.push(step(
                        now,
                        "allocate",
                        Success,
                        format!("reserved {}", describe(total)),
                        None,
                    ));
                }
                Verdict {
                    result,
                    code,
                    message,
                    group_short,
                    placement,
                }
            };

        // Attempt bookkeeping: what counts, what is recorded, when to give up.
        let changed = session.last_result != Some(verdict.result)
            || session.last_error_code.as_deref() != verdict.code;
        let record = match verdict.result {
            Success | Failure | Expired => true,
            NeedRetry => changed || (verdict.group_short && snapshot.capacity_grew),
            _ => changed,
        };
        let counts = record && matches!(verdict.result, Success | Failure | NeedRetry);
        let attempts = session.attempts + counts as u32;
        let mut decision = Decision {
            session_id: session.session_id,
            version: session.version,
            result: verdict.result,
            error_code: verdict.code,
            message: verdict.message.clone(),
            steps,
            attempts,
            placement: verdict.placement,
            cancel_reason: None,
            record,
        };
        match verdict.result {
            Expired => {
                decision.cancel_reason = Some(format!("expired in the queue: {}", verdict.message));
            }
            // No scope's agents could ever hold it: waiting would never end.
            Failure if verdict.code == Some("NO_SHARED_NETWORK") => {
                decision.cancel_reason = Some(verdict.message.clone());
            }
            Failure | NeedRetry if counts && attempts >= rules.max_attempts => {
                decision.result = GiveUp;
                decision.message = format!(
                    "gave up after {attempts} attempts (the group allows {}): {}",
                    rules.max_attempts, verdict.message
                );
                decision.cancel_reason = Some(decision.message.clone());
            }
            NeedRetry if verdict.group_short => {
                let holds_back =
                    rules.queue_policy != QueuePolicy::Backfill && attempts <= rules.skip_after;
                if holds_back && blocker.is_none() {
                    blocker = Some((session.session_id, verdict.message.clone()));
                }
            }
            _ => {}
        }
        decisions.push(decision);
    }
    snapshot.queue = queue;
    decisions
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use SchedulingResult::*;

    const GIB: u64 = 1 << 30;

    fn slots(cpu: u64, mem_gib: u64) -> ResourceSlots {
        ResourceSlots {
            cpu_milli: cpu * 1000,
            memory_bytes: mem_gib * GIB,
            gpu_milli: 0,
        }
    }

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 0).unwrap()
    }

    fn agent(id: &str, cpu: u64, used_cpu: u64) -> AgentView {
        AgentView {
            agent_id: id.into(),
            capacity: slots(cpu, 64),
            used: slots(used_cpu, 0),
            unheard_for: Some(Duration::from_secs(3)),
            network_scope: "engine:one".into(),
            volumes: Vec::new(),
        }
    }

    fn scoped(id: &str, cpu: u64, used_cpu: u64, scope: &str) -> AgentView {
        AgentView {
            network_scope: scope.into(),
            ..agent(id, cpu, used_cpu)
        }
    }

    fn multi_node(n: u128, cpu: u64, size: u32) -> PendingSession {
        PendingSession {
            cluster_mode: ClusterMode::MultiNode,
            cluster_size: size,
            ..session(n, cpu)
        }
    }

    #[test]
    fn a_multi_node_cluster_goes_to_the_agents_of_one_network_scope() {
        // Four kernels of 2 cores: engine `x` holds 4 in all (its two agents), engine `y`
        // only 3 (it is larger now, but one scope must hold every kernel).
        let agents = vec![
            scoped("x1", 4, 0, "engine:x"),
            scoped("x2", 4, 0, "engine:x"),
            scoped("y1", 6, 0, "engine:y"),
        ];
        let mut s = snapshot(agents, vec![multi_node(1, 2, 4)]);
        let d = plan(&mut s);
        let kernels = d[0].placement.as_ref().expect("placed");
        assert_eq!(kernels.len(), 4);
        assert!(
            d[0].message.contains("share network scope `engine:x`"),
            "{}",
            d[0].message
        );
        assert!(
            kernels.iter().all(|k| k.agent_id.starts_with('x')),
            "{kernels:?}"
        );
        assert_eq!(
            kernels.iter().filter(|k| k.agent_id == "x1").count(),
            2,
            "spread over the scope's agents: {kernels:?}"
        );
    }

    #[test]
    fn a_cluster_no_scope_could_hold_is_cancelled_at_once_saying_why() {
        // Together the agents hold four kernels of 2 cores, but each engine only two.
        let agents = vec![
            scoped("x1", 4, 0, "engine:x"),
            scoped("y1", 4, 0, "engine:y"),
        ];
        let mut s = snapshot(agents, vec![multi_node(1, 2, 4)]);
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (Failure, Some("NO_SHARED_NETWORK"))
        );
        assert_eq!(d[0].attempts, 1);
        let reason = d[0].cancel_reason.as_deref().expect("cancelled at once");
        assert!(reason.contains("`engine:x` 2, `engine:y` 2"), "{reason}");
        let events = d[0].events();
        assert!(events.iter().any(|e| matches!(e,
            Event::SessionStatusChanged(c) if c.to == SessionStatus::Cancelled)));
        assert!(events.iter().any(|e| matches!(e,
            Event::SchedulingAttempted(a) if a.message.contains("cluster network"))));
    }

    #[test]
    fn a_cluster_waits_for_a_busy_scope_that_could_hold_it_saying_which() {
        // Engine x could hold both kernels but has room for one now; engine y never could.
        let agents = vec![
            scoped("x1", 4, 2, "engine:x"),
            scoped("x2", 4, 4, "engine:x"),
            scoped("y1", 2, 0, "engine:y"),
        ];
        let mut s = snapshot(agents, vec![multi_node(1, 2, 2)]);
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (NeedRetry, Some("NO_CAPACITY"))
        );
        assert!(d[0].cancel_reason.is_none());
        assert!(d[0].placement.is_none());
        assert!(d[0].message.contains("`engine:x` 1"), "{}", d[0].message);
        assert!(!d[0].message.contains("engine:y"), "{}", d[0].message);
    }

    fn mounting(id: &str, cpu: u64, volumes: &[&str]) -> AgentView {
        AgentView {
            volumes: volumes.iter().map(|v| v.to_string()).collect(),
            ..agent(id, cpu, 0)
        }
    }

    fn on_volumes(n: u128, cpu: u64, volumes: &[&str]) -> PendingSession {
        PendingSession {
            volumes: volumes.iter().map(|v| v.to_string()).collect(),
            ..session(n, cpu)
        }
    }

    #[test]
    fn a_session_whose_folders_live_on_a_volume_goes_only_where_it_is_mounted() {
        // The largest agent mounts nothing; of the two that mount `shared`, only one also
        // mounts `ceph`, which the first session needs, and it has room for one.
        let agents = vec![
            mounting("plain", 16, &[]),
            mounting("nfs", 4, &["shared"]),
            mounting("both", 2, &["shared", "ceph"]),
        ];
        let queue = vec![
            on_volumes(1, 2, &["ceph", "shared"]),
            on_volumes(2, 2, &["shared"]),
            session(3, 8),
        ];
        let mut s = snapshot(agents, queue);
        let d = plan(&mut s);
        let on = |i: usize| d[i].placement.as_ref().expect("placed")[0].agent_id.clone();
        assert_eq!(on(0), "both");
        assert_eq!(on(1), "nfs", "the one left that mounts it");
        assert!(
            d[1].message.contains("volume `shared` mounted there")
                && d[1].message.contains("passed over for lacking them: plain"),
            "{}",
            d[1].message
        );
        assert_eq!(
            on(2),
            "plain",
            "a session without shared folders goes anywhere"
        );
    }

    #[test]
    fn a_placements_history_says_whether_its_image_was_there_or_is_pulled_and_who_held_it() {
        let with_image = |n: u128, on: &[&str]| PendingSession {
            image: "berth/python:3.12".into(),
            image_on: on.iter().map(|a| a.to_string()).collect(),
            ..session(n, 2)
        };
        // Room for one on each: one goes where the image is, the other pulls it.
        let agents = vec![agent("a1", 2, 0), agent("a2", 2, 0)];
        let mut s = snapshot(agents, vec![with_image(1, &["a1"]), with_image(2, &["a1"])]);
        let mut on = Vec::new();
        for decision in plan(&mut s) {
            let agent = decision.placement.as_ref().expect("placed")[0]
                .agent_id
                .clone();
            let expected = if agent == "a1" {
                "its image `berth/python:3.12` is there"
            } else {
                "its image `berth/python:3.12` is pulled on a2 (held by a1)"
            };
            assert!(decision.message.contains(expected), "{}", decision.message);
            on.push(agent);
        }
        on.sort();
        assert_eq!(on, ["a1", "a2"]);
    }

    #[test]
    fn a_session_waits_naming_the_volume_no_live_agent_mounts() {
        let agents = vec![mounting("plain", 16, &[]), mounting("ceph", 16, &["ceph"])];
        let mut s = snapshot(agents, vec![on_volumes(1, 1, &["shared"])]);
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (NeedRetry, Some("NO_VOLUME"))
        );
        assert!(d[0].placement.is_none() && d[0].cancel_reason.is_none());
        assert!(d[0].message.contains("volume `shared`"), "{}", d[0].message);
        // Chosen by hand, an agent that does not mount it is refused, naming it.
        let mut wanted = on_volumes(2, 1, &["shared", "ceph"]);
        wanted.wanted_agent = Some("ceph".into());
        let mut s = snapshot(vec![mounting("ceph", 16, &["ceph"])], vec![wanted]);
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (Failure, Some("AGENT_LACKS_VOLUME"))
        );
        assert!(d[0].message.contains("volume `shared`"), "{}", d[0].message);
    }

    #[test]
    fn kernels_fit_by_their_scarcest_resource() {
        assert_eq!(kernels_in(slots(8, 4), slots(2, 1)), 4);
        assert_eq!(kernels_in(slots(8, 3), slots(2, 1)), 3);
        assert_eq!(kernels_in(slots(1, 64), slots(2, 1)), 0);
    }

    fn silent_agent(id: &str, cpu: u64, unheard_secs: u64) -> AgentView {
        AgentView {
            unheard_for: Some(Duration::from_secs(unheard_secs)),
            ..agent(id, cpu, 0)
        }
    }

    fn session(n: u128, cpu: u64) -> PendingSession {
        PendingSession {
            image: Default::default(),
            image_on: Default::default(),
            session_id: Uuid::from_u128(n),
            version: 0,
            owner: Uuid::from_u128(1000),
            per_kernel: slots(cpu, 1),
            cluster_mode: ClusterMode::SingleNode,
            cluster_size: 1,
            wanted_agent: None,
            starts_at: None,
            queued_at: t0(),
            attempts: 0,
            last_result: None,
            last_error_code: None,
            priority: 0,
            project: None,
            volumes: Vec::new(),
        }
    }

    fn snapshot(agents: Vec<AgentView>, queue: Vec<PendingSession>) -> Snapshot {
        Snapshot {
            group: GroupRules {
                name: "default".into(),
                queue_policy: QueuePolicy::Fifo,
                agent_selection: AgentSelection::Concentrated,
                max_attempts: 5,
                skip_after: 2,
                pending_timeout_secs: 3600,
                fair_share: FairShareSettings::default(),
                starve_after_secs: 0,
            },
            agents,
            silent_after: Duration::from_secs(10),
            queue,
            owners: HashMap::new(),
            held: HashMap::new(),
            usage: Usage::default(),
            now: t0(),
            capacity_grew: false,
        }
    }

    fn agent_of(d: &Decision) -> Option<&str> {
        d.placement.as_ref().map(|k| k[0].agent_id.as_str())
    }

    #[test]
    fn a_session_that_fits_is_placed_and_the_agent_fills() {
        let mut s = snapshot(vec![agent("a1", 4, 0)], vec![session(1, 3), session(2, 2)]);
        let d = plan(&mut s);
        assert_eq!((d[0].result, agent_of(&d[0])), (Success, Some("a1")));
        assert_eq!(d[0].attempts, 1);
        assert_eq!(s.agents[0].used.cpu_milli, 3000);
        // The second no longer fits now: it waits with the figures, and holds the queue.
        assert_eq!(d[1].result, NeedRetry);
        assert_eq!(d[1].error_code, Some("NO_CAPACITY"));
        assert!(d[1].message.contains("cpu 1 cores"), "{}", d[1].message);
        let events = d[0].events();
        assert_eq!(events.len(), 3, "history, placement, status");
        assert_eq!(d[1].events().len(), 1, "history only");
    }

    #[test]
    fn concentrated_packs_and_dispersed_spreads() {
        let agents = vec![agent("a1", 8, 6), agent("a2", 8, 0)];
        let mut s = snapshot(agents.clone(), vec![session(1, 2)]);
        assert_eq!(agent_of(&plan(&mut s)[0]), Some("a1"));
        let mut s = snapshot(agents, vec![session(1, 2)]);
        s.group.agent_selection = AgentSelection::Dispersed;
        assert_eq!(agent_of(&plan(&mut s)[0]), Some("a2"));
    }

    #[test]
    fn a_request_that_can_never_fit_fails_each_pass_then_is_given_up_and_cancelled() {
        let mut s = snapshot(
            vec![agent("a1", 4, 0), agent("a2", 4, 0)],
            vec![session(1, 6)],
        );
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (Failure, Some("NEVER_FITS"))
        );
        assert!(d[0].message.contains("largest agent"), "{}", d[0].message);
        assert!(d[0].message.contains("cpu 4 cores"), "{}", d[0].message);
        assert_eq!(d[0].cancel_reason, None);
        let mut last = session(1, 6);
        last.attempts = 4;
        last.last_result = Some(Failure);
        let mut s = snapshot(vec![agent("a1", 4, 0)], vec![last]);
        let d = plan(&mut s);
        assert_eq!((d[0].result, d[0].attempts), (GiveUp, 5));
        assert!(d[0]
            .cancel_reason
            .as_deref()
            .unwrap()
            .contains("gave up after 5 attempts"));
        let events = d[0].events();
        assert!(
            matches!(&events[1], Event::SessionStatusChanged(c) if c.to == SessionStatus::Cancelled)
        );
    }

    #[test]
    fn a_start_time_in_the_future_is_skipped_without_counting() {
        let mut later = session(1, 1);
        later.starts_at = Some(t0() + chrono::Duration::seconds(30));
        let mut s = snapshot(vec![agent("a1", 4, 0)], vec![later.clone(), session(2, 1)]);
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code, d[0].attempts),
            (Skipped, Some("RESERVED_START"), 0)
        );
        assert_eq!(d[1].result, Success, "a reserved session holds nobody back");
        // At its time it goes.
        let mut s = snapshot(vec![agent("a1", 4, 0)], vec![later]);
        s.now = t0() + chrono::Duration::seconds(31);
        assert_eq!(plan(&mut s)[0].result, Success);
    }

    #[test]
    fn policy_limits_wait_or_fail_and_never_block_others() {
        let other_owner = {
            let mut s = session(3, 1);
            s.owner = Uuid::from_u128(2000);
            s
        };
        let mut s = snapshot(
            vec![agent("a1", 16, 0)],
            vec![session(1, 1), session(2, 1), other_owner],
        );
        s.owners.insert(
            Uuid::from_u128(1000),
            OwnerLoad {
                policy: "p".into(),
                sessions: 1,
                used: slots(1, 1),
                max_sessions: 2,
                max_total: slots(8, 64),
            },
        );
        let d = plan(&mut s);
        assert_eq!(d[0].result, Success);
        assert_eq!(
            (d[1].result, d[1].error_code),
            (NeedRetry, Some("POLICY_CONCURRENCY"))
        );
        assert!(
            d[1].message.contains("allows 2 at once"),
            "{}",
            d[1].message
        );
        assert_eq!(d[2].result, Success, "another owner is not held back");

        let mut s = snapshot(
            vec![agent("a1", 16, 0)],
            vec![session(1, 12), session(2, 4)],
        );
        s.owners.insert(
            Uuid::from_u128(1000),
            OwnerLoad {
                policy: "p".into(),
                sessions: 0,
                used: slots(6, 1),
                max_sessions: 10,
                max_total: slots(8, 64),
            },
        );
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (Failure, Some("POLICY_MAX"))
        );
        assert_eq!(
            (d[1].result, d[1].error_code),
            (NeedRetry, Some("POLICY_TOTAL"))
        );
        assert!(
            d[1].message.contains("holds cpu 6 cores"),
            "{}",
            d[1].message
        );
    }

    #[test]
    fn an_agent_chosen_by_hand_is_used_or_explained() {
        let agents = vec![agent("a1", 8, 0), agent("a2", 2, 1)];
        let mut wanted = session(1, 1);
        wanted.wanted_agent = Some("a2".into());
        let mut s = snapshot(agents.clone(), vec![wanted.clone()]);
        assert_eq!(agent_of(&plan(&mut s)[0]), Some("a2"), "not the fuller a1");
        let mut big = wanted.clone();
        big.per_kernel = slots(2, 1);
        let mut s = snapshot(agents.clone(), vec![big]);
        assert_eq!(plan(&mut s)[0].error_code, Some("AGENT_BUSY"));
        let mut huge = wanted.clone();
        huge.per_kernel = slots(3, 1);
        let mut s = snapshot(agents.clone(), vec![huge]);
        assert_eq!(plan(&mut s)[0].error_code, Some("AGENT_TOO_SMALL"));
        let mut gone = wanted;
        gone.wanted_agent = Some("a9".into());
        let mut s = snapshot(agents, vec![gone]);
        assert_eq!(plan(&mut s)[0].error_code, Some("AGENT_UNKNOWN"));
    }

    #[test]
    fn a_large_head_holds_small_ones_back_only_for_a_bounded_number_of_attempts() {
        // 4 cores, 3 in use: the 4-core head waits; the 1-core sessions behind it would fit.
        let queue = vec![session(1, 4), session(2, 1), session(3, 1)];
        let mut s = snapshot(vec![agent("a1", 4, 3)], queue.clone());
        let d = plan(&mut s);
        assert_eq!(d[0].result, NeedRetry);
        assert_eq!(
            (d[1].result, d[1].error_code, d[1].attempts),
            (Skipped, Some("BEHIND_HEAD"), 0)
        );
        assert!(d[1].message.contains(&Uuid::from_u128(1).to_string()));

        // Once the head has used its `skip_after` attempts, the others are served around it.
        let mut head = queue[0].clone();
        head.attempts = 2;
        head.last_result = Some(NeedRetry);
        head.last_error_code = Some("NO_CAPACITY".into());
        let mut s = snapshot(
            vec![agent("a1", 4, 3)],
            vec![head.clone(), queue[1].clone(), queue[2].clone()],
        );
        s.capacity_grew = true;
        let d = plan(&mut s);
        assert_eq!((d[0].result, d[0].attempts), (NeedRetry, 3));
        assert_eq!(d[1].result, Success);
        assert_eq!(
            d[2].result, NeedRetry,
            "the one free core went to the first small one"
        );

        // Backfill never holds anyone back.
        let mut s = snapshot(vec![agent("a1", 4, 3)], queue);
        s.group.queue_policy = QueuePolicy::Backfill;
        let d = plan(&mut s);
        assert_eq!(d[1].result, Success);
    }

    #[test]
    fn an_unchanged_wait_is_not_recorded_again_and_does_not_count() {
        let mut waiting = session(1, 4);
        waiting.attempts = 1;
        waiting.last_result = Some(NeedRetry);
        waiting.last_error_code = Some("NO_CAPACITY".into());
        let mut s = snapshot(vec![agent("a1", 4, 1)], vec![waiting.clone()]);
        let d = plan(&mut s);
        assert!(!d[0].record);
        assert_eq!(d[0].attempts, 1);
        let mut s = snapshot(vec![agent("a1", 4, 1)], vec![waiting]);
        s.capacity_grew = true;
        let d = plan(&mut s);
        assert!(d[0].record);
        assert_eq!(d[0].attempts, 2);
    }

    #[test]
    fn the_next_deadline_is_the_earliest_reserved_start_or_timeout_still_ahead() {
        let mut s = snapshot(vec![agent("a1", 8, 0)], vec![session(1, 1), session(2, 1)]);
        s.group.pending_timeout_secs = 0;
        assert_eq!(
            next_deadline(&s),
            None,
            "no start time, no timeout: only events"
        );
        s.queue[0].starts_at = Some(t0() + chrono::Duration::seconds(30));
        s.queue[1].starts_at = Some(t0() + chrono::Duration::seconds(20));
        assert_eq!(
            next_deadline(&s),
            Some(t0() + chrono::Duration::seconds(20))
        );
        s.now = t0() + chrono::Duration::seconds(25);
        assert_eq!(
            next_deadline(&s),
            Some(t0() + chrono::Duration::seconds(30)),
            "a start time already past is no deadline"
        );
        s.group.pending_timeout_secs = 10;
        s.now = t0();
        s.queue[0].queued_at = t0();
        assert_eq!(
            next_deadline(&s),
            Some(t0() + chrono::Duration::seconds(11)),
            "the first moment `plan` expires the wait"
        );
        let mut expired = s.clone();
        expired.now = t0() + chrono::Duration::seconds(11);
        assert_eq!(plan(&mut expired)[0].result, Expired);
        let mut waiting = s.clone();
        waiting.now = t0() + chrono::Duration::seconds(10);
        assert_ne!(plan(&mut waiting)[0].result, Expired, "not a moment early");
    }

    #[test]
    fn a_wait_past_the_pending_timeout_expires_and_cancels() {
        let mut s = snapshot(vec![agent("a1", 4, 4)], vec![session(1, 1)]);
        s.now = t0() + chrono::Duration::seconds(3601);
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (Expired, Some("PENDING_TIMEOUT"))
        );
        assert!(d[0].cancel_reason.as_deref().unwrap().contains("3601 s"));
    }

    #[test]
    fn clusters_go_on_one_agent_or_spread_over_several() {
        let mut single = session(1, 2);
        single.cluster_size = 3;
        let mut s = snapshot(
            vec![agent("a1", 4, 0), agent("a2", 8, 0)],
            vec![single.clone()],
        );
        let d = plan(&mut s);
        let kernels = d[0].placement.as_ref().unwrap();
        assert_eq!(kernels.len(), 3);
        assert!(kernels.iter().all(|k| k.agent_id == "a2"));

        let mut multi = single;
        multi.cluster_mode = ClusterMode::MultiNode;
        let mut s = snapshot(
            vec![agent("a1", 4, 0), agent("a2", 4, 0)],
            vec![multi.clone()],
        );
        let d = plan(&mut s);
        let kernels = d[0].placement.as_ref().unwrap();
        let on_a1 = kernels.iter().filter(|k| k.agent_id == "a1").count();
        assert!((1..=2).contains(&on_a1), "{kernels:?}");
        let mut s = snapshot(vec![agent("a1", 1, 0)], vec![multi]);
        assert_eq!(plan(&mut s)[0].error_code, Some("NEVER_FITS"));
    }

    #[test]
    fn a_silent_agent_is_passed_over_and_every_decision_says_so() {
        // a1 would be chosen (concentrated: the fuller one) were it not silent for 12 s.
        let agents = vec![
            silent_agent("a1", 8, 12),
            agent("a2", 8, 0),
            agent("a3", 8, 6),
        ];
        let mut s = snapshot(agents, vec![session(1, 2)]);
        s.agents[2].unheard_for = Some(Duration::from_secs(10));
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, agent_of(&d[0])),
            (Success, Some("a3")),
            "silent for exactly two heartbeats is not silent yet"
        );
        assert!(d[0]
            .message
            .contains("passed over silent agent(s) `a1` (last heard 12 s ago)"));
        assert!(d[0].message.contains("more than 10 s"), "{}", d[0].message);
        let step = &d[0].steps[1];
        assert_eq!(
            (step.step.as_str(), step.error_code.as_deref()),
            ("pass over silent agents", Some("AGENT_SILENT"))
        );
        let left: Vec<&str> = s.agents.iter().map(|a| a.agent_id.as_str()).collect();
        assert_eq!(
            left,
            ["a2", "a3"],
            "only the live agents stay in the snapshot"
        );

        // Silence that cannot be told from a bus outage is no silence.
        let mut unknown = agent("a1", 8, 6);
        unknown.unheard_for = None;
        let mut s = snapshot(vec![unknown, agent("a2", 8, 0)], vec![session(1, 2)]);
        let d = plan(&mut s);
        assert_eq!(agent_of(&d[0]), Some("a1"));
        assert!(!d[0].message.contains("passed over"));
    }

    #[test]
    fn when_only_silent_agents_could_take_it_a_session_waits_and_says_why() {
        let mut s = snapshot(vec![silent_agent("a1", 8, 31)], vec![session(1, 1)]);
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (NeedRetry, Some("NO_AGENTS"))
        );
        assert!(d[0].message.contains("no live agent"), "{}", d[0].message);
        assert!(d[0].message.contains("`a1` (last heard 31 s ago)"));

        let mut wanted = session(1, 1);
        wanted.wanted_agent = Some("a1".into());
        let mut s = snapshot(
            vec![silent_agent("a1", 8, 31), agent("a2", 8, 0)],
            vec![wanted],
        );
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (NeedRetry, Some("AGENT_SILENT")),
            "it may come back: a wait, not a failure"
        );
        assert!(d[0]
            .message
            .contains("agent `a1` was asked for, but it is silent"));

        // Only the silent agent is large enough: a wait, not NEVER_FITS counting to a give-up.
        let mut s = snapshot(
            vec![silent_agent("a1", 16, 31), agent("a2", 4, 0)],
            vec![session(1, 8)],
        );
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (NeedRetry, Some("AGENT_SILENT"))
        );
        assert!(d[0].message.contains("only silent agents could hold it"));
    }

    #[test]
    fn the_pending_timeout_counts_from_the_last_time_it_entered_the_queue() {
        let mut back = session(1, 1);
        back.queued_at = t0() + chrono::Duration::seconds(7200);
        let mut s = snapshot(vec![agent("a1", 4, 4)], vec![back]);
        s.now = t0() + chrono::Duration::seconds(7300);
        assert_eq!(plan(&mut s)[0].result, NeedRetry, "not expired");
    }

    #[test]
    fn no_live_agent_is_a_wait_with_its_reason() {
        let mut s = snapshot(vec![], vec![session(1, 1)]);
        let d = plan(&mut s);
        assert_eq!(
            (d[0].result, d[0].error_code),
            (NeedRetry, Some("NO_AGENTS"))
        );
    }
}
