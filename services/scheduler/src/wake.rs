//! The scheduler woken by the bus: the events that can change a decision, as the relay
//! publishes them on NATS, each poke the scheduler's [`Notify`]. A wake-up is only a hint
//! (the pass reads the ledger), so a core subscription is enough: one lost while NATS is away
//! is covered by the scheduler's interval, and a burst coalesces into the one stored permit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use events::catalogue::Event;
use events::ledger;
use events::payloads::SchedulerWakeupsMissed;
use events::relay::Topology;
use events::store::ExpectedVersion;
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
/// scheduler's interval, and the break is recorded ([`record_missed_wakeups`]).
pub async fn follow(
    client: async_nats::Client,
    pool: Pool,
    topology: Topology,
    wake: Arc<Notify>,
    stop: CancellationToken,
) -> Result<(), async_nats::SubscribeError> {
    let heard = Heard::default();
    let watch = record_missed_wakeups(client.clone(), pool, heard.clone(), stop.clone());
    let waking = |message: &async_nats::Message| {
        let waking = events::hints::event_type(message).is_some_and(wakes_scheduler);
        if waking {
            heard.note(message);
        }
        waking
    };
    let poke = events::hints::poke_on(client, topology.all_subjects(), waking, wake, stop);
    let (_, poked) = tokio::join!(watch, poke);
    poked
}

/// When the last wake-up the scheduler heard was recorded: the relay publishes in the log's
/// order, so what was recorded before it was heard too.
#[derive(Debug, Clone, Default)]
pub struct Heard(Arc<Mutex<Option<DateTime<Utc>>>>);

impl Heard {
    /// Notes a relayed event that woke the scheduler.
    pub fn note(&self, message: &async_nats::Message) {
        #[derive(serde::Deserialize)]
        struct Recorded {
            recorded_at: DateTime<Utc>,
        }
        if let Ok(Recorded { recorded_at }) = serde_json::from_slice(&message.payload) {
            let mut latest = self.0.lock().expect("no holder panicked");
            *latest = (*latest).max(Some(recorded_at));
        }
    }

    /// The recording time of the last wake-up heard, if any was.
    pub fn latest(&self) -> Option<DateTime<Utc>> {
        *self.0.lock().expect("no holder panicked")
    }
}

/// How often the connection's state is looked at: a recorded break begins at the last look
/// that saw the connection up or the last wake-up heard, whichever is later, so it may begin
/// up to this much early.
const WATCH_EVERY: Duration = Duration::from_millis(200);

/// Records `SchedulerWakeupsMissed` for every break in `client`'s connection, once it is
/// connected again, until `stop`: a what-if replay of the log needs to know when the live
/// scheduler passed only at its interval. A record that fails (PostgreSQL away too) is tried
/// again at the next look.
pub async fn record_missed_wakeups(
    client: async_nats::Client,
    pool: Pool,
    heard: Heard,
    stop: CancellationToken,
) {
    let mut broken_since: Option<DateTime<Utc>> = None;
    // The break began after the last look that saw the connection up, and after the last
    // wake-up heard (which the relay published after everything recorded before it): from
    // then on, what was published may have been missed. A wake-up heard between the last
    // look and the break is no wake-up missed, and a replay that took it for one would hold
    // back a pass the live scheduler made.
    let mut seen_up = Utc::now();
    let mut outage = events::fault::Outage::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(WATCH_EVERY) => {}
        }
        let connected = client.connection_state() == async_nats::connection::State::Connected;
        match (connected, broken_since) {
            (true, None) => seen_up = Utc::now(),
            (false, None) => broken_since = Some(seen_up).max(heard.latest()),
            (true, Some(from)) => {
                let missed = Event::SchedulerWakeupsMissed(SchedulerWakeupsMissed {
                    from,
                    until: Utc::now(),
                });
                let metadata = events::trace::metadata("scheduler", None);
                match ledger::record_now(&pool, STREAM, ExpectedVersion::Any, &[missed], &metadata)
                    .await
                {
                    Ok(_) => {
                        outage.passed("scheduler wake-ups");
                        broken_since = None;
                    }
                    Err(e) => outage.failed("scheduler wake-ups", &e),
                }
            }
            _ => {}
        }
    }
}

/// The stream the scheduler's missed wake-ups are recorded on.
pub const STREAM: &str = "scheduler-wakeups";

#[cfg(test)]
mod tests {
    use super::*;

    fn relayed(payload: &str) -> async_nats::Message {
        async_nats::Message {
            subject: "berth.evt.session.x".into(),
            reply: None,
            payload: payload.to_owned().into(),
            headers: None,
            status: None,
            description: None,
            length: payload.len(),
        }
    }

    #[test]
    fn the_last_wake_up_heard_is_the_latest_recorded_whatever_the_order_it_came_in() {
        let heard = Heard::default();
        assert_eq!(heard.latest(), None);
        heard.note(&relayed(
            r#"{"event_type": "SessionRequested", "recorded_at": "2026-11-30T02:05:45.282Z"}"#,
        ));
        heard.note(&relayed(r#"{"recorded_at": "2026-11-30T02:05:45.268Z"}"#));
        heard.note(&relayed("not an event"));
        assert_eq!(
            heard.latest(),
            Some("2026-11-30T02:05:45.282Z".parse().unwrap())
        );
    }

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
