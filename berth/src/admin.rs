//! `berth admin ...`: operators create users, keys, passwords, projects, resource groups,
//! policies and presets, admit and revoke agents, and make the NATS server's authorization. Talks to the database directly (like `berth migrate`), so it works before any
//! key exists; every change is an event in the log.

use clap::Subcommand;
use events::payloads::*;
use launcher::access;

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Create the defaults and the first superadmin on a fresh install (prints its key once).
    Init,
    /// Create a user and print their first API key (shown only now).
    CreateUser {
        #[arg(long)]
        email: String,
        /// user, admin or superadmin
        #[arg(long, default_value = "user")]
        role: String,
        #[arg(long, default_value = "default")]
        policy: String,
        /// Projects the user joins (repeatable).
        #[arg(long = "project", default_values_t = vec!["default".to_string()])]
        projects: Vec<String>,
    },
    /// Issue another API key to a user.
    IssueKey {
        #[arg(long)]
        email: String,
    },
    /// Set a user's password, with which they sign in to the web console. The password is
    /// read from BERTH_NEW_PASSWORD when set, else from the first line of standard input;
    /// never from a flag, which other users of the host could read in the process list.
    SetPassword {
        #[arg(long)]
        email: String,
    },
    /// Create a project (or change its description).
    CreateProject {
        name: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Add a user, by email, to a project.
    AddMember { project: String, email: String },
    /// Create a resource group (or change its scheduling settings).
    CreateGroup {
        name: String,
        /// fifo or backfill
        #[arg(long, default_value = "fifo")]
        queue: String,
        /// concentrated or dispersed
        #[arg(long, default_value = "concentrated")]
        selection: String,
        /// Counted scheduling attempts before a session is cancelled.
        #[arg(long, default_value_t = 5)]
        max_attempts: u32,
        /// Failed attempts after which a queue head stops holding back those behind it.
        #[arg(long, default_value_t = 3)]
        skip_after: u32,
        /// Seconds a session may wait in PENDING before it is cancelled (0: no limit).
        #[arg(long, default_value_t = 3600)]
        pending_timeout: u64,
    },
    /// Let a project use a resource group.
    GrantGroup { group: String, project: String },
    /// Create a resource policy (or change its limits).
    SetPolicy {
        name: String,
        #[arg(long)]
        max_sessions: u32,
        /// cores
        #[arg(long)]
        max_cpu: f64,
        /// GiB
        #[arg(long)]
        max_memory_gib: f64,
        #[arg(long, default_value_t = 0.0)]
        max_gpu: f64,
        /// seconds
        #[arg(long)]
        max_lifetime: Option<u64>,
        /// Most customized images (committed sessions) a user may keep.
        #[arg(long)]
        max_custom_images: Option<u32>,
    },
    /// Admit or revoke agents.
    #[command(subcommand)]
    Agent(AgentAdminCommand),
    /// Print the NATS server's `authorization` block: the control plane's user (from the
    /// user and password in BERTH_NATS_URL) with every right, and each admitted agent by its
    /// key with its own subjects only. Include it in the server's configuration and reload
    /// the server (SIGHUP) after each admission or revocation.
    NatsAuthorization,
    /// The idle-reaper's checks: set them, or see what it would reap now.
    #[command(subcommand)]
    Idle(IdleAdminCommand),
    /// Save a resource preset that create requests may name.
    SavePreset {
        name: String,
        #[arg(long)]
        cpu: f64,
        #[arg(long)]
        memory_gib: f64,
        #[arg(long, default_value_t = 0.0)]
        gpu: f64,
        #[arg(long, default_value_t = 64)]
        shm_mib: u64,
    },
}

#[derive(Subcommand)]
pub enum IdleAdminCommand {
    /// Set the idle checks of a resource group, or of a resource policy (whose checks replace
    /// the group's, checker by checker, for its users). A checker left out is off.
    Set {
        #[arg(long, conflicts_with = "policy", required_unless_present = "policy")]
        group: Option<String>,
        #[arg(long)]
        policy: Option<String>,
        /// Seconds a session may live, counted from its creation.
        #[arg(long)]
        max_lifetime: Option<u64>,
        /// Seconds without a byte in or out after which an interactive session is reaped.
        #[arg(long)]
        network_idle: Option<u64>,
        /// Utilization: seconds after the start of RUNNING in which it never reaps.
        #[arg(long, default_value_t = 0)]
        grace: u64,
        /// Utilization: seconds the averages are taken over (turns the checker on).
        #[arg(long)]
        window: Option<u64>,
        /// Utilization thresholds, in percent of what the session holds.
        #[arg(long)]
        cpu: Option<f64>,
        #[arg(long)]
        memory: Option<f64>,
        #[arg(long)]
        gpu: Option<f64>,
        #[arg(long)]
        gpu_memory: Option<f64>,
        /// `all`: idle when every resource is below its threshold; `any`: when one is.
        #[arg(long, default_value = "all")]
        combine: String,
    },
    /// List the sessions the idle-reaper would reap now, and why, without reaping (asks the
    /// running idle-reaper over NATS).
    Preview,
}

#[derive(Subcommand)]
pub enum AgentAdminCommand {
    /// Admit an agent into a resource group, up to a capacity; prints its credential (an
    /// nkey seed) once. Admitting it again gives it a new credential.
    Admit {
        id: String,
        #[arg(long, default_value = "default")]
        group: String,
        /// Most cores it may offer.
        #[arg(long, default_value_t = 1024.0)]
        max_cpu: f64,
        /// Most GiB it may offer.
        #[arg(long, default_value_t = 16384.0)]
        max_memory_gib: f64,
        /// Most GPUs it may offer.
        #[arg(long, default_value_t = 64.0)]
        max_gpu: f64,
        /// Write the credential to this file (mode 0600) instead of printing it.
        #[arg(long)]
        credential_out: Option<std::path::PathBuf>,
    },
    /// Revoke an agent: it may no longer register, and is offered to the scheduler no more.
    Revoke {
        id: String,
        #[arg(long, default_value = "revoked by an operator")]
        reason: String,
    },
}

/// Says how the NATS server learns of an admission or a revocation: where berth keeps its
/// authorization (`BERTH_NATS_AUTHORIZATION_DIR`), the control plane's recorder follows the
/// event; elsewhere the operator makes the authorization again.
fn tell_nats_server(config: &berth::config::Config) {
    match &config.nats_authorization {
        Some(dir) => println!(
            "the control plane brings the NATS server's authorization ({}) in step",
            dir.display()
        ),
        None => println!(
            "make the NATS server's authorization again (berth admin nats-authorization) and reload it"
        ),
    }
}

fn milli(v: f64) -> u64 {
    (v * 1000.0).round().max(0.0) as u64
}

fn gib(v: f64) -> u64 {
    (v * (1u64 << 30) as f64).round().max(0.0) as u64
}

pub async fn run(
    pool: &deadpool_postgres::Pool,
    config: &berth::config::Config,
    command: AdminCommand,
) -> anyhow::Result<()> {
    match command {
        AdminCommand::Agent(AgentAdminCommand::Admit {
            id,
            group,
            max_cpu,
            max_memory_gib,
            max_gpu,
            credential_out,
        }) => {
            let admission = recorder::admission::Admission {
                agent_id: id.clone(),
                resource_group: group.clone(),
                max_capacity: ResourceSlots {
                    cpu_milli: milli(max_cpu),
                    memory_bytes: gib(max_memory_gib),
                    gpu_milli: milli(max_gpu),
                },
            };
            let seed = recorder::admission::admit(pool, &admission, "admin").await?;
            match credential_out {
                Some(path) => {
                    write_secret(&path, &seed)?;
                    println!(
                        "agent {id} admitted to {group}; its credential is in {}",
                        path.display()
                    );
                }
                None => {
                    println!("agent {id} admitted to {group}");
                    println!("credential (shown only now; give it to the agent as BERTH_AGENT_CREDENTIAL): {seed}");
                }
            }
            tell_nats_server(config);
        }
        AdminCommand::Agent(AgentAdminCommand::Revoke { id, reason }) => {
            recorder::admission::revoke(pool, &id, &reason, "admin").await?;
            println!("agent {id} revoked");
            tell_nats_server(config);
        }
        AdminCommand::Idle(IdleAdminCommand::Set {
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
        }) => {
            use events::idleness::*;
            let combine = match combine.as_str() {
                "all" | "and" => Combine::All,
                "any" | "or" => Combine::Any,
                other => anyhow::bail!("--combine: `{other}` is neither `all` nor `any`"),
            };
            let utilization = window.map(|window_secs| UtilizationCheck {
                grace_period_secs: grace,
                window_secs,
                thresholds: Thresholds {
                    cpu_percent: cpu,
                    memory_percent: memory,
                    gpu_percent: gpu,
                    gpu_memory_percent: gpu_memory,
                },
                combine,
            });
            let scope = match (group, policy) {
                (Some(g), _) => IdleScope::ResourceGroup(g),
                (None, Some(p)) => IdleScope::ResourcePolicy(p),
                (None, None) => anyhow::bail!("name a --group or a --policy"),
            };
            let checks = IdleChecks {
                max_lifetime_secs: max_lifetime,
                network_idle_timeout_secs: network_idle,
                utilization,
            };
            launcher::access::set_idle_checks(pool, scope.clone(), checks).await?;
            println!("idle checks of {scope:?} set");
        }
        AdminCommand::Idle(IdleAdminCommand::Preview) => {
            let nats = berth::app::connect_nats(config).await?;
            let answer = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                nats.request(config.agent_bus.idle_preview(), Vec::new().into()),
            )
            .await
            .map_err(|_| anyhow::anyhow!("the idle-reaper did not answer (is it running?)"))?
            .map_err(|e| anyhow::anyhow!("the idle-reaper did not answer: {e}"))?;
            let due: Vec<events::idleness::IdleVerdict> = serde_json::from_slice(&answer.payload)?;
            if due.is_empty() {
                println!("nothing would be reaped now");
            }
            for verdict in due {
                println!(
                    "{}  {}  {}",
                    verdict.session_id,
                    verdict.reading.checker.as_str(),
                    verdict.reading.explanation
                );
            }
        }
        AdminCommand::NatsAuthorization => {
            let url = reqwest::Url::parse(&config.nats_url)?;
            anyhow::ensure!(
                !url.username().is_empty() && url.password().is_some(),
                "BERTH_NATS_URL names no user and password for the control plane"
            );
            let keys = recorder::admission::admitted_keys(pool).await?;
            let block = bus::permissions::authorization(
                &config.agent_bus,
                url.username(),
                url.password().unwrap_or_default(),
                &keys,
            );
            println!("authorization: {}", serde_json::to_string_pretty(&block)?);
        }
        AdminCommand::Init => match access::bootstrap(pool).await? {
            Some((email, key)) => {
                println!("created superadmin {email}");
                println!("API key (shown only now): {key}");
            }
            None => println!("already initialised"),
        },
        AdminCommand::CreateUser {
            email,
            role,
            policy,
            projects,
        } => {
            let role = Role::parse(&role).ok_or_else(|| {
                anyhow::anyhow!("--role: `{role}` is not user, admin or superadmin")
            })?;
            let (id, key) = access::create_user(pool, &email, role, &policy, &projects).await?;
            println!("created user {email} ({id})");
            println!("API key (shown only now): {key}");
        }
        AdminCommand::IssueKey { email } => {
            println!(
                "API key (shown only now): {}",
                access::issue_key(pool, &email).await?
            );
        }
        AdminCommand::SetPassword { email } => {
            let password = new_password(&email)?;
            launcher::credentials::set_password(pool, &email, &password).await?;
            println!("password of {email} set");
        }
        AdminCommand::CreateProject { name, description } => {
            access::create_project(pool, &name, &description).await?;
            println!("project {name} created");
        }
        AdminCommand::AddMember { project, email } => {
            access::add_member(pool, &project, &email).await?;
            println!("{email} joined {project}");
        }
        AdminCommand::CreateGroup {
            name,
            queue,
            selection,
            max_attempts,
            skip_after,
            pending_timeout,
        } => {
            let queue_policy = match queue.as_str() {
                "fifo" => QueuePolicy::Fifo,
                "backfill" => QueuePolicy::Backfill,
                other => anyhow::bail!("--queue: `{other}` is not fifo or backfill"),
            };
            let agent_selection = match selection.as_str() {
                "concentrated" => AgentSelection::Concentrated,
                "dispersed" => AgentSelection::Dispersed,
                other => anyhow::bail!("--selection: `{other}` is not concentrated or dispersed"),
            };
            access::create_group(
                pool,
                ResourceGroupCreated {
                    name: name.clone(),
                    queue_policy,
                    agent_selection,
                    max_attempts,
                    skip_after,
                    pending_timeout_secs: pending_timeout,
                },
            )
            .await?;
            println!("resource group {name} created");
        }
        AdminCommand::GrantGroup { group, project } => {
            access::grant_group(pool, &group, &project).await?;
            println!("{project} may use {group}");
        }
        AdminCommand::SetPolicy {
            name,
            max_sessions,
            max_cpu,
            max_memory_gib,
            max_gpu,
            max_lifetime,
            max_custom_images,
        } => {
            access::set_policy(
                pool,
                ResourcePolicySet {
                    name: name.clone(),
                    max_concurrent_sessions: max_sessions,
                    max_total: ResourceSlots {
                        cpu_milli: milli(max_cpu),
                        memory_bytes: gib(max_memory_gib),
                        gpu_milli: milli(max_gpu),
                    },
                    max_session_lifetime_secs: max_lifetime,
                    max_custom_images,
                },
            )
            .await?;
            println!("resource policy {name} set");
        }
        AdminCommand::SavePreset {
            name,
            cpu,
            memory_gib,
            gpu,
            shm_mib,
        } => {
            access::save_preset(
                pool,
                PresetSaved {
                    name: name.clone(),
                    resources: ResourceSlots {
                        cpu_milli: milli(cpu),
                        memory_bytes: gib(memory_gib),
                        gpu_milli: milli(gpu),
                    },
                    shared_memory_bytes: shm_mib << 20,
                },
            )
            .await?;
            println!("preset {name} saved");
        }
    }
    Ok(())
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

/// Writes a secret to a file only its owner can read.
fn write_secret(path: &std::path::Path, secret: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    writeln!(file, "{secret}")?;
    Ok(())
}
