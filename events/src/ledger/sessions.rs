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
            patch.note(event, at);
        }
        Event::SessionScheduled(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            place_sql(client, &[(e.session_id, e.placements())]).await?;
            patch.note(event, at);
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
            patch.note(event, at);
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

/// The row of a requested session, pending: the one insert of [`RequestRows`], for one row.
async fn insert_sql<C: GenericClient>(
    client: &C,
    e: &SessionRequested,
    stream_version: u64,
    at: DateTime<Utc>,
    traceparent: Option<&str>,
) -> Result<(), LedgerError> {
    let mut row = RequestRows::default();
    row.push(e, stream_version, at, traceparent);
    row.write(client).await
}

/// Requested sessions' rows, pending, gathered column by column for one insert (one
/// statement whether it writes one row, [`insert_sql`], or a launch's).
#[derive(Default)]
struct RequestRows {
    /// When they were recorded: one moment for them all (one append).
    at: Option<DateTime<Utc>>,
    session_id: Vec<Uuid>,
    owner: Vec<Uuid>,
    owner_email: Vec<String>,
    name: Vec<String>,
    project: Vec<Option<String>>,
    resource_group: Vec<String>,
    session_type: Vec<String>,
    cpu_milli: Vec<i64>,
    memory_bytes: Vec<i64>,
    gpu_milli: Vec<i64>,
    cluster_mode: Vec<String>,
    cluster_size: Vec<i32>,
    wanted_agent: Vec<Option<String>>,
    starts_at: Vec<Option<DateTime<Utc>>>,
    version: Vec<i64>,
    traceparent: Vec<Option<String>>,
    priority: Vec<i32>,
    /// Each row's volumes as a JSON array: an array of arrays does not unnest row by row.
    volumes: Vec<serde_json::Value>,
    image: Vec<String>,
}

impl RequestRows {
    fn push(
        &mut self,
        e: &SessionRequested,
        version: u64,
        at: DateTime<Utc>,
        traceparent: Option<&str>,
    ) {
        self.at = Some(at);
        self.session_id.push(e.session_id);
        self.owner.push(e.owner.user_id);
        self.owner_email.push(e.owner.email.clone());
        self.name.push(e.name.clone());
        self.project.push(e.owner.project.clone());
        self.resource_group.push(e.resource_group.clone());
        self.session_type.push(name_of(&e.session_type));
        self.cpu_milli.push(i64_of(e.resources.cpu_milli));
        self.memory_bytes.push(i64_of(e.resources.memory_bytes));
        self.gpu_milli.push(i64_of(e.resources.gpu_milli));
        self.cluster_mode.push(name_of(&e.cluster_mode));
        self.cluster_size.push(e.cluster_size as i32);
        self.wanted_agent.push(e.agent_id.clone());
        self.starts_at.push(e.starts_at);
        self.version.push(i64_of(version));
        self.traceparent.push(traceparent.map(str::to_owned));
        self.priority.push(e.priority);
        self.volumes
            .push(serde_json::Value::from(domain::volumes::needed(&e.volumes)));
        self.image.push(e.image.clone());
    }

    async fn write<C: GenericClient>(&self, client: &C) -> Result<(), LedgerError> {
        let Some(at) = self.at else {
            return Ok(());
        };
        // In the order taken: `queue_seq`, the queue's order, is given as the rows go in.
        exec(
            client,
            "INSERT INTO ledger.sessions (session_id, owner, owner_email, name, project,
                   resource_group, session_type, status, status_since, cpu_milli,
                   memory_bytes, gpu_milli, cluster_mode, cluster_size, wanted_agent,
                   starts_at, created_at, version, traceparent, priority, volumes, image)
             SELECT r.session_id, r.owner, r.owner_email, r.name, r.project, r.resource_group,
                    r.session_type, 'PENDING', $1, r.cpu, r.mem, r.gpu, r.cluster_mode,
                    r.cluster_size, r.wanted_agent, r.starts_at, $1, r.version, r.traceparent,
                    r.priority, ARRAY(SELECT jsonb_array_elements_text(r.volumes)), r.image
             FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                         $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bigint[],
                         $12::text[], $13::int[], $14::text[], $15::timestamptz[],
                         $16::bigint[], $17::text[], $18::int[], $19::jsonb[], $20::text[])
                  WITH ORDINALITY AS r(session_id, owner, owner_email, name, project,
                       resource_group, session_type, cpu, mem, gpu, cluster_mode, cluster_size,
                       wanted_agent, starts_at, version, traceparent, priority, volumes, image,
                       ord)
             ORDER BY r.ord",
            &[
                &at,
                &self.session_id,
                &self.owner,
                &self.owner_email,
                &self.name,
                &self.project,
                &self.resource_group,
                &self.session_type,
                &self.cpu_milli,
                &self.memory_bytes,
                &self.gpu_milli,
                &self.cluster_mode,
                &self.cluster_size,
                &self.wanted_agent,
                &self.starts_at,
                &self.version,
                &self.traceparent,
                &self.priority,
                &self.volumes,
                &self.image,
            ],
        )
        .await?;
        Ok(())
    }
}

/// The kernels of a placed session, their shares reserved on their agents.
/// Places sessions' kernels: their shares reserved on their agents (refused, for all of them,
/// when any agent lacks the room or is lost) and their rows written, one statement each.
async fn place_sql<C: GenericClient>(
    client: &C,
    sessions: &[(Uuid, Vec<KernelPlacement>)],
) -> Result<(), LedgerError> {
    reserve(client, sessions.iter().flat_map(|(_, kernels)| kernels)).await?;
    let rows = sessions.iter().map(|(_, kernels)| kernels.len()).sum();
    let mut ids = Vec::with_capacity(rows);
    let mut idx = Vec::with_capacity(rows);
    let mut agents = Vec::with_capacity(rows);
    let (mut cpu, mut mem, mut gpu) = (
        Vec::with_capacity(rows),
        Vec::with_capacity(rows),
        Vec::with_capacity(rows),
    );
    for (session_id, kernels) in sessions {
        for (i, k) in (0i32..).zip(kernels) {
            ids.push(*session_id);
            idx.push(i);
            agents.push(k.agent_id.as_str());
            cpu.push(i64_of(k.resources.cpu_milli));
            mem.push(i64_of(k.resources.memory_bytes));
            gpu.push(i64_of(k.resources.gpu_milli));
        }
    }
    exec(
        client,
        "INSERT INTO ledger.kernels
         SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::bigint[], $5::bigint[],
           $6::bigint[])",
        &[&ids, &idx, &agents, &cpu, &mem, &gpu],
    )
    .await?;
    Ok(())
}

/// Adds the kernels' shares to their agents, refusing when any agent lacks the room or is
/// lost: one statement for every agent, its condition on each agent's whole new share.
async fn reserve<'k, C: GenericClient>(
    client: &C,
    kernels: impl Iterator<Item = &'k KernelPlacement>,
) -> Result<(), LedgerError> {
    let mut per_agent: Vec<(&str, ResourceSlots)> = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for k in kernels {
        match seen.get(k.agent_id.as_str()) {
            Some(&i) => per_agent[i].1 = per_agent[i].1.saturating_add(k.resources),
            None => {
                seen.insert(&k.agent_id, per_agent.len());
                per_agent.push((&k.agent_id, k.resources));
            }
        }
    }
    if per_agent.is_empty() {
        return Ok(());
    }
    let agents: Vec<&str> = per_agent.iter().map(|(a, _)| *a).collect();
    let cpu: Vec<i64> = per_agent.iter().map(|(_, n)| i64_of(n.cpu_milli)).collect();
    let mem: Vec<i64> = per_agent
        .iter()
        .map(|(_, n)| i64_of(n.memory_bytes))
        .collect();
    let gpu: Vec<i64> = per_agent.iter().map(|(_, n)| i64_of(n.gpu_milli)).collect();
    let statement = client
        .prepare_cached(
            "UPDATE ledger.agents a SET used_cpu_milli = used_cpu_milli + n.cpu,
               used_memory_bytes = used_memory_bytes + n.mem, used_gpu_milli = used_gpu_milli + n.gpu
             FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])
                  AS n(agent_id, cpu, mem, gpu)
             WHERE a.agent_id = n.agent_id AND a.lost IS NULL
               AND a.used_cpu_milli + n.cpu <= a.cpu_milli
               AND a.used_memory_bytes + n.mem <= a.memory_bytes
               AND a.used_gpu_milli + n.gpu <= a.gpu_milli
             RETURNING a.agent_id",
        )
        .await?;
    let reserved = client
        .query(&statement, &[&agents, &cpu, &mem, &gpu])
        .await?;
    if reserved.len() < agents.len() {
        let reserved: std::collections::HashSet<String> =
            reserved.iter().map(|r| r.get(0)).collect();
        let full = agents
            .iter()
            .find(|a| !reserved.contains(**a))
            .copied()
            .unwrap_or_default();
        return Err(LedgerError::AgentFull(full.to_owned()));
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

    /// The row's changes `event` makes that need no statement of their own (the placement's
    /// kernels and the usage intervals are written apart).
    fn note(&mut self, event: &Event, at: DateTime<Utc>) {
        match event {
            Event::SchedulingAttempted(e) => {
                self.attempts = Some(e.attempts as i32);
                self.result = Some((e.result.as_str().to_owned(), e.error_code.clone()));
            }
            Event::SessionScheduled(e) => {
                self.agent_id = Some(Some(e.agent_id.clone()));
                self.holds = Some(true);
            }
            Event::SessionStatusChanged(e) => {
                self.status = Some((e.to.as_str().to_owned(), e.reason.clone(), at));
                if e.to == SessionStatus::Pending {
                    self.requeues += 1;
                    self.agent_id = Some(None);
                }
            }
            _ => {}
        }
    }

    /// Writes what was gathered, if anything.
    pub(super) async fn flush<C: GenericClient>(&mut self, client: &C) -> Result<(), LedgerError> {
        let mut rows = PatchRows::default();
        rows.push(std::mem::take(self));
        rows.write(client).await
    }
}

/// Many sessions' gathered changes, written by one statement.
#[derive(Default)]
struct PatchRows {
    session_id: Vec<Uuid>,
    attempts: Vec<Option<i32>>,
    set_result: Vec<bool>,
    result: Vec<Option<String>>,
    code: Vec<Option<String>>,
    set_agent: Vec<bool>,
    agent_id: Vec<Option<String>>,
    holds: Vec<Option<bool>>,
    status: Vec<Option<String>>,
    reason: Vec<Option<String>>,
    since: Vec<Option<DateTime<Utc>>>,
    requeues: Vec<i32>,
    name: Vec<Option<String>>,
    version: Vec<i64>,
    priority: Vec<Option<i32>>,
}

impl PatchRows {
    /// Takes in one session's patch (none, when it gathered nothing).
    fn push(&mut self, patch: SessionPatch) {
        let Some(session_id) = patch.session_id else {
            return;
        };
        self.session_id.push(session_id);
        self.attempts.push(patch.attempts);
        self.set_result.push(patch.result.is_some());
        let (result, code) = patch.result.map_or((None, None), |(r, c)| (Some(r), c));
        self.result.push(result);
        self.code.push(code);
        self.set_agent.push(patch.agent_id.is_some());
        self.agent_id.push(patch.agent_id.flatten());
        self.holds.push(patch.holds);
        let (status, reason, since) = patch
            .status
            .map_or((None, None, None), |(s, r, at)| (Some(s), r, Some(at)));
        self.status.push(status);
        self.reason.push(reason);
        self.since.push(since);
        self.requeues.push(patch.requeues);
        self.name.push(patch.name);
        self.version.push(patch.version);
        self.priority.push(patch.priority);
    }

    async fn write<C: GenericClient>(self, client: &C) -> Result<(), LedgerError> {
        if self.session_id.is_empty() {
            return Ok(());
        }
        exec(
            client,
            "UPDATE ledger.sessions s SET
               attempts = coalesce(p.attempts, s.attempts),
               last_result = CASE WHEN p.set_result THEN p.result ELSE s.last_result END,
               last_error_code = CASE WHEN p.set_result THEN p.code ELSE s.last_error_code END,
               agent_id = CASE WHEN p.set_agent THEN p.agent_id ELSE s.agent_id END,
               holds = coalesce(p.holds, s.holds),
               status = coalesce(p.status, s.status),
               status_reason = CASE WHEN p.status IS NULL THEN s.status_reason ELSE p.reason END,
               status_since = coalesce(p.since, s.status_since),
               requeues = s.requeues + p.requeues,
               name = coalesce(p.name, s.name),
               version = p.version,
               priority = coalesce(p.priority, s.priority)
             FROM unnest($1::uuid[], $2::int[], $3::bool[], $4::text[], $5::text[], $6::bool[],
                         $7::text[], $8::bool[], $9::text[], $10::text[], $11::timestamptz[],
                         $12::int[], $13::text[], $14::bigint[], $15::int[])
                  AS p(session_id, attempts, set_result, result, code, set_agent, agent_id,
                       holds, status, reason, since, requeues, name, version, priority)
             WHERE s.session_id = p.session_id",
            &[
                &self.session_id,
                &self.attempts,
                &self.set_result,
                &self.result,
                &self.code,
                &self.set_agent,
                &self.agent_id,
                &self.holds,
                &self.status,
                &self.reason,
                &self.since,
                &self.requeues,
                &self.name,
                &self.version,
                &self.priority,
            ],
        )
        .await?;
        Ok(())
    }
}

/// Many sessions' requests and scheduling decisions, written together: every requested
/// session's row with one insert, every placement's kernels with one reservation and one
/// insert, every session row with one update. What [`record_many`](super::record_many)
/// writes for the streams whose events are all a request or all a decision's.
#[derive(Default)]
pub(super) struct Decisions {
    requests: RequestRows,
    patches: PatchRows,
    placements: Vec<(Uuid, Vec<KernelPlacement>)>,
}

impl Decisions {
    /// Takes in a session stream's one new event when it is the session's request, the
    /// stream's `version`-th; false, taking nothing, otherwise.
    pub(super) fn take_request(
        &mut self,
        events: &[Event],
        version: u64,
        at: DateTime<Utc>,
        traceparent: Option<&str>,
    ) -> bool {
        let [Event::SessionRequested(e)] = events else {
            return false;
        };
        self.requests.push(e, version, at, traceparent);
        true
    }

    /// Takes in one session stream's new events, the first of them its `first_version`-th,
    /// when they are all of a scheduling decision's kinds (its history, its placement, a move
    /// that opens or closes no usage, its start estimate); false, taking nothing, otherwise.
    pub(super) fn take(&mut self, events: &[Event], first_version: u64, at: DateTime<Utc>) -> bool {
        let session_of = |event: &Event| match event {
            Event::SchedulingAttempted(e) => Some(e.session_id),
            Event::SessionScheduled(e) => Some(e.session_id),
            Event::SessionStatusChanged(e) if usage_move(e.to).is_none() => Some(e.session_id),
            Event::SessionStartEstimated(e) => Some(e.session_id),
            _ => None,
        };
        let Some(session_id) = events.first().and_then(session_of) else {
            return false;
        };
        if !events.iter().all(|e| session_of(e) == Some(session_id)) {
            return false;
        }
        let mut patch = SessionPatch {
            session_id: Some(session_id),
            version: i64_of(first_version + events.len() as u64 - 1),
            ..SessionPatch::default()
        };
        for event in events {
            patch.note(event, at);
            if let Event::SessionScheduled(e) = event {
                self.placements.push((session_id, e.placements()));
            }
        }
        self.patches.push(patch);
        true
    }

    /// Writes what was taken in: the requested rows first, in the order taken (their place
    /// in the queue).
    pub(super) async fn write<C: GenericClient>(self, client: &C) -> Result<(), LedgerError> {
        self.requests.write(client).await?;
        if !self.placements.is_empty() {
            place_sql(client, &self.placements).await?;
        }
        self.patches.write(client).await
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

    /// Writes the family's other tables (`usage_intervals`, `kernels`) into `schema`.
    pub(super) async fn copy_others(
        &self,
        tx: &Transaction<'_>,
        schema: &str,
    ) -> Result<(), tokio_postgres::Error> {
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

    /// Writes the `sessions` table into `schema` (the replay's scratch copy): the family's
    /// largest, which a replay writes on a connection of its own beside the others.
    pub(super) async fn copy_sessions(
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
