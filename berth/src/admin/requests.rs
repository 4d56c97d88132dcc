//! Flags to the gateway's typed admin requests, once: each command becomes a [`Call`], the
//! method and path of its endpoint, its body as the gateway's own request type
//! (`gateway::api::admin::...`) serialised, and what to print from the answer. The rules of
//! each field live on those types and the gateway checks them; here only what a flag spells
//! differently from the API is read (`--role`, `--queue`, `--selection`, `--combine`, GiB).

use std::path::PathBuf;

use anyhow::Context;
use events::idleness::Combine;
use events::payloads::{AgentSelection, QueuePolicy, Role};
use gateway::api::admin::agents::{AdmitAgent, Revocation};
use gateway::api::admin::groups::{
    Grant, GroupDefaults, GroupScheduling, NewGroup, PriorityIn, WeightsIn,
};
use gateway::api::admin::idle::{ChecksIn, IdleChecksIn, ThresholdsIn, UtilizationIn};
use gateway::api::admin::images::ImageListingIn;
use gateway::api::admin::keys::{KeyFor, NewKey};
use gateway::api::admin::policies::PolicyLimits;
use gateway::api::admin::presets::{PresetAmounts, PresetIn};
use gateway::api::admin::projects::{Member, NewProject};
use gateway::api::admin::registries::RegistryCredentialIn;
use gateway::api::admin::users::{NewUser, PasswordSet, RoleSet};
use gateway::api::admin::AmountsIn;
use reqwest::Method;
use serde::Serialize;
use serde_json::Value;

use super::{AdminCommand, AgentAdminCommand, IdleAdminCommand, Kind, RegistryAdminCommand};
use crate::session_cli::{path_part, Output};

/// One admin command as the gateway takes it.
pub struct Call {
    pub method: Method,
    pub path: String,
    /// A typed request, serialised; `None` for a body-less request.
    pub body: Option<Value>,
    pub answer: Answer,
}

/// What to print from the gateway's answer.
pub enum Answer {
    Listing(Kind, Output),
    Shares(Output),
    IdlePreview,
    /// The NATS server's authorization block, from the admitted agents listed.
    NatsAuthorization,
    /// A new user's id and first key.
    User(String),
    /// A new API key.
    ApiKey,
    /// A Backend.AI keypair of this user.
    Keypair(String),
    /// An agent's credential, printed or written to a file.
    Admitted {
        id: String,
        group: String,
        credential_out: Option<PathBuf>,
    },
    /// An agent revoked: what the NATS server learns is said too.
    Revoked(String),
    /// A line that says what was done.
    Done(String),
}

impl Call {
    fn new(method: Method, path: impl Into<String>, body: Option<Value>, answer: Answer) -> Call {
        Call {
            method,
            path: path.into(),
            body,
            answer,
        }
    }

    fn get(path: impl Into<String>, answer: Answer) -> Call {
        Call::new(Method::GET, path, None, answer)
    }

    fn post(path: impl Into<String>, body: impl Serialize, answer: Answer) -> Call {
        Call::new(Method::POST, path, Some(typed(body)), answer)
    }

    fn put(path: impl Into<String>, body: impl Serialize, answer: Answer) -> Call {
        Call::new(Method::PUT, path, Some(typed(body)), answer)
    }
}

fn typed(body: impl Serialize) -> Value {
    serde_json::to_value(body).expect("a request type serialises")
}

fn done(line: String) -> Answer {
    Answer::Done(line)
}

/// The call an admin command makes (`init` and the database's commands are not calls).
pub fn call(command: AdminCommand) -> anyhow::Result<Call> {
    Ok(match command {
        AdminCommand::Init => anyhow::bail!("berth admin init writes to the database itself"),
        AdminCommand::Ls { kind, output } => {
            Call::get(list_path(kind), Answer::Listing(kind, output))
        }
        AdminCommand::CreateUser {
            email,
            role,
            policy,
            projects,
        } => create_user(email, &role, policy, projects)?,
        AdminCommand::IssueKey {
            keypair_for: Some(email),
            ..
        } => Call::post(
            "/v1/admin/backendai-keypairs",
            KeyFor {
                email: email.clone(),
            },
            Answer::Keypair(email),
        ),
        AdminCommand::IssueKey {
            email,
            expires_in,
            expires_at,
            ..
        } => {
            let email = email.context("name the user: --email")?;
            let key = NewKey {
                email,
                expires_in_secs: expires_in,
                expires_at,
            };
            Call::post("/v1/admin/api-keys", key, Answer::ApiKey)
        }
        AdminCommand::RevokeKey {
            access_key: Some(access_key),
            ..
        } => Call::new(
            Method::POST,
            format!("/v1/admin/backendai-keypairs/{access_key}/revoke"),
            None,
            done(format!("Backend.AI keypair {access_key} revoked")),
        ),
        AdminCommand::RevokeKey { prefix, .. } => {
            let prefix = prefix.context("name the key by its prefix (berth admin ls keys)")?;
            Call::new(
                Method::POST,
                format!("/v1/admin/api-keys/{prefix}/revoke"),
                None,
                done(format!("API key {prefix} revoked")),
            )
        }
        AdminCommand::DisableUser { email } => Call::new(
            Method::POST,
            format!("/v1/admin/users/{}/disable", path_part(&email)),
            None,
            done(format!("{email} disabled")),
        ),
        AdminCommand::EnableUser { email } => Call::new(
            Method::POST,
            format!("/v1/admin/users/{}/enable", path_part(&email)),
            None,
            done(format!("{email} enabled")),
        ),
        AdminCommand::SetRole { email, role } => {
            let role = Role::parse(&role).with_context(|| {
                format!("--role (role): `{role}` is not user, admin or superadmin")
            })?;
            Call::put(
                format!("/v1/admin/users/{}/role", path_part(&email)),
                RoleSet { role },
                done(format!("{email} is now {}", role.as_str())),
            )
        }
        AdminCommand::SetPassword { email } => {
            let password = new_password(&email)?;
            let line = format!("password of {email} set");
            Call::put(
                "/v1/admin/passwords",
                PasswordSet { email, password },
                done(line),
            )
        }
        AdminCommand::CreateProject { name, description } => {
            let line = format!("project {name} created");
            Call::post(
                "/v1/admin/projects",
                NewProject { name, description },
                done(line),
            )
        }
        AdminCommand::AddMember { project, email } => Call::post(
            format!("/v1/admin/projects/{project}/members"),
            Member {
                email: email.clone(),
            },
            done(format!("{email} joined {project}")),
        ),
        command @ AdminCommand::CreateGroup { .. } => group_call(command)?,
        AdminCommand::GrantGroup { group, project } => Call::post(
            format!("/v1/admin/resource-groups/{group}/grants"),
            Grant {
                project: project.clone(),
            },
            done(format!("{project} may use {group}")),
        ),
        command @ AdminCommand::SetScheduling { .. } => group_call(command)?,
        AdminCommand::SetDefaults {
            group,
            image,
            preset,
        } => Call::put(
            format!("/v1/admin/resource-groups/{group}/defaults"),
            GroupDefaults { image, preset },
            done(format!("defaults of resource group {group} set")),
        ),
        AdminCommand::ListImage { image, listing } => Call::put(
            "/v1/admin/images/listing".to_owned(),
            ImageListingIn {
                image: image.clone(),
                listing: listing.into(),
            },
            done(format!("{image} listed as {listing:?}").to_lowercase()),
        ),
        AdminCommand::Shares { group, output } => Call::get(
            format!("/v1/admin/resource-groups/{group}/shares"),
            Answer::Shares(output),
        ),
        AdminCommand::SetPriority { session, priority } => Call::put(
            format!("/v1/admin/sessions/{session}/priority"),
            PriorityIn { priority },
            done(format!("session {session} has priority {priority}")),
        ),
        command @ AdminCommand::SetPolicy { .. } => limits_call(command),
        command @ AdminCommand::SavePreset { .. } => limits_call(command),
        AdminCommand::Agent(command) => agent_call(command),
        AdminCommand::Registry(RegistryAdminCommand::Set { registry, username }) => {
            let password = new_password(&registry)?;
            let line = format!("credential of {registry} stored");
            Call::put(
                format!("/v1/admin/registries/{}", path_part(&registry)),
                RegistryCredentialIn { username, password },
                done(line),
            )
        }
        AdminCommand::Registry(RegistryAdminCommand::Rm { registry }) => Call::new(
            Method::DELETE,
            format!("/v1/admin/registries/{}", path_part(&registry)),
            None,
            done(format!("credential of {registry} removed")),
        ),
        AdminCommand::NatsAuthorization => Call::get("/v1/admin/agents", Answer::NatsAuthorization),
        AdminCommand::Idle(IdleAdminCommand::Preview) => {
            Call::get("/v1/admin/idle-preview", Answer::IdlePreview)
        }
        AdminCommand::Idle(set) => idle_call(set)?,
    })
}

/// `create-user`: the role as `--role` spells it.
fn create_user(
    email: String,
    role: &str,
    resource_policy: String,
    projects: Vec<String>,
) -> anyhow::Result<Call> {
    let role = Role::parse(role)
        .with_context(|| format!("--role (role): `{role}` is not user, admin or superadmin"))?;
    let user = NewUser {
        email: email.clone(),
        role: Some(role),
        resource_policy,
        projects,
    };
    Ok(Call::post("/v1/admin/users", user, Answer::User(email)))
}

/// `create-group` and `set-scheduling`: a group's settings, its policy as `--queue` names it.
fn group_call(command: AdminCommand) -> anyhow::Result<Call> {
    Ok(match command {
        AdminCommand::CreateGroup {
            name,
            queue,
            selection,
            max_attempts,
            skip_after,
            pending_timeout,
        } => {
            let agent_selection = match selection.as_str() {
                "concentrated" => AgentSelection::Concentrated,
                "dispersed" => AgentSelection::Dispersed,
                other => anyhow::bail!(
                    "--selection (agent_selection): `{other}` is not concentrated or dispersed"
                ),
            };
            let group = NewGroup {
                name: name.clone(),
                queue_policy: Some(queue_policy(&queue)?),
                agent_selection: Some(agent_selection),
                max_attempts: Some(max_attempts),
                skip_after: Some(skip_after),
                pending_timeout_secs: Some(pending_timeout),
            };
            let line = format!("resource group {name} created");
            Call::post("/v1/admin/resource-groups", group, done(line))
        }
        AdminCommand::SetScheduling {
            group,
            queue,
            half_life,
            lookback,
            weight_cpu,
            weight_memory,
            weight_gpu,
            starve_after,
        } => {
            let scheduling = GroupScheduling {
                queue_policy: queue_policy(&queue)?,
                half_life_secs: Some(half_life),
                lookback_secs: Some(lookback),
                weights: Some(WeightsIn {
                    cpu_per_core: weight_cpu,
                    memory_per_gib: weight_memory,
                    gpu_per_device: weight_gpu,
                }),
                starve_after_secs: Some(starve_after),
            };
            let line = format!("resource group {group} orders its queue by {queue}");
            Call::put(
                format!("/v1/admin/resource-groups/{group}/scheduling"),
                scheduling,
                done(line),
            )
        }
        _ => unreachable!("only create-group and set-scheduling are a group's settings"),
    })
}

/// `set-policy` and `save-preset`: limits and amounts, memory in GiB.
fn limits_call(command: AdminCommand) -> Call {
    match command {
        AdminCommand::SetPolicy {
            name,
            max_sessions,
            max_cpu,
            max_memory_gib,
            max_gpu,
            max_lifetime,
            max_custom_images,
            max_session_priority,
            max_pids,
            max_log_bytes,
            max_folder_gib,
        } => {
            let limits = PolicyLimits {
                max_concurrent_sessions: max_sessions,
                max_total: amounts(max_cpu, max_memory_gib, max_gpu),
                max_session_lifetime_secs: max_lifetime,
                max_custom_images,
                max_session_priority,
                max_pids,
                max_log_bytes,
                max_folder_bytes: max_folder_gib.map(gib),
            };
            let line = format!("resource policy {name} set");
            Call::put(format!("/v1/admin/policies/{name}"), limits, done(line))
        }
        AdminCommand::SavePreset {
            name,
            cpu,
            memory_gib,
            gpu,
            shm_mib,
        } => {
            let preset = PresetIn {
                resources: PresetAmounts {
                    cpu,
                    memory_bytes: gib(memory_gib),
                    gpu,
                },
                shared_memory_bytes: Some(shm_mib << 20),
            };
            let line = format!("preset {name} saved");
            Call::put(format!("/v1/admin/presets/{name}"), preset, done(line))
        }
        _ => unreachable!("only set-policy and save-preset are limits"),
    }
}

/// Where `berth admin ls KIND` reads.
fn list_path(kind: Kind) -> &'static str {
    match kind {
        Kind::Users => "/v1/admin/users",
        Kind::Keys => "/v1/admin/api-keys",
        Kind::Keypairs => "/v1/admin/backendai-keypairs",
        Kind::Projects => "/v1/admin/projects",
        Kind::Groups => "/v1/admin/resource-groups",
        Kind::Policies => "/v1/admin/policies",
        Kind::Presets => "/v1/presets",
        Kind::Idle => "/v1/admin/idle-checks",
        Kind::Agents => "/v1/admin/agents",
        Kind::Registries => "/v1/admin/registries",
        Kind::Images => "/v1/admin/images",
    }
}

fn agent_call(command: AgentAdminCommand) -> Call {
    match command {
        AgentAdminCommand::Admit {
            id,
            group,
            max_cpu,
            max_memory_gib,
            max_gpu,
            credential_out,
        } => {
            let admit = AdmitAgent {
                agent_id: id.clone(),
                resource_group: group.clone(),
                max_capacity: Some(amounts(max_cpu, max_memory_gib, max_gpu)),
            };
            let answer = Answer::Admitted {
                id,
                group,
                credential_out,
            };
            Call::post("/v1/admin/agents", admit, answer)
        }
        AgentAdminCommand::Revoke { id, reason } => Call::post(
            format!("/v1/admin/agents/{id}/revoke"),
            Revocation {
                reason: Some(reason),
            },
            Answer::Revoked(id),
        ),
    }
}

/// `berth admin idle set`: a group's or a policy's checks, whole.
fn idle_call(command: IdleAdminCommand) -> anyhow::Result<Call> {
    let IdleAdminCommand::Set {
        group,
        policy,
        max_lifetime,
        network_idle,
        grace,
        window,
        cpu,
        memory,
        gpu,
        gpu_memory,
        combine,
    } = command
    else {
        anyhow::bail!("only `idle set` sets idle checks");
    };
    let combine = match combine.as_str() {
        "all" | "and" => Combine::All,
        "any" | "or" => Combine::Any,
        other => anyhow::bail!(
            "--combine (checks.utilization.combine): `{other}` is neither `all` nor `any`"
        ),
    };
    let line = match (&group, &policy) {
        (Some(g), _) => format!("idle checks of resource_group {g} set"),
        (None, Some(p)) => format!("idle checks of resource_policy {p} set"),
        (None, None) => anyhow::bail!("name a --group or a --policy"),
    };
    let utilization = window.map(|window_secs| UtilizationIn {
        grace_period_secs: grace,
        window_secs,
        thresholds: ThresholdsIn {
            cpu_percent: cpu,
            memory_percent: memory,
            gpu_percent: gpu,
            gpu_memory_percent: gpu_memory,
        },
        combine: Some(combine),
    });
    let set = IdleChecksIn {
        // `--group` and `--policy` conflict: one of them is named.
        resource_group: group,
        resource_policy: policy,
        checks: ChecksIn {
            max_lifetime_secs: max_lifetime,
            network_idle_timeout_secs: network_idle,
            utilization,
        },
    };
    Ok(Call::put("/v1/admin/idle-checks", set, done(line)))
}

/// GiB from a flag as the API's bytes.
fn gib(v: f64) -> u64 {
    (v * (1u64 << 30) as f64).round().max(0.0) as u64
}

/// Cores and GPUs in units, memory in GiB, as the API takes an amount.
fn amounts(cpu: f64, memory_gib: f64, gpu: f64) -> AmountsIn {
    AmountsIn {
        cpu,
        memory_bytes: gib(memory_gib),
        gpu,
    }
}

/// A queue policy as `--queue` names it.
fn queue_policy(name: &str) -> anyhow::Result<QueuePolicy> {
    QueuePolicy::parse(name).with_context(|| {
        let all: Vec<&str> = QueuePolicy::ALL.iter().map(|p| p.as_str()).collect();
        format!(
            "--queue (queue_policy): `{name}` is not one of {}",
            all.join(", ")
        )
    })
}

/// The new password for `email`: BERTH_NEW_PASSWORD, or the first line of standard input
/// (asked for on the terminal when it is one), without its line ending.
pub(crate) fn new_password(email: &str) -> anyhow::Result<String> {
    use std::io::{BufRead, IsTerminal, Write};
    if let Ok(password) = std::env::var("BERTH_NEW_PASSWORD") {
        return Ok(password);
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("new password for {email} (it shows as you type; pipe it in or set BERTH_NEW_PASSWORD to hide it): ");
        std::io::stderr().flush()?;
    }
    let mut line = String::new();
    stdin.lock().read_line(&mut line)?;
    let password = line
        .strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(&line);
    anyhow::ensure!(
        !password.is_empty(),
        "no password: give it on standard input or in BERTH_NEW_PASSWORD"
    );
    Ok(password.to_owned())
}
