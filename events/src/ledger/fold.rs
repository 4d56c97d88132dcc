//! How each event changes the ledger's tables, as [`record`](super::record) applies events
//! in the transaction that appends them. A replay folds the log with a second account of the
//! same rules (`memory`), written apart, and compares the two.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::{accounts, agents, i64_of, name_of, resources, Family, LedgerError};
use crate::catalogue::Event;
use crate::payloads::*;

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
    version: i64,
}

impl SessionPatch {
    /// Takes in a session event (running its effects on agents and kernels at once);
    /// `false` when the event is not one the patch gathers.
    pub(super) async fn absorb<C: GenericClient>(
        &mut self,
        client: &C,
        event: &Event,
        stream_version: u64,
        at: DateTime<Utc>,
    ) -> Result<bool, LedgerError> {
        let session_id = match event {
            Event::SchedulingAttempted(e) => e.session_id,
            Event::SessionScheduled(e) => e.session_id,
            Event::SessionResourcesReleased(e) => e.session_id,
            Event::SessionStatusChanged(e) => e.session_id,
            Event::SessionRenamed(e) => e.session_id,
            Event::SessionTerminationRequested(e) => e.session_id,
            Event::KernelStarted(e) => e.session_id,
            // Only the session's version moves: the reaper and the detail read these from
            // the log.
            Event::SessionIdleExempted(e) => e.session_id,
            Event::SessionIdleReaped(e) => e.session_id,
            Event::SessionCommitRequested(e) => e.session_id,
            Event::SessionCommitProgressed(e) => e.session_id,
            Event::SessionCommitEnded(e) => e.session_id,
            Event::AppStartRequested(e) => e.session_id,
            Event::AppStartEnded(e) => e.session_id,
            _ => return Ok(false),
        };
        if self.session_id.is_some_and(|s| s != session_id) {
            self.flush(client).await?;
        }
        self.session_id = Some(session_id);
        self.version = i64_of(stream_version);
        match event {
            Event::SchedulingAttempted(e) => {
                self.attempts = Some(e.attempts as i32);
                self.result = Some((e.result.as_str().to_owned(), e.error_code.clone()));
            }
            Event::SessionScheduled(e) => {
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
                self.agent_id = Some(Some(e.agent_id.clone()));
                self.holds = Some(true);
            }
            Event::AppStartEnded(e) => {
                if let AppStartOutcome::Started { token } = &e.outcome {
                    // A start that found the app running keeps the secret it was started with.
                    exec(
                        client,
                        "INSERT INTO ledger.app_services VALUES ($1, $2, $3, $4)
                         ON CONFLICT (session_id, app) DO UPDATE
                           SET token = coalesce(excluded.token, ledger.app_services.token)",
                        &[&e.session_id, &e.app, token, &at],
                    )
                    .await?;
                }
            }
            Event::SessionCommitEnded(e) => {
                if let CommitOutcome::Done {
                    image_id,
                    size_bytes,
                    ..
                } = &e.outcome
                {
                    exec(
                        client,
                        "INSERT INTO ledger.custom_images VALUES ($1, $2, $3, $4, $5, $6, $7)
                         ON CONFLICT (image) DO UPDATE SET owner = $2, session_id = $3,
                           agent_id = $4, image_id = $5, size_bytes = $6, created_at = $7",
                        &[
                            &e.image,
                            &e.owner,
                            &e.session_id,
                            &e.agent_id,
                            image_id,
                            &i64_of(*size_bytes),
                            &at,
                        ],
                    )
                    .await?;
                }
            }
            Event::SessionResourcesReleased(e) => {
                exec(
                    client,
                    "DELETE FROM ledger.app_services WHERE session_id = $1",
                    &[&e.session_id],
                )
                .await?;
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
                self.holds = Some(false);
            }
            Event::SessionStatusChanged(e) => {
                self.status = Some((e.to.as_str().to_owned(), e.reason.clone(), at));
                if e.to == SessionStatus::Pending {
                    self.requeues += 1;
                    self.agent_id = Some(None);
                }
            }
            Event::SessionRenamed(e) => self.name = Some(e.new_name.clone()),
            _ => {}
        }
        Ok(true)
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
               version = $14
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
            ],
        )
        .await?;
        Ok(())
    }
}

/// Applies one event, the `stream_version`-th of its stream, to the ledger.
/// `traceparent` is the trace the event was recorded in (kept for a session's journey).
pub(super) async fn apply<C: GenericClient>(
    client: &C,
    event: &Event,
    stream_version: u64,
    at: DateTime<Utc>,
    traceparent: Option<&str>,
) -> Result<(), LedgerError> {
    match Family::of(event) {
        Family::Accounts => return accounts::apply_sql(client, event, at).await,
        Family::Resources => return resources::apply_sql(client, event).await,
        Family::Agents => return agents::apply_sql(client, event, at).await,
        Family::Sessions | Family::Apps | Family::Images | Family::Ignored => {}
    }
    let version = i64_of(stream_version);
    match event {
        // Admission lives in the agent's stream; the recorder folds it from there.
        Event::AgentAdmitted(_) => {}
        // The idle-reaper folds its checks itself; the ledger decides nothing on them.
        Event::IdleChecksSet(_) => {}
        // The notification service folds what was read.
        Event::NotificationsRead(_) | Event::NotificationWebhookSet(_) => {}
        Event::AppCircuitOpened(e) => {
            let admission = serde_json::to_value(&e.admission).expect("admissions serialise");
            exec(
                client,
                "INSERT INTO ledger.circuits VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &e.circuit_id,
                    &e.session_id,
                    &e.owner,
                    &e.app,
                    &name_of(&e.protocol),
                    &i32::from(e.container_port),
                    &i32::from(e.port),
                    &admission,
                    &at,
                ],
            )
            .await?;
        }
        Event::AppCircuitClosed(e) => {
            exec(
                client,
                "DELETE FROM ledger.circuits WHERE circuit_id = $1",
                &[&e.circuit_id],
            )
            .await?;
        }
        Event::CustomImageRemoved(e) => {
            exec(
                client,
                "DELETE FROM ledger.custom_images WHERE image = $1 AND owner = $2",
                &[&e.image, &e.owner],
            )
            .await?;
        }
        Event::SessionRequested(e) => {
            exec(
                client,
                "INSERT INTO ledger.sessions (session_id, owner, owner_email, name, project,
                       resource_group, session_type, status, status_since, cpu_milli,
                       memory_bytes, gpu_milli, cluster_mode, cluster_size, wanted_agent,
                       starts_at, created_at, version, traceparent)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, 'PENDING', $8, $9, $10, $11, $12, $13,
                       $14, $15, $8, $16, $17)",
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
                    &version,
                    &traceparent,
                ],
            )
            .await?;
        }
        Event::SchedulingAttempted(_)
        | Event::SessionScheduled(_)
        | Event::SessionResourcesReleased(_)
        | Event::SessionStatusChanged(_)
        | Event::SessionRenamed(_)
        | Event::SessionTerminationRequested(_)
        | Event::KernelStarted(_)
        | Event::SessionIdleExempted(_)
        | Event::SessionIdleReaped(_)
        | Event::SessionCommitRequested(_)
        | Event::SessionCommitProgressed(_)
        | Event::SessionCommitEnded(_)
        | Event::AppStartRequested(_)
        | Event::AppStartEnded(_) => {
            let mut patch = SessionPatch::default();
            patch.absorb(client, event, stream_version, at).await?;
            patch.flush(client).await?;
        }
        other => unreachable!("`{}` is routed by family", other.event_type()),
    }
    Ok(())
}

/// Runs one statement, prepared once per connection.
pub(super) async fn exec<C: GenericClient>(
    client: &C,
    sql: &'static str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.execute(&statement, params).await
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
