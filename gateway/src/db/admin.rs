//! What a superadmin lists: users, API keys (prefix and owner only), projects with their
//! members and groups, resource groups' settings and grants, resource policies, the idle
//! checks set, and every agent ever admitted with what it offers. From the ledger
//! (`ledger.users`, `ledger.api_keys`, `ledger.projects`, `ledger.project_members`,
//! `ledger.user_passwords`, `ledger.resource_groups`, `ledger.group_projects`,
//! `ledger.policies`, `ledger.agents`, `ledger.kernels`, written by `events::ledger`), the
//! recorder's `agent_liveness`, and, for what the ledger takes no notice of (admissions, idle
//! checks), the log itself (`events`, the agents' and idle streams).

use deadpool_postgres::Pool;
use events::idleness::{IdleChecks, IdleScope};

use super::resources::amounts;
use crate::error::ApiError;
use crate::model::{
    AdminGroup, AdminPolicy, AdminProject, AdminUser, AdmittedAgent, Amounts, ApiKeyListed,
    IdleSetting,
};

/// Every user, by email.
pub async fn users(pool: &Pool) -> Result<Vec<AdminUser>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT u.user_id, u.email, u.role, u.resource_policy, u.created_at,
               coalesce((SELECT array_agg(m.project ORDER BY m.project)
                         FROM ledger.project_members m WHERE m.user_id = u.user_id), '{}'),
               (SELECT count(*) FROM ledger.api_keys k WHERE k.user_id = u.user_id),
               EXISTS (SELECT 1 FROM ledger.user_passwords p WHERE p.user_id = u.user_id)
             FROM ledger.users u ORDER BY u.email",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| AdminUser {
            user_id: r.get(0),
            email: r.get(1),
            role: r.get(2),
            resource_policy: r.get(3),
            created_at: r.get(4),
            projects: r.get(5),
            api_keys: r.get(6),
            has_password: r.get(7),
        })
        .collect())
}

/// Every API key's prefix and owner, by owner's email, then prefix.
pub async fn api_keys(pool: &Pool) -> Result<Vec<ApiKeyListed>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT k.key_prefix, k.user_id, u.email
             FROM ledger.api_keys k JOIN ledger.users u USING (user_id)
             ORDER BY u.email, k.key_prefix",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ApiKeyListed {
            key_prefix: r.get(0),
            user_id: r.get(1),
            email: r.get(2),
        })
        .collect())
}

/// Every project with its members' emails and the groups granted to it, by name.
pub async fn projects(pool: &Pool) -> Result<Vec<AdminProject>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT p.name, p.description,
               coalesce((SELECT array_agg(u.email ORDER BY u.email)
                         FROM ledger.project_members m JOIN ledger.users u USING (user_id)
                         WHERE m.project = p.name), '{}'),
               coalesce((SELECT array_agg(g.resource_group ORDER BY g.resource_group)
                         FROM ledger.group_projects g WHERE g.project = p.name), '{}')
             FROM ledger.projects p ORDER BY p.name",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| AdminProject {
            name: r.get(0),
            description: r.get(1),
            members: r.get(2),
            resource_groups: r.get(3),
        })
        .collect())
}

/// Every resource group's settings and the projects granted it, by name.
pub async fn groups(pool: &Pool) -> Result<Vec<AdminGroup>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT r.name, r.queue_policy, r.agent_selection, r.max_attempts, r.skip_after,
               r.pending_timeout_secs,
               coalesce((SELECT array_agg(g.project ORDER BY g.project)
                         FROM ledger.group_projects g WHERE g.resource_group = r.name), '{}')
             FROM ledger.resource_groups r ORDER BY r.name",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| AdminGroup {
            name: r.get(0),
            queue_policy: r.get(1),
            agent_selection: r.get(2),
            max_attempts: r.get(3),
            skip_after: r.get(4),
            pending_timeout_secs: r.get(5),
            projects: r.get(6),
        })
        .collect())
}

/// Every resource policy, by name, with how many users it applies to.
pub async fn policies(pool: &Pool) -> Result<Vec<AdminPolicy>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT p.name, p.max_concurrent_sessions, p.max_cpu_milli, p.max_memory_bytes,
               p.max_gpu_milli, p.max_session_lifetime_secs, p.max_custom_images,
               (SELECT count(*) FROM ledger.users u WHERE u.resource_policy = p.name)
             FROM ledger.policies p ORDER BY p.name",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| AdminPolicy {
            name: r.get(0),
            max_concurrent_sessions: r.get(1),
            max_total: amounts(r, 2),
            max_session_lifetime_secs: r.get(5),
            max_custom_images: r.get(6),
            users: r.get(7),
        })
        .collect())
}

/// The idle checks of every group and policy, as last set, groups first, by name.
pub async fn idle_settings(pool: &Pool) -> Result<Vec<IdleSetting>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT DISTINCT ON (stream_id) payload FROM events
             WHERE event_type = 'IdleChecksSet'
             ORDER BY stream_id, stream_version DESC",
            &[],
        )
        .await?;
    let mut settings: Vec<IdleSetting> = rows
        .iter()
        .filter_map(|r| {
            #[derive(serde::Deserialize)]
            struct Set {
                scope: IdleScope,
                checks: IdleChecks,
            }
            let set: Set = serde_json::from_value(r.get(0)).ok()?;
            Some(IdleSetting {
                scope: set.scope,
                checks: set.checks,
            })
        })
        .collect();
    settings.sort_by_key(|s| match &s.scope {
        IdleScope::ResourceGroup(n) => (0, n.clone()),
        IdleScope::ResourcePolicy(n) => (1, n.clone()),
    });
    Ok(settings)
}

fn slots_amounts(v: &serde_json::Value) -> Amounts {
    let n = |f: &str| v[f].as_u64().unwrap_or(0);
    Amounts {
        cpu: n("cpu_milli") as f64 / 1000.0,
        memory_bytes: i64::try_from(n("memory_bytes")).unwrap_or(i64::MAX),
        gpu: n("gpu_milli") as f64 / 1000.0,
    }
}

/// Every agent ever admitted, by id: its last admission (group, most capacity, key), whether
/// it was revoked since, and, once it registered, what it offers, holds and has free, how
/// long it has gone unheard, its sessions and the version it registered with.
pub async fn admitted_agents(pool: &Pool) -> Result<Vec<AdmittedAgent>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "WITH admitted AS (
               SELECT DISTINCT ON (stream_id) stream_id, payload FROM events
                WHERE category = 'agent' AND event_type = 'AgentAdmitted'
                ORDER BY stream_id, stream_version DESC),
             latest AS (
               SELECT DISTINCT ON (stream_id) stream_id, event_type, payload FROM events
                WHERE category = 'agent' AND event_type IN ('AgentAdmitted', 'AgentRevoked')
                ORDER BY stream_id, stream_version DESC),
             registered AS (
               SELECT DISTINCT ON (stream_id) stream_id, payload->>'version' AS version
                 FROM events
                WHERE category = 'agent' AND event_type = 'AgentRegistered'
                ORDER BY stream_id, stream_version DESC)
             SELECT d.payload->>'agent_id', d.payload, l.event_type = 'AgentRevoked',
               l.payload->>'reason', a.agent_id IS NOT NULL,
               coalesce(a.cpu_milli, 0), coalesce(a.memory_bytes, 0), coalesce(a.gpu_milli, 0),
               coalesce(a.used_cpu_milli, 0), coalesce(a.used_memory_bytes, 0),
               coalesce(a.used_gpu_milli, 0),
               greatest(coalesce(a.cpu_milli - a.used_cpu_milli, 0), 0),
               greatest(coalesce(a.memory_bytes - a.used_memory_bytes, 0), 0),
               greatest(coalesce(a.gpu_milli - a.used_gpu_milli, 0), 0), a.lost,
               greatest(extract(epoch FROM now() - greatest(a.last_heartbeat, lv.seen_at))::float8,
                        0),
               (SELECT count(DISTINCT k.session_id) FROM ledger.kernels k
                 WHERE k.agent_id = a.agent_id),
               g.version
             FROM admitted d JOIN latest l USING (stream_id)
             LEFT JOIN ledger.agents a ON a.agent_id = d.payload->>'agent_id'
             LEFT JOIN agent_liveness lv ON lv.agent_id = a.agent_id
             LEFT JOIN registered g USING (stream_id)
             ORDER BY 1",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let admitted: serde_json::Value = r.get(1);
            let revoked: bool = r.get(2);
            let registered: bool = r.get(4);
            AdmittedAgent {
                agent_id: r.get(0),
                resource_group: admitted["resource_group"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                max_capacity: slots_amounts(&admitted["max_capacity"]),
                public_key: (!revoked)
                    .then(|| admitted["public_key"].as_str().map(str::to_owned))
                    .flatten(),
                revoked: revoked
                    .then(|| r.get::<_, Option<String>>(3))
                    .flatten()
                    .or(revoked.then(String::new)),
                capacity: registered.then(|| amounts(r, 5)),
                used: registered.then(|| amounts(r, 8)),
                free: registered.then(|| amounts(r, 11)),
                lost: r.get(14),
                heartbeat_age_secs: registered.then(|| r.get(15)),
                sessions: registered.then(|| r.get(16)),
                version: r.get(17),
            }
        })
        .collect())
}
