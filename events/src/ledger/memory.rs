//! The ledger folded in memory: what every table would hold after the log's events, computed
//! without the database, for [`replay`](super::replay) to write out with one `COPY` per table.
//!
//! A replay that sends one statement per event folds about 5,000 events a second: the round
//! trips and the per-statement work of PostgreSQL, not the fold, are the cost. Folding in
//! memory and writing each table once makes a replay of a million events take seconds.
//!
//! This is a second account of how each event changes the tables, beside [`fold`](super::fold)
//! (which the live ledger uses). That is what a replay is for: the two are written apart,
//! and `berth replay ledger` compares what they produce row for row, so a change to one that
//! the other lacks shows as a difference instead of being reproduced by both. The fold here
//! decides nothing (no uniqueness, no room on an agent): it only adds up, because the log
//! already holds every decision.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{accounts, agents, i64_of, name_of, resources, Family};
use crate::catalogue::Event;
use crate::payloads::*;
use crate::RecordedEvent;

pub(super) struct Session {
    pub owner: Uuid,
    pub owner_email: String,
    pub name: String,
    pub project: Option<String>,
    pub resource_group: String,
    pub session_type: String,
    pub status: String,
    pub status_reason: Option<String>,
    pub status_since: DateTime<Utc>,
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub gpu_milli: i64,
    pub cluster_mode: String,
    pub cluster_size: i32,
    pub wanted_agent: Option<String>,
    pub starts_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub attempts: i32,
    pub last_result: Option<String>,
    pub last_error_code: Option<String>,
    pub agent_id: Option<String>,
    pub holds: bool,
    pub requeues: i32,
    pub version: i64,
    pub traceparent: Option<String>,
}

pub(super) struct Kernel {
    /// Its place in the session (0: the main kernel).
    pub idx: i32,
    pub agent_id: String,
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub gpu_milli: i64,
}

pub(super) struct CustomImage {
    pub owner: Uuid,
    pub session_id: Uuid,
    pub agent_id: Option<String>,
    pub image_id: String,
    pub size_bytes: i64,
    pub created_at: DateTime<Utc>,
}

pub(super) struct Circuit {
    pub session_id: Uuid,
    pub owner: Uuid,
    pub app: String,
    pub protocol: String,
    pub container_port: i32,
    pub port: i32,
    pub admission: serde_json::Value,
    pub opened_at: DateTime<Utc>,
}

pub(super) struct AppService {
    pub token: Option<String>,
    pub started_at: DateTime<Utc>,
}

/// Every ledger table, keyed by its primary key.
#[derive(Default)]
pub(super) struct LedgerRows {
    pub accounts: accounts::Tables,
    pub resources: resources::Tables,
    pub agents: agents::Tables,
    pub sessions: HashMap<Uuid, Session>,
    /// Each placed session's kernels, in order (`idx` is the place).
    pub kernels: HashMap<Uuid, Vec<Kernel>>,
    pub custom_images: HashMap<String, CustomImage>,
    pub circuits: HashMap<Uuid, Circuit>,
    pub app_services: HashMap<(Uuid, String), AppService>,
}

impl LedgerRows {
    /// Folds one recorded event in, as the replay's SQL fold applies it.
    pub(super) fn apply(&mut self, recorded: &RecordedEvent) {
        let at = recorded.recorded_at;
        let version = i64_of(recorded.stream_version);
        match Family::of(&recorded.event) {
            Family::Accounts => return self.accounts.apply_in_memory(recorded),
            Family::Resources => return self.resources.apply_in_memory(&recorded.event),
            Family::Agents => return self.agents.apply_in_memory(recorded),
            Family::Sessions | Family::Apps | Family::Images | Family::Ignored => {}
        }
        match &recorded.event {
            Event::AgentAdmitted(_)
            | Event::IdleChecksSet(_)
            | Event::NotificationsRead(_)
            | Event::NotificationWebhookSet(_) => {}
            Event::AppCircuitOpened(e) => {
                self.circuits.insert(
                    e.circuit_id,
                    Circuit {
                        session_id: e.session_id,
                        owner: e.owner,
                        app: e.app.clone(),
                        protocol: name_of(&e.protocol),
                        container_port: i32::from(e.container_port),
                        port: i32::from(e.port),
                        admission: serde_json::to_value(&e.admission)
                            .expect("admissions serialise"),
                        opened_at: at,
                    },
                );
            }
            Event::AppCircuitClosed(e) => {
                self.circuits.remove(&e.circuit_id);
            }
            Event::CustomImageRemoved(e) => {
                if self
                    .custom_images
                    .get(&e.image)
                    .is_some_and(|i| i.owner == e.owner)
                {
                    self.custom_images.remove(&e.image);
                }
            }
            Event::SessionRequested(e) => {
                self.sessions.insert(
                    e.session_id,
                    Session {
                        owner: e.owner.user_id,
                        owner_email: e.owner.email.clone(),
                        name: e.name.clone(),
                        project: e.owner.project.clone(),
                        resource_group: e.resource_group.clone(),
                        session_type: name_of(&e.session_type),
                        status: SessionStatus::Pending.as_str().to_owned(),
                        status_reason: None,
                        status_since: at,
                        cpu_milli: i64_of(e.resources.cpu_milli),
                        memory_bytes: i64_of(e.resources.memory_bytes),
                        gpu_milli: i64_of(e.resources.gpu_milli),
                        cluster_mode: name_of(&e.cluster_mode),
                        cluster_size: e.cluster_size as i32,
                        wanted_agent: e.agent_id.clone(),
                        starts_at: e.starts_at,
                        created_at: at,
                        attempts: 0,
                        last_result: None,
                        last_error_code: None,
                        agent_id: None,
                        holds: false,
                        requeues: 0,
                        version,
                        traceparent: recorded.metadata.traceparent.clone(),
                    },
                );
            }
            Event::SchedulingAttempted(e) => {
                self.session(e.session_id, version, |s| {
                    s.attempts = e.attempts as i32;
                    s.last_result = Some(e.result.as_str().to_owned());
                    s.last_error_code = e.error_code.clone();
                });
            }
            Event::SessionScheduled(e) => {
                let kernels = e.placements();
                for k in &kernels {
                    self.occupy(&k.agent_id, k.resources, 1);
                }
                self.kernels.insert(
                    e.session_id,
                    kernels
                        .iter()
                        .zip(0..)
                        .map(|(k, idx)| Kernel {
                            idx,
                            agent_id: k.agent_id.clone(),
                            cpu_milli: i64_of(k.resources.cpu_milli),
                            memory_bytes: i64_of(k.resources.memory_bytes),
                            gpu_milli: i64_of(k.resources.gpu_milli),
                        })
                        .collect(),
                );
                self.session(e.session_id, version, |s| {
                    s.agent_id = Some(e.agent_id.clone());
                    s.holds = true;
                });
            }
            Event::SessionResourcesReleased(e) => {
                self.app_services.retain(|(s, _), _| *s != e.session_id);
                for k in self.kernels.remove(&e.session_id).unwrap_or_default() {
                    if let Some(a) = self.agents.agents.get_mut(&k.agent_id) {
                        a.used_cpu_milli -= k.cpu_milli;
                        a.used_memory_bytes -= k.memory_bytes;
                        a.used_gpu_milli -= k.gpu_milli;
                    }
                }
                self.session(e.session_id, version, |s| s.holds = false);
            }
            Event::SessionStatusChanged(e) => {
                self.session(e.session_id, version, |s| {
                    s.status = e.to.as_str().to_owned();
                    s.status_reason = e.reason.clone();
                    s.status_since = at;
                    if e.to == SessionStatus::Pending {
                        s.requeues += 1;
                        s.agent_id = None;
                    }
                });
            }
            Event::SessionRenamed(e) => {
                self.session(e.session_id, version, |s| s.name = e.new_name.clone());
            }
            Event::AppStartEnded(e) => {
                if let AppStartOutcome::Started { token } = &e.outcome {
                    let service = self
                        .app_services
                        .entry((e.session_id, e.app.clone()))
                        .or_insert(AppService {
                            token: None,
                            started_at: at,
                        });
                    // A start that found the app running keeps the secret it was started with.
                    if token.is_some() {
                        service.token = token.clone();
                    }
                }
                self.session(e.session_id, version, |_| {});
            }
            Event::SessionCommitEnded(e) => {
                if let CommitOutcome::Done {
                    image_id,
                    size_bytes,
                    ..
                } = &e.outcome
                {
                    self.custom_images.insert(
                        e.image.clone(),
                        CustomImage {
                            owner: e.owner,
                            session_id: e.session_id,
                            agent_id: e.agent_id.clone(),
                            image_id: image_id.clone(),
                            size_bytes: i64_of(*size_bytes),
                            created_at: at,
                        },
                    );
                }
                self.session(e.session_id, version, |_| {});
            }
            // Only the session's version moves.
            Event::SessionTerminationRequested(e) => self.session(e.session_id, version, |_| {}),
            Event::KernelStarted(e) => self.session(e.session_id, version, |_| {}),
            Event::SessionIdleExempted(e) => self.session(e.session_id, version, |_| {}),
            Event::SessionIdleReaped(e) => self.session(e.session_id, version, |_| {}),
            Event::SessionCommitRequested(e) => self.session(e.session_id, version, |_| {}),
            Event::SessionCommitProgressed(e) => self.session(e.session_id, version, |_| {}),
            Event::AppStartRequested(e) => self.session(e.session_id, version, |_| {}),
            _ => unreachable!("routed by family"),
        }
    }

    /// Changes a session's row, when there is one, and moves its version.
    fn session(&mut self, id: Uuid, version: i64, change: impl FnOnce(&mut Session)) {
        if let Some(s) = self.sessions.get_mut(&id) {
            change(s);
            s.version = version;
        }
    }

    /// Adds (`sign` 1) or takes away (-1) a kernel's share on its agent.
    fn occupy(&mut self, agent_id: &str, share: ResourceSlots, sign: i64) {
        if let Some(a) = self.agents.agents.get_mut(agent_id) {
            a.used_cpu_milli += sign * i64_of(share.cpu_milli);
            a.used_memory_bytes += sign * i64_of(share.memory_bytes);
            a.used_gpu_milli += sign * i64_of(share.gpu_milli);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::Metadata;
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
                agent_id: "a1".into(),
                resource_group: "default".into(),
                capacity: slots(4_000),
                images: vec![],
                address: None,
                image_apps: Default::default(),
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
        assert_eq!(rows.kernels[&session_id].len(), 1);
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
        assert!(rows.kernels.is_empty());
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
            }),
        ));
        assert!(rows.sessions.is_empty());
    }
}
