//! The ledger folded in memory: what every table would hold after the log's events, computed
//! without the database, for [`replay`](super::replay) to write out with one `COPY` per table.
//!
//! A replay that sends one statement per event folds about 5,000 events a second: the round
//! trips and the per-statement work of PostgreSQL, not the fold, are the cost. Folding in
//! memory and writing each table once makes a replay of a million events take seconds.
//!
//! This is a second account of how each event changes the tables, beside [`fold`](super::fold)
//! (which the live ledger uses): each event routed to its family's `apply_in_memory`. That is
//! what a replay is for: the two are written apart, and `berth replay ledger` compares what
//! they produce row for row, so a change to one that the other lacks shows as a difference
//! instead of being reproduced by both. The fold here decides nothing (no uniqueness, no room
//! on an agent): it only adds up, because the log already holds every decision.

use super::{accounts, agents, apps, images, launches, resources, sessions, Family};
use crate::RecordedEvent;

/// Every ledger table, by family.
#[derive(Default)]
pub(super) struct LedgerRows {
    pub accounts: accounts::Tables,
    pub resources: resources::Tables,
    pub agents: agents::Tables,
    pub sessions: sessions::Tables,
    pub apps: apps::Tables,
    pub images: images::Tables,
    pub launches: launches::Tables,
}

impl LedgerRows {
    /// Folds one recorded event in, routed to its family.
    pub(super) fn apply(&mut self, recorded: &RecordedEvent) {
        match Family::of(&recorded.event) {
            Family::Accounts => self.accounts.apply_in_memory(recorded),
            Family::Resources => self.resources.apply_in_memory(&recorded.event),
            Family::Agents => self.agents.apply_in_memory(recorded),
            Family::Sessions => {
                self.sessions
                    .apply_in_memory(&mut self.agents, &mut self.apps, recorded)
            }
            Family::Apps => self.apps.apply_in_memory(&mut self.sessions, recorded),
            Family::Images => self.images.apply_in_memory(&mut self.sessions, recorded),
            Family::Launches => self.launches.apply_in_memory(recorded),
            Family::Ignored => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use uuid::Uuid;

    use super::*;
    use crate::catalogue::{Event, Metadata};
    use crate::payloads::*;
    use crate::LogPosition;

    fn recorded(stream_version: u64, event: Event) -> RecordedEvent {
        RecordedEvent {
            event_id: Uuid::new_v4(),
            stream_id: "s-1".into(),
            stream_version,
            position: LogPosition::START,
            recorded_at: Utc::now(),
            schema_version: 1,
            metadata: Metadata::default(),
            event,
        }
    }

    fn slots(cpu_milli: u64) -> ResourceSlots {
        ResourceSlots {
            cpu_milli,
            memory_bytes: 1 << 30,
            gpu_milli: 0,
        }
    }

    #[test]
    fn a_session_holds_its_agent_share_from_placement_to_release() {
        let mut rows = LedgerRows::default();
        rows.apply(&recorded(
            1,
            Event::AgentRegistered(AgentRegistered {
                unlabelled_images: Vec::new(),
                agent_id: "a1".into(),
                resource_group: "default".into(),
                capacity: slots(4_000),
                images: vec![],
                address: None,
                image_apps: Default::default(),
                network_scope: None,
                volumes: Default::default(),
            }),
        ));
        let session_id = Uuid::new_v4();
        rows.apply(&recorded(
            2,
            Event::SessionScheduled(SessionScheduled {
                session_id,
                agent_id: "a1".into(),
                resources: slots(1_500),
                kernels: vec![],
            }),
        ));
        assert_eq!(rows.agents.agents["a1"].used_cpu_milli, 1_500);
        assert_eq!(rows.sessions.kernels[&session_id].len(), 1);
        rows.apply(&recorded(
            3,
            Event::SessionResourcesReleased(SessionResourcesReleased {
                session_id,
                agent_id: "a1".into(),
                resources: slots(1_500),
                kernels: vec![],
            }),
        ));
        assert_eq!(rows.agents.agents["a1"].used_cpu_milli, 0);
        assert!(rows.sessions.kernels.is_empty());
    }

    #[test]
    fn a_session_counts_as_used_from_its_start_to_its_end_once_however_often_it_restarts() {
        let mut rows = LedgerRows::default();
        let session_id = Uuid::new_v4();
        let owner = Uuid::new_v4();
        let request: SessionRequested = serde_json::from_value(serde_json::json!({
            "session_id": session_id, "name": "train", "owner": {"user_id": owner, "email": "a@b.c",
            "project": "lab"}, "session_type": "batch", "resource_group": "gpu",
            "image": "python", "resources": slots(2_000), "shared_memory_bytes": 0,
            "cluster_mode": "single-node", "cluster_size": 1, "omp_num_threads": 2}))
        .unwrap();
        assert_eq!(
            request.priority,
            SessionPriority::DEFAULT,
            "an old request's priority"
        );
        rows.apply(&recorded(0, Event::SessionRequested(Box::new(request))));
        rows.apply(&recorded(
            1,
            Event::SessionScheduled(SessionScheduled {
                session_id,
                agent_id: "a1".into(),
                resources: slots(2_000),
                kernels: vec![],
            }),
        ));
        let moved = |to, at| {
            Event::SessionStatusChanged(SessionStatusChanged {
                session_id,
                from: SessionStatus::Pending,
                to,
                reason: None,
                exit_code: None,
                occurred_at: at,
            })
        };
        let started = Utc::now() - chrono::Duration::hours(3);
        let ended = Utc::now() - chrono::Duration::hours(1);
        rows.apply(&recorded(2, moved(SessionStatus::Running, Some(started))));
        rows.apply(&recorded(3, moved(SessionStatus::Restarting, None)));
        rows.apply(&recorded(4, moved(SessionStatus::Running, None)));
        rows.apply(&recorded(5, moved(SessionStatus::Terminated, Some(ended))));
        let usage: Vec<_> = rows.sessions.usage.iter().collect();
        assert_eq!(usage.len(), 1, "one interval, kept open over the restart");
        let ((id, from), interval) = usage[0];
        assert_eq!(
            (*id, *from, interval.ended_at),
            (session_id, started, Some(ended))
        );
        assert_eq!(
            (
                interval.owner,
                interval.project.as_deref(),
                interval.cpu_milli
            ),
            (owner, Some("lab"), 2_000)
        );
        assert_eq!(interval.resource_group, "gpu");
        rows.apply(&recorded(
            6,
            Event::SessionPriorityChanged(SessionPriorityChanged {
                session_id,
                from: 10,
                to: 60,
            }),
        ));
        assert_eq!(rows.sessions.sessions[&session_id].priority, 60);
    }

    #[test]
    fn an_event_for_a_session_the_ledger_lacks_changes_no_session() {
        let mut rows = LedgerRows::default();
        rows.apply(&recorded(
            4,
            Event::SessionStatusChanged(SessionStatusChanged {
                session_id: Uuid::new_v4(),
                from: SessionStatus::Pending,
                to: SessionStatus::Scheduled,
                reason: None,
                exit_code: None,
                occurred_at: None,
            }),
        ));
        assert!(rows.sessions.sessions.is_empty());
    }
}
