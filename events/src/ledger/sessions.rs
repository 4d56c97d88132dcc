//! The sessions family: every session from its request to its end, and where its kernels
//! hold their shares.
//!
//! Tables: `sessions` and `kernels`, and the `used_*` columns of `agents` (the sum of the
//! shares the agent's kernels hold). Changed by `SessionRequested` (the row),
//! `SchedulingAttempted`, `SessionScheduled` (the kernels, reserved on their agents:
//! the only decision here, refused when an agent lacks the room or is lost),
//! `SessionResourcesReleased` (the kernels given back, and the session's apps forgotten, see
//! `apps`), `SessionStatusChanged`, `SessionRenamed` and `SessionPriorityChanged`.
//! `SessionTerminationRequested`, `KernelStarted`, `SessionIdleExempted`, `SessionIdleReaped`,
//! `SessionPullProgressed` and `SessionStartEstimated` only move the session's version, as the other events of its stream do (those of `apps`
//! and `images`): the reaper and the detail read them from the log.
//!
//! The SQL account gathers the session row's changes from consecutive events of one stream
//! in a [`SessionPatch`] and writes them with one statement.
//!
//! Also `usage_intervals`: what each session held from when it ran until it stopped, for fair
//! share. RUNNING opens one (at the container's start, `occurred_at`, when the event carries
//! it; else at the event's `recorded_at`, which the SQL account reads back from the log so
//! both accounts agree to the microsecond), and an end, a move back to the queue or the
//! release of its resources closes it, at the same kind of time. A restart that runs again
//! while one is open keeps it open.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::fold::exec;
use super::{agents, apps, i64_of, name_of, LedgerError};
use crate::catalogue::Event;
use crate::payloads::*;
use crate::pg::copy_rows;
use crate::RecordedEvent;

/// Applies one of the family's events to the live tables, as [`record`](super::record) does:
/// the session row's changes into `patch`, the rest at once.
pub(super) async fn apply_sql<C: GenericClient>(
    client: &C,
    patch: &mut SessionPatch,
    event: &Event,
    stream_version: u64,
    at: DateTime<Utc>,
    traceparent: Option<&str>,
) -> Result<(), LedgerError> {
    match event {
        Event::SessionRequested(e) => {
            patch.flush(client).await?;
            insert_sql(client, e, stream_version, at, traceparent).await?;
        }
        Event::SchedulingAttempted(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            patch.attempts = Some(e.attempts as i32);
            patch.result = Some((e.result.as_str().to_owned(), e.error_code.clone()));
        }
        Event::SessionScheduled(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            place_sql(client, e).await?;
            patch.agent_id = Some(Some(e.agent_id.clone()));
            patch.holds = Some(true);
        }
        Event::SessionResourcesReleased(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            apps::session_released_sql(client, e.session_id).await?;
            exec(
                client,
                "WITH gone AS (DELETE FROM ledger.kernels WHERE session_id = $1 RETURNING *),
                 per_agent AS (SELECT agent_id, sum(cpu_milli) c, sum(memory_bytes) m,
                   sum(gpu_milli) g FROM gone GROUP BY agent_id)
                 UPDATE ledger.agents a SET used_cpu_milli = used_cpu_milli - p.c,
                   used_memory_bytes = used_memory_bytes - p.m,
                   used_gpu_milli = used_gpu_milli - p.g
                 FROM per_agent p WHERE a.agent_id = p.agent_id",
                &[&e.session_id],
            )
            .await?;
            patch.holds = Some(false);
            usage_closes_sql(client, e.session_id, None, stream_version).await?;
        }
        Event::SessionStatusChanged(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            patch.status = Some((e.to.as_str().to_owned(), e.reason.clone(), at));
            if e.to == SessionStatus::Pending {
                patch.requeues += 1;
                patch.agent_id = Some(None);
            }
            match usage_move(e.to) {
                Some(UsageMove::Opens) => {
                    usage_opens_sql(client, e.session_id, e.occurred_at, stream_version).await?
                }
                Some(UsageMove::Closes) => {
                    usage_closes_sql(client, e.session_id, e.occurred_at, stream_version).await?
                }
                None => {}
            }
        }
        Event::SessionPriorityChanged(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            patch.priority = Some(e.to);
        }
        Event::SessionRenamed(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            patch.name = Some(e.new_name.clone());
        }
        // Only the session's version moves.
        Event::SessionTerminationRequested(e) => {
            patch.enter(client, e.session_id, stream_version).await?
        }
        Event::KernelStarted(e) => patch.enter(client, e.session_id, stream_version).await?,
        Event::SessionIdleExempted(e) => patch.enter(client, e.session_id, stream_version).await?,
        Event::SessionPullProgressed(e) => {
            patch.enter(client, e.session_id, stream_version).await?
        }
        Event::SessionStartEstimated(e) => {
            patch.enter(client, e.session_id, stream_version).await?
        }
        Event::SessionIdleReaped(e) => patch.enter(client, e.session_id, stream_version).await?,
        other => unreachable!("`{}` is not a sessions event", other.event_type()),
    }
    Ok(())
}

/// What a status change does to a session's usage interval.
#[derive(Debug, Clone, Copy, PartialEq)]
enum UsageMove {
    Opens,
    Closes,
}

fn usage_move(to: SessionStatus) -> Option<UsageMove> {
    match to {
        SessionStatus::Running => Some(UsageMove::Opens),
        SessionStatus::Pending => Some(UsageMove::Closes),
        to if to.is_terminal() => Some(UsageMove::Closes),
        _ => None,
    }
}

/// Opens the session's usage interval, unless one is open, with what its kernels hold. Its
/// start is `occurred_at`, else the log's time of the session's `stream_version`-th event
/// (recorded in this transaction): the time the in-memory account reads as `recorded_at`.
async fn usage_opens_sql<C: GenericClient>(
    client: &C,
    session_id: Uuid,
    occurred_at: Option<DateTime<Utc>>,
    stream_version: u64,
) -> Result<(), LedgerError> {
    let stream = crate::catalogue::stream_id("session", session_id);
    exec(
        client,
        "INSERT INTO ledger.usage_intervals (session_id, started_at, resource_group, owner,
           project, cpu_milli, memory_bytes, gpu_milli)
         SELECT s.session_id, coalesce($2, (SELECT recorded_at FROM events
             WHERE stream_id = $3 AND stream_version = $4)),
           s.resource_group, s.owner, s.project, sum(k.cpu_milli)::bigint,
           sum(k.memory_bytes)::bigint, sum(k.gpu_milli)::bigint
         FROM ledger.sessions s JOIN ledger.kernels k USING (session_id)
         WHERE s.session_id = $1 AND NOT EXISTS (SELECT 1 FROM ledger.usage_intervals u
           WHERE u.session_id = $1 AND u.ended_at IS NULL)
         GROUP BY s.session_id, s.resource_group, s.owner, s.project
         ON CONFLICT DO NOTHING",
        &[&session_id, &occurred_at, &stream, &i64_of(stream_version)],
    )
    .await?;
    Ok(())
}

/// Closes the session's open usage interval, if any, at `occurred_at` or the log's time of
/// the event (as [`usage_opens_sql`]).
async fn usage_closes_sql<C: GenericClient>(
    client: &C,
    session_id: Uuid,
    occurred_at: Option<DateTime<Utc>>,
    stream_version: u64,
) -> Result<(), LedgerError> {
    let stream = crate::catalogue::stream_id("session", session_id);
    exec(
        client,
        "UPDATE ledger.usage_intervals SET ended_at = coalesce($2, (SELECT recorded_at
             FROM events WHERE stream_id = $3 AND stream_version = $4))
         WHERE session_id = $1 AND ended_at IS NULL",
        &[&session_id, &occurred_at, &stream, &i64_of(stream_version)],
    )
    .await?;
    Ok(())
}

/// The row of a requested session, pending.
async fn insert_sql<C: GenericClient>(
    client: &C,
    e: &SessionRequested,
    stream_version: u64,
    at: DateTime<Utc>,
    traceparent: Option<&str>,
) -> Result<(), LedgerError> {
    exec(
        client,
        "INSERT INTO ledger.sessions (session_id, owner, owner_email, name, project,
               resource_group, session_type, status, status_since, cpu_milli,
               memory_bytes, gpu_milli, cluster_mode, cluster_size, wanted_agent,
               starts_at, created_at, version, traceparent, priority, volumes, image)
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'PENDING', $8, $9, $10, $11, $12, $13,
               $14, $15, $8, $16, $17, $18, $19, $20)",
        &[
            &e.session_id,
            &e.owner.user_id,
            &e.owner.email,
            &e.name,
            &e.owner.project,
            &e.resource_group,
            &name_of(&e.session_type),
            &at,
            &i64_of(e.resources.cpu_milli),
            &i64_of(e.resources.memory_bytes),
            &i64_of(e.resources.gpu_milli),
            &name_of(&e.cluster_mode),
            &(e.cluster_size as i32),
            &e.agent_id,
            &e.starts_at,
            &i64_of(stream_version),
            &traceparent,
            &e.priority,
            &domain::volumes::needed(&e.volumes),
            &e.image,
        ],
    )
    .await?;
    Ok(())
}

/// The kernels of a placed session, their shares reserved on their agents.
async fn place_sql<C: GenericClient>(client: &C, e: &SessionScheduled) -> Result<(), LedgerError> {
    let kernels = e.placements();
    reserve(client, &kernels).await?;
    let agents: Vec<&str> = kernels.iter().map(|k| k.agent_id.as_str()).collect();
    let idx: Vec<i32> = (0..kernels.len() as i32).collect();
    let cpu: Vec<i64> = kernels
        .iter()
        .map(|k| i64_of(k.resources.cpu_milli))
        .collect();
    let mem: Vec<i64> = kernels
        .iter()
        .map(|k| i64_of(k.resources.memory_bytes))
        .collect();
    let gpu: Vec<i64> = kernels
        .iter()
        .map(|k| i64_of(k.resources.gpu_milli))
        .collect();
    exec(
        client,
        "INSERT INTO ledger.kernels
         SELECT $1, * FROM unnest($2::int[], $3::text[], $4::bigint[], $5::bigint[],
           $6::bigint[])",
        &[&e.session_id, &idx, &agents, &cpu, &mem, &gpu],
    )
    .await?;
    Ok(())
}

/// Adds the kernels' shares to their agents, refusing when any agent lacks the room or is
/// lost.
async fn reserve<C: GenericClient>(
    client: &C,
    kernels: &[KernelPlacement],
) -> Result<(), LedgerError> {
    let mut per_agent: Vec<(&str, ResourceSlots)> = Vec::new();
    for k in kernels {
        match per_agent.iter_mut().find(|(a, _)| *a == k.agent_id) {
            Some((_, total)) => *total = total.saturating_add(k.resources),
            None => per_agent.push((&k.agent_id, k.resources)),
        }
    }
    for (agent_id, need) in per_agent {
        let sql = "UPDATE ledger.agents SET used_cpu_milli = used_cpu_milli + $2,
               used_memory_bytes = used_memory_bytes + $3, used_gpu_milli = used_gpu_milli + $4
             WHERE agent_id = $1 AND lost IS NULL
               AND used_cpu_milli + $2 <= cpu_milli
               AND used_memory_bytes + $3 <= memory_bytes
               AND used_gpu_milli + $4 <= gpu_milli";
        let n = exec(
            client,
            sql,
            &[
                &agent_id,
                &i64_of(need.cpu_milli),
                &i64_of(need.memory_bytes),
                &i64_of(need.gpu_milli),
            ],
        )
        .await?;
        if n == 0 {
            return Err(LedgerError::AgentFull(agent_id.to_owned()));
        }
    }
    Ok(())
}

/// Changes to one session's ledger row, gathered from consecutive events and written by one
/// statement.
#[derive(Default)]
pub(super) struct SessionPatch {
    session_id: Option<Uuid>,
    attempts: Option<i32>,
    result: Option<(String, Option<String>)>,
    agent_id: Option<Option<String>>,
    holds: Option<bool>,
    status: Option<(String, Option<String>, DateTime<Utc>)>,
    requeues: i32,
    name: Option<String>,
    priority: Option<i32>,
    version: i64,
}

impl SessionPatch {
    /// Takes in the `stream_version`-th event of session `session_id`'s stream (its changes
    /// are set by the caller), writing first what was gathered for another session.
    pub(super) async fn enter<C: GenericClient>(
        &mut self,
        client: &C,
        session_id: Uuid,
        stream_version: u64,
    ) -> Result<(), LedgerError> {
        if self.session_id.is_some_and(|s| s != session_id) {
            self.flush(client).await?;
        }
        self.session_id = Some(session_id);
        self.version = i64_of(stream_version);
        Ok(())
    }

    /// Writes what was gathered, if anything.
    pub(super) async fn flush<C: GenericClient>(&mut self, client: &C) -> Result<(), LedgerError> {
        let Some(session_id) = self.session_id.take() else {
            return Ok(());
        };
        let patch = std::mem::take(self);
        let (set_result, result, code) = match patch.result {
            Some((r, c)) => (true, Some(r), c),
            None => (false, None, None),
        };
        let (set_agent, agent_id) = match patch.agent_id {
            Some(a) => (true, a),
            None => (false, None),
        };
        let (status, reason, since) = match patch.status {
            Some((s, r, at)) => (Some(s), r, Some(at)),
            None => (None, None, None),
        };
        exec(
            client,
            "UPDATE ledger.sessions SET
               attempts = coalesce($2, attempts),
               last_result = CASE WHEN $3 THEN $4 ELSE last_result END,
               last_error_code = CASE WHEN $3 THEN $5 ELSE last_error_code END,
               agent_id = CASE WHEN $6 THEN $7 ELSE agent_id END,
               holds = coalesce($8, holds),
               status = coalesce($9, status),
               status_reason = CASE WHEN $9 IS NULL THEN status_reason ELSE $10 END,
               status_since = coalesce($11, status_since),
               requeues = requeues + $12,
               name = coalesce($13, name),
               version = $14,
               priority = coalesce($15, priority)
             WHERE session_id = $1",
            &[
                &session_id,
                &patch.attempts,
                &set_result,
                &result,
                &code,
                &set_agent,
                &agent_id,
                &patch.holds,
                &status,
                &reason,
                &since,
                &patch.requeues,
                &patch.name,
                &patch.version,
                &patch.priority,
            ],
        )
        .await?;
        Ok(())
    }
}

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
    pub priority: i32,
    /// The shared volumes its folders live on, which its agents must mount.
    pub volumes: Vec<String>,
    pub image: String,
}

/// One session's hold on its group's resources while it ran ([`usage_move`]).
pub(super) struct UsageInterval {
    pub ended_at: Option<DateTime<Utc>>,
    pub resource_group: String,
    pub owner: Uuid,
    pub project: Option<String>,
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub gpu_milli: i64,
}

pub(super) struct Kernel {
    /// Its place in the session (0: the main kernel).
    pub idx: i32,
    pub agent_id: String,
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub gpu_milli: i64,
}

/// The family's tables folded in memory, keyed by session id.
#[derive(Default)]
pub(super) struct Tables {
    pub sessions: HashMap<Uuid, Session>,
    /// Each placed session's kernels, in order (`idx` is the place).
    pub kernels: HashMap<Uuid, Vec<Kernel>>,
    /// Usage intervals by session and start.
    pub usage: HashMap<(Uuid, DateTime<Utc>), UsageInterval>,
    /// The start of each session's open usage interval.
    pub open_usage: HashMap<Uuid, DateTime<Utc>>,
}

impl Tables {
    /// Folds one of the family's events in, as the replay does: with the shares its kernels
    /// hold on `agents`, and forgetting a released session's `apps`.
    pub(super) fn apply_in_memory(
        &mut self,
        agents: &mut agents::Tables,
        apps: &mut apps::Tables,
        recorded: &RecordedEvent,
    ) {
        let at = recorded.recorded_at;
        let version = i64_of(recorded.stream_version);
        match &recorded.event {
            Event::SessionRequested(e) => {
                let traceparent = recorded.metadata.traceparent.clone();
                self.sessions
                    .insert(e.session_id, requested(e, at, version, traceparent));
            }
            Event::SchedulingAttempted(e) => {
                self.change(e.session_id, version, |s| {
                    s.attempts = e.attempts as i32;
                    s.last_result = Some(e.result.as_str().to_owned());
                    s.last_error_code = e.error_code.clone();
                });
            }
            Event::SessionScheduled(e) => self.place(agents, e, version),
            Event::SessionResourcesReleased(e) => {
                self.usage_closes(e.session_id, at);
                apps.session_released(e.session_id);
                for k in self.kernels.remove(&e.session_id).unwrap_or_default() {
                    if let Some(a) = agents.agents.get_mut(&k.agent_id) {
                        a.used_cpu_milli -= k.cpu_milli;
                        a.used_memory_bytes -= k.memory_bytes;
                        a.used_gpu_milli -= k.gpu_milli;
                    }
                }
                self.change(e.session_id, version, |s| s.holds = false);
            }
            Event::SessionStatusChanged(e) => {
                self.change(e.session_id, version, |s| {
                    s.status = e.to.as_str().to_owned();
                    s.status_reason = e.reason.clone();
                    s.status_since = at;
                    if e.to == SessionStatus::Pending {
                        s.requeues += 1;
                        s.agent_id = None;
                    }
                });
                let when = e.occurred_at.unwrap_or(at);
                match usage_move(e.to) {
                    Some(UsageMove::Opens) => self.usage_opens(e.session_id, when),
                    Some(UsageMove::Closes) => self.usage_closes(e.session_id, when),
                    None => {}
                }
            }
            Event::SessionPriorityChanged(e) => {
                self.change(e.session_id, version, |s| s.priority = e.to);
            }
            Event::SessionRenamed(e) => {
                self.change(e.session_id, version, |s| s.name = e.new_name.clone());
            }
            // Only the session's version moves.
            Event::SessionTerminationRequested(e) => self.change(e.session_id, version, |_| {}),
            Event::KernelStarted(e) => self.change(e.session_id, version, |_| {}),
            Event::SessionIdleExempted(e) => self.change(e.session_id, version, |_| {}),
            Event::SessionPullProgressed(e) => self.change(e.session_id, version, |_| {}),
            Event::SessionStartEstimated(e) => self.change(e.session_id, version, |_| {}),
            Event::SessionIdleReaped(e) => self.change(e.session_id, version, |_| {}),
            other => unreachable!("`{}` is not a sessions event", other.event_type()),
        }
    }

    /// Opens the session's usage interval at `at`, unless one is open, with what its kernels
    /// hold (none: nothing to count).
    fn usage_opens(&mut self, id: Uuid, at: DateTime<Utc>) {
        let Some(s) = self.sessions.get(&id) else {
            return;
        };
        let Some(kernels) = self.kernels.get(&id).filter(|k| !k.is_empty()) else {
            return;
        };
        if self.open_usage.contains_key(&id) || self.usage.contains_key(&(id, at)) {
            return;
        }
        self.open_usage.insert(id, at);
        self.usage.insert(
            (id, at),
            UsageInterval {
                ended_at: None,
                resource_group: s.resource_group.clone(),
                owner: s.owner,
                project: s.project.clone(),
                cpu_milli: kernels.iter().map(|k| k.cpu_milli).sum(),
                memory_bytes: kernels.iter().map(|k| k.memory_bytes).sum(),
                gpu_milli: kernels.iter().map(|k| k.gpu_milli).sum(),
            },
        );
    }

    /// Closes the session's open usage interval at `at`, if any.
    fn usage_closes(&mut self, id: Uuid, at: DateTime<Utc>) {
        if let Some(started) = self.open_usage.remove(&id) {
            if let Some(u) = self.usage.get_mut(&(id, started)) {
                u.ended_at = Some(at);
            }
        }
    }

    /// Changes a session's row, when there is one, and moves its version.
    pub(super) fn change(&mut self, id: Uuid, version: i64, change: impl FnOnce(&mut Session)) {
        if let Some(s) = self.sessions.get_mut(&id) {
            change(s);
            s.version = version;
        }
    }

    /// The kernels of a placed session, their shares added to their agents.
    fn place(&mut self, agents: &mut agents::Tables, e: &SessionScheduled, version: i64) {
        let kernels = e.placements();
        for k in &kernels {
            if let Some(a) = agents.agents.get_mut(&k.agent_id) {
                a.used_cpu_milli += i64_of(k.resources.cpu_milli);
                a.used_memory_bytes += i64_of(k.resources.memory_bytes);
                a.used_gpu_milli += i64_of(k.resources.gpu_milli);
            }
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
        self.change(e.session_id, version, |s| {
            s.agent_id = Some(e.agent_id.clone());
            s.holds = true;
        });
    }

    /// Writes the tables into `schema` (the replay's scratch copy).
    pub(super) async fn copy_into(
        &self,
        tx: &Transaction<'_>,
        schema: &str,
    ) -> Result<(), tokio_postgres::Error> {
        self.copy_sessions(tx, schema).await?;
        copy_rows(
            tx,
            &format!("{schema}.usage_intervals"),
            [
                "session_id",
                "started_at",
                "ended_at",
                "resource_group",
                "owner",
                "project",
                "cpu_milli",
                "memory_bytes",
                "gpu_milli",
            ],
            &self
                .usage
                .iter()
                .map(|((session, started), u)| -> [&(dyn ToSql + Sync); 9] {
                    [
                        session,
                        started,
                        &u.ended_at,
                        &u.resource_group,
                        &u.owner,
                        &u.project,
                        &u.cpu_milli,
                        &u.memory_bytes,
                        &u.gpu_milli,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.kernels"),
            [
                "session_id",
                "idx",
                "agent_id",
                "cpu_milli",
                "memory_bytes",
                "gpu_milli",
            ],
            &self
                .kernels
                .iter()
                .flat_map(|(session, kernels)| {
                    kernels.iter().map(move |k| -> [&(dyn ToSql + Sync); 6] {
                        [
                            session,
                            &k.idx,
                            &k.agent_id,
                            &k.cpu_milli,
                            &k.memory_bytes,
                            &k.gpu_milli,
                        ]
                    })
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }

    async fn copy_sessions(
        &self,
        tx: &Transaction<'_>,
        schema: &str,
    ) -> Result<(), tokio_postgres::Error> {
        copy_rows(
            tx,
            &format!("{schema}.sessions"),
            [
                "session_id",
                "owner",
                "owner_email",
                "name",
                "project",
                "resource_group",
                "session_type",
                "status",
                "status_reason",
                "status_since",
                "cpu_milli",
                "memory_bytes",
                "gpu_milli",
                "cluster_mode",
                "cluster_size",
                "wanted_agent",
                "starts_at",
                "created_at",
                "attempts",
                "last_result",
                "last_error_code",
                "agent_id",
                "holds",
                "requeues",
                "version",
                "traceparent",
                "priority",
                "volumes",
                "image",
            ],
            &self
                .sessions
                .iter()
                .map(|(id, s)| -> [&(dyn ToSql + Sync); 29] {
                    [
                        id,
                        &s.owner,
                        &s.owner_email,
                        &s.name,
                        &s.project,
                        &s.resource_group,
                        &s.session_type,
                        &s.status,
                        &s.status_reason,
                        &s.status_since,
                        &s.cpu_milli,
                        &s.memory_bytes,
                        &s.gpu_milli,
                        &s.cluster_mode,
                        &s.cluster_size,
                        &s.wanted_agent,
                        &s.starts_at,
                        &s.created_at,
                        &s.attempts,
                        &s.last_result,
                        &s.last_error_code,
                        &s.agent_id,
                        &s.holds,
                        &s.requeues,
                        &s.version,
                        &s.traceparent,
                        &s.priority,
                        &s.volumes,
                        &s.image,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }
}

/// The row of a requested session, pending.
fn requested(
    e: &SessionRequested,
    at: DateTime<Utc>,
    version: i64,
    traceparent: Option<String>,
) -> Session {
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
        traceparent,
        priority: e.priority,
        volumes: domain::volumes::needed(&e.volumes),
        image: e.image.clone(),
    }
}
