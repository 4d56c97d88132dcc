//! Agents: each agent of some resource groups, what it offers, holds and has free, and for
//! superadmins how long it has gone unheard and how many sessions it holds. From the ledger
//! (`ledger.agents`, `ledger.kernels`, written by `events::ledger`: the figures the launcher
//! and the scheduler decide on) and `recorder.agent_liveness` (heartbeats, kept
//! outside the log).

use deadpool_postgres::Pool;

use super::resources::amounts;
use crate::error::ApiError;
use crate::model::Agent;

/// Who is asking, for what [`agents`] tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Live agents only, without their liveness or sessions: what a user picks one from.
    User,
    /// Every agent, lost ones too, with how long each has gone unheard and its sessions.
    Superadmin,
}

/// The agents of `groups`, by group and id, as `audience` may see them.
pub async fn agents(
    pool: &Pool,
    groups: &[String],
    audience: Audience,
) -> Result<Vec<Agent>, ApiError> {
    let everyone = audience == Audience::Superadmin;
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT a.agent_id, a.resource_group, a.cpu_milli, a.memory_bytes, a.gpu_milli,
               a.used_cpu_milli, a.used_memory_bytes, a.used_gpu_milli,
               greatest(a.cpu_milli - a.used_cpu_milli, 0),
               greatest(a.memory_bytes - a.used_memory_bytes, 0),
               greatest(a.gpu_milli - a.used_gpu_milli, 0), a.lost,
               greatest(extract(epoch FROM now() - greatest(a.last_heartbeat, l.seen_at))::float8,
                        0),
               (SELECT count(DISTINCT k.session_id) FROM ledger.kernels k
                 WHERE k.agent_id = a.agent_id)
             FROM ledger.agents a LEFT JOIN recorder.agent_liveness l USING (agent_id)
             WHERE a.resource_group = ANY($1) AND ($2 OR a.lost IS NULL)
             ORDER BY a.resource_group, a.agent_id",
            &[&groups, &everyone],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Agent {
            agent_id: r.get(0),
            resource_group: r.get(1),
            capacity: amounts(r, 2),
            used: amounts(r, 5),
            free: amounts(r, 8),
            lost: r.get(11),
            heartbeat_age_secs: everyone.then(|| r.get(12)),
            sessions: everyone.then(|| r.get(13)),
        })
        .collect())
}
