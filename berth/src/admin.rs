//! `berth admin ...`: operators create users, keys, passwords, projects, resource groups,
//! policies and presets, set the idle checks, admit and revoke agents, list each of these,
//! and make the NATS server's authorization. Everything goes through the gateway's superadmin
//! endpoints (`/v1/admin/...`) with a superadmin's API key (BERTH_GATEWAY_URL,
//! BERTH_API_KEY), the client `berth session` uses; every change is an event in the log. Only
//! `init`, the first superadmin on a fresh install (which `berth up` also makes), reaches the
//! database, because no key exists before it; and without an API key the commands write to
//! the database as they did before (`crate::admin_database`), the way back in when no
//! superadmin key is left.

use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{json, Value};

use crate::session_cli::{print_error, show, Client, Output};
use gateway::model::{
    AdminGroups, AdminPolicies, AdminProjects, AdminUsers, AdmittedAgents, Amounts, ApiKeysListed,
    GroupShares, IdleSettings, KeypairsListed, Presets,
};

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Create the defaults and the first superadmin on a fresh install (prints its key once).
    /// The one admin command that reaches the database (BERTH_DATABASE_URL): no key exists
    /// before it.
    Init,
    /// List users, API keys, Backend.AI keypairs, projects, resource groups, policies,
    /// presets, idle checks or agents.
    Ls {
        #[arg(value_enum)]
        kind: Kind,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
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
    /// Issue another API key to a user; with `--backendai EMAIL`, a Backend.AI keypair for
    /// Backend.AI's own client instead, printed once as the `export` lines it reads.
    IssueKey {
        #[arg(
            long,
            required_unless_present = "keypair_for",
            conflicts_with = "keypair_for"
        )]
        email: Option<String>,
        /// The user to issue a Backend.AI keypair to.
        #[arg(long = "backendai", value_name = "EMAIL")]
        keypair_for: Option<String>,
    },
    /// Revoke a Backend.AI keypair (`--backendai ACCESS_KEY`): requests it signs are refused.
    RevokeKey {
        #[arg(long = "backendai", value_name = "ACCESS_KEY")]
        access_key: String,
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
        /// fifo, backfill, lifo, drf or fair-share
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
    /// Set how a resource group's queue is ordered: its policy, fair share's half-life,
    /// look-back and weights, and the starvation bound.
    SetScheduling {
        group: String,
        /// fifo, backfill, lifo, drf or fair-share
        #[arg(long)]
        queue: String,
        /// Fair share: seconds after which past use counts half (7 days).
        #[arg(long, default_value_t = 604_800)]
        half_life: u64,
        /// Fair share: seconds of past use counted (30 days).
        #[arg(long, default_value_t = 2_592_000)]
        lookback: u64,
        /// Fair share: what a core counts for per second.
        #[arg(long, default_value_t = 1.0)]
        weight_cpu: f64,
        /// Fair share: what a GiB of memory counts for per second.
        #[arg(long, default_value_t = 0.25)]
        weight_memory: f64,
        /// Fair share: what a GPU counts for per second.
        #[arg(long, default_value_t = 10.0)]
        weight_gpu: f64,
        /// Seconds a session may be passed over before it goes first (0: no bound).
        #[arg(long, default_value_t = 0)]
        starve_after: u64,
    },
    /// Every user's standing in a resource group's queue: decayed use, fair-share factor,
    /// dominant share, queued sessions, the priority they may ask.
    Shares {
        group: String,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Change a queued session's priority (0 to 100, higher first).
    SetPriority { session: String, priority: i32 },
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
        /// Highest priority a user may ask for a session (0 to 100; absent: 100).
        #[arg(long)]
        max_session_priority: Option<u32>,
    },
    /// Admit or revoke agents.
    #[command(subcommand)]
    Agent(AgentAdminCommand),
    /// Print the NATS server's `authorization` block: the control plane's user (from the
    /// user and password in BERTH_NATS_URL) with every right, and each admitted agent (as
    /// `GET /v1/admin/agents` lists them) by its key with its own subjects only. Include it in the server's configuration and reload
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

/// What `berth admin ls` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Users,
    Keys,
    Keypairs,
    Projects,
    Groups,
    Policies,
    Presets,
    Idle,
    Agents,
}

/// Says how the NATS server learns of an admission or a revocation: a control plane that
/// keeps its authorization (`BERTH_NATS_AUTHORIZATION_DIR`, its recorder's process) follows
/// the event; elsewhere the operator makes the authorization again.
fn tell_nats_server() {
    println!(
        "a control plane that keeps the NATS server's authorization (BERTH_NATS_AUTHORIZATION_DIR) brings it in step; \
         elsewhere make it again (berth admin nats-authorization) and reload the server"
    );
}

/// Cores or GPUs as the API takes them (units), from a flag.
fn units(v: f64) -> Value {
    json!(v)
}

/// GiB from a flag as the API's bytes.
fn gib(v: f64) -> u64 {
    (v * (1u64 << 30) as f64).round().max(0.0) as u64
}

/// `{cpu, memory_bytes, gpu}` as the API takes an amount.
fn amounts(cpu: f64, memory_gib: f64, gpu: f64) -> Value {
    json!({"cpu": units(cpu), "memory_bytes": gib(memory_gib), "gpu": units(gpu)})
}

/// Runs an admin command through the gateway (`init` alone through the database).
pub async fn run(
    config: &berth::config::Config,
    command: AdminCommand,
) -> anyhow::Result<ExitCode> {
    if matches!(command, AdminCommand::Init) || config.api_key.is_none() {
        let store = crate::connect_store(config).await?;
        crate::admin_database::run(store.pool(), config, command).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let client = Client::new(config)?;
    let get = |path: &str| client.http.get(client.url(path));
    let post = |path: &str, body: Value| client.http.post(client.url(path)).json(&body);
    let put = |path: &str, body: Value| client.http.put(client.url(path)).json(&body);
    let result: Result<(), Value> = match command {
        AdminCommand::Init => unreachable!("the database's alone"),
        AdminCommand::Ls { kind, output } => {
            let path = match kind {
                Kind::Users => "/v1/admin/users",
                Kind::Keys => "/v1/admin/api-keys",
                Kind::Keypairs => "/v1/admin/backendai-keypairs",
                Kind::Projects => "/v1/admin/projects",
                Kind::Groups => "/v1/admin/resource-groups",
                Kind::Policies => "/v1/admin/policies",
                Kind::Presets => "/v1/presets",
                Kind::Idle => "/v1/admin/idle-checks",
                Kind::Agents => "/v1/admin/agents",
            };
            client
                .send(get(path))
                .await?
                .map(|v| print_listing(kind, output, v))
        }
        AdminCommand::Agent(AgentAdminCommand::Admit {
            id,
            group,
            max_cpu,
            max_memory_gib,
            max_gpu,
            credential_out,
        }) => {
            let body = json!({
                "agent_id": id,
                "resource_group": group,
                "max_capacity": amounts(max_cpu, max_memory_gib, max_gpu),
            });
            match client.send(post("/v1/admin/agents", body)).await? {
                Ok(v) => {
                    let seed = v["credential"].as_str().unwrap_or_default();
                    match credential_out {
                        Some(path) => {
                            write_secret(&path, seed)?;
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
                    tell_nats_server();
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        AdminCommand::Agent(AgentAdminCommand::Revoke { id, reason }) => client
            .send(post(
                &format!("/v1/admin/agents/{id}/revoke"),
                json!({ "reason": reason }),
            ))
            .await?
            .map(|_| {
                println!("agent {id} revoked");
                tell_nats_server();
            }),
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
            let combine = match combine.as_str() {
                "all" | "and" => "all",
                "any" | "or" => "any",
                other => anyhow::bail!("--combine: `{other}` is neither `all` nor `any`"),
            };
            let (field, name) = match (group, policy) {
                (Some(g), _) => ("resource_group", g),
                (None, Some(p)) => ("resource_policy", p),
                (None, None) => anyhow::bail!("name a --group or a --policy"),
            };
            let mut checks = serde_json::Map::new();
            if let Some(secs) = max_lifetime {
                checks.insert("max_lifetime_secs".into(), json!(secs));
            }
            if let Some(secs) = network_idle {
                checks.insert("network_idle_timeout_secs".into(), json!(secs));
            }
            if let Some(window) = window {
                let mut thresholds = serde_json::Map::new();
                for (name, value) in [
                    ("cpu_percent", cpu),
                    ("memory_percent", memory),
                    ("gpu_percent", gpu),
                    ("gpu_memory_percent", gpu_memory),
                ] {
                    if let Some(v) = value {
                        thresholds.insert(name.into(), json!(v));
                    }
                }
                checks.insert(
                    "utilization".into(),
                    json!({"grace_period_secs": grace, "window_secs": window,
                           "thresholds": thresholds, "combine": combine}),
                );
            }
            client
                .send(put(
                    "/v1/admin/idle-checks",
                    json!({ field: name, "checks": checks }),
                ))
                .await?
                .map(|_| println!("idle checks of {field} {name} set"))
        }
        AdminCommand::Idle(IdleAdminCommand::Preview) => client
            .send(get("/v1/admin/idle-preview"))
            .await?
            .map(|v| {
                let due = v["due"].as_array().cloned().unwrap_or_default();
                if due.is_empty() {
                    println!("nothing would be reaped now");
                }
                for verdict in due {
                    println!(
                        "{}  {}  {}",
                        verdict["session_id"].as_str().unwrap_or_default(),
                        verdict["reading"]["checker"].as_str().unwrap_or_default(),
                        verdict["reading"]["explanation"].as_str().unwrap_or_default()
                    );
                }
            }),
        AdminCommand::NatsAuthorization => {
            let url = reqwest::Url::parse(&config.nats_url)?;
            anyhow::ensure!(
                !url.username().is_empty() && url.password().is_some(),
                "BERTH_NATS_URL names no user and password for the control plane"
            );
            match client.send(get("/v1/admin/agents")).await? {
                Ok(v) => {
                    let listed: AdmittedAgents = serde_json::from_value(v)?;
                    let keys: Vec<bus::permissions::AdmittedKey> = listed
                        .agents
                        .into_iter()
                        .filter_map(|a| {
                            Some(bus::permissions::AdmittedKey {
                                public_key: a.public_key?,
                                agent_id: a.agent_id,
                            })
                        })
                        .collect();
                    let block = bus::permissions::authorization(
                        &config.agent_bus,
                        url.username(),
                        url.password().unwrap_or_default(),
                        &keys,
                    );
                    println!("authorization: {}", serde_json::to_string_pretty(&block)?);
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        AdminCommand::CreateUser {
            email,
            role,
            policy,
            projects,
        } => client
            .send(post(
                "/v1/admin/users",
                json!({"email": email, "role": role, "resource_policy": policy, "projects": projects}),
            ))
            .await?
            .map(|v| {
                println!(
                    "created user {email} ({})",
                    v["user_id"].as_str().unwrap_or_default()
                );
                println!(
                    "API key (shown only now): {}",
                    v["api_key"].as_str().unwrap_or_default()
                );
            }),
        AdminCommand::IssueKey {
            email: _,
            keypair_for: Some(email),
        } => client
            .send(post(
                "/v1/admin/backendai-keypairs",
                json!({ "email": email }),
            ))
            .await?
            .map(|v| {
                print_keypair(
                    &email,
                    v["access_key"].as_str().unwrap_or_default(),
                    v["secret_key"].as_str().unwrap_or_default(),
                    Some(&client.url("")),
                )
            }),
        AdminCommand::IssueKey { email, .. } => client
            .send(post("/v1/admin/api-keys", json!({ "email": email })))
            .await?
            .map(|v| {
                println!(
                    "API key (shown only now): {}",
                    v["api_key"].as_str().unwrap_or_default()
                )
            }),
        AdminCommand::RevokeKey { access_key } => client
            .send(client.http.post(client.url(&format!(
                "/v1/admin/backendai-keypairs/{access_key}/revoke"
            ))))
            .await?
            .map(|_| println!("Backend.AI keypair {access_key} revoked")),
        AdminCommand::SetPassword { email } => {
            let password = new_password(&email)?;
            client
                .send(put(
                    "/v1/admin/passwords",
                    json!({"email": email, "password": password}),
                ))
                .await?
                .map(|_| println!("password of {email} set"))
        }
        AdminCommand::CreateProject { name, description } => client
            .send(post(
                "/v1/admin/projects",
                json!({"name": name, "description": description}),
            ))
            .await?
            .map(|_| println!("project {name} created")),
        AdminCommand::AddMember { project, email } => client
            .send(post(
                &format!("/v1/admin/projects/{project}/members"),
                json!({ "email": email }),
            ))
            .await?
            .map(|_| println!("{email} joined {project}")),
        AdminCommand::CreateGroup {
            name,
            queue,
            selection,
            max_attempts,
            skip_after,
            pending_timeout,
        } => client
            .send(post(
                "/v1/admin/resource-groups",
                json!({"name": name, "queue_policy": queue, "agent_selection": selection,
                       "max_attempts": max_attempts, "skip_after": skip_after,
                       "pending_timeout_secs": pending_timeout}),
            ))
            .await?
            .map(|_| println!("resource group {name} created")),
        AdminCommand::SetScheduling {
            group,
            queue,
            half_life,
            lookback,
            weight_cpu,
            weight_memory,
            weight_gpu,
            starve_after,
        } => client
            .send(put(
                &format!("/v1/admin/resource-groups/{group}/scheduling"),
                json!({"queue_policy": queue, "half_life_secs": half_life,
                       "lookback_secs": lookback,
                       "weights": {"cpu_per_core": weight_cpu, "memory_per_gib": weight_memory,
                                   "gpu_per_device": weight_gpu},
                       "starve_after_secs": starve_after}),
            ))
            .await?
            .map(|_| println!("resource group {group} orders its queue by {queue}")),
        AdminCommand::Shares { group, output } => client
            .send(get(&format!("/v1/admin/resource-groups/{group}/shares")))
            .await?
            .map(|v| print_shares(output, v)),
        AdminCommand::SetPriority { session, priority } => client
            .send(put(
                &format!("/v1/admin/sessions/{session}/priority"),
                json!({ "priority": priority }),
            ))
            .await?
            .map(|_| println!("session {session} has priority {priority}")),
        AdminCommand::GrantGroup { group, project } => client
            .send(post(
                &format!("/v1/admin/resource-groups/{group}/grants"),
                json!({ "project": project }),
            ))
            .await?
            .map(|_| println!("{project} may use {group}")),
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
            let mut body = json!({
                "max_concurrent_sessions": max_sessions,
                "max_total": amounts(max_cpu, max_memory_gib, max_gpu),
            });
            if let Some(secs) = max_lifetime {
                body["max_session_lifetime_secs"] = json!(secs);
            }
            if let Some(n) = max_custom_images {
                body["max_custom_images"] = json!(n);
            }
            if let Some(n) = max_session_priority {
                body["max_session_priority"] = json!(n);
            }
            client
                .send(put(&format!("/v1/admin/policies/{name}"), body))
                .await?
                .map(|_| println!("resource policy {name} set"))
        }
        AdminCommand::SavePreset {
            name,
            cpu,
            memory_gib,
            gpu,
            shm_mib,
        } => client
            .send(put(
                &format!("/v1/admin/presets/{name}"),
                json!({"resources": amounts(cpu, memory_gib, gpu),
                       "shared_memory_bytes": shm_mib << 20}),
            ))
            .await?
            .map(|_| println!("preset {name} saved")),
    };
    Ok(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(body) => print_error(&body),
    })
}

/// A Backend.AI keypair as Backend.AI's client takes it: `export` lines to paste into a
/// shell, under a comment (so the whole output pastes) that says it is shown once, and where
/// the client's endpoint is, when known.
pub(crate) fn print_keypair(
    email: &str,
    access_key: &str,
    secret_key: &str,
    endpoint: Option<&str>,
) {
    println!(
        "# Backend.AI keypair of {email}: the secret key is shown only now (berth keeps none)"
    );
    if let Some(endpoint) = endpoint {
        println!("# Backend.AI's client reaches berth at its gateway: export BACKEND_ENDPOINT={endpoint}");
    }
    println!("export BACKEND_ACCESS_KEY={access_key}");
    println!("export BACKEND_SECRET_KEY={secret_key}");
}

/// Prints rows under their headers, each column as wide as its widest cell.
fn table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let text: Vec<String> = cells
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c
                } else {
                    format!("{c:<width$}", width = widths[i])
                }
            })
            .collect();
        println!("{}", text.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

/// `2 cpu, 4.0 GiB, 0 gpu`.
fn amount(a: &Amounts) -> String {
    format!(
        "{} cpu, {:.1} GiB, {} gpu",
        a.cpu,
        a.memory_bytes as f64 / (1u64 << 30) as f64,
        a.gpu
    )
}

fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_owned())
}

/// Prints a listing as a table, or as the API's JSON.
/// A group's shares as a table: one line per user, then one per project.
fn print_shares(output: Output, v: Value) {
    show(output, v, |s: GroupShares| {
        println!(
            "{}: {} (half-life {} s, look-back {} s, starvation bound {} s)",
            s.resource_group,
            s.queue_policy,
            s.half_life_secs,
            s.lookback_secs,
            s.starve_after_secs
        );
        table(
            &[
                "USER",
                "QUEUED",
                "DOMINANT-SHARE",
                "DECAYED-USE",
                "FACTOR",
                "MAX-PRIORITY",
            ],
            s.users
                .into_iter()
                .map(|u| {
                    vec![
                        u.email.unwrap_or_else(|| u.user_id.to_string()),
                        u.queued.to_string(),
                        format!("{:.3} ({})", u.dominant_share, u.dominant),
                        format!("{:.0}", u.decayed_usage),
                        format!("{:.3}", u.fair_share_factor),
                        u.max_session_priority.to_string(),
                    ]
                })
                .collect(),
        );
        if !s.projects.is_empty() {
            table(
                &["PROJECT", "DECAYED-USE", "FACTOR"],
                s.projects
                    .into_iter()
                    .map(|p| {
                        vec![
                            p.project,
                            format!("{:.0}", p.decayed_usage),
                            format!("{:.3}", p.fair_share_factor),
                        ]
                    })
                    .collect(),
            );
        }
    })
}

fn print_listing(kind: Kind, output: Output, v: Value) {
    match kind {
        Kind::Users => show(output, v, |l: AdminUsers| {
            table(
                &[
                    "EMAIL", "ROLE", "POLICY", "KEYS", "PASSWORD", "PROJECTS", "ID",
                ],
                l.users
                    .into_iter()
                    .map(|u| {
                        vec![
                            u.email,
                            u.role,
                            u.resource_policy,
                            u.api_keys.to_string(),
                            if u.has_password { "yes" } else { "no" }.into(),
                            u.projects.join(","),
                            u.user_id.to_string(),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Keys => show(output, v, |l: ApiKeysListed| {
            table(
                &["PREFIX", "EMAIL", "USER"],
                l.api_keys
                    .into_iter()
                    .map(|k| vec![k.key_prefix, k.email, k.user_id.to_string()])
                    .collect(),
            )
        }),
        Kind::Keypairs => show(output, v, |l: KeypairsListed| {
            table(
                &["ACCESS-KEY", "EMAIL", "STATE", "USER"],
                l.keypairs
                    .into_iter()
                    .map(|k| {
                        let state = if k.active { "active" } else { "revoked" };
                        vec![
                            k.access_key,
                            k.email,
                            state.to_owned(),
                            k.user_id.to_string(),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Projects => show(output, v, |l: AdminProjects| {
            table(
                &["NAME", "MEMBERS", "GROUPS", "DESCRIPTION"],
                l.projects
                    .into_iter()
                    .map(|p| {
                        vec![
                            p.name,
                            p.members.join(","),
                            p.resource_groups.join(","),
                            p.description,
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Groups => show(output, v, |l: AdminGroups| {
            table(
                &[
                    "NAME",
                    "QUEUE",
                    "SELECTION",
                    "MAX-ATTEMPTS",
                    "SKIP-AFTER",
                    "PENDING-TIMEOUT",
                    "PROJECTS",
                ],
                l.resource_groups
                    .into_iter()
                    .map(|g| {
                        vec![
                            g.name,
                            g.queue_policy,
                            g.agent_selection,
                            g.max_attempts.to_string(),
                            g.skip_after.to_string(),
                            format!("{}s", g.pending_timeout_secs),
                            g.projects.join(","),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Policies => show(output, v, |l: AdminPolicies| {
            table(
                &[
                    "NAME",
                    "SESSIONS",
                    "MAX-TOTAL",
                    "LIFETIME",
                    "CUSTOM-IMAGES",
                    "USERS",
                ],
                l.policies
                    .into_iter()
                    .map(|p| {
                        vec![
                            p.name,
                            p.max_concurrent_sessions.to_string(),
                            amount(&p.max_total),
                            or_dash(p.max_session_lifetime_secs.map(|s| format!("{s}s"))),
                            or_dash(p.max_custom_images.map(|n| n.to_string())),
                            p.users.to_string(),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Presets => show(output, v, |l: Presets| {
            table(
                &["NAME", "RESOURCES", "SHM"],
                l.presets
                    .into_iter()
                    .map(|p| {
                        vec![
                            p.name,
                            amount(&p.resources),
                            format!("{} MiB", p.shared_memory_bytes >> 20),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Idle => show(output, v, |l: IdleSettings| {
            table(
                &["SCOPE", "NAME", "CHECKS"],
                l.idle_checks
                    .into_iter()
                    .map(|s| {
                        let (scope, name) = match s.scope {
                            events::idleness::IdleScope::ResourceGroup(n) => ("group", n),
                            events::idleness::IdleScope::ResourcePolicy(n) => ("policy", n),
                        };
                        vec![
                            scope.to_owned(),
                            name,
                            serde_json::to_string(&s.checks).unwrap_or_default(),
                        ]
                    })
                    .collect(),
            )
        }),
        Kind::Agents => show(output, v, |l: AdmittedAgents| {
            table(
                &[
                    "ID",
                    "GROUP",
                    "STATE",
                    "CAPACITY",
                    "FREE",
                    "HEARTBEAT-AGE",
                    "SESSIONS",
                    "VERSION",
                ],
                l.agents
                    .into_iter()
                    .map(|a| {
                        let state = match (&a.revoked, &a.capacity, &a.lost) {
                            (Some(_), _, _) => "revoked".to_owned(),
                            (None, None, _) => "admitted".to_owned(),
                            (None, Some(_), Some(why)) => format!("lost ({why})"),
                            (None, Some(_), None) => "live".to_owned(),
                        };
                        vec![
                            a.agent_id,
                            a.resource_group,
                            state,
                            or_dash(a.capacity.as_ref().map(amount)),
                            or_dash(a.free.as_ref().map(amount)),
                            or_dash(a.heartbeat_age_secs.map(|s| format!("{s:.0}s"))),
                            or_dash(a.sessions.map(|n| n.to_string())),
                            or_dash(a.version),
                        ]
                    })
                    .collect(),
            )
        }),
    }
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
pub(crate) fn write_secret(path: &std::path::Path, secret: &str) -> anyhow::Result<()> {
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
