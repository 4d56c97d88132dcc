//! The order a group's queue is decided in, by its policy and the sessions' priorities, with
//! the figures that put each session where it is (recorded as a history step). Pure: the
//! live scheduler and the what-if replay order the same snapshot the same way.
//!
//! The order key is, first to last:
//! 1. *starving*: a session queued longer than the group's `starve_after_secs` (when set)
//!    goes before every one that is not, the longest waiting first: no priority or share can
//!    pass it over for longer than that bound;
//! 2. *priority*, higher first;
//! 3. the *policy*: `fifo` and `backfill` oldest first, `lifo` newest first, `drf` the owner
//!    with the smallest dominant share of the group's live capacity (held now, and raised by
//!    each placement of the pass, so shares are recomputed turn by turn), `fair-share` the
//!    highest fair-share factor (owner's times project's, from decayed past use);
//! 4. *arrival* (the queue's order as loaded, oldest first) breaks every tie.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};

use chrono::{DateTime, Utc};
use events::payloads::{QueuePolicy, ResourceSlots};
use uuid::Uuid;

use crate::core::{PendingSession, Snapshot};
use crate::fair_share::{dominant_share, dominant_share_value, DominantShare, Factors};

/// The name of the history step that says where a session's turn came from.
pub fn step_name(policy: QueuePolicy) -> String {
    format!("order the queue ({})", policy.as_str())
}

/// A session's turn: its index in the loaded queue and why it came now.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub index: usize,
    pub message: String,
}

/// Usage in weighed resource-seconds, short (812, 12.3 k, 4.56 M).
pub fn short_usage(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2} M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1} k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

/// The sessions of one band of the order (starving ones, or one priority), and how the
/// band's turns are chosen.
enum Band {
    /// Turns fixed in advance.
    Fixed(VecDeque<usize>),
    /// Dominant resource fairness: per owner, their sessions oldest first; the heap yields the
    /// owner with the smallest share (ties: the earliest next session).
    Drf {
        per_owner: HashMap<Uuid, VecDeque<usize>>,
        heap: BinaryHeap<Reverse<(u64, usize, Uuid)>>,
        /// Whether the owners' shares have been computed (at the band's first turn, so the
        /// placements of earlier bands count).
        started: bool,
    },
}

/// The order of one pass, turn by turn. Call [`Order::placed`] after a turn's session is
/// placed, so a dynamic order (DRF) sees it.
pub struct Order {
    policy: QueuePolicy,
    bands: VecDeque<Band>,
    /// The owner of the last DRF turn, to put back on the heap at the next turn.
    drf_owner: Option<Uuid>,
    held: HashMap<Uuid, ResourceSlots>,
    capacity: ResourceSlots,
    factors: Factors,
    usage: HashMap<Uuid, f64>,
    /// Whether priorities differ in the queue (only then does the history name them).
    priorities_differ: bool,
    starve_after_secs: u64,
    turns: usize,
    total: usize,
    queued: Vec<Facts>,
}

/// What the order knows of one queued session.
#[derive(Debug, Clone)]
struct Facts {
    owner: Uuid,
    project: Option<String>,
    priority: i32,
    waited: u64,
    starving: bool,
}

/// Share as a sortable key: non-negative finite floats order as their bits do.
fn share_key(share: f64) -> u64 {
    share.max(0.0).to_bits()
}

impl Order {
    /// The order of `snapshot`'s queue; `capacity` is the group's live agents' capacity
    /// together (DRF's shares are of it).
    pub fn new(snapshot: &Snapshot, capacity: ResourceSlots) -> Order {
        let rules = &snapshot.group;
        let now = snapshot.now;
        let starve = rules.starve_after_secs;
        let queued: Vec<Facts> = snapshot
            .queue
            .iter()
            .map(|s| {
                let waited = waited(s, now);
                Facts {
                    owner: s.owner,
                    project: s.project.clone(),
                    priority: s.priority,
                    waited,
                    starving: starve > 0 && waited > starve,
                }
            })
            .collect();
        let factors = if rules.queue_policy == QueuePolicy::FairShare {
            Factors::new(
                &snapshot.usage,
                snapshot
                    .queue
                    .iter()
                    .map(|s| (s.owner, s.project.as_deref())),
            )
        } else {
            Factors::default()
        };
        let priorities_differ = queued.windows(2).any(|w| w[0].priority != w[1].priority);
        let mut order = Order {
            policy: rules.queue_policy,
            bands: VecDeque::new(),
            drf_owner: None,
            held: snapshot.held.clone(),
            capacity,
            usage: snapshot.usage.by_owner.clone(),
            factors,
            priorities_differ,
            starve_after_secs: starve,
            turns: 0,
            total: queued.len(),
            queued,
        };
        order.bands = order.make_bands();
        order.seed_drf_band();
        order
    }

    fn make_bands(&self) -> VecDeque<Band> {
        let mut bands = VecDeque::new();
        let (mut starving, rest): (Vec<usize>, Vec<usize>) =
            (0..self.queued.len()).partition(|&i| self.queued[i].starving);
        starving.sort_by_key(|&i| (Reverse(self.queued[i].waited), i));
        if !starving.is_empty() {
            bands.push_back(Band::Fixed(starving.into()));
        }
        // Priority bands, highest first; each keeps arrival order inside.
        let mut by_priority: Vec<(i32, Vec<usize>)> = Vec::new();
        let mut rest = rest;
        rest.sort_by_key(|&i| (Reverse(self.queued[i].priority), i));
        for i in rest {
            let priority = self.queued[i].priority;
            match by_priority.last_mut() {
                Some((p, members)) if *p == priority => members.push(i),
                _ => by_priority.push((priority, vec![i])),
            }
        }
        for (_, mut members) in by_priority {
            let band = match self.policy {
                QueuePolicy::Fifo | QueuePolicy::Backfill => Band::Fixed(members.into()),
                QueuePolicy::Lifo => {
                    members.reverse();
                    Band::Fixed(members.into())
                }
                QueuePolicy::FairShare => {
                    let factor = |i: usize| {
                        let s = &self.queued[i];
                        self.factors.owner(s.owner) * self.factors.project(s.project.as_deref())
                    };
                    members.sort_by(|&a, &b| {
                        factor(b)
                            .partial_cmp(&factor(a))
                            .unwrap_or(Ordering::Equal)
                            .then(a.cmp(&b))
                    });
                    Band::Fixed(members.into())
                }
                QueuePolicy::Drf => {
                    let mut per_owner: HashMap<Uuid, VecDeque<usize>> = HashMap::new();
                    for i in members {
                        per_owner
                            .entry(self.queued[i].owner)
                            .or_default()
                            .push_back(i);
                    }
                    Band::Drf {
                        per_owner,
                        heap: BinaryHeap::new(),
                        started: false,
                    }
                }
            };
            bands.push_back(band);
        }
        bands
    }

    /// The owner's dominant share now, the figure alone (a heap key).
    fn share_key(&self, owner: Uuid) -> u64 {
        share_key(dominant_share_value(
            self.held.get(&owner).copied().unwrap_or_default(),
            self.capacity,
        ))
    }

    fn share(&self, owner: Uuid) -> DominantShare {
        dominant_share(
            self.held.get(&owner).copied().unwrap_or_default(),
            self.capacity,
        )
    }

    /// The next session to decide, or `None` when every one has had its turn.
    pub fn next_turn(&mut self) -> Option<Turn> {
        loop {
            // The owner of the last DRF turn goes back on the heap with its share as it is now
            // (raised if that session was placed).
            let returning = self
                .drf_owner
                .take()
                .map(|owner| (owner, self.share_key(owner)));
            let index = match self.bands.front_mut()? {
                Band::Fixed(turns) => turns.pop_front(),
                Band::Drf {
                    per_owner, heap, ..
                } => {
                    if let Some((owner, key)) = returning {
                        if let Some(next) = per_owner.get(&owner).and_then(|q| q.front()) {
                            heap.push(Reverse((key, *next, owner)));
                        }
                    }
                    heap.pop().map(|Reverse((_, _, owner))| {
                        self.drf_owner = Some(owner);
                        per_owner
                            .get_mut(&owner)
                            .and_then(VecDeque::pop_front)
                            .expect("an owner on the heap has a session left")
                    })
                }
            };
            match index {
                Some(index) => {
                    self.turns += 1;
                    let message = self.explain(index);
                    return Some(Turn { index, message });
                }
                None => {
                    self.bands.pop_front();
                    self.seed_drf_band();
                }
            }
        }
    }

    /// Puts every owner of the front band on its heap, if it is a DRF band not yet started,
    /// with their shares as they stand now (after the earlier bands' placements).
    fn seed_drf_band(&mut self) {
        let shares: Vec<(Uuid, u64)> = match self.bands.front() {
            Some(Band::Drf {
                per_owner, started, ..
            }) if !*started => per_owner.keys().map(|o| (*o, self.share_key(*o))).collect(),
            _ => return,
        };
        if let Some(Band::Drf {
            per_owner,
            heap,
            started,
        }) = self.bands.front_mut()
        {
            *started = true;
            for (owner, key) in shares {
                if let Some(first) = per_owner.get(&owner).and_then(|q| q.front()) {
                    heap.push(Reverse((key, *first, owner)));
                }
            }
        }
    }

    /// The session of the last turn was placed holding `resources`: its owner's share grows.
    pub fn placed(&mut self, owner: Uuid, resources: ResourceSlots) {
        let held = self.held.entry(owner).or_default();
        *held = held.saturating_add(resources);
    }

    /// Why session `index` has its turn now, in words with the figures.
    fn explain(&self, index: usize) -> String {
        let facts = &self.queued[index];
        let mut parts = vec![format!("turn {} of {}", self.turns, self.total)];
        if facts.starving {
            parts.push(format!(
                "waited {} s, past the group's bound of {} s: goes before every session not \
                 waiting that long, whatever its priority or rank",
                facts.waited, self.starve_after_secs
            ));
        } else {
            if self.priorities_differ {
                parts.push(format!("priority {}", facts.priority));
            }
            match self.policy {
                QueuePolicy::Fifo | QueuePolicy::Backfill => parts.push("oldest first".into()),
                QueuePolicy::Lifo => parts.push("newest first".into()),
                QueuePolicy::Drf => {
                    let share = self.share(facts.owner);
                    parts.push(format!(
                        "owner's dominant share {:.3} ({}), the smallest of the owners waiting",
                        share.share, share.dominant
                    ));
                }
                QueuePolicy::FairShare => {
                    let owner = self.factors.owner(facts.owner);
                    let project = self.factors.project(facts.project.as_deref());
                    let used = self.usage.get(&facts.owner).copied().unwrap_or(0.0);
                    parts.push(format!(
                        "factor {:.3} = owner {owner:.3} × project {project:.3}; owner's decayed \
                         use {} weighed resource-seconds",
                        owner * project,
                        short_usage(used)
                    ));
                }
            }
        }
        parts.join("; ")
    }
}

/// Whole seconds `session` has waited in the queue at `now`.
pub fn waited(session: &PendingSession, now: DateTime<Utc>) -> u64 {
    (now - session.queued_at).num_seconds().max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{plan, AgentView, Decision, GroupRules};
    use crate::fair_share::{FairShareSettings, Usage};
    use chrono::TimeZone;
    use events::payloads::{AgentSelection, ClusterMode};
    use std::time::Duration;

    const GIB: u64 = 1 << 30;
    const ALICE: u128 = 1;
    const BOB: u128 = 2;

    fn cores(n: u64) -> ResourceSlots {
        ResourceSlots {
            cpu_milli: n * 1000,
            memory_bytes: n * GIB,
            gpu_milli: 0,
        }
    }

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 26, 12, 0, 0).unwrap()
    }

    /// Session `n` of `owner` for 2 cores, queued `n` seconds after t0.
    fn session(n: u128, owner: u128) -> PendingSession {
        PendingSession {
            image: Default::default(),
            image_on: Default::default(),
            session_id: Uuid::from_u128(n),
            version: 0,
            owner: Uuid::from_u128(owner),
            per_kernel: cores(2),
            cluster_mode: ClusterMode::SingleNode,
            cluster_size: 1,
            wanted_agent: None,
            starts_at: None,
            queued_at: t0() + chrono::Duration::seconds(n as i64),
            attempts: 0,
            last_result: None,
            last_error_code: None,
            priority: 0,
            project: None,
            volumes: Default::default(),
        }
    }

    /// One agent of 16 cores with `used` in use, under `policy`.
    fn snapshot(policy: QueuePolicy, used: u64, queue: Vec<PendingSession>) -> Snapshot {
        Snapshot {
            group: GroupRules {
                name: "lab".into(),
                queue_policy: policy,
                agent_selection: AgentSelection::Concentrated,
                max_attempts: 100,
                skip_after: 100,
                pending_timeout_secs: 0,
                fair_share: FairShareSettings::default(),
                starve_after_secs: 0,
            },
            agents: vec![AgentView {
                agent_id: "a1".into(),
                capacity: cores(16),
                used: cores(used),
                unheard_for: None,
                network_scope: "engine:one".into(),
                volumes: Default::default(),
            }],
            silent_after: Duration::from_secs(10),
            queue,
            owners: HashMap::new(),
            held: HashMap::new(),
            usage: Usage::default(),
            now: t0() + chrono::Duration::seconds(1000),
            capacity_grew: true,
        }
    }

    /// The sessions placed, in the order they were decided.
    fn placed(decisions: &[Decision]) -> Vec<u128> {
        decisions
            .iter()
            .filter(|d| d.placement.is_some())
            .map(|d| d.session_id.as_u128())
            .collect()
    }

    fn decided(decisions: &[Decision]) -> Vec<u128> {
        decisions.iter().map(|d| d.session_id.as_u128()).collect()
    }

    fn order_message(d: &Decision) -> &str {
        let step = &d.steps[0];
        assert!(step.step.starts_with("order the queue ("), "{step:?}");
        &step.message
    }

    #[test]
    fn fifo_and_backfill_go_oldest_first_and_lifo_newest_first() {
        let queue = vec![session(1, ALICE), session(2, ALICE), session(3, BOB)];
        // Room for two sessions of 2 cores.
        for (policy, expected) in [
            (QueuePolicy::Fifo, vec![1, 2]),
            (QueuePolicy::Backfill, vec![1, 2]),
            (QueuePolicy::Lifo, vec![3, 2]),
        ] {
            let mut s = snapshot(policy, 12, queue.clone());
            let d = plan(&mut s);
            assert_eq!(placed(&d), expected, "{policy:?}");
            assert_eq!(
                d[0].steps[0].step,
                format!("order the queue ({})", policy.as_str())
            );
        }
        let mut s = snapshot(QueuePolicy::Lifo, 12, queue);
        let d = plan(&mut s);
        assert!(order_message(&d[0]).contains("turn 1 of 3; newest first"));
    }

    #[test]
    fn drf_serves_the_owner_with_the_smallest_dominant_share_turn_by_turn() {
        // Nothing held: Alice's four and Bob's two alternate while shares are equal, ties by
        // arrival; once Bob is out, Alice's backlog follows.
        let queue = vec![
            session(1, ALICE),
            session(2, ALICE),
            session(3, ALICE),
            session(4, ALICE),
            session(5, BOB),
            session(6, BOB),
        ];
        let mut s = snapshot(QueuePolicy::Drf, 0, queue);
        let d = plan(&mut s);
        assert_eq!(decided(&d), [1, 5, 2, 6, 3, 4]);
        assert_eq!(placed(&d).len(), 6);
        assert!(order_message(&d[0]).contains("owner's dominant share 0.000 (nothing held)"));
        // Bob's second: he holds 2 of 16 cores (and 2 of 16 GiB); Alice holds 4.
        assert!(
            order_message(&d[3]).contains("owner's dominant share 0.125 (cpu 2 of 16 cores)"),
            "{}",
            order_message(&d[3])
        );
        assert_eq!(
            s.held[&Uuid::from_u128(ALICE)],
            cores(8),
            "holdings grow with the pass's placements"
        );
    }

    #[test]
    fn drf_puts_a_light_owner_before_a_heavy_owners_older_backlog() {
        // Alice holds 14 of the 16 cores and queued 20 more before Bob's 2: one fits.
        let mut queue: Vec<PendingSession> = (1..=20).map(|n| session(n, ALICE)).collect();
        queue.push(session(21, BOB));
        queue.push(session(22, BOB));
        for (policy, first) in [(QueuePolicy::Drf, 21), (QueuePolicy::Fifo, 1)] {
            let mut s = snapshot(policy, 14, queue.clone());
            s.held.insert(Uuid::from_u128(ALICE), cores(14));
            let d = plan(&mut s);
            assert_eq!(placed(&d), [first], "{policy:?}");
        }
        let mut s = snapshot(QueuePolicy::Drf, 14, queue);
        s.held.insert(Uuid::from_u128(ALICE), cores(14));
        let d = plan(&mut s);
        // Bob's second waits at the head (the group is full now) and holds Alice's back.
        assert_eq!(decided(&d)[..3], [21, 22, 1]);
        assert_eq!(d[1].error_code, Some("NO_CAPACITY"));
        assert_eq!(d[2].error_code, Some("BEHIND_HEAD"));
        assert!(
            order_message(&d[2]).contains("owner's dominant share 0.875 (cpu 14 of 16 cores)"),
            "{}",
            order_message(&d[2])
        );
    }

    #[test]
    fn fair_share_puts_the_owner_who_ran_least_first_and_names_the_factor() {
        let mut alice = session(1, ALICE);
        alice.project = Some("physics".into());
        let mut bob = session(2, BOB);
        bob.project = Some("physics".into());
        let mut s = snapshot(QueuePolicy::FairShare, 14, vec![alice, bob]);
        s.usage.by_owner.insert(Uuid::from_u128(ALICE), 12_345.0);
        s.usage.by_project.insert("physics".into(), 12_345.0);
        let d = plan(&mut s);
        assert_eq!(placed(&d), [2]);
        // Two owners, Alice used all: her factor is 2^(-1 * 2) = 0.25, Bob's 1; one project.
        assert!(
            order_message(&d[0]).contains("factor 0.500 = owner 1.000 × project 0.500"),
            "{}",
            order_message(&d[0])
        );
        assert!(
            order_message(&d[1])
                .contains("factor 0.125 = owner 0.250 × project 0.500; owner's decayed use 12.3 k"),
            "{}",
            order_message(&d[1])
        );
    }

    #[test]
    fn higher_priority_goes_first_within_every_policy() {
        let low = session(1, ALICE);
        let mut high = session(2, ALICE);
        high.priority = 50;
        for policy in QueuePolicy::ALL {
            let mut s = snapshot(policy, 14, vec![low.clone(), high.clone()]);
            let d = plan(&mut s);
            assert_eq!(placed(&d), [2], "{policy:?}");
            assert!(
                order_message(&d[0]).contains("priority 50"),
                "{}",
                order_message(&d[0])
            );
        }
        // Under DRF a priority band comes before any share: Alice's high one goes before Bob
        // though Alice holds much more.
        let mut bob = session(3, BOB);
        bob.priority = 0;
        let mut s = snapshot(QueuePolicy::Drf, 14, vec![low, high, bob]);
        s.held.insert(Uuid::from_u128(ALICE), cores(14));
        assert_eq!(decided(&plan(&mut s)), [2, 3, 1]);
    }

    #[test]
    fn a_session_waiting_past_the_starvation_bound_goes_before_higher_priorities() {
        let low = session(1, ALICE);
        let mut high = session(900, BOB);
        high.priority = 100;
        let mut s = snapshot(QueuePolicy::Fifo, 14, vec![low.clone(), high.clone()]);
        s.group.starve_after_secs = 600;
        // At t0 + 1000 s the low one has waited 999 s, past the bound; the high one 100 s.
        let d = plan(&mut s);
        assert_eq!(placed(&d), [1]);
        assert!(
            order_message(&d[0]).contains("waited 999 s, past the group's bound of 600 s"),
            "{}",
            order_message(&d[0])
        );
        // Before the bound, priority wins; and the bound is a deadline of the queue.
        let mut s = snapshot(QueuePolicy::Fifo, 14, vec![low, high]);
        s.group.starve_after_secs = 600;
        s.now = t0() + chrono::Duration::seconds(500);
        assert_eq!(
            crate::core::next_deadline(&s),
            Some(t0() + chrono::Duration::seconds(602))
        );
        assert_eq!(placed(&plan(&mut s)), [900]);
        // No bound, no starvation.
        let mut s = snapshot(
            QueuePolicy::Fifo,
            14,
            vec![session(1, ALICE), {
                let mut h = session(2, BOB);
                h.priority = 1;
                h
            }],
        );
        s.now = t0() + chrono::Duration::days(1);
        assert_eq!(placed(&plan(&mut s)), [2]);
    }

    #[test]
    fn dominant_share_is_the_largest_share_of_any_resource_the_group_has() {
        let capacity = ResourceSlots {
            cpu_milli: 16_000,
            memory_bytes: 64 * GIB,
            gpu_milli: 0,
        };
        let held = ResourceSlots {
            cpu_milli: 2_000,
            memory_bytes: 32 * GIB,
            gpu_milli: 0,
        };
        let share = dominant_share(held, capacity);
        assert_eq!(share.share, 0.5);
        assert_eq!(share.dominant, "memory 32 of 64 GiB");
        assert_eq!(dominant_share(held, ResourceSlots::default()).share, 0.0);
        assert_eq!(short_usage(812.4), "812");
        assert_eq!(short_usage(4_560_000.0), "4.56 M");
    }
}
