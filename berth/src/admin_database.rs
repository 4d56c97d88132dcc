//! `berth admin ...` written straight to the database, as it was before the gateway had
//! superadmin endpoints: what runs when no API key is set (BERTH_API_KEY), on a host that
//! holds BERTH_DATABASE_URL. It is the way back in when no superadmin key is left
//! (`issue-key --email admin@berth.local`), and what `infra/up.sh`, the compose file and the
//! binary's own tests still call; everything else goes through the gateway
//! ([`crate::admin`]). The same functions as the gateway's endpoints record each
//! change, so the events are the same either way.

use events::payloads::*;
use launcher::access;

use crate::admin::{
    new_password, print_keypair, write_secret, AdminCommand, AgentAdminCommand, IdleAdminCommand,
};

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

/// The gateway's master key, which a keypair's secret is derived with. Unlike the gateway,
/// this never makes one: a key made here, beside a gateway that has another, would derive a
/// secret that gateway refuses.
fn backendai_master_key(config: &berth::config::Config) -> anyhow::Result<Vec<u8>> {
    use berth::config::MasterKey;
    match &config.backendai {
        None => anyhow::bail!("Backend.AI's API is switched off (BERTH_BACKENDAI=off)"),
        Some(MasterKey::File(path)) if !path.exists() => anyhow::bail!(
            "no Backend.AI master key at {}: run this where the gateway keeps it, or set \
             BERTH_BACKENDAI_MASTER_KEY(_FILE) as the gateway has it",
            path.display()
        ),
        Some(key) => key.load(),
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
        AdminCommand::Ls { .. } => anyhow::bail!(
            "berth admin ls reads through the gateway: set BERTH_API_KEY to a superadmin's key"
        ),
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
        AdminCommand::IssueKey {
            email: _,
            keypair_for: Some(email),
        } => {
            let master = backendai_master_key(config)?;
            let (_, access_key) = access::issue_backendai_keypair(pool, &email).await?;
            let secret = gateway::handles::derive_secret(&master, &access_key);
            print_keypair(&email, &access_key, &secret, None);
        }
        AdminCommand::IssueKey { email, .. } => {
            let email = email.ok_or_else(|| anyhow::anyhow!("name the user: --email"))?;
            println!(
                "API key (shown only now): {}",
                access::issue_key(pool, &email).await?
            );
        }
        AdminCommand::RevokeKey { access_key } => {
            access::revoke_backendai_keypair(pool, &access_key).await?;
            println!("Backend.AI keypair {access_key} revoked");
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
            let queue_policy = queue_policy(&queue)?;
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
            if half_life == 0 {
                anyhow::bail!("--half-life: at least 1 second");
            }
            for (flag, weight) in [
                ("--weight-cpu", weight_cpu),
                ("--weight-memory", weight_memory),
                ("--weight-gpu", weight_gpu),
            ] {
                if !(0.0..=1e6).contains(&weight) {
                    anyhow::bail!("{flag}: from 0 to 1000000");
                }
            }
            access::set_group_scheduling(
                pool,
                ResourceGroupSchedulingSet {
                    name: group.clone(),
                    queue_policy: queue_policy(&queue)?,
                    half_life_secs: half_life,
                    lookback_secs: lookback,
                    weight_cpu_per_core: weight_cpu,
                    weight_memory_per_gib: weight_memory,
                    weight_gpu_per_device: weight_gpu,
                    starve_after_secs: starve_after,
                },
            )
            .await?;
            println!("resource group {group} orders its queue by {queue}");
        }
        AdminCommand::Shares { .. } => anyhow::bail!(
            "berth admin shares reads through the gateway: set BERTH_API_KEY to a superadmin's key"
        ),
        AdminCommand::SetPriority { session, priority } => {
            let id: uuid::Uuid = session
                .parse()
                .map_err(|_| anyhow::anyhow!("`{session}` is not a session id"))?;
            let metadata = events::trace::metadata("admin", None);
            events::lifecycle::command(pool, id, &metadata, |s| s.change_priority(priority))
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            println!("session {session} has priority {priority}");
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
            max_session_priority,
        } => {
            if max_session_priority.is_some_and(|m| m > SessionPriority::MAX as u32) {
                anyhow::bail!("--max-session-priority: at most {}", SessionPriority::MAX);
            }
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
                    max_session_priority,
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

/// A queue policy as `--queue` names it.
fn queue_policy(name: &str) -> anyhow::Result<QueuePolicy> {
    QueuePolicy::parse(name).ok_or_else(|| {
        let all: Vec<&str> = QueuePolicy::ALL.iter().map(|p| p.as_str()).collect();
        anyhow::anyhow!("--queue: `{name}` is not one of {}", all.join(", "))
    })
}
