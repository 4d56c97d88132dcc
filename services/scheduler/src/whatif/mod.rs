//! What-if replays: a recorded workload (the requests of a time window, with their sizes and
//! how long each really held its agents, and the agents of the time) run again through a
//! queue policy in simulated time, with the same pure core the scheduler runs live
//! ([`crate::core::plan`]), and measured next to what really happened. Pure: the workload
//! comes from the log ([`workload`], read by [`db`]), time is the simulation's own.
//!
//! The simulation is a discrete-event loop that passes where the live scheduler passed, with
//! its pace ([`Pacing`], the install's settings, which the log does not hold). A pass of
//! [`crate::core::plan`] runs:
//! - at every moment the real scheduler's passes recorded a decision in the group (the log's
//!   `SchedulingAttempted` of phase `schedule`, each pass's time its steps' `started_at`,
//!   the snapshot's `now`);
//! - at every moment that wakes the live scheduler (a request, a withdrawal, resources
//!   released, an agent registering, departing or lost; not a lost agent's return, which
//!   wakes nobody) when no recorded pass follows it within [`WAKE_LATENCY`]: the live
//!   scheduler passed there too, and recorded nothing. While it missed its wake-ups (the
//!   log's `SchedulerWakeupsMissed`: its bus connection broken), a wake-up reaches it only
//!   when the connection is back;
//! - an interval after every pass, woken or not, and again at once after a pass that placed
//!   or cancelled, as the live loop does (unless the log holds that pass);
//! - when time alone changes a decision ([`crate::core::next_deadline`]), unless a recorded
//!   pass follows within [`WAKE_LATENCY`] (the live pass at the deadline, which comes a
//!   little after it: its timer's wake-up, or the end of a pass still running).
//!
//! So the replay through the policy that really ran decides on the same queue and agents as
//! the live passes did and reproduces their placements (same session, same agents, same
//! order); through another policy, the emulated passes let it place whenever the live
//! scheduler would have looked. A pass's `now` is the moment before it read its snapshot, so
//! the events recorded before it are those it saw, and a pending session's wait counts from
//! its request's recorded time (the ledger keeps the log's clock). A release recorded just
//! before a pass began to read, whose transaction was still committing when the pass read
//! its agents, was not seen by it: each pass keeps what its read saw of the log
//! (`SchedulingAttempted::read`), and the replay holds such a release until just after the
//! passes that did not see it (in a log written before passes kept it, the replay sees it at
//! that pass, and places one pass earlier).
//!
//! A placed session holds its agents for as long as the same placement really held them
//! (from the placement to its `SessionResourcesReleased`, which covers its start and its
//! run), whenever the simulation places it. A placement that ended with the session back in
//! the queue (its agent lost before it started it, or its start stalled) sends it back after
//! that long, with the reconciler's result, and its next placement holds as the next one
//! did. One that never held anything in the log (cancelled while waiting, or still waiting at
//! the window's end) frees at once if the simulation places it, and one still holding at the
//! end of the log holds to the end. A request withdrawn by its user while it waited leaves
//! the simulated queue at the moment it really left. An agent that was lost for its silence
//! (the log's `AgentLost` with `last_heard`) is passed over from its silence on, as the live
//! scheduler passed it over; what the agents and the bus did is otherwise as the log says.
//!
//! What the simulation cannot know is left as it was, and said: an agent silent for a while
//! and heard again before it was lost left no trace in the log, and counts as live
//! throughout; a requeue happens after the time the placement really held, not when the
//! simulated placement's own agent is lost (the same moment under the policy that ran);
//! resources the owner held in other groups do not count against their resource policy;
//! the live scheduler passes every group when any group's event wakes it, which a replay of
//! one group does not see; sessions requested before the window are not replayed, and what
//! they held during it is held as recorded. The wait measured is to a session's first
//! placement.
//!
//! The figures ([`Figures`]): per user, the wait from request to placement (p50, p99) and the
//! mean bounded slowdown; overall, utilization per resource (resource-seconds held over the
//! agents' capacity-seconds within the window) and Jain's fairness index over the users'
//! mean bounded slowdowns (1 when every user is slowed down alike, `1/n` when one user takes
//! all the waiting).

pub mod db;
pub mod figures;
pub mod workload;

pub use figures::{compare, Comparison};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use events::payloads::*;
use serde::Serialize;
use uuid::Uuid;

use crate::core::{self, AgentView, GroupRules, OwnerLoad, PendingSession, Snapshot};
use crate::fair_share::{self, UsageInterval};

/// Why a workload could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    #[error(transparent)]
    Ledger(#[from] events::ledger::LedgerError),
    #[error("an event of the log does not decode: {0}")]
    Catalogue(#[from] events::catalogue::CatalogueError),
    #[error("the log holds no resource group `{0}` by then")]
    UnknownGroup(String),
}

/// Replays the log's workload of `group` (`None`: each group requests were made in,
/// separately) within `[from, to]` (`None`: the whole log) through `policy` (`None`: the
/// policy that really ran), the live scheduler having been paced as `pacing` says, each
/// next to what really happened.
pub async fn replay(
    client: &impl deadpool_postgres::GenericClient,
    policy: Option<QueuePolicy>,
    group: Option<&str>,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    pacing: Pacing,
) -> Result<Vec<Comparison>, WhatIfError> {
    let events = db::logged_events(client, to).await?;
    let groups = match group {
        Some(group) => vec![group.to_owned()],
        None => workload::groups(&events),
    };
    let mut comparisons = Vec::with_capacity(groups.len());
    for name in groups {
        let Some(mut workload) = workload::workload(&events, &name, from, to) else {
            return Err(WhatIfError::UnknownGroup(name));
        };
        workload.pacing = pacing;
        let mut rules = workload.rules.clone();
        rules.queue_policy = policy.unwrap_or(rules.queue_policy);
        let outcome = simulate(&workload, &rules);
        comparisons.push(compare(&workload, &outcome, rules.queue_policy.as_str()));
    }
    Ok(comparisons)
}

/// How soon after a wake-up the live scheduler passes (it is woken by the bus within
/// milliseconds): a recorded pass this soon after a wake-up is the one it caused.
pub const WAKE_LATENCY: TimeDelta = TimeDelta::seconds(1);

/// Most queued sessions of one group decided in one pass, as the live scheduler's
/// `SchedulerConfig::batch`.
pub const BATCH: usize = 5_000;

/// The run time under which a wait counts as if the session had run this long, in the
/// bounded slowdown: a session of a second that waited ten is not thought "slowed down
/// elevenfold" (the usual bound in the scheduling literature).
pub const SLOWDOWN_BOUND_SECS: f64 = 10.0;

/// A recorded workload of one resource group.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// The group's rules as they were (the policy that really ran among them).
    pub rules: GroupRules,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// The agents joining and leaving the group, in time order (those there at `from`
    /// joining at `from`).
    pub agents: Vec<AgentChange>,
    /// The requests of the window, in the order they were made.
    pub requests: Vec<Request>,
    /// What sessions requested before the window held during it, as recorded.
    pub background: Vec<Hold>,
    /// The owners' resource policies (an owner not here has no limits).
    pub limits: HashMap<Uuid, OwnerLimits>,
    /// The moments of the real scheduler's passes that recorded a decision in the group,
    /// in time order.
    pub passes: Vec<DateTime<Utc>>,
    /// Agents silent before they were lost, from when they were last heard.
    pub silences: Vec<Silence>,
    /// When the live scheduler missed its wake-ups (its bus connection broken), in time
    /// order: `(from, until)`.
    pub deaf: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    /// How the live scheduler was paced, which the log does not hold (the install's
    /// configuration does).
    pub pacing: Pacing,
}

/// The live scheduler's pace: its settings that decide when it passes and which agents it
/// passes over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pacing {
    /// It passes at least this long after its last pass, woken or not.
    pub interval: Duration,
    /// An agent unheard for longer is passed over.
    pub silent_after: Duration,
}

impl Default for Pacing {
    /// The services' defaults.
    fn default() -> Pacing {
        Pacing {
            interval: crate::run::INTERVAL,
            silent_after: events::aggregate::SILENT_AFTER,
        }
    }
}

/// An agent that went silent and was lost for it: last heard at `heard`, lost at `lost`.
#[derive(Debug, Clone, PartialEq)]
pub struct Silence {
    pub agent_id: String,
    pub heard: DateTime<Utc>,
    pub lost: DateTime<Utc>,
}

/// An agent joining (with what it offers) or leaving the group.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentChange {
    pub at: DateTime<Utc>,
    pub agent_id: String,
    /// `None`: it left (lost, departed, revoked, or joined another group).
    pub joined: Option<AgentOffer>,
    /// Whether the live scheduler is woken by it (a return and a revocation wake nobody).
    pub wakes: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AgentOffer {
    pub capacity: ResourceSlots,
    pub network_scope: String,
    /// The shared volumes it mounted.
    pub volumes: Vec<String>,
}

/// A resource policy's limits on one owner.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerLimits {
    pub policy: String,
    pub max_sessions: u32,
    pub max_total: ResourceSlots,
}

/// One request of the workload, with what really became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub session_id: Uuid,
    pub owner: Uuid,
    /// Who the owner is, for people (their email).
    pub user: String,
    pub project: Option<String>,
    pub per_kernel: ResourceSlots,
    pub cluster_mode: ClusterMode,
    pub cluster_size: u32,
    pub wanted_agent: Option<String>,
    pub starts_at: Option<DateTime<Utc>>,
    /// The shared volumes its folders lived on.
    pub volumes: Vec<String>,
    /// Its priority when requested.
    pub priority: i32,
    /// An admin's changes of its priority while it waited, in order: `(when, to)`.
    pub reprioritized: Vec<(DateTime<Utc>, i32)>,
    pub requested_at: DateTime<Utc>,
    /// How long it held its agents once placed for the last time; `None`: to the end (it
    /// was never released).
    pub held_for: Option<TimeDelta>,
    /// Each placement before that, in order: each ended with the session back in the queue
    /// (its agent lost or gone before it ran, or its start stalled).
    pub requeued_after: Vec<Requeued>,
    /// When its user withdrew it while it waited, if they did.
    pub withdrawn_at: Option<DateTime<Utc>>,
    /// Where and when it really was placed (within the window), if it was.
    pub recorded: Option<Placement>,
    /// When the real scheduler gave up on it or expired it, if it did (within the window).
    pub recorded_cancel: Option<DateTime<Utc>>,
}

impl Request {
    /// Its priority at `now`: the last change made by then, or the one it was requested with.
    pub fn priority_at(&self, now: DateTime<Utc>) -> i32 {
        self.reprioritized
            .iter()
            .take_while(|(at, _)| *at <= now)
            .last()
            .map_or(self.priority, |(_, to)| *to)
    }

    /// How long it held agents in all, over all its placements (`None`: to the end).
    pub fn held_in_all(&self) -> Option<TimeDelta> {
        let before: TimeDelta = self.requeued_after.iter().map(|r| r.held).sum();
        self.held_for.map(|last| before + last)
    }

    pub fn total(&self) -> ResourceSlots {
        let n = self.cluster_size as u64;
        ResourceSlots {
            cpu_milli: self.per_kernel.cpu_milli * n,
            memory_bytes: self.per_kernel.memory_bytes.saturating_mul(n),
            gpu_milli: self.per_kernel.gpu_milli * n,
        }
    }
}

/// A placement that ended with the session back in the queue: how long it held its agents,
/// and the reconciler's result and code, which the scheduler's next decision is compared
/// with (a changed result is recorded, and counts).
#[derive(Debug, Clone, PartialEq)]
pub struct Requeued {
    pub held: TimeDelta,
    pub result: SchedulingResult,
    pub error_code: Option<String>,
}

/// A placement: when (the deciding pass's moment) and each kernel's agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub at: DateTime<Utc>,
    pub kernels: Vec<KernelPlacement>,
}

/// Resources held on agents from one moment to another (`None`: to the end).
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    pub owner: Uuid,
    pub project: Option<String>,
    pub kernels: Vec<KernelPlacement>,
    pub from: DateTime<Utc>,
    pub until: Option<DateTime<Utc>>,
}

/// What a run of the workload decided for each request (index for index).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub placements: Vec<Option<Placement>>,
    /// Requests the scheduler gave up on or expired, with when and why.
    pub cancelled: Vec<Option<(DateTime<Utc>, String)>>,
    /// Passes of `plan` run.
    pub passes: usize,
    /// The moments of the passes that recorded a decision (those a live scheduler's log
    /// would hold).
    pub deciding_passes: Vec<DateTime<Utc>>,
}

impl Outcome {
    /// What really happened, as the workload recorded it.
    pub fn recorded(workload: &Workload) -> Outcome {
        Outcome {
            placements: workload
                .requests
                .iter()
                .map(|r| r.recorded.clone())
                .collect(),
            cancelled: workload
                .requests
                .iter()
                .map(|r| r.recorded_cancel.map(|at| (at, "as recorded".to_owned())))
                .collect(),
            passes: workload.passes.len(),
            deciding_passes: workload.passes.clone(),
        }
    }
}

/// What happens at one moment of simulated time. The order of the variants is the order
/// of things at the same instant: resources are freed and agents change before the queue
/// does, and the pass comes last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Happening {
    /// A hold given back (an index into the holds).
    Release(usize),
    /// A placement of a request that ended with it back in the queue: (the request, its
    /// hold).
    Requeue(usize, usize),
    /// A background hold taken, as recorded.
    Occupy(usize),
    Agent(usize),
    Withdraw(usize),
    Arrive(usize),
    /// A pass; `true` when it is one of the recorded ones.
    Pass(bool),
    /// The live scheduler's interval since its last pass at this moment: a pass unless it
    /// passed since.
    Tick,
    /// The live scheduler's second look right after a pass that placed or cancelled.
    Again,
}

/// A request's place in the simulated queue.
#[derive(Debug, Clone)]
struct Waiting {
    /// When it entered the queue, the last time.
    queued_at: DateTime<Utc>,
    attempts: u32,
    last_result: Option<SchedulingResult>,
    last_error_code: Option<String>,
    /// How many times it was placed before.
    placed: usize,
}

impl Waiting {
    fn new(queued_at: DateTime<Utc>) -> Waiting {
        Waiting {
            queued_at,
            attempts: 0,
            last_result: None,
            last_error_code: None,
            placed: 0,
        }
    }
}

/// Runs `workload` through `rules` (the workload's own, or another policy's) in simulated
/// time; see the module's docs.
pub fn simulate(workload: &Workload, rules: &GroupRules) -> Outcome {
    let n = workload.requests.len();
    let mut outcome = Outcome {
        placements: vec![None; n],
        cancelled: vec![None; n],
        passes: 0,
        deciding_passes: Vec::new(),
    };
    let mut timeline = Timeline::default();
    for (i, change) in workload.agents.iter().enumerate() {
        if change.at <= workload.to {
            timeline.push((change.at.max(workload.from), Happening::Agent(i)));
        }
    }
    for (i, request) in workload.requests.iter().enumerate() {
        timeline.push((request.requested_at, Happening::Arrive(i)));
        if let Some(at) = request.withdrawn_at {
            timeline.push((at, Happening::Withdraw(i)));
        }
    }
    for at in &workload.passes {
        timeline.push((*at, Happening::Pass(true)));
    }

    let mut agents: BTreeMap<String, AgentView> = BTreeMap::new();
    // What is held on agents that are not in the group now (not joined yet, or gone): theirs
    // again when they join.
    let mut absent_used: HashMap<String, ResourceSlots> = HashMap::new();
    let mut held: HashMap<Uuid, ResourceSlots> = HashMap::new();
    let mut sessions_held: HashMap<Uuid, u32> = HashMap::new();
    let mut intervals: Vec<UsageInterval> = Vec::new();
    // Every hold, the background's (taken and given back as recorded) and the simulation's.
    let mut holds: Vec<Hold> = Vec::new();
    for hold in &workload.background {
        intervals.push(UsageInterval {
            owner: hold.owner,
            project: hold.project.clone(),
            resources: hold_total(hold),
            started_at: hold.from,
            ended_at: hold.until,
        });
        timeline.push((hold.from.max(workload.from), Happening::Occupy(holds.len())));
        if let Some(until) = hold.until.filter(|u| *u <= workload.to) {
            timeline.push((until, Happening::Release(holds.len())));
        }
        holds.push(hold.clone());
    }
    // Takes (`take`) or gives back a hold's resources.
    let apply = |hold: &Hold,
                 take: bool,
                 agents: &mut BTreeMap<String, AgentView>,
                 absent_used: &mut HashMap<String, ResourceSlots>,
                 held: &mut HashMap<Uuid, ResourceSlots>,
                 sessions_held: &mut HashMap<Uuid, u32>| {
        let change = |s: ResourceSlots, by: ResourceSlots| {
            if take {
                s.saturating_add(by)
            } else {
                s.saturating_sub(by)
            }
        };
        for k in &hold.kernels {
            match agents.get_mut(&k.agent_id) {
                Some(agent) => agent.used = change(agent.used, k.resources),
                None => {
                    let used = absent_used.entry(k.agent_id.clone()).or_default();
                    *used = change(*used, k.resources);
                }
            }
        }
        let h = held.entry(hold.owner).or_default();
        *h = change(*h, hold_total(hold));
        let s = sessions_held.entry(hold.owner).or_default();
        *s = if take { *s + 1 } else { s.saturating_sub(1) };
    };

    let mut queue: BTreeMap<usize, Waiting> = BTreeMap::new();
    // Placed requests that may come back to the queue, with their place in it.
    let mut parked: HashMap<usize, Waiting> = HashMap::new();
    let mut last_free: Option<ResourceSlots> = None;
    let mut last_pass: Option<DateTime<Utc>> = None;
    let mut changed_since_pass = true;
    let passes = &workload.passes;
    let interval = TimeDelta::from_std(workload.pacing.interval).unwrap_or(TimeDelta::MAX);

    while let Some((now, happening)) = timeline.pop() {
        if now > workload.to {
            break;
        }
        match happening {
            Happening::Occupy(i) => apply(
                &holds[i],
                true,
                &mut agents,
                &mut absent_used,
                &mut held,
                &mut sessions_held,
            ),
            Happening::Release(i) => apply(
                &holds[i],
                false,
                &mut agents,
                &mut absent_used,
                &mut held,
                &mut sessions_held,
            ),
            Happening::Requeue(i, hold) => {
                apply(
                    &holds[hold],
                    false,
                    &mut agents,
                    &mut absent_used,
                    &mut held,
                    &mut sessions_held,
                );
                if let Some(mut waiting) = parked.remove(&i) {
                    let requeued = &workload.requests[i].requeued_after[waiting.placed - 1];
                    waiting.queued_at = now;
                    waiting.last_result = Some(requeued.result);
                    waiting.last_error_code = requeued.error_code.clone();
                    queue.insert(i, waiting);
                }
            }
            Happening::Agent(i) => {
                let change = &workload.agents[i];
                match &change.joined {
                    Some(offer) => {
                        let used = match agents.get(&change.agent_id) {
                            Some(agent) => agent.used,
                            None => absent_used.remove(&change.agent_id).unwrap_or_default(),
                        };
                        agents.insert(
                            change.agent_id.clone(),
                            AgentView {
                                agent_id: change.agent_id.clone(),
                                capacity: offer.capacity,
                                used,
                                unheard_for: None,
                                network_scope: offer.network_scope.clone(),
                                volumes: offer.volumes.clone(),
                            },
                        );
                    }
                    None => {
                        // What it holds is remembered for its return; nothing goes on it meanwhile.
                        if let Some(agent) = agents.remove(&change.agent_id) {
                            absent_used.insert(change.agent_id.clone(), agent.used);
                        }
                    }
                }
            }
            Happening::Withdraw(i) => {
                queue.remove(&i);
            }
            Happening::Arrive(i) => {
                queue.insert(i, Waiting::new(workload.requests[i].requested_at));
            }
            Happening::Pass(_) | Happening::Tick | Happening::Again => {
                // A tick is a pass only if none came since, and the live one is not in
                // the log (a recorded pass soon after is that one).
                if happening == Happening::Tick
                    && (last_pass.is_some_and(|p| now - p < interval)
                        || recorded_soon_after(passes, now))
                {
                    continue;
                }
                if happening != Happening::Again && last_pass == Some(now) && !changed_since_pass {
                    continue;
                }
                // The live scheduler passes again an interval after every pass, woken or
                // not (an empty queue's pass decides nothing, and keeps the pace).
                last_pass = Some(now);
                timeline.push((now + interval, Happening::Tick));
                if queue.is_empty() {
                    continue;
                }
                let mut snapshot = snapshot(
                    workload,
                    rules,
                    now,
                    &agents,
                    &queue,
                    &held,
                    &sessions_held,
                    &intervals,
                    last_free,
                );
                // As the live pass: the deadline is taken before deciding.
                let deadline = core::next_deadline(&snapshot);
                let decisions = core::plan(&mut snapshot);
                outcome.passes += 1;
                changed_since_pass = false;
                for agent in snapshot.agents {
                    agents.insert(agent.agent_id.clone(), agent);
                }
                last_free = Some(
                    agents
                        .values()
                        .fold(ResourceSlots::default(), |s, a| s.saturating_add(a.free())),
                );
                let index: HashMap<Uuid, usize> = queue
                    .keys()
                    .map(|i| (workload.requests[*i].session_id, *i))
                    .collect();
                let mut deciding = false;
                let mut moved = false;
                for decision in decisions.into_iter().filter(|d| d.record) {
                    deciding = true;
                    let i = index[&decision.session_id];
                    let request = &workload.requests[i];
                    if let Some(kernels) = decision.placement {
                        moved = true;
                        let Some(mut waiting) = queue.remove(&i) else {
                            continue;
                        };
                        // Each placement holds for as long as the same placement really
                        // held; one that ended in a requeue sends the session back then.
                        let requeue = request.requeued_after.get(waiting.placed);
                        waiting.placed += 1;
                        let total = request.total();
                        let h = held.entry(request.owner).or_default();
                        *h = h.saturating_add(total);
                        *sessions_held.entry(request.owner).or_default() += 1;
                        let until = match requeue {
                            Some(r) => Some(now + r.held.max(TimeDelta::zero())),
                            None => request.held_for.map(|d| now + d.max(TimeDelta::zero())),
                        };
                        intervals.push(UsageInterval {
                            owner: request.owner,
                            project: request.project.clone(),
                            resources: total,
                            started_at: now,
                            ended_at: until,
                        });
                        let hold = Hold {
                            owner: request.owner,
                            project: request.project.clone(),
                            kernels: kernels.clone(),
                            from: now,
                            until,
                        };
                        if let Some(until) = until.filter(|u| *u <= workload.to) {
                            let ends = match requeue {
                                Some(_) => Happening::Requeue(i, holds.len()),
                                None => Happening::Release(holds.len()),
                            };
                            timeline.push((until, ends));
                        }
                        holds.push(hold);
                        parked.insert(i, waiting);
                        // The wait measured is to the first placement.
                        outcome.placements[i].get_or_insert(Placement { at: now, kernels });
                        continue;
                    }
                    if let Some(reason) = decision.cancel_reason {
                        moved = true;
                        queue.remove(&i);
                        outcome.cancelled[i] = Some((now, reason));
                        continue;
                    }
                    if let Some(waiting) = queue.get_mut(&i) {
                        waiting.attempts = decision.attempts;
                        waiting.last_result = Some(decision.result);
                        waiting.last_error_code = decision.error_code.map(str::to_owned);
                    }
                }
                if deciding {
                    outcome.deciding_passes.push(now);
                }
                // The live scheduler looks again at once when its queue moved; if that look
                // decided anything, it is in the log, just after this pass.
                let next_recorded = passes.get(passes.partition_point(|p| *p <= now));
                if moved && next_recorded.is_none_or(|p| *p - now > WAKE_LATENCY) {
                    timeline.push((now, Happening::Again));
                }
                // The live scheduler passes at the deadline too, a little after it (its
                // timer's wake-up, or the end of a pass still running: tens of milliseconds
                // under load); a pass that gave up a wait is in the log, and a recorded pass
                // soon after the deadline is that one. Made here at the deadline itself, it
                // would decide early, and a placement it made would free early, and so on.
                if let Some(deadline) = deadline.filter(|d| !recorded_soon_after(passes, *d)) {
                    timeline.push((deadline, Happening::Pass(false)));
                }
                continue;
            }
        }
        changed_since_pass = true;
        let wakes = match happening {
            Happening::Release(_)
            | Happening::Requeue(..)
            | Happening::Arrive(_)
            | Happening::Withdraw(_) => true,
            Happening::Agent(i) => workload.agents[i].wakes,
            _ => false,
        };
        if wakes {
            // The live scheduler passes right after a wake-up, or, while it missed its
            // wake-ups, when the relay's backlog reached it. A recorded pass soon after is
            // that pass; with none, the live pass recorded nothing, and is made here.
            let woken = deaf_until(&workload.deaf, now).unwrap_or(now);
            if !recorded_soon_after(passes, woken) {
                timeline.push((woken, Happening::Pass(false)));
            }
        }
    }
    outcome
}

/// Whether a recorded pass comes within [`WAKE_LATENCY`] from `at` on: the live pass made
/// then, which a replay takes from the log rather than makes.
fn recorded_soon_after(passes: &[DateTime<Utc>], at: DateTime<Utc>) -> bool {
    passes
        .get(passes.partition_point(|p| *p < at))
        .is_some_and(|pass| *pass - at <= WAKE_LATENCY)
}

/// The end of the window of missed wake-ups `now` falls in, if it falls in one.
fn deaf_until(
    deaf: &[(DateTime<Utc>, DateTime<Utc>)],
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    // A wake-up recorded at the window's start is the last one heard.
    deaf.iter()
        .find(|(from, until)| *from < now && now < *until)
        .map(|(_, until)| *until)
}

fn hold_total(hold: &Hold) -> ResourceSlots {
    hold.kernels.iter().fold(ResourceSlots::default(), |s, k| {
        s.saturating_add(k.resources)
    })
}

fn pending(request: &Request, waiting: &Waiting, now: DateTime<Utc>) -> PendingSession {
    PendingSession {
        session_id: request.session_id,
        version: 0,
        owner: request.owner,
        per_kernel: request.per_kernel,
        cluster_mode: request.cluster_mode,
        cluster_size: request.cluster_size,
        wanted_agent: request.wanted_agent.clone(),
        starts_at: request.starts_at,
        queued_at: waiting.queued_at,
        attempts: waiting.attempts,
        last_result: waiting.last_result,
        last_error_code: waiting.last_error_code.clone(),
        priority: request.priority_at(now),
        project: request.project.clone(),
        volumes: request.volumes.clone(),
        // A replay writes no history row, which alone says where the image was.
        image: String::new(),
        image_on: Default::default(),
    }
}

/// The snapshot a live pass would load at `now`.
#[allow(clippy::too_many_arguments)]
fn snapshot(
    workload: &Workload,
    rules: &GroupRules,
    now: DateTime<Utc>,
    agents: &BTreeMap<String, AgentView>,
    queue: &BTreeMap<usize, Waiting>,
    held: &HashMap<Uuid, ResourceSlots>,
    sessions_held: &HashMap<Uuid, u32>,
    intervals: &[UsageInterval],
    last_free: Option<ResourceSlots>,
) -> Snapshot {
    let queue: Vec<PendingSession> = queue
        .iter()
        .take(BATCH)
        .map(|(i, w)| pending(&workload.requests[*i], w, now))
        .collect();
    let mut owners = HashMap::new();
    for session in &queue {
        if let Some(limits) = workload.limits.get(&session.owner) {
            owners.entry(session.owner).or_insert_with(|| OwnerLoad {
                policy: limits.policy.clone(),
                sessions: sessions_held.get(&session.owner).copied().unwrap_or(0),
                used: held.get(&session.owner).copied().unwrap_or_default(),
                max_sessions: limits.max_sessions,
                max_total: limits.max_total,
            });
        }
    }
    // An agent silent before it was lost was passed over once silent for long enough.
    let agents: Vec<AgentView> = agents
        .values()
        .map(|agent| AgentView {
            unheard_for: workload
                .silences
                .iter()
                .find(|s| s.agent_id == agent.agent_id && s.heard <= now && now < s.lost)
                .and_then(|s| (now - s.heard).to_std().ok()),
            ..agent.clone()
        })
        .collect();
    let free = agents
        .iter()
        .fold(ResourceSlots::default(), |s, a| s.saturating_add(a.free()));
    let capacity_grew = last_free.is_none_or(|before| !free.fits_in(before));
    // Past use matters only to fair share; it is the costliest input to make.
    let usage = if rules.queue_policy == QueuePolicy::FairShare {
        fair_share::usage(intervals, now, &rules.fair_share)
    } else {
        Default::default()
    };
    Snapshot {
        group: rules.clone(),
        agents,
        silent_after: workload.pacing.silent_after,
        queue,
        owners,
        held: held.clone(),
        usage,
        now,
        capacity_grew,
    }
}

/// The happenings still ahead, earliest first.
#[derive(Default)]
struct Timeline {
    heap: BinaryHeap<Reverse<(DateTime<Utc>, Happening)>>,
}

impl Timeline {
    fn push(&mut self, (at, happening): (DateTime<Utc>, Happening)) {
        self.heap.push(Reverse((at, happening)));
    }

    fn pop(&mut self) -> Option<(DateTime<Utc>, Happening)> {
        self.heap.pop().map(|Reverse(next)| next)
    }
}

#[cfg(test)]
mod tests;
