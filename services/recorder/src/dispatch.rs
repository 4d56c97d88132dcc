//! The dispatcher: a durable consumer of session events that turns them into agent
//! commands on the commands stream, where each waits until its agent takes it.
//!
//! - a session placed (`SessionScheduled`): `Assign` to its main agent;
//! - a session CREATING: `Assign` to the other agents of its cluster, whose kernels join the
//!   network the main agent has made by then;
//! - a session TERMINATING, or giving back its resources (it ended, or went back to the
//!   queue): `Stop` to every agent holding a kernel of it;
//! - an app's start asked (`AppStartRequested`): `StartApp` to its main agent.
//!
//! Commits and image removals are the image-commit service's.
//!
//! Commands are derived from events and idempotent, and each carries the id
//! `<event id>.<agent>`, so a redelivered event sends nothing twice within the stream's
//! duplicate window, and an agent ignores a command it has acted on. Only the relay publishes
//! events; commands go out only through `bus::command::send`, from here and from the
//! image-commit service (commits and image removals).

use async_nats::jetstream;
use bus::protocol::Command;
use bus::Subjects;
use deadpool_postgres::Transaction;
use events::catalogue::Event;
use events::consumer::{Handler, HandlerError};
use events::payloads::SessionStatus;
use events::RecordedEvent;

use crate::db;
/// Which placement a release ends, as the dispatcher counts it (its stop names it).
pub use crate::db::releases_before;

/// The consumer's durable name.
pub const NAME: &str = "dispatcher";

pub struct Dispatcher {
    pub js: jetstream::Context,
    pub subjects: Subjects,
}

/// The commands an event of a session's stream calls for, given the agents holding its
/// kernels now (`(agent, is its main agent)`) and how many placements the session gave
/// back before the event (`released_before`: the placement a release ends). Pure.
pub fn commands_for(
    event: &Event,
    holders: &[(String, bool)],
    released_before: u32,
) -> Vec<(String, Command)> {
    let stop_all = |session_id| {
        holders
            .iter()
            .map(|(agent, _)| {
                let command = Command::Stop {
                    session_id,
                    placement: None,
                };
                (agent.clone(), command)
            })
            .collect()
    };
    match event {
        Event::SessionScheduled(e) => vec![(
            e.agent_id.clone(),
            Command::Assign {
                session_id: e.session_id,
                main: true,
            },
        )],
        Event::SessionStatusChanged(e) if e.to == SessionStatus::Creating => holders
            .iter()
            .filter(|(_, main)| !main)
            .map(|(agent, _)| {
                let command = Command::Assign {
                    session_id: e.session_id,
                    main: false,
                };
                (agent.clone(), command)
            })
            .collect(),
        Event::SessionStatusChanged(e) if e.to == SessionStatus::Terminating => {
            stop_all(e.session_id)
        }
        // Apps run in the main kernel.
        Event::AppStartRequested(e) => holders
            .iter()
            .filter(|(_, main)| *main)
            .map(|(agent, _)| {
                let command = Command::StartApp {
                    session_id: e.session_id,
                    start_id: e.start_id,
                    app: e.app.clone(),
                    port: e.port,
                };
                (agent.clone(), command)
            })
            .collect(),
        Event::SessionResourcesReleased(e) => {
            let mut agents: Vec<&str> = e.kernels.iter().map(|k| k.agent_id.as_str()).collect();
            agents.push(&e.agent_id);
            agents.sort_unstable();
            agents.dedup();
            agents
                .into_iter()
                .map(|agent| {
                    let command = Command::Stop {
                        session_id: e.session_id,
                        placement: Some(released_before),
                    };
                    (agent.to_owned(), command)
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Whether `event` can call for a command, whoever holds the session's kernels. Pure.
pub fn acts_on(event: &Event) -> bool {
    needs_holders(event).is_some() || !commands_for(event, &[], 0).is_empty()
}

fn needs_holders(event: &Event) -> Option<uuid::Uuid> {
    match event {
        Event::SessionStatusChanged(e)
            if matches!(e.to, SessionStatus::Creating | SessionStatus::Terminating) =>
        {
            Some(e.session_id)
        }
        Event::AppStartRequested(e) => Some(e.session_id),
        _ => None,
    }
}

impl Handler for Dispatcher {
    /// Only the events that can call for a command: the rest of a session's history (most
    /// of it) costs the dispatcher no transaction.
    fn wants(&self, event: &RecordedEvent) -> bool {
        acts_on(&event.event)
    }

    async fn handle<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        event: &'a RecordedEvent,
    ) -> Result<(), HandlerError> {
        let holders = match needs_holders(&event.event) {
            Some(session_id) => db::kernel_holders(tx, session_id)
                .await
                .map_err(|e| HandlerError::Transient(e.to_string()))?,
            None => Vec::new(),
        };
        let released_before = match &event.event {
            Event::SessionResourcesReleased(_) => {
                db::releases_before(tx, &event.stream_id, event.stream_version)
                    .await
                    .map_err(|e| HandlerError::Transient(e.to_string()))?
            }
            _ => 0,
        };
        for (agent, command) in commands_for(&event.event, &holders, released_before) {
            bus::command::send(&self.js, &self.subjects, event.event_id, &agent, &command)
                .await
                .map_err(|e| HandlerError::Transient(e.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use events::payloads::*;
    use uuid::Uuid;

    fn changed(to: SessionStatus) -> Event {
        Event::SessionStatusChanged(SessionStatusChanged {
            session_id: Uuid::nil(),
            from: SessionStatus::Prepared,
            to,
            reason: None,
            exit_code: None,
            occurred_at: None,
        })
    }

    #[test]
    fn the_dispatcher_passes_over_events_that_call_for_no_command() {
        let placed = Event::SessionScheduled(SessionScheduled {
            session_id: Uuid::nil(),
            agent_id: "a1".into(),
            resources: ResourceSlots::default(),
            kernels: vec![],
        });
        assert!(acts_on(&placed));
        assert!(acts_on(&changed(SessionStatus::Creating)));
        assert!(acts_on(&changed(SessionStatus::Terminating)));
        for passed_over in [
            SessionStatus::Preparing,
            SessionStatus::Prepared,
            SessionStatus::Running,
        ] {
            assert!(!acts_on(&changed(passed_over)), "{passed_over:?}");
        }
        let renamed = Event::SessionRenamed(SessionRenamed {
            session_id: Uuid::nil(),
            old_name: "a".into(),
            new_name: "b".into(),
        });
        assert!(!acts_on(&renamed));
    }

    #[test]
    fn a_placement_assigns_the_main_agent_and_creating_the_others() {
        let slots = ResourceSlots::default();
        let placed = Event::SessionScheduled(SessionScheduled {
            session_id: Uuid::nil(),
            agent_id: "a1".into(),
            resources: slots,
            kernels: vec![],
        });
        let commands = commands_for(&placed, &[], 0);
        assert_eq!(commands.len(), 1);
        assert_eq!(commands[0].0, "a1");
        assert!(matches!(commands[0].1, Command::Assign { main: true, .. }));
        let holders = [("a1".to_string(), true), ("a2".to_string(), false)];
        let creating = commands_for(&changed(SessionStatus::Creating), &holders, 0);
        assert_eq!(creating.len(), 1);
        assert_eq!(creating[0].0, "a2");
        assert!(matches!(creating[0].1, Command::Assign { main: false, .. }));
        assert!(commands_for(&changed(SessionStatus::Running), &holders, 0).is_empty());
    }

    #[test]
    fn an_apps_start_goes_to_the_main_agent_alone() {
        let holders = [("a1".to_string(), false), ("a2".to_string(), true)];
        let asked = Event::AppStartRequested(events::payloads::AppStartRequested {
            session_id: Uuid::nil(),
            start_id: Uuid::nil(),
            app: "jupyter".into(),
            port: 8888,
            by: Uuid::nil(),
        });
        let commands = commands_for(&asked, &holders, 0);
        assert_eq!(commands.len(), 1);
        assert_eq!(commands[0].0, "a2");
        assert!(matches!(
            &commands[0].1,
            Command::StartApp { port: 8888, .. }
        ));
    }

    #[test]
    fn terminating_or_releasing_stops_every_holder_once() {
        let holders = [("a1".to_string(), true), ("a2".to_string(), false)];
        let stops = commands_for(&changed(SessionStatus::Terminating), &holders, 0);
        assert_eq!(stops.len(), 2);
        let slots = ResourceSlots::default();
        let released = Event::SessionResourcesReleased(SessionResourcesReleased {
            session_id: Uuid::nil(),
            agent_id: "a1".into(),
            resources: slots,
            kernels: vec![
                KernelPlacement {
                    agent_id: "a1".into(),
                    resources: slots,
                },
                KernelPlacement {
                    agent_id: "a2".into(),
                    resources: slots,
                },
                KernelPlacement {
                    agent_id: "a2".into(),
                    resources: slots,
                },
            ],
        });
        assert!(stops.iter().all(|(_, c)| matches!(
            c,
            Command::Stop {
                placement: None,
                ..
            }
        )));
        let releases = commands_for(&released, &[], 2);
        let agents: Vec<&str> = releases.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(agents, ["a1", "a2"]);
        assert!(
            releases.iter().all(|(_, c)| matches!(
                c,
                Command::Stop {
                    placement: Some(2),
                    ..
                }
            )),
            "a release stops the placement it ends, the third: {releases:?}"
        );
    }
}
