//! Resources: whether a resource group exists, which groups are open to a caller and what
//! each holds, a user's limits and usage and the group's total, and the presets. Groups,
//! policies and presets come from the ledger (`ledger.resource_groups`,
//! `ledger.group_projects`, `ledger.project_members`, `ledger.policies`, `ledger.presets`,
//! written by `events::ledger`); the summary's usage and capacity from the gateway's own
//! projection (`proj_sessions.sessions`, `proj_sessions.agents`, written by
//! [`crate::projection`]); the open groups' capacity from the ledger's agents
//! (`ledger.agents`), the figures the launcher and the scheduler decide on.

use deadpool_postgres::Pool;
use events::ledger::KeyOwner;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::{
    Amounts, GroupResources, Limits, MyUsage, Preset, ResourceGroup, ResourceSummary,
};

/// Three columns from `first` (milli-cores, bytes, milli-GPUs) as [`Amounts`].
pub(super) fn amounts(r: &Row, first: usize) -> Amounts {
    Amounts {
        cpu: r.get::<_, i64>(first) as f64 / 1000.0,
        memory_bytes: r.get(first + 1),
        gpu: r.get::<_, i64>(first + 2) as f64 / 1000.0,
    }
}

/// Whether a resource group named `name` exists.
pub async fn group_exists(pool: &Pool, name: &str) -> Result<bool, ApiError> {
    let client = pool.get().await?;
    Ok(client
        .query_opt(
            "SELECT 1 FROM ledger.resource_groups WHERE name = $1",
            &[&name],
        )
        .await?
        .is_some())
}

/// The resource groups open to `caller`, by name: every group for a superadmin, else those
/// granted to a project they are a member of (the launcher's own rule,
/// `launcher::db::open_groups`).
pub async fn open_groups(pool: &Pool, caller: &KeyOwner) -> Result<Vec<String>, ApiError> {
    let client = pool.get().await?;
    Ok(launcher::db::open_groups(&client, caller).await?)
}

/// The resource groups named in `groups` that exist, by name, each with its scheduling
/// settings and what its live agents (not lost) hold in all, have used and have free.
pub async fn resource_groups(
    pool: &Pool,
    groups: &[String],
) -> Result<Vec<ResourceGroup>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT r.name, r.queue_policy, r.agent_selection, count(a.agent_id)::int,
               coalesce(sum(a.cpu_milli), 0)::bigint, coalesce(sum(a.memory_bytes), 0)::bigint,
               coalesce(sum(a.gpu_milli), 0)::bigint,
               coalesce(sum(a.used_cpu_milli), 0)::bigint,
               coalesce(sum(a.used_memory_bytes), 0)::bigint,
               coalesce(sum(a.used_gpu_milli), 0)::bigint,
               coalesce(sum(a.cpu_milli - a.used_cpu_milli), 0)::bigint,
               coalesce(sum(a.memory_bytes - a.used_memory_bytes), 0)::bigint,
               coalesce(sum(a.gpu_milli - a.used_gpu_milli), 0)::bigint
             FROM ledger.resource_groups r
               LEFT JOIN ledger.agents a ON a.resource_group = r.name AND a.lost IS NULL
             WHERE r.name = ANY($1) GROUP BY r.name ORDER BY r.name",
            &[&groups],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ResourceGroup {
            name: r.get(0),
            queue_policy: r.get(1),
            agent_selection: r.get(2),
            agents: r.get(3),
            capacity: amounts(r, 4),
            used: amounts(r, 7),
            free: amounts(r, 10),
        })
        .collect())
}

/// The resource summary of the seeds: the caller's limits (from `policy`), the caller's
/// usage in `group`, and the group's total, used and free resources.
pub async fn resource_summary(
    pool: &Pool,
    user: Uuid,
    policy: &str,
    group: &str,
) -> Result<ResourceSummary, ApiError> {
    let client = pool.get().await?;
    let limits = client
        .query_one(
            "SELECT max_concurrent_sessions, max_cpu_milli, max_memory_bytes, max_gpu_milli,
                    max_session_lifetime_secs, name FROM ledger.policies WHERE name = $1",
            &[&policy],
        )
        .await?;
    let mine = client
        .query_one(
            &format!(
                "SELECT count(*)::int,
                   coalesce(sum((resources->>'cpu_milli')::bigint * cluster_size), 0)::bigint,
                   coalesce(sum((resources->>'memory_bytes')::bigint * cluster_size), 0)::bigint,
                   coalesce(sum((resources->>'gpu_milli')::bigint * cluster_size), 0)::bigint
                 FROM proj_sessions.sessions WHERE owner = $1 AND resource_group = $2 AND {}",
                events::sql::holds_resources("status")
            ),
            &[&user, &group],
        )
        .await?;
    let total = client
        .query_one(
            "SELECT count(*)::int, coalesce(sum(cpu_milli), 0)::bigint,
               coalesce(sum(memory_bytes), 0)::bigint, coalesce(sum(gpu_milli), 0)::bigint,
               coalesce(sum(used_cpu_milli), 0)::bigint, coalesce(sum(used_memory_bytes), 0)::bigint,
               coalesce(sum(used_gpu_milli), 0)::bigint,
               coalesce(sum(cpu_milli - used_cpu_milli), 0)::bigint,
               coalesce(sum(memory_bytes - used_memory_bytes), 0)::bigint,
               coalesce(sum(gpu_milli - used_gpu_milli), 0)::bigint
             FROM proj_sessions.agents WHERE resource_group = $1 AND lost IS NULL",
            &[&group],
        )
        .await?;
    Ok(ResourceSummary {
        resource_group: group.to_owned(),
        my_limits: Limits {
            resource_policy: limits.get(5),
            max_concurrent_sessions: limits.get(0),
            max_total: amounts(&limits, 1),
            max_session_lifetime_secs: limits.get(4),
        },
        my_usage: MyUsage {
            sessions: mine.get(0),
            resources: amounts(&mine, 1),
        },
        group: GroupResources {
            agents: total.get(0),
            total: amounts(&total, 1),
            used: amounts(&total, 4),
            free: amounts(&total, 7),
        },
    })
}

/// Every preset, by name.
pub async fn presets(pool: &Pool) -> Result<Vec<Preset>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT name, cpu_milli, memory_bytes, gpu_milli, shared_memory_bytes
             FROM ledger.presets ORDER BY name",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Preset {
            name: r.get(0),
            resources: amounts(r, 1),
            shared_memory_bytes: r.get(4),
        })
        .collect())
}
