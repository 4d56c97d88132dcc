//! [`SessionsView`](super::SessionsView) folded in memory: its three tables after the log's
//! events, written out with one `COPY` each. How a first install and a rebuild fold a whole
//! log; the live runner applies events one by one with the SQL beside it, and a rebuild
//! compares the two accounts row for row.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use events::catalogue::Event;
use events::payloads::*;
use events::pg::copy_rows;
use events::projection::FoldedRows;
use events::RecordedEvent;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::{container_of, i64_of, request_of, text};

struct Session {
    name: String,
    owner: Uuid,
    owner_email: String,
    requested_by: Option<Uuid>,
    project: Option<String>,
    session_type: String,
    status: String,
    status_reason: Option<String>,
    image: String,
    resource_group: String,
    agent_id: Option<String>,
    resources: serde_json::Value,
    shared_memory_bytes: i64,
    cluster_mode: String,
    cluster_size: i32,
    kernels: serde_json::Value,
    containers: serde_json::Value,
    request: serde_json::Value,
    created_at: DateTime<Utc>,
    status_changed_at: DateTime<Utc>,
    scheduled_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    ended_at: Option<DateTime<Utc>>,
    exit_code: Option<i32>,
    attempts: i32,
    priority: i32,
    termination_requested: bool,
    version: i64,
}

struct History {
    session_id: Uuid,
    phase: String,
    result: String,
    from_status: String,
    to_status: String,
    attempts: i32,
    message: String,
    error_code: Option<String>,
    steps: serde_json::Value,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

struct Agent {
    resource_group: String,
    cpu_milli: i64,
    memory_bytes: i64,
    gpu_milli: i64,
    used_cpu_milli: i64,
    used_memory_bytes: i64,
    used_gpu_milli: i64,
    lost: Option<String>,
    last_heartbeat: DateTime<Utc>,
}

#[derive(Default)]
pub struct SessionsRows {
    sessions: HashMap<Uuid, Session>,
    history: HashMap<Uuid, History>,
    /// Each session's newest history row, the one a repeat of its outcome merges into.
    latest: HashMap<Uuid, Uuid>,
    agents: HashMap<String, Agent>,
}

impl SessionsRows {
    /// Changes a session's row, when there is one, and moves its version.
    fn session(&mut self, id: Uuid, version: i64, change: impl FnOnce(&mut Session)) {
        if let Some(s) = self.sessions.get_mut(&id) {
            change(s);
            s.version = version;
        }
    }

    /// Adds (`sign` 1) or takes away (-1) kernels' shares on the agents' occupancy.
    fn occupy(&mut self, kernels: &[KernelPlacement], sign: i64) {
        for k in kernels {
            if let Some(a) = self.agents.get_mut(&k.agent_id) {
                a.used_cpu_milli += sign * i64_of(k.resources.cpu_milli);
                a.used_memory_bytes += sign * i64_of(k.resources.memory_bytes);
                a.used_gpu_milli += sign * i64_of(k.resources.gpu_milli);
            }
        }
    }

    fn mark_agent(&mut self, agent_id: &str, lost: Option<String>) {
        if let Some(a) = self.agents.get_mut(agent_id) {
            a.lost = lost;
        }
    }

    /// A scheduling attempt: merged into the session's newest history row when it repeats
    /// that row's outcome, a row of its own otherwise.
    fn attempted(&mut self, id: Uuid, e: &SchedulingAttempted, at: DateTime<Utc>) {
        let steps = serde_json::to_value(&e.steps).unwrap_or_default();
        let same = self
            .latest
            .get(&e.session_id)
            .and_then(|latest| self.history.get_mut(latest))
            .filter(|row| {
                row.phase == e.phase
                    && row.result == text(&e.result)
                    && row.from_status == text(&e.status_before)
                    && row.to_status == text(&e.status_after)
                    && row.error_code == e.error_code
            });
        match same {
            Some(row) => {
                row.attempts = e.attempts as i32;
                row.message = e.message.clone();
                row.steps = steps;
                row.updated_at = at;
            }
            None => {
                let newest = self
                    .latest
                    .get(&e.session_id)
                    .and_then(|latest| Some((latest, self.history.get(latest)?)))
                    .is_none_or(|(latest, row)| (row.created_at, *latest) <= (at, id));
                self.history.insert(
                    id,
                    History {
                        session_id: e.session_id,
                        phase: e.phase.clone(),
                        result: text(&e.result),
                        from_status: text(&e.status_before),
                        to_status: text(&e.status_after),
                        attempts: e.attempts as i32,
                        message: e.message.clone(),
                        error_code: e.error_code.clone(),
                        steps,
                        created_at: at,
                        updated_at: at,
                    },
                );
                if newest {
                    self.latest.insert(e.session_id, id);
                }
            }
        }
    }
}

impl FoldedRows for SessionsRows {
    fn apply(&mut self, recorded: &RecordedEvent) {
        let at = recorded.recorded_at;
        let version = recorded.stream_version as i64;
        match &recorded.event {
            Event::SessionRequested(r) => {
                self.sessions
                    .entry(r.session_id)
                    .or_insert_with(|| Session {
                        name: r.name.clone(),
                        owner: r.owner.user_id,
                        owner_email: r.owner.email.clone(),
                        requested_by: r.requested_by,
                        project: r.owner.project.clone(),
                        session_type: text(&r.session_type),
                        status: "PENDING".into(),
                        status_reason: None,
                        image: r.image.clone(),
                        resource_group: r.resource_group.clone(),
                        agent_id: None,
                        resources: serde_json::to_value(r.resources).unwrap_or_default(),
                        shared_memory_bytes: i64_of(r.shared_memory_bytes),
                        cluster_mode: text(&r.cluster_mode),
                        cluster_size: r.cluster_size as i32,
                        kernels: serde_json::json!([]),
                        containers: serde_json::json!([]),
                        request: request_of(r),
                        created_at: at,
                        status_changed_at: at,
                        scheduled_at: None,
                        started_at: None,
                        ended_at: None,
                        exit_code: None,
                        attempts: 0,
                        priority: r.priority,
                        termination_requested: false,
                        version,
                    });
            }
            Event::SchedulingAttempted(e) => {
                self.attempted(recorded.event_id, e, at);
                self.session(e.session_id, version, |s| s.attempts = e.attempts as i32);
            }
            Event::SessionScheduled(e) => {
                let kernels = e.placements();
                self.occupy(&kernels, 1);
                self.session(e.session_id, version, |s| {
                    s.agent_id = Some(e.agent_id.clone());
                    s.kernels = serde_json::to_value(&kernels).unwrap_or_default();
                    s.scheduled_at = Some(at);
                });
            }
            Event::SessionResourcesReleased(e) => {
                self.occupy(&e.placements(), -1);
                self.session(e.session_id, version, |_| {});
            }
            Event::SessionStatusChanged(e) => {
                let ended = events::lifecycle::is_terminal(e.to);
                self.session(e.session_id, version, |s| {
                    s.status = text(&e.to);
                    s.status_reason = e.reason.clone();
                    s.status_changed_at = at;
                    // The container's times where the agent reported them.
                    let happened = e.occurred_at.unwrap_or(at);
                    if e.to == SessionStatus::Running {
                        s.started_at = s.started_at.or(Some(happened));
                    }
                    if ended {
                        s.ended_at = Some(happened);
                    }
                    s.exit_code = e.exit_code.or(s.exit_code);
                    if e.to == SessionStatus::Pending {
                        s.agent_id = None;
                    }
                });
            }
            Event::SessionPriorityChanged(e) => {
                self.session(e.session_id, version, |s| s.priority = e.to);
            }
            Event::SessionRenamed(e) => {
                self.session(e.session_id, version, |s| s.name = e.new_name.clone());
            }
            Event::SessionTerminationRequested(e) => {
                self.session(e.session_id, version, |s| s.termination_requested = true);
            }
            Event::KernelStarted(e) => {
                self.session(e.session_id, version, |s| {
                    if let serde_json::Value::Array(containers) = &mut s.containers {
                        containers.push(container_of(e));
                    }
                });
            }
            Event::AgentRegistered(e) => {
                let agent = self.agents.entry(e.agent_id.clone()).or_insert(Agent {
                    resource_group: String::new(),
                    cpu_milli: 0,
                    memory_bytes: 0,
                    gpu_milli: 0,
                    used_cpu_milli: 0,
                    used_memory_bytes: 0,
                    used_gpu_milli: 0,
                    lost: None,
                    last_heartbeat: at,
                });
                agent.resource_group = e.resource_group.clone();
                agent.cpu_milli = i64_of(e.capacity.cpu_milli);
                agent.memory_bytes = i64_of(e.capacity.memory_bytes);
                agent.gpu_milli = i64_of(e.capacity.gpu_milli);
                agent.last_heartbeat = at;
                agent.lost = None;
            }
            Event::AgentHeartbeated(e) => {
                if let Some(a) = self.agents.get_mut(&e.agent_id) {
                    a.last_heartbeat = a.last_heartbeat.max(e.at);
                }
            }
            Event::AgentLost(e) => self.mark_agent(&e.agent_id, Some(e.reason.clone())),
            Event::AgentDeparted(e) => self.mark_agent(&e.agent_id, Some(e.lost())),
            Event::AgentReturned(e) => self.mark_agent(&e.agent_id, None),
            Event::AgentRevoked(e) => {
                self.mark_agent(&e.agent_id, Some(format!("revoked: {}", e.reason)))
            }
            _ => {}
        }
    }

    async fn write<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        schema: &'a str,
    ) -> Result<(), tokio_postgres::Error> {
        copy_rows(
            tx,
            &format!("{schema}.sessions"),
            [
                "session_id",
                "name",
                "owner",
                "owner_email",
                "requested_by",
                "project",
                "session_type",
                "status",
                "status_reason",
                "image",
                "resource_group",
                "agent_id",
                "resources",
                "shared_memory_bytes",
                "cluster_mode",
                "cluster_size",
                "kernels",
                "containers",
                "request",
                "created_at",
                "status_changed_at",
                "scheduled_at",
                "started_at",
                "ended_at",
                "exit_code",
                "attempts",
                "priority",
                "termination_requested",
                "version",
            ],
            &self
                .sessions
                .iter()
                .map(|(id, s)| -> [&(dyn ToSql + Sync); 29] {
                    [
                        id,
                        &s.name,
                        &s.owner,
                        &s.owner_email,
                        &s.requested_by,
                        &s.project,
                        &s.session_type,
                        &s.status,
                        &s.status_reason,
                        &s.image,
                        &s.resource_group,
                        &s.agent_id,
                        &s.resources,
                        &s.shared_memory_bytes,
                        &s.cluster_mode,
                        &s.cluster_size,
                        &s.kernels,
                        &s.containers,
                        &s.request,
                        &s.created_at,
                        &s.status_changed_at,
                        &s.scheduled_at,
                        &s.started_at,
                        &s.ended_at,
                        &s.exit_code,
                        &s.attempts,
                        &s.priority,
                        &s.termination_requested,
                        &s.version,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.history"),
            [
                "id",
                "session_id",
                "phase",
                "result",
                "from_status",
                "to_status",
                "attempts",
                "message",
                "error_code",
                "steps",
                "created_at",
                "updated_at",
            ],
            &self
                .history
                .iter()
                .map(|(id, h)| -> [&(dyn ToSql + Sync); 12] {
                    [
                        id,
                        &h.session_id,
                        &h.phase,
                        &h.result,
                        &h.from_status,
                        &h.to_status,
                        &h.attempts,
                        &h.message,
                        &h.error_code,
                        &h.steps,
                        &h.created_at,
                        &h.updated_at,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.agents"),
            [
                "agent_id",
                "resource_group",
                "cpu_milli",
                "memory_bytes",
                "gpu_milli",
                "used_cpu_milli",
                "used_memory_bytes",
                "used_gpu_milli",
                "lost",
                "last_heartbeat",
            ],
            &self
                .agents
                .iter()
                .map(|(id, a)| -> [&(dyn ToSql + Sync); 10] {
                    [
                        id,
                        &a.resource_group,
                        &a.cpu_milli,
                        &a.memory_bytes,
                        &a.gpu_milli,
                        &a.used_cpu_milli,
                        &a.used_memory_bytes,
                        &a.used_gpu_milli,
                        &a.lost,
                        &a.last_heartbeat,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }
}
