//! When a session is expected to start, and which shapes or groups would start sooner: the
//! live queue run forward in simulated time through the very decisions the scheduler makes
//! ([`crate::core::plan`]). Pure: the caller hands the group's snapshot, what its sessions
//! hold now and until when, and how long a session typically holds its agents there.
//!
//! The model, said plainly: every session that holds resources now gives them back at its
//! expected end (its start plus the group's typical hold, or, past that, one typical hold from
//! now; never after its hard lifetime); every session placed in the simulation holds for the
//! typical hold. Agents neither join nor leave, and nobody else asks meanwhile. A pass runs at
//! every release and whenever time alone changes a decision (a reserved start), as the live
//! scheduler's wake-ups do. The estimate is the simulated time of the asked session's
//! placement, and the sessions ahead are those the simulation places before it. Counted
//! attempts and the pending timeout are left out: a simulated wait never gives up.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
pub use events::advice::{Advice, AdviceAsked, Alternative, Estimate, Shape};
use events::payloads::{ClusterMode, ResourceSlots};
use uuid::Uuid;

use crate::core::{self, PendingSession, Snapshot};

/// How far ahead a simulation looks before it says "not within" it.
pub const HORIZON: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most passes one simulation runs.
const MOST_PASSES: usize = 1_000;
/// The longest queue the scheduler estimates for as it passes (a simulation over a longer one
/// would cost more than the pass itself): its sessions get no estimate.
pub const MOST_ESTIMATED_QUEUE: usize = 256;
/// The hold assumed when the group has no finished session to learn from.
pub const DEFAULT_TYPICAL_HOLD: Duration = Duration::from_secs(3600);

/// What a session holds on the group's agents now, and when it is expected to give it back.
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    pub session_id: Uuid,
    pub owner: Uuid,
    /// Each kernel's agent and share.
    pub kernels: Vec<(String, ResourceSlots)>,
    /// When it began to hold.
    pub since: DateTime<Utc>,
    /// Its hard lifetime, from its creation, when its policy sets one.
    pub ends_by: Option<DateTime<Utc>>,
}

impl Holding {
    /// When it is expected to give its resources back, seen at `now`.
    pub fn expected_end(&self, now: DateTime<Utc>, typical: Duration) -> DateTime<Utc> {
        let typical = TimeDelta::from_std(typical).unwrap_or(TimeDelta::hours(1));
        let by_habit = self.since + typical;
        let expected = if by_habit > now {
            by_habit
        } else {
            now + typical
        };
        self.ends_by
            .map_or(expected, |cap| expected.min(cap.max(now)))
    }
}

/// The waiting session `asked` (already in the snapshot's queue), or a new request of `shape`
/// by `owner` at the back of the queue: when the simulation places it.
pub enum Asked {
    Queued(Uuid),
    New {
        owner: Uuid,
        shape: Shape,
        priority: i32,
        project: Option<String>,
    },
}

/// A release in the simulation: whose, which agent, what, and whether it ends one of its
/// owner's sessions (its main kernel's release does).
type Release = (Uuid, String, ResourceSlots, bool);

/// The simulation's releases, earliest first.
#[derive(Default)]
struct Releases {
    due: BinaryHeap<Reverse<(DateTime<Utc>, usize)>>,
    all: Vec<Release>,
}

impl Releases {
    fn push(&mut self, at: DateTime<Utc>, release: Release) {
        self.due.push(Reverse((at, self.all.len())));
        self.all.push(release);
    }

    fn next_at(&self) -> Option<DateTime<Utc>> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    /// The next release due by `now`.
    fn pop_due(&mut self, now: DateTime<Utc>) -> Option<Release> {
        let Reverse((at, i)) = *self.due.peek()?;
        if at > now {
            return None;
        }
        self.due.pop();
        Some(self.all[i].clone())
    }
}

/// The id a new request takes in the simulation.
const ASKED_ID: Uuid = Uuid::from_u128(0xadu128);

/// When `asked` is expected to start in the group of `snapshot`, whose sessions hold
/// `holdings` now and typically hold for `typical`.
pub fn estimate(
    snapshot: &Snapshot,
    holdings: &[Holding],
    asked: &Asked,
    typical: Duration,
) -> Estimate {
    let mut sim = snapshot.clone();
    let target = match asked {
        Asked::Queued(id) => *id,
        Asked::New {
            owner,
            shape,
            priority,
            project,
        } => {
            sim.queue.push(PendingSession {
                session_id: ASKED_ID,
                version: 0,
                owner: *owner,
                per_kernel: shape.per_kernel,
                cluster_mode: ClusterMode::SingleNode,
                cluster_size: shape.cluster_size.max(1),
                wanted_agent: None,
                starts_at: None,
                queued_at: sim.now,
                attempts: 0,
                last_result: None,
                last_error_code: None,
                priority: *priority,
                project: project.clone(),
                volumes: Vec::new(),
                image: String::new(),
                image_on: Default::default(),
            });
            ASKED_ID
        }
    };
    simulate(sim, holdings, &[target], typical)
        .remove(&target)
        .unwrap_or_else(|| Estimate::never("it is not waiting in this group", Vec::new()))
}

/// The most sessions named ahead of one.
pub const MOST_NAMED_AHEAD: usize = 20;

/// When each of `targets` (waiting in `snapshot`'s queue) is expected to start: one run of the
/// queue forward, which places them all in turn. A target not in the queue has no estimate.
pub fn simulate(
    snapshot: Snapshot,
    holdings: &[Holding],
    targets: &[Uuid],
    typical: Duration,
) -> HashMap<Uuid, Estimate> {
    let start = snapshot.now;
    let mut sim = snapshot;
    sim.group.max_attempts = u32::MAX;
    sim.group.pending_timeout_secs = 0;
    let waiting: HashSet<Uuid> = sim.queue.iter().map(|s| s.session_id).collect();
    let mut open: HashSet<Uuid> = targets
        .iter()
        .copied()
        .filter(|t| waiting.contains(t))
        .collect();
    let mut found = HashMap::new();
    let mut releases = Releases::default();
    for h in holdings {
        let end = h.expected_end(start, typical);
        for (i, (agent, share)) in h.kernels.iter().enumerate() {
            releases.push(end, (h.owner, agent.clone(), *share, i == 0));
        }
    }
    let typical_delta = TimeDelta::from_std(typical).unwrap_or(TimeDelta::hours(1));
    let horizon = start + TimeDelta::from_std(HORIZON).unwrap_or(TimeDelta::days(7));
    // The waiting sessions placed so far, in order; an estimate names the first of them.
    let mut placed: Vec<Uuid> = Vec::new();
    let named = |placed: &[Uuid]| placed.iter().take(MOST_NAMED_AHEAD).copied().collect();
    let close = |found: &mut HashMap<Uuid, Estimate>, open: &mut HashSet<Uuid>, e: Estimate| {
        for t in open.drain() {
            found.insert(t, e.clone());
        }
    };
    for _ in 0..MOST_PASSES {
        if open.is_empty() {
            return found;
        }
        sim.capacity_grew = true;
        let decisions = core::plan(&mut sim);
        let mut gone = Vec::new();
        for d in &decisions {
            if let Some(kernels) = &d.placement {
                if open.remove(&d.session_id) {
                    let ahead = named(&placed);
                    found.insert(d.session_id, Estimate::placed(sim.now - start, ahead));
                }
                placed.push(d.session_id);
                let owner = sim
                    .queue
                    .iter()
                    .find(|s| s.session_id == d.session_id)
                    .map(|s| s.owner)
                    .unwrap_or_default();
                for (i, k) in kernels.iter().enumerate() {
                    let release = (owner, k.agent_id.clone(), k.resources, i == 0);
                    releases.push(sim.now + typical_delta, release);
                }
                gone.push(d.session_id);
            } else if let Some(reason) = &d.cancel_reason {
                if open.remove(&d.session_id) {
                    found.insert(
                        d.session_id,
                        Estimate::never(reason.clone(), named(&placed)),
                    );
                }
                gone.push(d.session_id);
            }
        }
        sim.queue.retain(|s| !gone.contains(&s.session_id));
        if open.is_empty() {
            return found;
        }
        // The next moment something changes: a release, or a reserved start coming due.
        let deadline = core::next_deadline(&sim);
        let Some(next) = [deadline, releases.next_at()].into_iter().flatten().min() else {
            let never = Estimate::never(
                "nothing held in the group would free enough for it",
                named(&placed),
            );
            close(&mut found, &mut open, never);
            return found;
        };
        if next > horizon {
            let never = Estimate::never("not within a week", named(&placed));
            close(&mut found, &mut open, never);
            return found;
        }
        sim.now = next.max(sim.now);
        while let Some((owner, agent, share, ends_one)) = releases.pop_due(sim.now) {
            if let Some(a) = sim.agents.iter_mut().find(|a| a.agent_id == agent) {
                a.used = a.used.saturating_sub(share);
            }
            if let Some(load) = sim.owners.get_mut(&owner) {
                load.used = load.used.saturating_sub(share);
                if ends_one {
                    load.sessions = load.sessions.saturating_sub(1);
                }
            }
            if let Some(held) = sim.held.get_mut(&owner) {
                *held = held.saturating_sub(share);
            }
        }
    }
    let never = Estimate::never("the simulation ran out of passes", named(&placed));
    close(&mut found, &mut open, never);
    found
}

/// The shapes worth proposing instead of `shape`: half of it, then a quarter (each while it
/// still asks for something).
pub fn smaller_shapes(shape: Shape) -> Vec<(String, Shape)> {
    let mut found = Vec::new();
    for (label, divisor) in [("half the resources", 2), ("a quarter of the resources", 4)] {
        let per_kernel = ResourceSlots {
            cpu_milli: shape.per_kernel.cpu_milli / divisor,
            memory_bytes: shape.per_kernel.memory_bytes / divisor,
            gpu_milli: shape.per_kernel.gpu_milli / divisor,
        };
        if per_kernel.cpu_milli >= 100 && per_kernel.memory_bytes >= 64 << 20 {
            found.push((
                label.to_owned(),
                Shape {
                    per_kernel,
                    cluster_size: shape.cluster_size,
                },
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::FairShareSettings;
    use crate::core::{AgentView, GroupRules, OwnerLoad};
    use chrono::TimeZone;
    use events::payloads::{AgentSelection, QueuePolicy};
    use std::collections::HashMap;

    const GIB: u64 = 1 << 30;

    fn cores(n: u64) -> ResourceSlots {
        ResourceSlots {
            cpu_milli: n * 1000,
            memory_bytes: n * GIB,
            gpu_milli: 0,
        }
    }

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
    }

    fn waiting(n: u128, owner: Uuid, size: u64, queued: i64) -> PendingSession {
        PendingSession {
            session_id: Uuid::from_u128(n),
            version: 1,
            owner,
            per_kernel: cores(size),
            cluster_mode: ClusterMode::SingleNode,
            cluster_size: 1,
            wanted_agent: None,
            starts_at: None,
            queued_at: t0() + TimeDelta::seconds(queued),
            attempts: 1,
            last_result: None,
            last_error_code: None,
            priority: 10,
            project: None,
            volumes: Vec::new(),
            image: String::new(),
            image_on: Default::default(),
        }
    }

    /// One agent of 8 cores, all held by a session that began at `t0 - began` minutes, and
    /// a FIFO queue of `queue`.
    fn full_group(queue: Vec<PendingSession>, owner: Uuid) -> (Snapshot, Vec<Holding>) {
        let agent = AgentView {
            agent_id: "a1".into(),
            capacity: cores(8),
            used: cores(8),
            unheard_for: Some(Duration::from_secs(1)),
            network_scope: "agent:a1".into(),
            volumes: Vec::new(),
        };
        let load = OwnerLoad {
            policy: "default".into(),
            sessions: 0,
            used: ResourceSlots::default(),
            max_sessions: 100,
            max_total: cores(1000),
        };
        let snapshot = Snapshot {
            group: GroupRules {
                name: "default".into(),
                queue_policy: QueuePolicy::Fifo,
                agent_selection: AgentSelection::Concentrated,
                max_attempts: 5,
                skip_after: 2,
                pending_timeout_secs: 600,
                fair_share: FairShareSettings::default(),
                starve_after_secs: 0,
            },
            agents: vec![agent],
            silent_after: Duration::from_secs(10),
            queue,
            owners: HashMap::from([(owner, load)]),
            held: HashMap::new(),
            usage: Default::default(),
            now: t0(),
            capacity_grew: false,
        };
        let holding = Holding {
            session_id: Uuid::from_u128(99),
            owner,
            kernels: vec![("a1".into(), cores(8))],
            since: t0() - TimeDelta::minutes(20),
            ends_by: None,
        };
        (snapshot, vec![holding])
    }

    #[test]
    fn a_full_group_says_when_and_names_the_sessions_ahead_in_the_queues_order() {
        let owner = Uuid::from_u128(7);
        let queue = vec![waiting(1, owner, 6, 0), waiting(2, owner, 4, 10)];
        let (snapshot, holdings) = full_group(queue, owner);
        let typical = Duration::from_secs(3600);
        let asked = Asked::New {
            owner,
            shape: Shape {
                per_kernel: cores(4),
                cluster_size: 1,
            },
            priority: 10,
            project: None,
        };
        let e = estimate(&snapshot, &holdings, &asked, typical);
        // The holder frees at 40 min; 1 (6 cores) takes it, 2 (4) cannot fit beside it and
        // holds the FIFO queue; 1 frees at 100 min, then 2 and the asked one both fit.
        assert_eq!(e.wait_secs, Some(100 * 60), "{e:?}");
        assert_eq!(e.ahead, vec![Uuid::from_u128(1), Uuid::from_u128(2)]);
        assert_eq!(e.words(), "in about 1.7 h");
        // A queued session's own estimate: the second one starts at 100 min too.
        let second = estimate(
            &snapshot,
            &holdings,
            &Asked::Queued(Uuid::from_u128(2)),
            typical,
        );
        assert_eq!(second.wait_secs, Some(100 * 60));
        assert_eq!(second.ahead, vec![Uuid::from_u128(1)]);
    }

    #[test]
    fn a_shape_that_fits_now_starts_now_and_smaller_shapes_are_proposed() {
        let owner = Uuid::from_u128(7);
        let (mut snapshot, mut holdings) = full_group(Vec::new(), owner);
        // The holder keeps 6 of the 8 cores: 2 are free now.
        snapshot.agents[0].used = cores(6);
        holdings[0].kernels = vec![("a1".into(), cores(6))];
        let asked = |size: u64| Asked::New {
            owner,
            shape: Shape {
                per_kernel: cores(size),
                cluster_size: 1,
            },
            priority: 10,
            project: None,
        };
        let typical = Duration::from_secs(3600);
        let four = estimate(&snapshot, &holdings, &asked(4), typical);
        assert_eq!(four.wait_secs, Some(40 * 60));
        let smaller = smaller_shapes(Shape {
            per_kernel: cores(4),
            cluster_size: 1,
        });
        assert_eq!(smaller[0].1.per_kernel, cores(2));
        let half = estimate(&snapshot, &holdings, &asked(2), typical);
        assert_eq!(half.words(), "now");
        assert!(half.sooner_than(&four));
    }

    #[test]
    fn a_shape_no_agent_can_hold_is_never_expected_and_a_hold_past_habit_ends_by_its_cap() {
        let owner = Uuid::from_u128(7);
        let (snapshot, holdings) = full_group(Vec::new(), owner);
        let asked = Asked::New {
            owner,
            shape: Shape {
                per_kernel: cores(16),
                cluster_size: 1,
            },
            priority: 10,
            project: None,
        };
        let e = estimate(&snapshot, &holdings, &asked, Duration::from_secs(3600));
        assert_eq!(e.wait_secs, None, "{e:?}");
        let old = Holding {
            since: t0() - TimeDelta::hours(3),
            ends_by: Some(t0() + TimeDelta::minutes(5)),
            ..holdings[0].clone()
        };
        let typical = Duration::from_secs(3600);
        assert_eq!(
            old.expected_end(t0(), typical),
            t0() + TimeDelta::minutes(5)
        );
        let uncapped = Holding {
            ends_by: None,
            ..old
        };
        assert_eq!(
            uncapped.expected_end(t0(), typical),
            t0() + TimeDelta::hours(1)
        );
    }
}
