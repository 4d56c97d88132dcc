//! The gateway's read models, one projection (`proj_sessions`): the session list and detail,
//! the scheduling history (a row for every phase, in the order recorded; repeats of the same
//! outcome merged into one row whose attempts and updated time grow, as Backend.AI shows it)
//! and agent occupancy. Folded only from
//! events and their recorded times, so a rebuild equals the live tables.

use deadpool_postgres::Transaction;
use events::catalogue::Event;
use events::payloads::*;
use events::projection::Projection;
use events::RecordedEvent;
use serde_json::json;

mod rows;

pub use rows::SessionsRows;

pub struct SessionsView;

fn text<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// What a session asked for beyond its resources, as the detail shows it.
fn request_of(r: &SessionRequested) -> serde_json::Value {
    json!({
        "environment": r.environment,
        "preopen_ports": r.preopen_ports,
        "mounts": r.mounts,
        "startup_command": r.startup_command,
        "starts_at": r.starts_at,
        "batch_timeout_secs": r.batch_timeout_secs,
        "omp_num_threads": r.omp_num_threads,
        "max_lifetime_secs": r.max_lifetime_secs,
        "wanted_agent": r.agent_id,
        "apps": domain::apps::session_apps(&r.apps, &r.preopen_ports,
            r.session_type.is_attended()),
    })
}

/// A started kernel's container, as the detail lists it.
fn container_of(e: &KernelStarted) -> serde_json::Value {
    json!({"kernel": e.kernel, "agent_id": e.agent_id, "container_id": e.container_id,
        "hostname": e.hostname, "ports": e.ports, "address": e.address})
}

/// Adds (`sign` 1) or takes away (-1) kernels' shares on the agents' occupancy.
async fn occupy(
    tx: &Transaction<'_>,
    schema: &str,
    kernels: &[KernelPlacement],
    sign: i64,
) -> Result<(), tokio_postgres::Error> {
    let sql = format!(
        "UPDATE {schema}.agents SET used_cpu_milli = used_cpu_milli + $2,
           used_memory_bytes = used_memory_bytes + $3, used_gpu_milli = used_gpu_milli + $4
         WHERE agent_id = $1"
    );
    for k in kernels {
        tx.execute(
            &sql,
            &[
                &k.agent_id,
                &(sign * i64_of(k.resources.cpu_milli)),
                &(sign * i64_of(k.resources.memory_bytes)),
                &(sign * i64_of(k.resources.gpu_milli)),
            ],
        )
        .await?;
    }
    Ok(())
}

impl Projection for SessionsView {
    type Rows = SessionsRows;

    fn name(&self) -> &'static str {
        "sessions"
    }

    fn tables(&self) -> &'static [&'static str] {
        &["sessions", "history", "agents"]
    }

    fn create_tables(&self, schema: &str) -> String {
        format!(
            "CREATE TABLE {schema}.sessions (
                session_id uuid PRIMARY KEY,
                name text NOT NULL,
                owner uuid NOT NULL,
                owner_email text NOT NULL,
                requested_by uuid,
                project text,
                session_type text NOT NULL,
                status text NOT NULL,
                status_reason text,
                image text NOT NULL,
                resource_group text NOT NULL,
                agent_id text,
                resources jsonb NOT NULL,
                shared_memory_bytes bigint NOT NULL,
                cluster_mode text NOT NULL,
                cluster_size integer NOT NULL,
                kernels jsonb NOT NULL DEFAULT '[]',
                containers jsonb NOT NULL DEFAULT '[]',
                request jsonb NOT NULL,
                created_at timestamptz NOT NULL,
                status_changed_at timestamptz NOT NULL,
                scheduled_at timestamptz,
                started_at timestamptz,
                ended_at timestamptz,
                exit_code integer,
                attempts integer NOT NULL DEFAULT 0,
                priority integer NOT NULL,
                termination_requested boolean NOT NULL DEFAULT false,
                version bigint NOT NULL);
             CREATE INDEX ON {schema}.sessions (owner, created_at);
             CREATE INDEX ON {schema}.sessions (created_at);
             CREATE TABLE {schema}.history (
                id uuid PRIMARY KEY,
                session_id uuid NOT NULL,
                phase text NOT NULL,
                result text NOT NULL,
                from_status text NOT NULL,
                to_status text NOT NULL,
                attempts integer NOT NULL,
                message text NOT NULL,
                error_code text,
                steps jsonb NOT NULL,
                created_at timestamptz NOT NULL,
                updated_at timestamptz NOT NULL);
             CREATE INDEX ON {schema}.history (session_id, created_at);
             CREATE TABLE {schema}.agents (
                agent_id text PRIMARY KEY,
                resource_group text NOT NULL,
                cpu_milli bigint NOT NULL,
                memory_bytes bigint NOT NULL,
                gpu_milli bigint NOT NULL,
                used_cpu_milli bigint NOT NULL DEFAULT 0,
                used_memory_bytes bigint NOT NULL DEFAULT 0,
                used_gpu_milli bigint NOT NULL DEFAULT 0,
                lost text,
                last_heartbeat timestamptz NOT NULL);
             CREATE INDEX ON {schema}.agents (resource_group);"
        )
    }

    async fn apply<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        schema: &'a str,
        recorded: &'a RecordedEvent,
    ) -> Result<(), tokio_postgres::Error> {
        let at = recorded.recorded_at;
        let version = recorded.stream_version as i64;
        match &recorded.event {
            Event::SessionRequested(r) => {
                let request = request_of(r);
                let sql = format!(
                    "INSERT INTO {schema}.sessions (session_id, name, owner, owner_email,
                       requested_by, project, session_type, status, image, resource_group,
                       resources, shared_memory_bytes, cluster_mode, cluster_size, request,
                       created_at, status_changed_at, version, priority)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, 'PENDING', $8, $9, $10, $11, $12, $13,
                       $14, $15, $15, $16, $17) ON CONFLICT DO NOTHING"
                );
                let inserted = tx
                    .execute(
                        &sql,
                        &[
                            &r.session_id,
                            &r.name,
                            &r.owner.user_id,
                            &r.owner.email,
                            &r.requested_by,
                            &r.owner.project,
                            &text(&r.session_type),
                            &r.image,
                            &r.resource_group,
                            &serde_json::to_value(r.resources).unwrap_or_default(),
                            &i64_of(r.shared_memory_bytes),
                            &text(&r.cluster_mode),
                            &(r.cluster_size as i32),
                            &request,
                            &at,
                            &version,
                            &r.priority,
                        ],
                    )
                    .await?;
                if inserted > 0 {
                    ::metrics::counter!(crate::metrics::SESSIONS_CREATED, "type" => text(&r.session_type))
                        .increment(1);
                }
            }
            Event::SchedulingAttempted(e) => {
                let latest = format!(
                    "SELECT id, phase, result, from_status, to_status, error_code
                     FROM {schema}.history WHERE session_id = $1
                     ORDER BY created_at DESC, id DESC LIMIT 1"
                );
                let same = tx
                    .query_opt(&latest, &[&e.session_id])
                    .await?
                    .filter(|row| {
                        row.get::<_, &str>(1) == e.phase
                            && row.get::<_, &str>(2) == text(&e.result)
                            && row.get::<_, &str>(3) == text(&e.status_before)
                            && row.get::<_, &str>(4) == text(&e.status_after)
                            && row.get::<_, Option<&str>>(5) == e.error_code.as_deref()
                    });
                let steps = serde_json::to_value(&e.steps).unwrap_or_default();
                match same {
                    Some(row) => {
                        let sql = format!(
                            "UPDATE {schema}.history SET attempts = $2, message = $3, steps = $4,
                               updated_at = $5 WHERE id = $1"
                        );
                        let id: uuid::Uuid = row.get(0);
                        tx.execute(&sql, &[&id, &(e.attempts as i32), &e.message, &steps, &at])
                            .await?;
                    }
                    None => {
                        let sql = format!(
                            "INSERT INTO {schema}.history VALUES
                               ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)"
                        );
                        tx.execute(
                            &sql,
                            &[
                                &recorded.event_id,
                                &e.session_id,
                                &e.phase,
                                &text(&e.result),
                                &text(&e.status_before),
                                &text(&e.status_after),
                                &(e.attempts as i32),
                                &e.message,
                                &e.error_code,
                                &steps,
                                &at,
                            ],
                        )
                        .await?;
                    }
                }
                let sql = format!(
                    "UPDATE {schema}.sessions SET attempts = $2, version = $3 WHERE session_id = $1"
                );
                tx.execute(&sql, &[&e.session_id, &(e.attempts as i32), &version])
                    .await?;
            }
            Event::SessionScheduled(e) => {
                let kernels = e.placements();
                occupy(tx, schema, &kernels, 1).await?;
                let sql = format!(
                    "UPDATE {schema}.sessions SET agent_id = $2, kernels = $3, scheduled_at = $4,
                       version = $5 WHERE session_id = $1
                     RETURNING session_type, extract(epoch FROM $4 - created_at)::float8"
                );
                let placed = tx
                    .query_opt(
                        &sql,
                        &[
                            &e.session_id,
                            &e.agent_id,
                            &serde_json::to_value(&kernels).unwrap_or_default(),
                            &at,
                            &version,
                        ],
                    )
                    .await?;
                if let Some(row) = placed {
                    let session_type: String = row.get(0);
                    ::metrics::histogram!(crate::metrics::CREATE_TO_PLACED, "type" => session_type)
                        .record(row.get::<_, f64>(1));
                }
            }
            Event::SessionResourcesReleased(e) => {
                let kernels = e.placements();
                occupy(tx, schema, &kernels, -1).await?;
                let sql =
                    format!("UPDATE {schema}.sessions SET version = $2 WHERE session_id = $1");
                tx.execute(&sql, &[&e.session_id, &version]).await?;
            }
            Event::SessionStatusChanged(e) => {
                let ended = events::lifecycle::is_terminal(e.to);
                // Started and ended at the container's times where the agent reported them
                // ($8), else at the event's.
                let sql = format!(
                    "UPDATE {schema}.sessions SET status = $2, status_reason = $3,
                       status_changed_at = $4, version = $5,
                       started_at = CASE WHEN $2 = 'RUNNING' THEN coalesce(started_at, $8, $4)
                                         ELSE started_at END,
                       ended_at = CASE WHEN $6 THEN coalesce($8, $4) ELSE ended_at END,
                       exit_code = coalesce($7, exit_code),
                       agent_id = CASE WHEN $2 = 'PENDING' THEN NULL ELSE agent_id END
                     FROM (SELECT started_at AS started_before, ended_at AS ended_before
                           FROM {schema}.sessions WHERE session_id = $1) before
                     WHERE session_id = $1
                     RETURNING session_type, before.started_before IS NULL AND started_at IS NOT NULL,
                       extract(epoch FROM started_at - created_at)::float8,
                       before.ended_before IS NULL AND ended_at IS NOT NULL"
                );
                let changed = tx
                    .query_opt(
                        &sql,
                        &[
                            &e.session_id,
                            &text(&e.to),
                            &e.reason,
                            &at,
                            &version,
                            &ended,
                            &e.exit_code,
                            &e.occurred_at,
                        ],
                    )
                    .await?;
                // Measured once per session: its first RUNNING, and its end.
                if let Some(row) = changed {
                    let session_type: String = row.get(0);
                    if row.get::<_, bool>(1) {
                        let seconds: Option<f64> = row.get(2);
                        ::metrics::histogram!(crate::metrics::CREATE_TO_RUNNING, "type" => session_type.clone())
                            .record(seconds.unwrap_or_default());
                    }
                    if row.get::<_, bool>(3) {
                        ::metrics::counter!(crate::metrics::SESSIONS_ENDED, "type" => session_type, "status" => text(&e.to))
                            .increment(1);
                    }
                }
            }
            Event::SessionPriorityChanged(e) => {
                let sql = format!(
                    "UPDATE {schema}.sessions SET priority = $2, version = $3 WHERE session_id = $1"
                );
                tx.execute(&sql, &[&e.session_id, &e.to, &version]).await?;
            }
            Event::SessionRenamed(e) => {
                let sql = format!(
                    "UPDATE {schema}.sessions SET name = $2, version = $3 WHERE session_id = $1"
                );
                tx.execute(&sql, &[&e.session_id, &e.new_name, &version])
                    .await?;
            }
            Event::SessionTerminationRequested(e) => {
                let sql = format!(
                    "UPDATE {schema}.sessions SET termination_requested = true, version = $2
                     WHERE session_id = $1"
                );
                tx.execute(&sql, &[&e.session_id, &version]).await?;
            }
            Event::KernelStarted(e) => {
                let container = container_of(e);
                let sql = format!(
                    "UPDATE {schema}.sessions SET containers = containers || $2::jsonb,
                       version = $3 WHERE session_id = $1"
                );
                tx.execute(&sql, &[&e.session_id, &json!([container]), &version])
                    .await?;
            }
            Event::AgentRegistered(e) => {
                let sql = format!(
                    "INSERT INTO {schema}.agents (agent_id, resource_group, cpu_milli,
                       memory_bytes, gpu_milli, last_heartbeat) VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (agent_id) DO UPDATE SET resource_group = $2, cpu_milli = $3,
                       memory_bytes = $4, gpu_milli = $5, last_heartbeat = $6, lost = NULL"
                );
                tx.execute(
                    &sql,
                    &[
                        &e.agent_id,
                        &e.resource_group,
                        &i64_of(e.capacity.cpu_milli),
                        &i64_of(e.capacity.memory_bytes),
                        &i64_of(e.capacity.gpu_milli),
                        &at,
                    ],
                )
                .await?;
            }
            Event::AgentHeartbeated(e) => {
                let sql = format!(
                    "UPDATE {schema}.agents SET last_heartbeat = greatest(last_heartbeat, $2)
                     WHERE agent_id = $1"
                );
                tx.execute(&sql, &[&e.agent_id, &e.at]).await?;
            }
            Event::AgentLost(e) => {
                let sql = format!("UPDATE {schema}.agents SET lost = $2 WHERE agent_id = $1");
                tx.execute(&sql, &[&e.agent_id, &e.reason]).await?;
            }
            Event::AgentDeparted(e) => {
                let sql = format!("UPDATE {schema}.agents SET lost = $2 WHERE agent_id = $1");
                tx.execute(&sql, &[&e.agent_id, &e.lost()]).await?;
            }
            Event::AgentReturned(e) => {
                let sql = format!("UPDATE {schema}.agents SET lost = NULL WHERE agent_id = $1");
                tx.execute(&sql, &[&e.agent_id]).await?;
            }
            Event::AgentRevoked(e) => {
                let sql = format!("UPDATE {schema}.agents SET lost = $2 WHERE agent_id = $1");
                tx.execute(&sql, &[&e.agent_id, &format!("revoked: {}", e.reason)])
                    .await?;
            }
            _ => {}
        }
        Ok(())
    }
}
