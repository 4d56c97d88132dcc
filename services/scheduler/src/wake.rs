//! The scheduler woken by the bus: the events that can change a decision, as the relay
//! publishes them on NATS, each poke the scheduler's [`Notify`]. A wake-up is only a hint
//! (the pass reads the ledger), so a core subscription is enough: one lost while NATS is away
//! is covered by the scheduler's interval, and a burst coalesces into the one stored permit.

use std::sync::Arc;

use events::relay::Topology;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The event types after which a pass may decide differently: a session to place or one
/// gone from the queue, resources freed, agents come or gone, the rules of groups, policies
/// and memberships, and a shape to watch (it may fit at once).
pub const WAKING_EVENTS: &[&str] = &[
    "SessionRequested",
    "SessionTerminationRequested",
    "SessionResourcesReleased",
    "AgentRegistered",
    "AgentLost",
    "AgentDeparted",
    "ResourceGroupCreated",
    "ResourceGroupSchedulingSet",
    "SessionPriorityChanged",
    "ResourceGroupGranted",
    "ResourcePolicySet",
    "UserJoinedProject",
    "FitWatchRequested",
];

/// Whether an event of `event_type` can change a scheduling decision.
pub fn wakes_scheduler(event_type: &str) -> bool {
    WAKING_EVENTS.contains(&event_type)
}

/// Pokes `wake` for every published event that [wakes the scheduler](wakes_scheduler), until
/// `stop` ([`events::hints::poke_on`]); a wake-up lost while NATS is away is covered by the
/// scheduler's interval.
pub async fn follow(
    client: async_nats::Client,
    topology: Topology,
    wake: Arc<Notify>,
    stop: CancellationToken,
) -> Result<(), async_nats::SubscribeError> {
    events::hints::poke_on(client, topology.all_subjects(), wakes_scheduler, wake, stop).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_waking_event_is_in_the_catalogue_and_heartbeats_are_not_among_them() {
        let catalogue: Vec<&str> = events::catalogue::EVENT_TYPES
            .iter()
            .map(|(name, _)| *name)
            .collect();
        for name in WAKING_EVENTS {
            assert!(catalogue.contains(name), "{name} is not an event type");
        }
        for quiet in [
            "AgentHeartbeated",
            "SchedulingAttempted",
            "SessionScheduled",
            "KernelStarted",
            "SessionRenamed",
        ] {
            assert!(!wakes_scheduler(quiet), "{quiet}");
        }
    }
}
