//! Launching: a create request checked against every rule of the seeds and against what the
//! owner, the project, the resource group and its agents allow, then recorded as one
//! `SessionRequested` per session, all or none, in one transaction.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use events::catalogue::{stream_id, Event};
use events::ledger::{self, KeyOwner, LedgerError};
use events::payloads::*;
use events::store::ExpectedVersion;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::{self, FieldError, Shape};

/// Most sessions one request may create.
pub const MAX_COUNT: u32 = 100;
/// Shared memory a session gets when it names none (capped at its memory).
pub const DEFAULT_SHARED_MEMORY: u64 = 64 << 20;
const MAX_CPU_MILLI: u64 = 1024 * 1000;
const MAX_GPU_MILLI: u64 = 64 * 1000;
const MAX_MEMORY: u64 = 64 << 40;

/// A size in bytes, given as a number or as text with a unit (`512m`, `4g`, `1Gi`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ByteSize {
    Bytes(u64),
    Text(String),
}

impl ByteSize {
    fn bytes(&self, field: &str) -> Result<u64, FieldError> {
        let text = match self {
            ByteSize::Bytes(n) => return Ok(*n),
            ByteSize::Text(t) => t.trim(),
        };
        let bad = || FieldError {
            field: field.to_owned(),
            message: format!("`{text}` is not a size (use bytes, or a number with k, m, g or t)"),
        };
        let split = text
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: f64 = number.parse().map_err(|_| bad())?;
        let scale: u64 = match unit.to_ascii_lowercase().trim_end_matches(['b', 'i']) {
            "" => 1,
            "k" => 1 << 10,
            "m" => 1 << 20,
            "g" => 1 << 30,
            "t" => 1 << 40,
            _ => return Err(bad()),
        };
        let bytes = number * scale as f64;
        if !bytes.is_finite() || bytes > u64::MAX as f64 {
            return Err(bad());
        }
        Ok(bytes as u64)
    }
}

/// Resources asked for one kernel. CPU and GPU in units (0.5 is half), sizes as [`ByteSize`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceRequest {
    pub cpu: Option<f64>,
    pub memory: Option<ByteSize>,
    pub shared_memory: Option<ByteSize>,
    pub gpu: Option<f64>,
}

/// A request to create sessions, as the gateway receives it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub session_type: Option<SessionType>,
    pub image: String,
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    pub resource_group: Option<String>,
    pub project: Option<String>,
    pub preset: Option<String>,
    #[serde(default)]
    pub resources: ResourceRequest,
    pub cluster_mode: Option<ClusterMode>,
    pub cluster_size: Option<u32>,
    /// An agent chosen by hand.
    pub agent: Option<String>,
    #[serde(default)]
    pub preopen_ports: Vec<u32>,
    /// Names of folders to mount under /home/work.
    #[serde(default)]
    pub mounts: Vec<String>,
    pub startup_command: Option<String>,
    pub starts_at: Option<DateTime<Utc>>,
    /// Seconds a batch session may run.
    pub batch_timeout: Option<u64>,
    pub omp_num_threads: Option<u32>,
    /// How many sessions to create ("Sessions: N"); those that do not fit wait in the queue.
    pub count: Option<u32>,
    /// Create the session for this user (admins only).
    pub owner_email: Option<String>,
}

/// A session the launcher recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launched {
    pub session_id: Uuid,
    pub name: String,
    pub status: SessionStatus,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The request breaks a rule; the field says where.
    #[error(transparent)]
    Invalid(#[from] FieldError),
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(FieldError),
    /// The owner already has a live session of that name.
    #[error("{0}")]
    NameTaken(FieldError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl From<deadpool_postgres::PoolError> for LaunchError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        LaunchError::Ledger(e.into())
    }
}

impl From<tokio_postgres::Error> for LaunchError {
    fn from(e: tokio_postgres::Error) -> Self {
        LaunchError::Ledger(e.into())
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> LaunchError {
    LaunchError::Invalid(FieldError {
        field: field.into(),
        message: message.into(),
    })
}

/// CPU or GPU units to thousandths, refusing negatives, absurd amounts and finer fractions.
fn milli(field: &str, value: f64, max: u64) -> Result<u64, LaunchError> {
    let m = value * 1000.0;
    if m.is_nan() || m < 0.0 || m > max as f64 {
        return Err(invalid(
            field,
            format!("{value} is not between 0 and {}", max / 1000),
        ));
    }
    if (m - m.round()).abs() > 1e-6 {
        return Err(invalid(field, "at most three decimals"));
    }
    Ok(m.round() as u64)
}

/// The first resource of `asked` above `limit`, as (field, asked, limit).
fn first_excess(
    asked: ResourceSlots,
    limit: ResourceSlots,
) -> Option<(&'static str, String, String)> {
    let cpu = |m: u64| format!("{} cores", m as f64 / 1000.0);
    let gpu = |m: u64| format!("{} GPUs", m as f64 / 1000.0);
    let mem = |b: u64| format!("{} MiB", b >> 20);
    if asked.cpu_milli > limit.cpu_milli {
        Some(("resources.cpu", cpu(asked.cpu_milli), cpu(limit.cpu_milli)))
    } else if asked.memory_bytes > limit.memory_bytes {
        Some((
            "resources.memory",
            mem(asked.memory_bytes),
            mem(limit.memory_bytes),
        ))
    } else if asked.gpu_milli > limit.gpu_milli {
        Some(("resources.gpu", gpu(asked.gpu_milli), gpu(limit.gpu_milli)))
    } else {
        None
    }
}

fn slots_of(row: &tokio_postgres::Row, first: usize) -> ResourceSlots {
    let get = |i: usize| row.get::<_, i64>(first + i).max(0) as u64;
    ResourceSlots {
        cpu_milli: get(0),
        memory_bytes: get(1),
        gpu_milli: get(2),
    }
}

/// Checks `request` made by `actor` and records the sessions it asks for.
pub async fn launch(
    pool: &Pool,
    actor: &KeyOwner,
    request: CreateSession,
) -> Result<Vec<Launched>, LaunchError> {
    // Rules that need nothing but the request come first: bad input costs no query.
    let count = request.count.unwrap_or(1);
    if !(1..=MAX_COUNT).contains(&count) {
        return Err(invalid(
            "count",
            format!("must be 1 to {MAX_COUNT}, not {count}"),
        ));
    }
    // A base name for several sessions is checked once numbered (`job` gives `job1`, ...).
    if let Some(name) = request.name.as_ref().filter(|_| count == 1) {
        domain::check_name("name", name)?;
    }
    if request.image.trim().is_empty() || request.image.len() > 512 {
        return Err(invalid(
            "image",
            "must name an image (at most 512 characters)",
        ));
    }
    domain::check_environment(&request.environment)?;
    let preopen_ports = domain::check_ports(&request.preopen_ports)?;
    for (i, mount) in request.mounts.iter().enumerate() {
        domain::check_folder_name(&format!("mounts[{i}]"), mount)?;
    }
    let session_type = request.session_type.unwrap_or(SessionType::Interactive);
    if session_type == SessionType::System && actor.role != Role::Superadmin {
        return Err(LaunchError::Forbidden(FieldError {
            field: "type".into(),
            message: "only superadmins start system sessions".into(),
        }));
    }
    let cpu = request
        .resources
        .cpu
        .map(|c| milli("resources.cpu", c, MAX_CPU_MILLI))
        .transpose()?;
    let gpu = request
        .resources
        .gpu
        .map(|g| milli("resources.gpu", g, MAX_GPU_MILLI))
        .transpose()?;
    let memory = request
        .resources
        .memory
        .as_ref()
        .map(|m| m.bytes("resources.memory"))
        .transpose()?;
    let shared_memory = request
        .resources
        .shared_memory
        .as_ref()
        .map(|m| m.bytes("resources.shared_memory"))
        .transpose()?;
    for (field, value) in [
        ("resources.memory", memory),
        ("resources.shared_memory", shared_memory),
    ] {
        if value.is_some_and(|v| v > MAX_MEMORY) {
            return Err(invalid(field, "is above 64 TiB"));
        }
    }

    let client = pool.get().await?;

    // The owner: the caller, or (for admins) the user named by email.
    let owner = match &request.owner_email {
        Some(email) if *email != actor.email => {
            if actor.role < Role::Admin {
                return Err(LaunchError::Forbidden(FieldError {
                    field: "owner_email".into(),
                    message: "only admins create sessions for other users".into(),
                }));
            }
            let row = client
                .query_opt(
                    "SELECT user_id, role, resource_policy FROM ledger.users WHERE email = $1",
                    &[email],
                )
                .await?
                .ok_or_else(|| {
                    invalid("owner_email", format!("no user has the email `{email}`"))
                })?;
            KeyOwner {
                user_id: row.get(0),
                email: email.clone(),
                role: Role::parse(row.get(1)).unwrap_or(Role::User),
                resource_policy: row.get(2),
            }
        }
        _ => actor.clone(),
    };

    // Project and resource group.
    let group = request
        .resource_group
        .clone()
        .unwrap_or_else(|| "default".into());
    if client
        .query_opt(
            "SELECT 1 FROM ledger.resource_groups WHERE name = $1",
            &[&group],
        )
        .await?
        .is_none()
    {
        return Err(invalid(
            "resource_group",
            format!("no resource group is named `{group}`"),
        ));
    }
    if let Some(project) = &request.project {
        let member = client
            .query_opt(
                "SELECT 1 FROM ledger.project_members WHERE project = $1 AND user_id = $2",
                &[project, &owner.user_id],
            )
            .await?
            .is_some();
        if !member && owner.role != Role::Superadmin {
            return Err(invalid(
                "project",
                format!(
                    "`{}` is not a member of a project named `{project}`",
                    owner.email
                ),
            ));
        }
    }
    if owner.role != Role::Superadmin {
        let allowed = client
            .query_opt(
                "SELECT 1 FROM ledger.group_projects g JOIN ledger.project_members m USING (project)
                 WHERE g.resource_group = $1 AND m.user_id = $2 AND ($3::text IS NULL OR m.project = $3)",
                &[&group, &owner.user_id, &request.project],
            )
            .await?
            .is_some();
        if !allowed {
            return Err(invalid(
                "resource_group",
                format!("`{group}` is not open to the owner's projects"),
            ));
        }
    }

    // Resources: the preset, then what the request says.
    let mut per_kernel = ResourceSlots::default();
    let mut preset_shm = None;
    if let Some(preset) = &request.preset {
        let row = client
            .query_opt(
                "SELECT cpu_milli, memory_bytes, gpu_milli, shared_memory_bytes
                 FROM ledger.presets WHERE name = $1",
                &[preset],
            )
            .await?
            .ok_or_else(|| invalid("preset", format!("no preset is named `{preset}`")))?;
        per_kernel = slots_of(&row, 0);
        preset_shm = Some(row.get::<_, i64>(3).max(0) as u64);
    } else if cpu.is_none() || memory.is_none() {
        let field = if cpu.is_none() {
            "resources.cpu"
        } else {
            "resources.memory"
        };
        return Err(invalid(field, "is required (or name a preset)"));
    }
    per_kernel.cpu_milli = cpu.unwrap_or(per_kernel.cpu_milli);
    per_kernel.memory_bytes = memory.unwrap_or(per_kernel.memory_bytes);
    per_kernel.gpu_milli = gpu.unwrap_or(per_kernel.gpu_milli);
    let shared_memory_bytes = shared_memory
        .or(preset_shm)
        .unwrap_or(DEFAULT_SHARED_MEMORY.min(per_kernel.memory_bytes));

    let cluster_mode = request.cluster_mode.unwrap_or(ClusterMode::SingleNode);
    let cluster_size = request.cluster_size.unwrap_or(1);
    let omp_num_threads = domain::check_shape(&Shape {
        session_type,
        memory_bytes: per_kernel.memory_bytes,
        shared_memory_bytes,
        cpu_milli: per_kernel.cpu_milli,
        startup_command: request.startup_command.clone(),
        starts_at: request.starts_at,
        batch_timeout_secs: request.batch_timeout,
        cluster_mode,
        cluster_size,
        omp_num_threads: request.omp_num_threads,
    })?;
    let total = ResourceSlots {
        cpu_milli: per_kernel.cpu_milli * cluster_size as u64,
        memory_bytes: per_kernel.memory_bytes.saturating_mul(cluster_size as u64),
        gpu_milli: per_kernel.gpu_milli * cluster_size as u64,
    };

    // The owner's policy bounds what one session may ever hold.
    let policy = client
        .query_opt(
            "SELECT max_cpu_milli, max_memory_bytes, max_gpu_milli, max_session_lifetime_secs
             FROM ledger.policies WHERE name = $1",
            &[&owner.resource_policy],
        )
        .await?
        .ok_or_else(|| {
            invalid(
                "owner",
                format!("resource policy `{}` is missing", owner.resource_policy),
            )
        })?;
    let policy_max = slots_of(&policy, 0);
    if let Some((field, asked, limit)) = first_excess(total, policy_max) {
        return Err(invalid(
            field,
            format!(
                "the session asks {asked} in all; resource policy `{}` allows at most {limit}",
                owner.resource_policy
            ),
        ));
    }
    let max_lifetime_secs = policy.get::<_, Option<i64>>(3).map(|v| v.max(0) as u64);

    // The group: live agents, what they hold in all, which images they offer.
    let agents = client
        .query(
            "SELECT agent_id, cpu_milli, memory_bytes, gpu_milli, images FROM ledger.agents
             WHERE resource_group = $1 AND lost IS NULL",
            &[&group],
        )
        .await?;
    if agents.is_empty() {
        return Err(invalid(
            "resource_group",
            format!("`{group}` has no live agents"),
        ));
    }
    let group_total = agents.iter().fold(ResourceSlots::default(), |sum, a| {
        sum.saturating_add(slots_of(a, 1))
    });
    if let Some((field, asked, limit)) = first_excess(total, group_total) {
        return Err(invalid(
            field,
            format!("the session asks {asked} in all; resource group `{group}` has {limit} in all"),
        ));
    }
    let offered = |image: &str| {
        agents
            .iter()
            .any(|a| a.get::<_, Vec<String>>(4).iter().any(|i| i == image))
    };
    if !offered(&request.image) {
        return Err(invalid(
            "image",
            format!("no agent of `{group}` offers the image `{}`", request.image),
        ));
    }
    if let Some(agent) = &request.agent {
        if !agents.iter().any(|a| a.get::<_, &str>(0) == agent) {
            return Err(invalid(
                "agent",
                format!("`{agent}` is not a live agent of `{group}`"),
            ));
        }
    }

    // Folders: each must be one of the owner's.
    if !request.mounts.is_empty() {
        let known: Vec<String> = client
            .query(
                "SELECT name FROM ledger.folders WHERE owner = $1 AND name = ANY($2)",
                &[&owner.user_id, &request.mounts],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if let Some((i, missing)) = request
            .mounts
            .iter()
            .enumerate()
            .find(|(_, m)| !known.contains(m))
        {
            return Err(invalid(
                format!("mounts[{i}]"),
                format!(
                    "the owner has no folder named `{missing}` (create it with POST /v1/folders)"
                ),
            ));
        }
    }

    // Names: the given one (numbered when several), or random ones that no live session of
    // the owner has (a taken given name is the caller's to change: 409 below).
    let names: Vec<String> = match &request.name {
        Some(name) if count == 1 => vec![name.clone()],
        Some(name) => (1..=count).map(|i| format!("{name}{i}")).collect(),
        None => {
            let mut names: Vec<String> = Vec::with_capacity(count as usize);
            while names.len() < count as usize {
                let fresh: Vec<String> = {
                    let mut rng = rand::rng();
                    (names.len()..count as usize)
                        .map(|_| domain::random_name(&mut rng))
                        .collect()
                };
                let taken: Vec<String> = client
                    .query(
                        "SELECT name FROM ledger.sessions WHERE owner = $1 AND name = ANY($2)
                           AND status NOT IN ('TERMINATED', 'ERROR', 'CANCELLED')",
                        &[&owner.user_id, &fresh],
                    )
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                for name in fresh {
                    if !taken.contains(&name) && !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
            names
        }
    };
    for name in &names {
        domain::check_name("name", name)?;
    }

    drop(client);
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let metadata = events::trace::metadata(&actor.user_id.to_string(), Some(Uuid::now_v7()));
    let mut launched = Vec::with_capacity(names.len());
    for name in names {
        let session_id = Uuid::now_v7();
        let requested = SessionRequested {
            session_id,
            name: name.clone(),
            owner: Owner {
                user_id: owner.user_id,
                email: owner.email.clone(),
                project: request.project.clone(),
            },
            requested_by: (owner.user_id != actor.user_id).then_some(actor.user_id),
            session_type,
            resource_group: group.clone(),
            image: request.image.clone(),
            environment: request.environment.clone(),
            resources: per_kernel,
            shared_memory_bytes,
            cluster_mode,
            cluster_size,
            agent_id: request.agent.clone(),
            preopen_ports: preopen_ports.clone(),
            mounts: request.mounts.clone(),
            startup_command: request.startup_command.clone(),
            starts_at: request.starts_at,
            batch_timeout_secs: request.batch_timeout,
            omp_num_threads,
            max_lifetime_secs,
        };
        let event = Event::SessionRequested(Box::new(requested));
        let stream = stream_id("session", session_id);
        match ledger::record(&tx, &stream, ExpectedVersion::NoStream, &[event], &metadata).await {
            Ok(_) => {}
            Err(LedgerError::NameTaken(_)) => {
                return Err(LaunchError::NameTaken(FieldError {
                    field: "name".into(),
                    message: format!("the owner already has a live session named `{name}`"),
                }))
            }
            Err(e) => return Err(e.into()),
        }
        launched.push(Launched {
            session_id,
            name,
            status: SessionStatus::Pending,
        });
    }
    tx.commit().await?;
    tracing::info!(count = launched.len(), owner = %owner.email, "sessions requested");
    Ok(launched)
}

/// Creates a named folder for `owner`.
pub async fn create_folder(pool: &Pool, owner: &KeyOwner, name: &str) -> Result<(), LaunchError> {
    domain::check_folder_name("name", name)?;
    let event = Event::FolderCreated(FolderCreated {
        owner: owner.user_id,
        name: name.to_owned(),
    });
    let metadata = events::trace::metadata(&owner.user_id.to_string(), None);
    match ledger::record_now(
        pool,
        &stream_id("user", owner.user_id),
        ExpectedVersion::Any,
        &[event],
        &metadata,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(LedgerError::Exists { .. }) => Err(LaunchError::NameTaken(FieldError {
            field: "name".into(),
            message: format!("you already have a folder named `{name}`"),
        })),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_numbers_and_units() {
        assert_eq!(ByteSize::Bytes(5).bytes("m").unwrap(), 5);
        assert_eq!(ByteSize::Text("512m".into()).bytes("m").unwrap(), 512 << 20);
        assert_eq!(ByteSize::Text("4g".into()).bytes("m").unwrap(), 4 << 30);
        assert_eq!(ByteSize::Text("1Gi".into()).bytes("m").unwrap(), 1 << 30);
        assert_eq!(ByteSize::Text("1.5k".into()).bytes("m").unwrap(), 1536);
        assert_eq!(
            ByteSize::Text("lots".into()).bytes("x").unwrap_err().field,
            "x"
        );
        assert!(ByteSize::Text("5q".into()).bytes("x").is_err());
    }

    #[test]
    fn cpu_and_gpu_counts_refuse_negatives_absurd_and_too_fine() {
        assert_eq!(milli("cpu", 0.5, MAX_CPU_MILLI).unwrap(), 500);
        assert_eq!(milli("cpu", 1024.0, MAX_CPU_MILLI).unwrap(), 1_024_000);
        assert!(milli("cpu", -1.0, MAX_CPU_MILLI).is_err());
        assert!(milli("cpu", 1024.001, MAX_CPU_MILLI).is_err());
        assert!(milli("cpu", 1e300, MAX_CPU_MILLI).is_err());
        assert!(milli("gpu", 0.0001, MAX_GPU_MILLI).is_err());
        assert_eq!(milli("gpu", 0.25, MAX_GPU_MILLI).unwrap(), 250);
    }

    #[test]
    fn the_first_excess_names_its_field() {
        let limit = ResourceSlots {
            cpu_milli: 4000,
            memory_bytes: 8 << 30,
            gpu_milli: 0,
        };
        let mut asked = limit;
        assert_eq!(first_excess(asked, limit), None);
        asked.memory_bytes += 1;
        assert_eq!(first_excess(asked, limit).unwrap().0, "resources.memory");
        asked.gpu_milli = 500;
        asked.memory_bytes = 1;
        assert_eq!(first_excess(asked, limit).unwrap().0, "resources.gpu");
    }
}
