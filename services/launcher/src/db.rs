//! The launcher's reads of the ledger, as typed functions: the only place in this crate that
//! writes SQL (the workspace's tidy test checks it). Writes go through `events::ledger`.

use deadpool_postgres::{GenericClient, Pool};
use events::ledger::{KeyOwner, LedgerError};
use events::payloads::{ResourceSlots, Role};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::decide::{self, GroupAgent, LaunchContext, PolicyLimits, PresetSlots};
use crate::launch::CreateSession;

fn slots_of(row: &Row, first: usize) -> ResourceSlots {
    let get = |i: usize| row.get::<_, i64>(first + i).max(0) as u64;
    ResourceSlots {
        cpu_milli: get(0),
        memory_bytes: get(1),
        gpu_milli: get(2),
    }
}

/// The user with `email`, if any.
pub async fn user_by_email(
    client: &impl GenericClient,
    email: &str,
) -> Result<Option<KeyOwner>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT user_id, role, resource_policy FROM ledger.users WHERE email = $1",
            &[&email],
        )
        .await?;
    Ok(row.map(|row| KeyOwner {
        user_id: row.get(0),
        email: email.to_owned(),
        role: Role::parse(row.get(1)).unwrap_or(Role::User),
        resource_policy: row.get(2),
    }))
}

/// `owner`'s folder `name`: where it stands and its volume; `None` when they have none so
/// named.
pub async fn folder_standing(
    client: &impl GenericClient,
    owner: Uuid,
    name: &str,
) -> Result<Option<(::domain::folders::Standing, String)>, LedgerError> {
    use ::domain::folders::Standing;
    Ok(client
        .query_opt(
            "SELECT trashed_at IS NOT NULL, coalesce(volume, $3)
             FROM ledger.folders WHERE owner = $1 AND name = $2",
            &[&owner, &name, &::domain::volumes::HOST_LOCAL],
        )
        .await?
        .map(|row| {
            let standing = if row.get(0) {
                Standing::Trashed
            } else {
                Standing::Live
            };
            (standing, row.get(1))
        }))
}

/// Whether the user `user_id` is disabled; `None` when there is no such user.
pub async fn user_disabled(
    client: &impl GenericClient,
    user_id: Uuid,
) -> Result<Option<bool>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT disabled FROM ledger.users WHERE user_id = $1",
            &[&user_id],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// The open circuits of `owner`'s sessions: (circuit, session, proxy port).
pub async fn circuits_of(
    client: &impl GenericClient,
    owner: Uuid,
) -> Result<Vec<(Uuid, Uuid, u16)>, LedgerError> {
    let rows = client
        .query(
            "SELECT circuit_id, session_id, port FROM ledger.circuits WHERE owner = $1",
            &[&owner],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get::<_, i32>(2) as u16))
        .collect())
}

/// Tables of named things an admin command may refer to.
#[derive(Debug, Clone, Copy)]
pub enum Named {
    Policy,
    Project,
    ResourceGroup,
    Preset,
}

impl Named {
    fn table(self) -> &'static str {
        match self {
            Named::Policy => "ledger.policies",
            Named::Project => "ledger.projects",
            Named::ResourceGroup => "ledger.resource_groups",
            Named::Preset => "ledger.presets",
        }
    }
}

/// Whether a `what` named `name` exists.
pub async fn exists(
    client: &impl GenericClient,
    what: Named,
    name: &str,
) -> Result<bool, LedgerError> {
    let sql = format!("SELECT 1 FROM {} WHERE name = $1", what.table());
    Ok(client.query_opt(&sql, &[&name]).await?.is_some())
}

/// The resource groups open to `who`, by name: every group for a superadmin, else those
/// granted to a project `who` is a member of. It is the rule a launch is held to
/// ([`load_context`]'s `group_open_to_owner`, which [`decide::decide`] waives for a
/// superadmin), as a list to choose from.
pub async fn open_groups(
    client: &impl GenericClient,
    who: &KeyOwner,
) -> Result<Vec<String>, LedgerError> {
    let rows = if who.role == Role::Superadmin {
        client
            .query("SELECT name FROM ledger.resource_groups ORDER BY name", &[])
            .await?
    } else {
        client
            .query(
                "SELECT DISTINCT g.resource_group FROM ledger.group_projects g
                   JOIN ledger.project_members m USING (project)
                   JOIN ledger.resource_groups r ON r.name = g.resource_group
                 WHERE m.user_id = $1 ORDER BY 1",
                &[&who.user_id],
            )
            .await?
    };
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Takes the lock that serialises a fresh install's bootstrap (until the transaction ends)
/// and says whether any user exists.
pub async fn lock_bootstrap(client: &impl GenericClient) -> Result<bool, LedgerError> {
    client
        .execute("SELECT pg_advisory_xact_lock(7070707070)", &[])
        .await?;
    Ok(client
        .query_opt("SELECT 1 FROM ledger.users LIMIT 1", &[])
        .await?
        .is_some())
}

/// What choosing a launch's defaults weighs (`domain::defaults`).
#[derive(Debug, Clone, Default)]
pub struct DefaultsFacts {
    /// Whether the group exists.
    pub group_exists: bool,
    /// The operator's, for the group.
    pub set_image: Option<String>,
    pub set_preset: Option<String>,
    /// Sessions of the group by image.
    pub used: Vec<(String, u64)>,
    /// What its live agents offer.
    pub offered: std::collections::BTreeSet<String>,
    pub presets: Vec<(String, ResourceSlots)>,
    /// The most the owner (by email) may hold; `None` when no user has that email.
    pub policy: Option<ResourceSlots>,
    /// Its live agents' capacity.
    pub agents: Vec<ResourceSlots>,
}

/// Reads [`DefaultsFacts`] for a launch by the user with `email` in `group`.
pub async fn defaults_facts(
    pool: &Pool,
    email: &str,
    group: &str,
) -> Result<DefaultsFacts, LedgerError> {
    let client = pool.get().await?;
    let mut facts = DefaultsFacts::default();
    if let Some(row) = client
        .query_opt(
            "SELECT default_image, default_preset FROM ledger.resource_groups WHERE name = $1",
            &[&group],
        )
        .await?
    {
        facts.group_exists = true;
        facts.set_image = row.get(0);
        facts.set_preset = row.get(1);
    }
    facts.used = client
        .query(
            "SELECT image, count(*) FROM ledger.sessions
             WHERE resource_group = $1 AND image <> '' GROUP BY image",
            &[&group],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get::<_, i64>(1).max(0) as u64))
        .collect();
    let agents = client
        .query(
            "SELECT cpu_milli, memory_bytes, gpu_milli, images
             FROM ledger.agents WHERE resource_group = $1 AND lost IS NULL",
            &[&group],
        )
        .await?;
    for row in &agents {
        facts.agents.push(slots_of(row, 0));
        facts.offered.extend(row.get::<_, Vec<String>>(3));
    }
    facts.presets = client
        .query(
            "SELECT name, cpu_milli, memory_bytes, gpu_milli FROM ledger.presets",
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), slots_of(r, 1)))
        .collect();
    if let Some(row) = client
        .query_opt(
            "SELECT p.max_cpu_milli, p.max_memory_bytes, p.max_gpu_milli
             FROM ledger.users u JOIN ledger.policies p ON p.name = u.resource_policy
             WHERE u.email = $1",
            &[&email],
        )
        .await?
    {
        facts.policy = Some(slots_of(&row, 0));
    }
    Ok(facts)
}

/// Reads every fact the launch decision needs ([`LaunchContext`]) on one connection.
pub async fn load_context(
    pool: &Pool,
    actor: &KeyOwner,
    request: &CreateSession,
) -> Result<LaunchContext, LedgerError> {
    let client = pool.get().await?;
    let owner = match &request.owner_email {
        Some(email) if *email != actor.email => user_by_email(&client, email).await?,
        _ => Some(actor.clone()),
    };
    let who = owner.as_ref().unwrap_or(actor);
    let group = decide::group_of(request);

    let group_exists = exists(&client, Named::ResourceGroup, &group).await?;
    let project_member = match &request.project {
        Some(project) => client
            .query_opt(
                "SELECT 1 FROM ledger.project_members WHERE project = $1 AND user_id = $2",
                &[project, &who.user_id],
            )
            .await?
            .is_some(),
        None => true,
    };
    let group_open_to_owner = client
        .query_opt(
            "SELECT 1 FROM ledger.group_projects g JOIN ledger.project_members m USING (project)
             WHERE g.resource_group = $1 AND m.user_id = $2 AND ($3::text IS NULL OR m.project = $3)",
            &[&group, &who.user_id, &request.project],
        )
        .await?
        .is_some();
    let preset = match &request.preset {
        Some(name) => client
            .query_opt(
                "SELECT cpu_milli, memory_bytes, gpu_milli, shared_memory_bytes
                 FROM ledger.presets WHERE name = $1",
                &[name],
            )
            .await?
            .map(|row| PresetSlots {
                resources: slots_of(&row, 0),
                shared_memory_bytes: row.get::<_, i64>(3).max(0) as u64,
            }),
        None => None,
    };
    let policy = client
        .query_opt(
            "SELECT max_cpu_milli, max_memory_bytes, max_gpu_milli, max_session_lifetime_secs,
                    max_session_priority, max_pids, max_log_bytes
             FROM ledger.policies WHERE name = $1",
            &[&who.resource_policy],
        )
        .await?
        .map(|row| PolicyLimits {
            max_total: slots_of(&row, 0),
            max_lifetime_secs: row.get::<_, Option<i64>>(3).map(|v| v.max(0) as u64),
            max_session_priority: row.get::<_, Option<i32>>(4).map(|v| v.max(0) as u32),
            max_pids: row.get::<_, Option<i32>>(5).map(|v| v.max(0) as u32),
            max_log_bytes: row.get::<_, Option<i64>>(6).map(|v| v.max(0) as u64),
        });
    let agents = client
        .query(
            "SELECT agent_id, cpu_milli, memory_bytes, gpu_milli, images, image_apps -> $2
             FROM ledger.agents WHERE resource_group = $1 AND lost IS NULL",
            &[&group, &request.image],
        )
        .await?
        .iter()
        .map(|row| GroupAgent {
            agent_id: row.get(0),
            capacity: slots_of(row, 1),
            images: row.get(4),
            // Written by the ledger's fold from a typed event: it reads back.
            image_apps: row
                .get::<_, Option<serde_json::Value>>(5)
                .and_then(|apps| serde_json::from_value(apps).ok())
                .unwrap_or_default(),
        })
        .collect();
    let (mut owned_folders, mut folder_volumes) = (Vec::new(), std::collections::BTreeMap::new());
    if !request.mounts.is_empty() {
        let rows = client
            .query(
                "SELECT name, volume FROM ledger.folders
                 WHERE owner = $1 AND name = ANY($2) AND trashed_at IS NULL",
                &[&who.user_id, &request.mounts],
            )
            .await?;
        for row in rows {
            let name: String = row.get(0);
            if let Some(volume) = row.get::<_, Option<String>>(1) {
                folder_volumes.insert(name.clone(), volume);
            }
            owned_folders.push(name);
        }
    }
    // The rest of the mounts may be folders others shared with the owner, directly or
    // through one of their projects: the strongest share of each counts.
    let mut shared_folders = std::collections::BTreeMap::<String, Vec<_>>::new();
    let unowned: Vec<&String> = request
        .mounts
        .iter()
        .filter(|m| !owned_folders.contains(m))
        .collect();
    if !unowned.is_empty() {
        let rows = client
            .query(
                "SELECT f.name, f.owner, f.volume, max(s.permission)
                 FROM ledger.folder_shares s JOIN ledger.folders f USING (owner, name)
                 WHERE s.name = ANY($2) AND f.owner <> $1 AND f.trashed_at IS NULL
                   AND ((s.grantee_kind = 'user' AND s.grantee = $1::text)
                     OR (s.grantee_kind = 'project' AND s.grantee IN
                           (SELECT project FROM ledger.project_members WHERE user_id = $1)))
                 GROUP BY f.name, f.owner, f.volume ORDER BY f.name, f.owner",
                &[&who.user_id, &unowned],
            )
            .await?;
        for row in rows {
            let name: String = row.get(0);
            let permission: String = row.get(3);
            let Some(permission) = ::domain::sharing::FolderPermission::parse(&permission) else {
                continue;
            };
            if let Some(volume) = row.get::<_, Option<String>>(2) {
                folder_volumes.insert(name.clone(), volume);
            }
            shared_folders
                .entry(name)
                .or_default()
                .push((row.get(1), permission));
        }
    }
    let live_names = if request.name.is_none() {
        let sql = format!(
            "SELECT name FROM ledger.sessions WHERE owner = $1 AND {}",
            events::sql::is_live("status")
        );
        client
            .query(&sql, &[&who.user_id])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect()
    } else {
        Vec::new()
    };
    let (mut custom_images, mut pullable_images) = (Vec::new(), Vec::new());
    if ::domain::images::custom_image_owner(&request.image).is_some() {
        let found = client
            .query_opt(
                "SELECT pushed FROM ledger.custom_images WHERE owner = $1 AND image = $2",
                &[&who.user_id, &request.image],
            )
            .await?;
        if let Some(row) = found {
            custom_images.push(request.image.clone());
            if row.get::<_, bool>(0) {
                pullable_images.push(request.image.clone());
            }
        }
    }
    let registry = ::domain::images::registry_of(&request.image);
    let image_facts = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM ledger.registries WHERE registry = $1),
                    EXISTS (SELECT 1 FROM ledger.image_listings
                             WHERE image = $2 AND listing = 'hidden')",
            &[&registry, &request.image],
        )
        .await?;
    let (credential_stored, image_hidden): (bool, bool) = (image_facts.get(0), image_facts.get(1));
    if credential_stored {
        pullable_images.push(request.image.clone());
    }
    let actor_projects = projects_of(&client, actor.user_id).await?;
    let owner_projects = match &owner {
        Some(o) if o.user_id != actor.user_id => projects_of(&client, o.user_id).await?,
        _ => actor_projects.clone(),
    };
    Ok(LaunchContext {
        actor: actor.clone(),
        owner,
        actor_projects,
        owner_projects,
        group_exists,
        project_member,
        group_open_to_owner,
        preset,
        policy,
        agents,
        owned_folders,
        folder_volumes,
        shared_folders,
        live_names,
        custom_images,
        pullable_images,
        image_hidden,
    })
}

/// The projects `user` belongs to (none when there is no such user).
async fn projects_of(
    client: &deadpool_postgres::Client,
    user: uuid::Uuid,
) -> Result<std::collections::BTreeSet<String>, LedgerError> {
    Ok(events::ledger::principal(client, user)
        .await?
        .map(|p| p.projects)
        .unwrap_or_default())
}

/// Whether some live agent (not marked lost) mounts the shared volume `volume`.
pub async fn volume_mounted(pool: &Pool, volume: &str) -> Result<bool, LedgerError> {
    let client = pool.get().await?;
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM ledger.agents
                             WHERE lost IS NULL AND $1 = ANY(volumes))",
            &[&volume],
        )
        .await?;
    Ok(row.get(0))
}
