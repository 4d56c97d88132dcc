//! An index of a pass's agents by what they have free, so choosing an agent for a session
//! costs a few ordered-set steps instead of a scan of every agent: at 10,000 agents a scan per
//! session would cap the core far below 100,000 decisions a second.
//!
//! It chooses exactly what the scan ([`crate::core`]'s `pick`) chooses. Agents are compared by
//! what they would have left, `(gpu, cpu, memory)` in that order; subtracting the same request
//! from every agent that fits keeps that order, so the fullest (concentrated) or emptiest
//! (dispersed) agent left after placing is the fullest or emptiest by what it has free now,
//! ties to the lowest index, as the scan's strict comparison keeps the first.

use std::collections::BTreeSet;

use events::payloads::{AgentSelection, ResourceSlots};

use crate::core::AgentView;

/// The order agents are compared in: GPU first (the scarcest), then CPU, then memory.
pub fn key(s: ResourceSlots) -> (u64, u64, u64) {
    (s.gpu_milli, s.cpu_milli, s.memory_bytes)
}

type Key = (u64, u64, u64);

/// Agents (by index in the pass's list) ordered by what they have free.
#[derive(Debug, Clone, Default)]
pub struct FreeIndex {
    by_free: BTreeSet<(Key, usize)>,
    /// Distinct capacities (most groups have a few kinds of machine), for "could any agent
    /// ever hold it".
    capacities: Vec<ResourceSlots>,
    largest: ResourceSlots,
}

impl FreeIndex {
    pub fn new(agents: &[AgentView]) -> FreeIndex {
        let mut capacities: Vec<ResourceSlots> = agents.iter().map(|a| a.capacity).collect();
        capacities.sort_by_key(|c| key(*c));
        capacities.dedup();
        // The largest by key, the first of the largest as the scan's `max_by_key` would keep
        // the last; equal keys are equal capacities, so either is the same value.
        let largest = capacities.last().copied().unwrap_or_default();
        FreeIndex {
            by_free: agents
                .iter()
                .enumerate()
                .map(|(i, a)| (key(a.free()), i))
                .collect(),
            capacities,
            largest,
        }
    }

    /// Agent `i`'s free resources change from `before` to `after`.
    pub fn update(&mut self, i: usize, before: ResourceSlots, after: ResourceSlots) {
        self.by_free.remove(&(key(before), i));
        self.by_free.insert((key(after), i));
    }

    /// The largest capacity of any agent.
    pub fn largest(&self) -> ResourceSlots {
        self.largest
    }

    /// Whether some agent could ever hold `need` (when empty).
    pub fn ever_fits(&self, need: ResourceSlots) -> bool {
        self.capacities.iter().any(|c| need.fits_in(*c))
    }

    /// The most any one agent has free, by key.
    pub fn most_free(&self, agents: &[AgentView]) -> ResourceSlots {
        self.by_free
            .last()
            .map(|(_, i)| agents[*i].free())
            .unwrap_or_default()
    }

    /// The agent `need` goes on under `selection`, as the scan would choose it.
    pub fn pick(
        &self,
        agents: &[AgentView],
        need: ResourceSlots,
        selection: AgentSelection,
    ) -> Option<usize> {
        let fits = |i: usize| need.fits_in(agents[i].free());
        let floor = key(need);
        match selection {
            // The smallest key that fits; every agent that fits has a key at least `need`'s.
            AgentSelection::Concentrated => self
                .by_free
                .range((floor, 0)..)
                .find(|(_, i)| fits(*i))
                .map(|(_, i)| *i),
            // The largest key that fits, then the lowest index with that key.
            AgentSelection::Dispersed => {
                let (best, _) = self
                    .by_free
                    .range((floor, 0)..)
                    .rev()
                    .find(|(_, i)| fits(*i))?;
                self.by_free
                    .range((*best, 0)..=(*best, usize::MAX))
                    .next()
                    .map(|(_, i)| *i)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{pick, plan, GroupRules, PendingSession, Snapshot};
    use events::payloads::{ClusterMode, QueuePolicy};
    use std::collections::HashMap;
    use std::time::Duration;
    use uuid::Uuid;

    /// A small deterministic generator (no randomness from outside: the test repeats).
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }

        fn slots(&mut self, cpu: u64, gib: u64, gpu: u64) -> ResourceSlots {
            ResourceSlots {
                cpu_milli: self.below(cpu + 1) * 500,
                memory_bytes: self.below(gib + 1) << 30,
                gpu_milli: self.below(gpu + 1) * 1000,
            }
        }
    }

    fn agents(rng: &mut Lcg, n: usize) -> Vec<AgentView> {
        (0..n)
            .map(|i| {
                // A few kinds of machine, partly used; many ties on purpose.
                let capacity = match rng.below(3) {
                    0 => ResourceSlots {
                        cpu_milli: 8_000,
                        memory_bytes: 32 << 30,
                        gpu_milli: 0,
                    },
                    1 => ResourceSlots {
                        cpu_milli: 16_000,
                        memory_bytes: 64 << 30,
                        gpu_milli: 4_000,
                    },
                    _ => ResourceSlots {
                        cpu_milli: 4_000,
                        memory_bytes: 128 << 30,
                        gpu_milli: 1_000,
                    },
                };
                let used = rng.slots(8, 32, 2);
                AgentView {
                    agent_id: format!("a{i:03}"),
                    capacity,
                    used: ResourceSlots {
                        cpu_milli: used.cpu_milli.min(capacity.cpu_milli),
                        memory_bytes: used.memory_bytes.min(capacity.memory_bytes),
                        gpu_milli: used.gpu_milli.min(capacity.gpu_milli),
                    },
                    unheard_for: None,
                    network_scope: "engine:one".into(),
                    volumes: Default::default(),
                }
            })
            .collect()
    }

    #[test]
    fn the_index_chooses_what_the_scan_chooses_as_agents_fill() {
        let mut rng = Lcg(29);
        for round in 0..40 {
            let n = 1 + rng.below(60) as usize;
            let mut agents = agents(&mut rng, n);
            let mut index = FreeIndex::new(&agents);
            for _ in 0..200 {
                let need = rng.slots(6, 40, 2);
                let selection = if rng.below(2) == 0 {
                    AgentSelection::Concentrated
                } else {
                    AgentSelection::Dispersed
                };
                let chosen = index.pick(&agents, need, selection);
                assert_eq!(
                    chosen,
                    pick(&agents, need, selection),
                    "round {round}, {need:?} {selection:?}"
                );
                assert_eq!(
                    index.ever_fits(need),
                    agents.iter().any(|a| need.fits_in(a.capacity))
                );
                let most_free = agents.iter().map(|a| a.free()).max_by_key(|f| key(*f));
                assert_eq!(index.most_free(&agents), most_free.unwrap_or_default());
                if let Some(i) = chosen {
                    let before = agents[i].free();
                    agents[i].used = agents[i].used.saturating_add(need);
                    index.update(i, before, agents[i].free());
                }
            }
        }
    }

    #[test]
    fn a_pass_places_every_session_where_the_scan_would() {
        // The whole core, against the scan replayed by hand over the same decisions.
        let mut rng = Lcg(7);
        let start = agents(&mut rng, 50);
        let queue: Vec<PendingSession> = (0..300)
            .map(|n| PendingSession {
                image: Default::default(),
                image_on: Default::default(),
                session_id: Uuid::from_u128(n),
                version: 0,
                owner: Uuid::from_u128(n % 7),
                per_kernel: rng.slots(2, 8, 1),
                cluster_mode: ClusterMode::SingleNode,
                cluster_size: 1,
                wanted_agent: None,
                starts_at: None,
                queued_at: chrono::DateTime::UNIX_EPOCH,
                attempts: 0,
                last_result: None,
                last_error_code: None,
                priority: 0,
                project: None,
                volumes: Default::default(),
            })
            .collect();
        for selection in [AgentSelection::Concentrated, AgentSelection::Dispersed] {
            let mut snapshot = Snapshot {
                group: GroupRules {
                    name: "g".into(),
                    queue_policy: QueuePolicy::Backfill,
                    agent_selection: selection,
                    max_attempts: 10,
                    skip_after: 0,
                    pending_timeout_secs: 0,
                    fair_share: Default::default(),
                    starve_after_secs: 0,
                },
                agents: start.clone(),
                silent_after: Duration::from_secs(10),
                queue: queue.clone(),
                owners: HashMap::new(),
                held: HashMap::new(),
                usage: Default::default(),
                now: chrono::DateTime::UNIX_EPOCH,
                capacity_grew: true,
            };
            let decisions = plan(&mut snapshot);
            let mut by_hand = start.clone();
            let mut placed = 0;
            for (d, s) in decisions.iter().zip(&queue) {
                assert_eq!(
                    d.session_id, s.session_id,
                    "backfill decides in arrival order"
                );
                let expected = pick(&by_hand, s.per_kernel, selection);
                let got = d.placement.as_ref().map(|k| {
                    by_hand
                        .iter()
                        .position(|a| a.agent_id == k[0].agent_id)
                        .unwrap()
                });
                assert_eq!(got, expected, "{selection:?} session {}", s.session_id);
                if let Some(i) = expected {
                    by_hand[i].used = by_hand[i].used.saturating_add(s.per_kernel);
                    placed += 1;
                }
            }
            assert!(placed > 50, "the test must place many: {placed}");
            assert_eq!(snapshot.agents, by_hand);
        }
    }
}
