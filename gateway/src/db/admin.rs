//! What a superadmin lists: users, API keys (prefix and owner only), projects with their
//! members and groups, resource groups' settings and grants, resource policies, the idle
//! checks set, and every agent ever admitted with what it offers. From the ledger
//! (`ledger.users`, `ledger.api_keys`, `ledger.projects`, `ledger.project_members`,
//! `ledger.sessions`, `ledger.usage_intervals` (a group's shares),
//! `ledger.user_passwords`, `ledger.resource_groups`, `ledger.group_projects`,
//! `ledger.policies`, `ledger.agents`, `ledger.kernels`, written by `events::ledger`), the
//! recorder's heartbeats (`recorder.agent_liveness`), and, for what the ledger takes no notice of (admissions, idle
//! checks), the log itself (`events`, the agents' and idle streams).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use events::fair_share::{self, Factors, FairShareSettings, ResourceWeights, UsageInterval};
use events::idleness::{IdleChecks, IdleScope};
use events::payloads::{ResourceSlots, SessionPriority};
use uuid::Uuid;

use super::resources::amounts;
use crate::error::ApiError;
use crate::model::{
    AdminGroup, AdminPolicy, AdminProject, AdminUser, AdmittedAgent, Amounts, ApiKeyListed,
    GroupShares, IdleSetting, ProjectShare, RegistryListed, ShareWeights, UserShare,
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
               EXISTS (SELECT 1 FROM ledger.user_passwords p WHERE p.user_id = u.user_id),
               u.disabled
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
            disabled: r.get(8),
        })
        .collect())
}

/// Every API key's prefix and owner, by owner's email, then prefix.
pub async fn api_keys(pool: &Pool) -> Result<Vec<ApiKeyListed>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT k.key_prefix, k.user_id, u.email, k.revoked, k.expires_at
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
            revoked: r.get(3),
            expires_at: r.get(4),
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
                         FROM ledger.group_projects g WHERE g.resource_group = r.name), '{}'),
               r.half_life_secs, r.lookback_secs, r.weight_cpu_per_core,
               r.weight_memory_per_gib, r.weight_gpu_per_device, r.starve_after_secs
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
            half_life_secs: r.get(7),
            lookback_secs: r.get(8),
            weights: ShareWeights {
                cpu_per_core: r.get(9),
                memory_per_gib: r.get(10),
                gpu_per_device: r.get(11),
            },
            starve_after_secs: r.get(12),
        })
        .collect())
}

/// Where every user and project with use in the look-back, a queued session or a hold stands
/// in group `name` at `now` (`None`: no such group): what they hold now and its dominant share
/// of the capacity of the group's agents not lost, their decayed use
/// (`ledger.usage_intervals`) and fair-share factor, computed as the scheduler computes them
/// (`events::fair_share`).
pub async fn group_shares(
    pool: &Pool,
    name: &str,
    now: DateTime<Utc>,
) -> Result<Option<GroupShares>, ApiError> {
    let client = pool.get().await?;
    let Some(g) = client
        .query_opt(
            "SELECT queue_policy, half_life_secs, lookback_secs, weight_cpu_per_core,
               weight_memory_per_gib, weight_gpu_per_device, starve_after_secs,
               (SELECT coalesce(sum(cpu_milli), 0)::bigint FROM ledger.agents
                  WHERE resource_group = $1 AND lost IS NULL),
               (SELECT coalesce(sum(memory_bytes), 0)::bigint FROM ledger.agents
                  WHERE resource_group = $1 AND lost IS NULL),
               (SELECT coalesce(sum(gpu_milli), 0)::bigint FROM ledger.agents
                  WHERE resource_group = $1 AND lost IS NULL)
             FROM ledger.resource_groups WHERE name = $1",
            &[&name],
        )
        .await?
    else {
        return Ok(None);
    };
    let settings = FairShareSettings {
        half_life_secs: g.get::<_, i64>(1).max(1) as u64,
        lookback_secs: g.get::<_, i64>(2).max(0) as u64,
        weights: ResourceWeights {
            cpu_per_core: g.get(3),
            memory_per_gib: g.get(4),
            gpu_per_device: g.get(5),
        },
    };
    let slots = |r: &tokio_postgres::Row, first: usize| ResourceSlots {
        cpu_milli: r.get::<_, i64>(first).max(0) as u64,
        memory_bytes: r.get::<_, i64>(first + 1).max(0) as u64,
        gpu_milli: r.get::<_, i64>(first + 2).max(0) as u64,
    };
    let capacity = slots(&g, 7);
    let held: HashMap<Uuid, ResourceSlots> = client
        .query(
            "SELECT owner, sum(cpu_milli * cluster_size)::bigint,
               sum(memory_bytes * cluster_size)::bigint, sum(gpu_milli * cluster_size)::bigint
             FROM ledger.sessions WHERE resource_group = $1 AND holds GROUP BY owner",
            &[&name],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), slots(r, 1)))
        .collect();
    let queued: Vec<(Uuid, Option<String>, i64)> = client
        .query(
            "SELECT owner, project, count(*) FROM ledger.sessions
             WHERE resource_group = $1 AND status = 'PENDING' GROUP BY owner, project",
            &[&name],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let since = now - chrono::Duration::seconds(settings.lookback_secs as i64);
    let intervals: Vec<UsageInterval> = client
        .query(
            "SELECT owner, project, cpu_milli, memory_bytes, gpu_milli, started_at, ended_at
             FROM ledger.usage_intervals
             WHERE resource_group = $1 AND (ended_at IS NULL OR ended_at > $2)",
            &[&name, &since],
        )
        .await?
        .iter()
        .map(|r| UsageInterval {
            owner: r.get(0),
            project: r.get(1),
            resources: slots(r, 2),
            started_at: r.get(5),
            ended_at: r.get(6),
        })
        .collect();
    let usage = fair_share::usage(&intervals, now, &settings);
    let factors = Factors::new(&usage, queued.iter().map(|(o, p, _)| (*o, p.as_deref())));
    let mut owners: Vec<Uuid> = factors.by_owner.keys().copied().collect();
    owners.extend(held.keys().copied());
    owners.sort_unstable();
    owners.dedup();
    let known: HashMap<Uuid, (String, Option<i32>)> = client
        .query(
            "SELECT u.user_id, u.email, p.max_session_priority FROM ledger.users u
             LEFT JOIN ledger.policies p ON p.name = u.resource_policy
             WHERE u.user_id = ANY($1)",
            &[&owners],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let amounts_of = Amounts::of;
    let mut users: Vec<UserShare> = owners
        .iter()
        .map(|owner| {
            let holds = held.get(owner).copied().unwrap_or_default();
            let share = fair_share::dominant_share(holds, capacity);
            let (email, most) = known
                .get(owner)
                .map(|(e, m)| (Some(e.clone()), *m))
                .unwrap_or((None, None));
            UserShare {
                user_id: *owner,
                email,
                queued: queued
                    .iter()
                    .filter(|(o, _, _)| o == owner)
                    .map(|(_, _, n)| n)
                    .sum(),
                held: amounts_of(holds),
                dominant_share: share.share,
                dominant: share.dominant,
                decayed_usage: usage.by_owner.get(owner).copied().unwrap_or(0.0),
                fair_share_factor: factors.owner(*owner),
                max_session_priority: most
                    .unwrap_or(SessionPriority::MAX)
                    .min(SessionPriority::MAX),
            }
        })
        .collect();
    users.sort_by(|a, b| a.email.cmp(&b.email).then(a.user_id.cmp(&b.user_id)));
    let mut projects: Vec<ProjectShare> = factors
        .by_project
        .iter()
        .map(|(project, factor)| ProjectShare {
            project: project.clone(),
            decayed_usage: usage.by_project.get(project).copied().unwrap_or(0.0),
            fair_share_factor: *factor,
        })
        .collect();
    projects.sort_by(|a, b| a.project.cmp(&b.project));
    Ok(Some(GroupShares {
        resource_group: name.to_owned(),
        queue_policy: g.get(0),
        half_life_secs: settings.half_life_secs as i64,
        lookback_secs: settings.lookback_secs as i64,
        weights: ShareWeights {
            cpu_per_core: settings.weights.cpu_per_core,
            memory_per_gib: settings.weights.memory_per_gib,
            gpu_per_device: settings.weights.gpu_per_device,
        },
        starve_after_secs: g.get(6),
        capacity: amounts_of(capacity),
        computed_at: now,
        users,
        projects,
    }))
}

/// Every resource policy, by name, with how many users it applies to.
pub async fn policies(pool: &Pool) -> Result<Vec<AdminPolicy>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT p.name, p.max_concurrent_sessions, p.max_cpu_milli, p.max_memory_bytes,
               p.max_gpu_milli, p.max_session_lifetime_secs, p.max_custom_images,
               (SELECT count(*) FROM ledger.users u WHERE u.resource_policy = p.name),
               p.max_session_priority, p.max_pids, p.max_log_bytes, p.max_folder_bytes
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
            max_session_priority: r.get(8),
            max_pids: r.get(9),
            max_log_bytes: r.get(10),
            max_folder_bytes: r.get(11),
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
             LEFT JOIN recorder.agent_liveness lv ON lv.agent_id = a.agent_id
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

/// Every registry an admin stored a credential for, by name: its user, never its password.
pub async fn registries(pool: &Pool) -> Result<Vec<RegistryListed>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT registry, username, set_at FROM ledger.registries ORDER BY registry",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| RegistryListed {
            registry: r.get(0),
            username: r.get(1),
            set_at: r.get(2),
        })
        .collect())
}
