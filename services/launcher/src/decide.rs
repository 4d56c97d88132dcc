//! The launch decision, pure: a create request and the facts it depends on (a
//! [`LaunchContext`], loaded in one I/O step by `db::load_context`) in, the sessions to record
//! or the field at fault out. Every rule that once needed a database round trip in the middle
//! of the handler (the owner's policy, the group's capacity and images, membership, folders,
//! the chosen agent) is decided here and unit-tested without a server.

use std::collections::{BTreeMap, BTreeSet};

use events::authorization::{self, Action, Principal};
use events::ledger::KeyOwner;
use events::payloads::*;
use uuid::Uuid;

use crate::domain::{self, FieldError, Shape};
use crate::launch::{CreateSession, LaunchError, DEFAULT_SHARED_MEMORY, MAX_COUNT};

const MAX_CPU_MILLI: u64 = 1024 * 1000;
const MAX_GPU_MILLI: u64 = 64 * 1000;
const MAX_MEMORY: u64 = 64 << 40;

/// What a preset gives one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct PresetSlots {
    pub resources: ResourceSlots,
    pub shared_memory_bytes: u64,
}

/// The owner's resource policy, as far as one session is concerned.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyLimits {
    pub max_total: ResourceSlots,
    pub max_lifetime_secs: Option<u64>,
    /// Highest priority the owner may ask for; `None`: [`SessionPriority::MAX`].
    pub max_session_priority: Option<u32>,
    /// Processes per container, and output kept per kernel; `None`: the defaults
    /// ([`events::payloads::ContainerFence`]).
    pub max_pids: Option<u32>,
    pub max_log_bytes: Option<u64>,
}

/// A live agent of the requested group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupAgent {
    pub agent_id: String,
    pub capacity: ResourceSlots,
    pub images: Vec<String>,
    /// The apps the requested image declares on this agent's host.
    pub image_apps: Vec<::domain::apps::ServicePort>,
}

/// Every fact the launch decision needs, read before it is made.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchContext {
    /// Who asks.
    pub actor: KeyOwner,
    /// The user the sessions are for: the actor, the user named by `owner_email`, or `None`
    /// when no user has that email.
    pub owner: Option<KeyOwner>,
    /// The projects the actor belongs to.
    pub actor_projects: BTreeSet<String>,
    /// The projects the owner belongs to (the actor's when they are the owner).
    pub owner_projects: BTreeSet<String>,
    /// Whether the requested resource group exists.
    pub group_exists: bool,
    /// Whether the owner is a member of the requested project (true when none is named).
    pub project_member: bool,
    /// Whether the group is open to one of the owner's projects (the named one, if any).
    pub group_open_to_owner: bool,
    /// The named preset; `None` when it does not exist or none is named.
    pub preset: Option<PresetSlots>,
    /// The owner's policy; `None` when it is missing.
    pub policy: Option<PolicyLimits>,
    /// The group's live agents.
    pub agents: Vec<GroupAgent>,
    /// Which of the requested mounts are folders of the owner.
    pub owned_folders: Vec<String>,
    /// The shared volume of each of those that lives on one (host-local ones left out),
    /// and of each folder shared with the owner below.
    pub folder_volumes: std::collections::BTreeMap<String, String>,
    /// The requested mounts the owner has no folder of, but that other users shared with
    /// them (directly or through a project), by name: each owner that shared one by that
    /// name, with what the share allows.
    pub shared_folders:
        std::collections::BTreeMap<String, Vec<(Uuid, ::domain::sharing::FolderPermission)>>,
    /// Names of the owner's live sessions (read only when random names are to be drawn).
    pub live_names: Vec<String>,
    /// The requested image, when it is a customized image of the owner's that exists.
    pub custom_images: Vec<String>,
    /// The requested image, when every agent can pull it (a customized image of the owner's
    /// that the stack's registry holds, or an image of a registry an admin stored a
    /// credential for): it is offered whether an agent has it yet or not.
    pub pullable_images: Vec<String>,
    /// An admin hid the requested image from the catalogue (`ImageListingSet`).
    pub image_hidden: bool,
}

/// The amounts of a request, checked without any fact from the database.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedRequest {
    pub count: u32,
    pub session_type: SessionType,
    pub cpu_milli: Option<u64>,
    pub gpu_milli: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub shared_memory_bytes: Option<u64>,
    pub preopen_ports: Vec<u16>,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> LaunchError {
    LaunchError::Invalid(FieldError {
        field: field.into(),
        message: message.into(),
    })
}

/// A request that names something that does not exist (a user, group, preset, agent, image
/// or folder): the request itself is well formed, the data it points at is missing.
fn unknown(field: impl Into<String>, message: impl Into<String>) -> LaunchError {
    LaunchError::NotFound(FieldError {
        field: field.into(),
        message: message.into(),
    })
}

/// An owner named by email that no user has.
pub(crate) fn no_such_owner(email: &str) -> LaunchError {
    unknown("owner_email", format!("no user has the email `{email}`"))
}

/// A resource group that does not exist.
pub(crate) fn no_such_group(group: &str) -> LaunchError {
    unknown(
        "resource_group",
        format!("no resource group is named `{group}`"),
    )
}

/// A request the platform cannot take in its present state (no live agent, more than the
/// group holds in all, no default to fill what it left out).
pub(crate) fn conflict(field: impl Into<String>, message: impl Into<String>) -> LaunchError {
    LaunchError::Conflict(FieldError {
        field: field.into(),
        message: message.into(),
    })
}

fn forbidden(field: &str, message: &str) -> LaunchError {
    LaunchError::Forbidden(FieldError {
        field: field.into(),
        message: message.into(),
    })
}

/// The session's priority: the default when none is asked for; refused outside
/// `0..=100` (invalid) and above what the owner's policy allows (forbidden), naming `priority`.
fn check_priority(
    asked: Option<i32>,
    policy: &PolicyLimits,
    policy_name: &str,
) -> Result<i32, LaunchError> {
    let Some(asked) = asked else {
        return Ok(SessionPriority::DEFAULT);
    };
    if !(SessionPriority::MIN..=SessionPriority::MAX).contains(&asked) {
        return Err(invalid(
            "priority",
            format!(
                "{asked} is out of bounds: {}..={}",
                SessionPriority::MIN,
                SessionPriority::MAX
            ),
        ));
    }
    let most = policy
        .max_session_priority
        .map_or(SessionPriority::MAX, |m| {
            m.min(SessionPriority::MAX as u32) as i32
        });
    if asked > most {
        return Err(forbidden(
            "priority",
            &format!("{asked} is above {most}, the most resource policy `{policy_name}` allows"),
        ));
    }
    Ok(asked)
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

/// The rules that need nothing but the request and who sends it. The launcher runs them
/// before loading anything, so bad input costs no query.
pub fn check_request(
    actor: &KeyOwner,
    request: &CreateSession,
) -> Result<CheckedRequest, LaunchError> {
    let count = request.count.unwrap_or(1);
    if !(1..=MAX_COUNT).contains(&count) {
        return Err(invalid(
            "count",
            format!("must be 1 to {MAX_COUNT}, not {count}"),
        ));
    }
    // A base name for several sessions is checked once numbered (`job` gives `job1`, ...).
    if let Some(name) = request.name.as_ref().filter(|_| count == 1) {
        request.name_rule.check("name", name)?;
    }
    if request.image.trim().is_empty() || request.image.len() > 512 {
        return Err(invalid(
            "image",
            "must name an image (at most 512 characters)",
        ));
    }
    if let Some(project) = &request.project {
        domain::check_project_name("project", project)?;
    }
    domain::check_environment(&request.environment)?;
    let preopen_ports = domain::check_ports(&request.preopen_ports)?;
    for (i, mount) in request.mounts.iter().enumerate() {
        domain::check_folder_name(&format!("mounts[{i}]"), mount)?;
    }
    let session_type = request.session_type.unwrap_or(SessionType::Interactive);
    if session_type == SessionType::System
        && actor.role != Role::Superadmin
        && request.upload.is_none()
    {
        return Err(forbidden(
            "type",
            "only superadmins start system sessions (an upload session starts from its folders)",
        ));
    }
    let resources = &request.resources;
    let cpu_milli = resources
        .cpu
        .map(|c| milli("resources.cpu", c, MAX_CPU_MILLI))
        .transpose()?;
    let gpu_milli = resources
        .gpu
        .map(|g| milli("resources.gpu", g, MAX_GPU_MILLI))
        .transpose()?;
    let memory_bytes = resources
        .memory
        .as_ref()
        .map(|m| m.bytes("resources.memory"))
        .transpose()?;
    let shared_memory_bytes = resources
        .shared_memory
        .as_ref()
        .map(|m| m.bytes("resources.shared_memory"))
        .transpose()?;
    for (field, value) in [
        ("resources.memory", memory_bytes),
        ("resources.shared_memory", shared_memory_bytes),
    ] {
        if value.is_some_and(|v| v > MAX_MEMORY) {
            return Err(invalid(field, "is above 64 TiB"));
        }
    }
    // A user is refused before anyone is looked up (the rest of the rule, in `decide`, needs
    // the owner's role and projects).
    if let Some(email) = &request.owner_email {
        if *email != actor.email && !authorization::may_name_others(actor.role) {
            return Err(forbidden("owner_email", authorization::ONLY_ADMINS));
        }
    }
    Ok(CheckedRequest {
        count,
        session_type,
        cpu_milli,
        gpu_milli,
        memory_bytes,
        shared_memory_bytes,
        preopen_ports,
    })
}

/// The resource group a request names (`default` when it names none).
pub fn group_of(request: &CreateSession) -> String {
    request
        .resource_group
        .clone()
        .unwrap_or_else(|| "default".into())
}

/// Decides a create request: the `SessionRequested` events to record, one per session, or
/// the first rule it breaks. `draw_name` draws a random session name (used when the request
/// names none). It applies [`check_request`] itself, so it holds every rule on its own; the
/// launcher also runs that check before loading the context, which only saves the queries
/// (a few microseconds of pure work repeated, for a decision that cannot skip a rule).
pub fn decide(
    context: &LaunchContext,
    request: &CreateSession,
    draw_name: &mut impl FnMut() -> String,
) -> Result<Vec<SessionRequested>, LaunchError> {
    let checked = check_request(&context.actor, request)?;
    let actor = &context.actor;
    let owner = context
        .owner
        .as_ref()
        .ok_or_else(|| no_such_owner(request.owner_email.as_deref().unwrap_or_default()))?;

    // Who may create as whom: the one rule every surface asks.
    let as_principal = |who: &KeyOwner, projects: &BTreeSet<String>| Principal {
        user_id: who.user_id,
        role: who.role,
        projects: projects.clone(),
    };
    authorization::may(
        &as_principal(actor, &context.actor_projects),
        Action::CreateAs,
        &as_principal(owner, &context.owner_projects),
    )
    .map_err(|refusal| forbidden("owner_email", &refusal.to_string()))?;

    // Project and resource group.
    let group = group_of(request);
    if !context.group_exists {
        return Err(no_such_group(&group));
    }
    if let Some(project) = &request.project {
        if !context.project_member && owner.role != Role::Superadmin {
            return Err(forbidden(
                "project",
                &format!(
                    "`{}` is not a member of a project named `{project}`",
                    owner.email
                ),
            ));
        }
    }
    if owner.role != Role::Superadmin && !context.group_open_to_owner {
        return Err(forbidden(
            "resource_group",
            &format!("`{group}` is not open to the owner's projects"),
        ));
    }

    // Resources: the preset, then what the request says.
    let mut per_kernel = ResourceSlots::default();
    let mut preset_shm = None;
    if let Some(name) = &request.preset {
        let preset = context
            .preset
            .as_ref()
            .ok_or_else(|| unknown("preset", format!("no preset is named `{name}`")))?;
        per_kernel = preset.resources;
        preset_shm = Some(preset.shared_memory_bytes);
    } else if checked.cpu_milli.is_none() || checked.memory_bytes.is_none() {
        let field = if checked.cpu_milli.is_none() {
            "resources.cpu"
        } else {
            "resources.memory"
        };
        return Err(invalid(field, "is required (or name a preset)"));
    }
    per_kernel.cpu_milli = checked.cpu_milli.unwrap_or(per_kernel.cpu_milli);
    per_kernel.memory_bytes = checked.memory_bytes.unwrap_or(per_kernel.memory_bytes);
    per_kernel.gpu_milli = checked.gpu_milli.unwrap_or(per_kernel.gpu_milli);
    // Only shared memory the request asks for is held against the memory; a preset's or the
    // default shrinks to fit memory the request made smaller.
    let shared_memory_bytes = checked.shared_memory_bytes.unwrap_or_else(|| {
        preset_shm
            .unwrap_or(DEFAULT_SHARED_MEMORY)
            .min(per_kernel.memory_bytes)
    });

    let cluster_mode = request.cluster_mode.unwrap_or(ClusterMode::SingleNode);
    let cluster_size = request.cluster_size.unwrap_or(1);
    let omp_num_threads = domain::check_shape(&Shape {
        session_type: checked.session_type,
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
    let policy = context.policy.as_ref().ok_or_else(|| {
        invalid(
            "owner",
            format!("resource policy `{}` is missing", owner.resource_policy),
        )
    })?;
    if let Some((field, asked, limit)) = first_excess(total, policy.max_total) {
        return Err(forbidden(
            field,
            &format!(
                "the session asks {asked} in all; resource policy `{}` allows at most {limit}",
                owner.resource_policy
            ),
        ));
    }
    let priority = check_priority(request.priority, policy, &owner.resource_policy)?;

    // The group: live agents, what they hold in all, which images they offer.
    if context.agents.is_empty() {
        return Err(conflict(
            "resource_group",
            format!("`{group}` has no live agents"),
        ));
    }
    let group_total = context
        .agents
        .iter()
        .fold(ResourceSlots::default(), |sum, a| {
            sum.saturating_add(a.capacity)
        });
    if let Some((field, asked, limit)) = first_excess(total, group_total) {
        return Err(conflict(
            field,
            format!("the session asks {asked} in all; resource group `{group}` has {limit} in all"),
        ));
    }
    // A customized image is offered to its owner alone, and only while they keep it; one in
    // the stack's registry, or any image of a registry an admin stored a credential for, by
    // every agent, which pulls it.
    let offered_to_owner = match ::domain::images::custom_image_owner(&request.image) {
        Some(image_owner) => {
            image_owner == owner.user_id && context.custom_images.contains(&request.image)
        }
        None => true,
    };
    let offered = offered_to_owner
        && (context.pullable_images.contains(&request.image)
            || context
                .agents
                .iter()
                .any(|a| a.images.contains(&request.image)));
    if !offered {
        return Err(unknown(
            "image",
            format!("no agent of `{group}` offers the image `{}`", request.image),
        ));
    }
    if context.image_hidden {
        return Err(conflict(
            "image",
            format!(
                "an admin hid the image `{}` from the catalogue",
                request.image
            ),
        ));
    }
    // The image's apps, as an agent that offers it read them; a preopen port may not take
    // one of their ports.
    let image_apps = context
        .agents
        .iter()
        .find(|a| a.images.contains(&request.image))
        .map(|a| a.image_apps.clone())
        .unwrap_or_default();
    if let Err((i, message)) = ::domain::apps::check_preopen(&checked.preopen_ports, &image_apps) {
        return Err(invalid(format!("preopen_ports[{i}]"), message));
    }
    if let Some(agent) = &request.agent {
        if !context.agents.iter().any(|a| a.agent_id == *agent) {
            return Err(unknown(
                "agent",
                format!("`{agent}` is not a live agent of `{group}`"),
            ));
        }
    }

    // Folders: each must be one of the owner's, or shared with them by one user alone.
    let mut shared_mounts = BTreeMap::new();
    for (i, mount) in request.mounts.iter().enumerate() {
        if context.owned_folders.contains(mount) {
            continue;
        }
        match context.shared_folders.get(mount).map(Vec::as_slice) {
            Some([(owner, permission)]) => {
                shared_mounts.insert(
                    mount.clone(),
                    SharedMount {
                        owner: *owner,
                        read_only: *permission == ::domain::sharing::FolderPermission::ReadOnly,
                    },
                );
            }
            Some([_, _, ..]) => {
                return Err(LaunchError::Conflict(FieldError {
                    field: format!("mounts[{i}]"),
                    message: format!(
                        "more than one user shared a folder named `{mount}` with the owner: \
                         berth cannot tell which to mount"
                    ),
                }))
            }
            _ => {
                return Err(unknown(
                    format!("mounts[{i}]"),
                    format!(
                        "the owner has no folder named `{mount}`, and none by that name is \
                         shared with them (create it with POST /v1/folders)"
                    ),
                ))
            }
        }
    }

    // Names: the given one (numbered when several), or random ones that no live session of
    // the owner has (a taken given name is the caller's to change: the ledger answers 409).
    let count = checked.count as usize;
    let names: Vec<String> = match &request.name {
        Some(name) if count == 1 => vec![name.clone()],
        Some(name) => (1..=count).map(|i| format!("{name}{i}")).collect(),
        None => {
            let mut names: Vec<String> = Vec::with_capacity(count);
            while names.len() < count {
                let name = draw_name();
                if !context.live_names.contains(&name) && !names.contains(&name) {
                    names.push(name);
                }
            }
            names
        }
    };
    for name in &names {
        request.name_rule.check("name", name)?;
    }

    let requested_by = (owner.user_id != actor.user_id).then_some(actor.user_id);
    Ok(names
        .into_iter()
        .map(|name| SessionRequested {
            session_id: Uuid::now_v7(),
            name,
            owner: Owner {
                user_id: owner.user_id,
                email: owner.email.clone(),
                project: request.project.clone(),
            },
            requested_by,
            session_type: checked.session_type,
            resource_group: group.clone(),
            image: request.image.clone(),
            environment: request.environment.clone(),
            resources: per_kernel,
            shared_memory_bytes,
            cluster_mode,
            cluster_size,
            agent_id: request.agent.clone(),
            preopen_ports: checked.preopen_ports.clone(),
            mounts: request.mounts.clone(),
            startup_command: request.startup_command.clone(),
            starts_at: request.starts_at,
            batch_timeout_secs: request.batch_timeout,
            omp_num_threads,
            max_lifetime_secs: policy.max_lifetime_secs,
            network_idle_timeout_secs: request.upload.map(|u| u.idle_timeout_secs),
            apps: image_apps.clone(),
            priority,
            // The policy's bounds as they are now travel with the request: the agent and
            // the recorder apply them without reading the policy again.
            pids_limit: Some(policy.max_pids.unwrap_or(ContainerFence::DEFAULT_PIDS)),
            log_limit_bytes: Some(
                policy
                    .max_log_bytes
                    .unwrap_or(ContainerFence::DEFAULT_LOG_BYTES),
            ),
            // Where its folders live: the scheduler places it where those volumes are.
            volumes: request
                .mounts
                .iter()
                .filter_map(|m| Some((m.clone(), context.folder_volumes.get(m)?.clone())))
                .collect(),
            shared_mounts: shared_mounts.clone(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::ByteSize;
    use crate::launch::ResourceRequest;
    use std::collections::BTreeMap;

    const GIB: u64 = 1 << 30;

    fn user(email: &str, role: Role) -> KeyOwner {
        KeyOwner {
            user_id: Uuid::now_v7(),
            email: email.into(),
            role,
            resource_policy: "default".into(),
        }
    }

    fn slots(cores: u64, gib: u64, gpus: u64) -> ResourceSlots {
        ResourceSlots {
            cpu_milli: cores * 1000,
            memory_bytes: gib * GIB,
            gpu_milli: gpus * 1000,
        }
    }

    /// Alice, member of a project that may use `default`, with one agent offering `python`
    /// and a folder `data`.
    fn context() -> LaunchContext {
        let alice = user("alice@x.y", Role::User);
        LaunchContext {
            actor: alice.clone(),
            owner: Some(alice),
            actor_projects: ["research".to_string()].into(),
            owner_projects: ["research".to_string()].into(),
            group_exists: true,
            project_member: true,
            group_open_to_owner: true,
            preset: None,
            policy: Some(PolicyLimits {
                max_total: slots(16, 64, 2),
                max_lifetime_secs: Some(3600),
                max_session_priority: Some(50),
                max_pids: None,
                max_log_bytes: Some(64 << 10),
            }),
            agents: vec![GroupAgent {
                agent_id: "a1".into(),
                capacity: slots(8, 32, 1),
                images: vec!["python".into()],
                image_apps: ::domain::apps::parse_service_ports("jupyter:http:8888").unwrap(),
            }],
            owned_folders: vec!["data".into()],
            folder_volumes: Default::default(),
            shared_folders: Default::default(),
            live_names: vec![],
            custom_images: vec![],
            pullable_images: vec![],
            image_hidden: false,
        }
    }

    fn request() -> CreateSession {
        CreateSession {
            name: Some("job1".into()),
            image: "python".into(),
            resources: ResourceRequest {
                cpu: Some(2.0),
                memory: Some(ByteSize::Text("4g".into())),
                ..ResourceRequest::default()
            },
            ..CreateSession::default()
        }
    }

    fn no_names() -> impl FnMut() -> String {
        || unreachable!("the request names its session")
    }

    /// The field a refused request is refused on.
    fn refused(context: &LaunchContext, request: &CreateSession) -> (String, String) {
        match decide(context, request, &mut no_names()) {
            Err(
                LaunchError::Invalid(e)
                | LaunchError::Forbidden(e)
                | LaunchError::NotFound(e)
                | LaunchError::Conflict(e),
            ) => (e.field, e.message),
            other => panic!("expected a field error, got {other:?}"),
        }
    }

    #[test]
    fn a_request_within_every_rule_becomes_one_session_requested() {
        let context = context();
        let sessions = decide(&context, &request(), &mut no_names()).unwrap();
        assert_eq!(sessions.len(), 1);
        let s = &sessions[0];
        assert_eq!(s.name, "job1");
        assert_eq!(s.owner.email, "alice@x.y");
        assert_eq!(s.requested_by, None);
        assert_eq!(s.resources, slots(2, 4, 0));
        assert_eq!(s.shared_memory_bytes, DEFAULT_SHARED_MEMORY);
        assert_eq!(s.resource_group, "default");
        assert_eq!(s.omp_num_threads, 2, "OpenMP threads default to the cores");
        assert_eq!(
            s.max_lifetime_secs,
            Some(3600),
            "the policy's lifetime travels"
        );
    }

    #[test]
    fn the_policys_container_bounds_travel_with_the_request_or_the_defaults_do() {
        let sessions = decide(&context(), &request(), &mut no_names()).unwrap();
        assert_eq!(sessions[0].pids_limit, Some(ContainerFence::DEFAULT_PIDS));
        assert_eq!(sessions[0].log_limit_bytes, Some(64 << 10), "the policy's");
        let mut c = context();
        c.policy.as_mut().unwrap().max_pids = Some(64);
        let sessions = decide(&c, &request(), &mut no_names()).unwrap();
        assert_eq!(sessions[0].fence().pids, 64);
    }

    #[test]
    fn a_request_setting_a_gpu_variable_is_refused_naming_it() {
        let mut request = request();
        request
            .environment
            .insert("NVIDIA_VISIBLE_DEVICES".into(), "all".into());
        let refused = decide(&context(), &request, &mut no_names()).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("environment.NVIDIA_VISIBLE_DEVICES"),
            "{refused}"
        );
    }

    #[test]
    fn the_owners_policy_maximum_refuses_the_whole_cluster() {
        let mut request = request();
        request.resources.cpu = Some(6.0);
        request.cluster_mode = Some(ClusterMode::MultiNode);
        request.cluster_size = Some(3);
        let (field, message) = refused(&context(), &request);
        assert_eq!(field, "resources.cpu");
        assert!(
            message.contains("18 cores") && message.contains("policy `default`"),
            "{message}"
        );
    }

    #[test]
    fn a_priority_is_the_default_unless_asked_and_bounded_by_the_policy() {
        let sessions = decide(&context(), &request(), &mut no_names()).unwrap();
        assert_eq!(sessions[0].priority, SessionPriority::DEFAULT);
        let mut asked = request();
        asked.priority = Some(50);
        let sessions = decide(&context(), &asked, &mut no_names()).unwrap();
        assert_eq!(sessions[0].priority, 50, "the policy's most is allowed");
        asked.priority = Some(51);
        let (field, message) = refused(&context(), &asked);
        assert_eq!(field, "priority");
        assert!(
            message.contains("above 50") && message.contains("policy `default`"),
            "{message}"
        );
        asked.priority = Some(101);
        assert_eq!(refused(&context(), &asked).0, "priority");
        asked.priority = Some(-1);
        assert_eq!(refused(&context(), &asked).0, "priority");
        let mut unbounded = context();
        unbounded.policy.as_mut().unwrap().max_session_priority = None;
        asked.priority = Some(100);
        assert_eq!(
            decide(&unbounded, &asked, &mut no_names()).unwrap()[0].priority,
            100
        );
    }

    #[test]
    fn a_session_larger_than_the_whole_group_is_refused() {
        let mut request = request();
        request.resources.memory = Some(ByteSize::Bytes(40 * GIB));
        let (field, message) = refused(&context(), &request);
        assert_eq!(field, "resources.memory");
        assert!(
            message.contains("resource group `default` has 32768 MiB"),
            "{message}"
        );
    }

    #[test]
    fn a_customized_image_is_offered_to_its_owner_alone_while_they_keep_it() {
        let mut c = context();
        let owner = c.owner.clone().unwrap().user_id;
        let mine = ::domain::images::custom_image(owner, "env1");
        let theirs = ::domain::images::custom_image(uuid::Uuid::now_v7(), "env1");
        c.agents[0].images.extend([mine.clone(), theirs.clone()]);
        let mut request = request();
        request.image = mine.clone();
        assert_eq!(
            refused(&c, &request).0,
            "image",
            "removed, or never committed"
        );
        c.custom_images = vec![mine.clone()];
        assert!(decide(&c, &request, &mut no_names()).is_ok());
        request.image = theirs;
        assert_eq!(refused(&c, &request).0, "image", "another user's image");
    }

    #[test]
    fn an_image_an_admin_hid_is_refused_though_an_agent_holds_it() {
        let mut c = context();
        let request = request();
        assert!(decide(&c, &request, &mut no_names()).is_ok());
        c.image_hidden = true;
        let (field, message) = refused(&c, &request);
        assert_eq!(field, "image");
        assert!(message.contains("hid"), "{message}");
    }

    #[test]
    fn a_customized_image_in_the_registry_is_offered_though_no_agent_has_it_yet() {
        let mut c = context();
        let owner = c.owner.clone().unwrap().user_id;
        let mine = ::domain::images::custom_image(owner, "env1");
        let mut request = request();
        request.image = mine.clone();
        c.custom_images = vec![mine.clone()];
        assert_eq!(refused(&c, &request).0, "image", "on no agent, not pushed");
        c.pullable_images = vec![mine];
        assert!(decide(&c, &request, &mut no_names()).is_ok());
    }

    #[test]
    fn an_image_of_a_registry_with_a_stored_credential_is_offered_though_no_agent_has_it() {
        let mut c = context();
        let mut request = request();
        request.image = "cr.example.com:5000/team/trainer:2".into();
        assert_eq!(refused(&c, &request).0, "image", "no credential stored");
        c.pullable_images = vec![request.image.clone()];
        assert!(decide(&c, &request, &mut no_names()).is_ok());
    }

    #[test]
    fn a_preopen_port_that_is_the_images_app_or_reserved_is_refused_by_name() {
        let c = context();
        let mut request = request();
        request.preopen_ports = vec![8080, 8888];
        let (field, message) = refused(&c, &request);
        assert_eq!(field, "preopen_ports[1]");
        assert!(message.contains("jupyter"), "{message}");
        request.preopen_ports = vec![2200];
        assert!(refused(&c, &request).1.contains("reserved"));
        request.preopen_ports = vec![8080];
        let launched = decide(&c, &request, &mut no_names()).unwrap();
        assert_eq!(
            launched[0].apps[0].name, "jupyter",
            "the image's apps are kept"
        );
    }

    #[test]
    fn an_image_no_agent_offers_is_refused() {
        let mut request = request();
        request.image = "ruby".into();
        assert_eq!(refused(&context(), &request).0, "image");
    }

    #[test]
    fn someone_who_is_not_a_member_cannot_launch_in_the_project() {
        let mut context = context();
        context.project_member = false;
        let mut request = request();
        request.project = Some("research".into());
        let (field, message) = refused(&context, &request);
        assert_eq!(field, "project");
        assert!(message.contains("`alice@x.y` is not a member"), "{message}");

        // A superadmin owner may use any project.
        let boss = user("boss@x.y", Role::Superadmin);
        context.actor = boss.clone();
        context.owner = Some(boss);
        assert!(decide(&context, &request, &mut no_names()).is_ok());
    }

    #[test]
    fn a_group_closed_to_the_owners_projects_is_refused() {
        let mut context = context();
        context.group_open_to_owner = false;
        assert_eq!(refused(&context, &request()).0, "resource_group");
        context.group_open_to_owner = true;
        context.group_exists = false;
        assert_eq!(refused(&context, &request()).0, "resource_group");
    }

    #[test]
    fn a_folder_that_is_not_the_owners_is_refused_by_its_index() {
        let mut request = request();
        request.mounts = vec!["data".into(), "bobs".into()];
        let (field, message) = refused(&context(), &request);
        assert_eq!(field, "mounts[1]");
        assert!(message.contains("`bobs`"), "{message}");
    }

    #[test]
    fn a_folder_shared_with_the_owner_is_mounted_as_its_share_allows_unless_two_share_one_name() {
        use ::domain::sharing::FolderPermission;
        let alice = Uuid::now_v7();
        let mut c = context();
        c.shared_folders = BTreeMap::from([
            ("set".into(), vec![(alice, FolderPermission::ReadOnly)]),
            (
                "both".into(),
                vec![
                    (alice, FolderPermission::ReadWrite),
                    (Uuid::now_v7(), FolderPermission::ReadOnly),
                ],
            ),
        ]);
        c.folder_volumes = BTreeMap::from([("set".into(), "shared".into())]);
        let mut request = request();
        request.mounts = vec!["data".into(), "set".into()];
        let sessions = decide(&c, &request, &mut no_names()).unwrap();
        assert_eq!(
            sessions[0].shared_mounts,
            BTreeMap::from([(
                "set".to_string(),
                SharedMount {
                    owner: alice,
                    read_only: true
                }
            )]),
            "the owner's own folder is no shared mount"
        );
        assert_eq!(sessions[0].volumes["set"], "shared");
        request.mounts = vec!["both".into()];
        let (field, message) = refused(&c, &request);
        assert_eq!(field, "mounts[0]");
        assert!(message.contains("more than one user"), "{message}");
    }

    #[test]
    fn a_session_records_the_shared_volume_of_each_folder_it_mounts() {
        let mut c = context();
        c.owned_folders = vec!["data".into(), "local".into()];
        c.folder_volumes = BTreeMap::from([("data".into(), "shared".into())]);
        let mut request = request();
        request.mounts = vec!["data".into(), "local".into()];
        let sessions = decide(&c, &request, &mut no_names()).unwrap();
        assert_eq!(
            sessions[0].volumes,
            BTreeMap::from([("data".to_string(), "shared".to_string())]),
            "a host-local folder needs no volume"
        );
    }

    #[test]
    fn an_agent_chosen_by_hand_must_be_a_live_agent_of_the_group() {
        let mut request = request();
        request.agent = Some("a9".into());
        assert_eq!(refused(&context(), &request).0, "agent");
        request.agent = Some("a1".into());
        let sessions = decide(&context(), &request, &mut no_names()).unwrap();
        assert_eq!(sessions[0].agent_id.as_deref(), Some("a1"));
    }

    #[test]
    fn a_group_without_live_agents_is_refused() {
        let mut context = context();
        context.agents.clear();
        let (field, message) = refused(&context, &request());
        assert_eq!(field, "resource_group");
        assert!(message.contains("no live agents"), "{message}");
    }

    #[test]
    fn sessions_for_someone_else_need_an_admin_and_a_known_email() {
        let mut request = request();
        request.owner_email = Some("bob@x.y".into());
        let (field, _) = refused(&context(), &request);
        assert_eq!(field, "owner_email", "a user may not launch for bob");

        let mut context = context();
        context.actor = user("root@x.y", Role::Admin);
        context.owner = None;
        let (field, message) = refused(&context, &request);
        assert_eq!(field, "owner_email");
        assert!(message.contains("bob@x.y"), "{message}");

        let bob = user("bob@x.y", Role::User);
        context.owner = Some(bob.clone());
        let sessions = decide(&context, &request, &mut no_names()).unwrap();
        assert_eq!(sessions[0].owner.user_id, bob.user_id);
        assert_eq!(sessions[0].requested_by, Some(context.actor.user_id));
    }

    #[test]
    fn an_admin_creates_only_for_members_of_their_projects_and_never_for_a_superadmin() {
        let mut request = request();
        request.owner_email = Some("boss@x.y".into());
        let mut context = context();
        context.actor = user("root@x.y", Role::Admin);
        context.owner = Some(user("boss@x.y", Role::Superadmin));
        let (field, message) = refused(&context, &request);
        assert_eq!(field, "owner_email");
        assert!(message.contains("never"), "{message}");

        request.owner_email = Some("carol@x.y".into());
        context.owner = Some(user("carol@x.y", Role::User));
        context.owner_projects = ["sales".to_string()].into();
        let (field, message) = refused(&context, &request);
        assert_eq!(field, "owner_email");
        assert!(message.contains("own projects"), "{message}");

        // A superadmin creates for anyone, a superadmin too.
        context.actor = user("boss2@x.y", Role::Superadmin);
        assert!(decide(&context, &request, &mut no_names()).is_ok());
    }

    #[test]
    fn a_preset_fills_what_the_request_leaves_out_and_a_missing_one_is_named() {
        let mut request = request();
        request.preset = Some("small".into());
        request.resources = ResourceRequest::default();
        assert_eq!(refused(&context(), &request).0, "preset");
        let mut context = context();
        context.preset = Some(PresetSlots {
            resources: slots(1, 2, 0),
            shared_memory_bytes: 128 << 20,
        });
        let s = &decide(&context, &request, &mut no_names()).unwrap()[0];
        assert_eq!(s.resources, slots(1, 2, 0));
        assert_eq!(s.shared_memory_bytes, 128 << 20);

        // Memory asked below the preset's shared memory shrinks it rather than refusing a
        // request that names no shared memory; one that names too much is still refused.
        request.resources.memory = Some(ByteSize::Bytes(14_019));
        let s = &decide(&context, &request, &mut no_names()).unwrap()[0];
        assert_eq!(s.shared_memory_bytes, 14_019);
        request.resources.shared_memory = Some(ByteSize::Bytes(14_020));
        assert_eq!(refused(&context, &request).0, "resources.shared_memory");
        request.resources = ResourceRequest::default();

        context.policy = None;
        assert_eq!(refused(&context, &request).0, "owner");
    }

    #[test]
    fn random_names_avoid_the_owners_live_sessions_and_each_other() {
        let mut context = context();
        context.live_names = vec!["AmberBriskCedar".into()];
        let mut drawn = [
            "AmberBriskCedar",
            "DeltaEmberFjord",
            "DeltaEmberFjord",
            "GaleIrisJade",
        ]
        .into_iter()
        .map(String::from);
        let mut request = request();
        request.name = None;
        request.count = Some(2);
        let sessions = decide(&context, &request, &mut || drawn.next().unwrap()).unwrap();
        let names: Vec<&str> = sessions.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["DeltaEmberFjord", "GaleIrisJade"]);
    }

    #[test]
    fn bad_input_is_refused_before_any_fact_is_needed() {
        let actor = user("alice@x.y", Role::User);
        let mut request = request();
        request.count = Some(0);
        assert!(
            matches!(check_request(&actor, &request), Err(LaunchError::Invalid(e)) if e.field == "count")
        );
        let mut request = super::tests::request();
        request.session_type = Some(SessionType::System);
        assert!(
            matches!(check_request(&actor, &request), Err(LaunchError::Forbidden(e)) if e.field == "type")
        );
    }

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
        let limit = slots(4, 8, 0);
        let mut asked = limit;
        assert_eq!(first_excess(asked, limit), None);
        asked.memory_bytes += 1;
        assert_eq!(first_excess(asked, limit).unwrap().0, "resources.memory");
        asked.gpu_milli = 500;
        asked.memory_bytes = 1;
        assert_eq!(first_excess(asked, limit).unwrap().0, "resources.gpu");
    }
}
