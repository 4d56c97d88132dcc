//! A large pass's decisions split into parts that PostgreSQL can write side by side.
//!
//! One connection's statements run one after another on one of the server's cores, so a pass
//! of thousands of decisions recorded on the pass's own connection keeps one core busy and
//! leaves the others idle. Recorded in several transactions at once they are written on as
//! many; but two transactions that reserve on the same agent wait on its ledger row, the
//! second until the first has committed, and two that each wait for a row the other holds
//! deadlock. So the parts are cut along the agents: no two parts reserve on one agent.

use std::collections::HashMap;

use events::catalogue::Event;
use events::ledger::Recording;

/// A pass's recordings cut into parts for transactions of their own.
#[derive(Default)]
pub struct Parts {
    /// At most the number asked for, none empty, each in the pass's order; no agent is
    /// reserved on by two of them.
    pub parts: Vec<Vec<Recording>>,
    /// The decisions that would join two parts (a cluster whose kernels went to agents
    /// already in different parts), for the pass's own transaction once the parts are in.
    pub across: Vec<Recording>,
}

/// Cuts `recordings` into at most `parts` parts, keeping their order within each. A
/// decision goes to the part that already holds its agents; one on agents new to every part
/// (or on none: a decision that places nothing), to the part with the fewest decisions so
/// far, so that the parts come out about the same size.
pub fn split_by_agent(recordings: Vec<Recording>, parts: usize) -> Parts {
    let mut split = Parts {
        parts: (0..parts.max(1)).map(|_| Vec::new()).collect(),
        across: Vec::new(),
    };
    let mut part_of: HashMap<String, usize> = HashMap::new();
    for recording in recordings {
        let agents = agents_of(&recording);
        let mut known = agents.iter().filter_map(|a| part_of.get(a).copied());
        let part = match known.next() {
            Some(first) if known.all(|p| p == first) => first,
            Some(_) => {
                split.across.push(recording);
                continue;
            }
            None => smallest(&split.parts),
        };
        for agent in agents {
            part_of.insert(agent, part);
        }
        split.parts[part].push(recording);
    }
    split.parts.retain(|p| !p.is_empty());
    split
}

/// The agents a decision reserves on: those of the kernels it places.
fn agents_of(recording: &Recording) -> Vec<String> {
    recording
        .events
        .iter()
        .filter_map(|e| match e {
            Event::SessionScheduled(s) => Some(s.placements()),
            _ => None,
        })
        .flatten()
        .map(|k| k.agent_id)
        .collect()
}

/// The index of the part with the fewest decisions (the first of equals).
fn smallest(parts: &[Vec<Recording>]) -> usize {
    parts
        .iter()
        .enumerate()
        .min_by_key(|(_, p)| p.len())
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests {
    use events::catalogue::{Event, Metadata};
    use events::payloads::{KernelPlacement, ResourceSlots, SessionScheduled};
    use events::store::ExpectedVersion;
    use uuid::Uuid;

    use super::*;

    /// A decision placing a kernel on each of `agents`; none: a decision that places nothing.
    fn decision(agents: &[&str]) -> Recording {
        let session_id = Uuid::new_v4();
        let kernels: Vec<KernelPlacement> = agents
            .iter()
            .map(|a| KernelPlacement {
                agent_id: (*a).to_owned(),
                resources: ResourceSlots {
                    cpu_milli: 1_000,
                    memory_bytes: 1 << 30,
                    gpu_milli: 0,
                },
            })
            .collect();
        let events = match agents.first() {
            Some(main) => vec![Event::SessionScheduled(SessionScheduled {
                session_id,
                agent_id: (*main).to_owned(),
                resources: ResourceSlots::default(),
                kernels,
            })],
            None => Vec::new(),
        };
        Recording {
            stream_id: format!("session-{session_id}"),
            expected: ExpectedVersion::Exact(1),
            events,
            metadata: Metadata::default(),
        }
    }

    fn streams(recordings: &[Recording]) -> Vec<&str> {
        recordings.iter().map(|r| r.stream_id.as_str()).collect()
    }

    #[test]
    fn no_agent_is_reserved_on_by_two_parts_and_each_keeps_the_passs_order() {
        let recordings = vec![
            decision(&["a"]),
            decision(&["b"]),
            decision(&["a"]),
            decision(&["c"]),
            decision(&["b"]),
            decision(&[]),
            decision(&["a"]),
        ];
        let order = streams(&recordings)
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
        let split = split_by_agent(recordings, 2);
        assert_eq!(split.parts.len(), 2);
        assert!(split.across.is_empty());
        let mut owner: HashMap<String, usize> = HashMap::new();
        for (i, part) in split.parts.iter().enumerate() {
            for recording in part {
                for agent in agents_of(recording) {
                    assert_eq!(*owner.entry(agent.clone()).or_insert(i), i, "{agent}");
                }
            }
            let positions: Vec<usize> = streams(part)
                .iter()
                .map(|s| order.iter().position(|o| o == s).unwrap())
                .collect();
            assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
        }
        // Every decision is in exactly one part.
        let total: usize = split.parts.iter().map(Vec::len).sum();
        assert_eq!(total, 7);
    }

    #[test]
    fn new_agents_and_decisions_that_place_nothing_even_the_parts_out() {
        let recordings: Vec<Recording> = (0..100)
            .map(|i| {
                if i % 4 == 0 {
                    decision(&[])
                } else {
                    decision(&[format!("agent-{}", i / 2).as_str()])
                }
            })
            .collect();
        let split = split_by_agent(recordings, 2);
        let sizes: Vec<usize> = split.parts.iter().map(Vec::len).collect();
        assert!(sizes.iter().all(|s| (45..=55).contains(s)), "{sizes:?}");
    }

    #[test]
    fn a_cluster_across_two_parts_is_left_for_the_passs_own_transaction() {
        let recordings = vec![
            decision(&["a"]),
            decision(&["b"]),
            // Joins a's part and b's: neither may take it.
            decision(&["a", "b"]),
            // New agents with a known one: into that one's part, the new agent with it.
            decision(&["b", "c"]),
            decision(&["c"]),
        ];
        let split = split_by_agent(recordings, 2);
        assert_eq!(split.across.len(), 1);
        assert_eq!(agents_of(&split.across[0]), ["a", "b"]);
        let with_c: Vec<usize> = split
            .parts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.iter().any(|r| agents_of(r).contains(&"c".to_owned())))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(with_c.len(), 1, "c is in one part only");
        assert!(split.parts[with_c[0]]
            .iter()
            .any(|r| agents_of(r) == ["b".to_owned()]));
    }

    #[test]
    fn one_part_asked_for_takes_everything_in_order() {
        let recordings = vec![decision(&["a", "b"]), decision(&["b"]), decision(&[])];
        let order: Vec<String> = streams(&recordings).iter().map(|s| s.to_string()).collect();
        let split = split_by_agent(recordings, 1);
        assert!(split.across.is_empty());
        assert_eq!(split.parts.len(), 1);
        assert_eq!(streams(&split.parts[0]), order);
        assert!(split_by_agent(Vec::new(), 2).parts.is_empty());
    }
}
