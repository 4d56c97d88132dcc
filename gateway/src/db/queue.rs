//! The queue: each resource group's PENDING sessions in the order the scheduler loads them
//! (`events::sql::queue_order`, the scheduler's own: priority, then arrival, newest first
//! under `lifo`; `drf` and `fair-share` turns are decided per pass, and each session's
//! history names the figures that placed it), each with why it waits (its latest
//! scheduling-history row). Order and figures from the ledger (`ledger.sessions`,
//! `ledger.resource_groups`, written by `events::ledger`); the reasons from the gateway's
//! projection (`proj_sessions.history`, written by [`crate::projection`]).

use deadpool_postgres::Pool;

use super::resources::amounts;
use crate::error::ApiError;
use crate::model::{Amounts, GroupQueue, OwnerRef, QueuedSession, WaitReason};

/// The queues of the resource groups named in `groups` that exist, by name (the order the
/// scheduler passes over them), each in the order the scheduler tries it.
pub async fn queue(pool: &Pool, groups: &[String]) -> Result<Vec<GroupQueue>, ApiError> {
    let client = pool.get().await?;
    let mut queues: Vec<GroupQueue> = client
        .query(
            "SELECT name, queue_policy FROM ledger.resource_groups
             WHERE name = ANY($1) ORDER BY name",
            &[&groups],
        )
        .await?
        .iter()
        .map(|r| GroupQueue {
            resource_group: r.get(0),
            queue_policy: r.get(1),
            sessions: Vec::new(),
        })
        .collect();
    let rows = client
        .query(
            &format!(
                "SELECT s.resource_group, s.session_id, s.name, s.owner, s.owner_email,
                   s.session_type, s.created_at, s.status_since, s.cpu_milli, s.memory_bytes,
                   s.gpu_milli, s.cluster_size, s.wanted_agent, s.starts_at, s.attempts,
                   h.phase, h.result, h.error_code, h.message, h.attempts, h.updated_at
                 FROM ledger.sessions s
                 JOIN ledger.resource_groups g ON g.name = s.resource_group
                 LEFT JOIN LATERAL (
                   SELECT phase, result, error_code, message, attempts, updated_at
                   FROM proj_sessions.history h WHERE h.session_id = s.session_id
                   ORDER BY created_at DESC, id DESC LIMIT 1) h ON true
                 WHERE s.status = 'PENDING' AND s.resource_group = ANY($1)
                 ORDER BY s.resource_group, {}",
                events::sql::queue_order("s", "g.queue_policy")
            ),
            &[&groups],
        )
        .await?;
    for r in &rows {
        let group: String = r.get(0);
        let Some(queue) = queues.iter_mut().find(|q| q.resource_group == group) else {
            continue;
        };
        let per_kernel = amounts(r, 8);
        let cluster_size: i32 = r.get(11);
        let n = f64::from(cluster_size.max(0));
        let reason = r.get::<_, Option<String>>(15).map(|phase| WaitReason {
            phase,
            result: r.get(16),
            error_code: r.get(17),
            message: r.get(18),
            attempts: r.get(19),
            updated_at: r.get(20),
        });
        queue.sessions.push(QueuedSession {
            position: queue.sessions.len() as i64 + 1,
            session_id: r.get(1),
            name: r.get(2),
            owner: OwnerRef {
                user_id: r.get(3),
                email: r.get(4),
            },
            session_type: r.get(5),
            created_at: r.get(6),
            queued_at: r.get(7),
            per_kernel,
            cluster_size,
            requested: Amounts {
                cpu: per_kernel.cpu * n,
                memory_bytes: per_kernel
                    .memory_bytes
                    .saturating_mul(i64::from(cluster_size.max(0))),
                gpu: per_kernel.gpu * n,
            },
            wanted_agent: r.get(12),
            starts_at: r.get(13),
            attempts: r.get(14),
            reason,
        });
    }
    Ok(queues)
}
