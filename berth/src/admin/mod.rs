//! `berth admin ...`: operators create users, keys (for ever or until an expiry), passwords,
//! projects, resource groups, policies and presets, revoke keys, disable and enable users and
//! change their role, set the idle checks, admit and revoke agents, store registries'
//! credentials, show and hide images in the catalogue, list each of these, and make the NATS
//! server's authorization.
//!
//! The flags of each command become the gateway's own typed request once
//! ([`requests`]: `gateway::api::admin::NewUser`, `PolicyLimits`, ...), whose rules the
//! gateway checks; [`http`] sends it to the superadmin endpoints (`/v1/admin/...`) with a
//! superadmin's API key (BERTH_GATEWAY_URL, BERTH_API_KEY), the client `berth session` uses,
//! and prints the answer ([`print`]); every change is an event in the log. Only where no key
//! can exist yet does a command reach the database ([`bootstrap`]): `init` (the first
//! superadmin, which `berth up` also makes), `issue-key --email` without a key (the way back
//! in when no superadmin key is left) and `nats-authorization` without a key (the NATS
//! server's block, which the control plane may need before it can start). Any other command
//! without a key stops, saying how to get one.

mod bootstrap;
mod http;
mod print;
mod requests;

use std::process::ExitCode;

use clap::Subcommand;

use crate::session_cli::Output;

pub(crate) use requests::new_password;

#[derive(Subcommand)]
pub enum AdminCommand {
    /// Create the defaults and the first superadmin on a fresh install (prints its key once).
    /// It reaches the database (BERTH_DATABASE_URL): no key exists before it.
    Init,
    /// List users, API keys, Backend.AI keypairs, projects, resource groups, policies,
    /// presets, idle checks, agents or registries.
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
    /// Backend.AI's own client instead, printed once as the `export` lines it reads. Without
    /// BERTH_API_KEY, `--email` writes to the database (BERTH_DATABASE_URL): the way back in
    /// when no superadmin key is left.
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
        /// The key is refused this many seconds from now (default: never).
        #[arg(long, value_name = "SECS", conflicts_with_all = ["expires_at", "keypair_for"])]
        expires_in: Option<i64>,
        /// The key is refused from this time on (RFC 3339, e.g. 2027-01-31T00:00:00Z).
        #[arg(long, value_name = "TIME", conflicts_with = "keypair_for")]
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// Revoke an API key by its prefix (`berth_` and 6 hex digits, as `ls keys` lists it), or
    /// a Backend.AI keypair (`--backendai ACCESS_KEY`): refused on every gateway from now on.
    RevokeKey {
        #[arg(required_unless_present = "access_key", conflicts_with = "access_key")]
        prefix: Option<String>,
        #[arg(long = "backendai", value_name = "ACCESS_KEY")]
        access_key: Option<String>,
    },
    /// Disable a user: their keys, keypairs and console sign-ins are refused and their apps'
    /// links closed; their sessions keep running (terminate them to end them).
    DisableUser { email: String },
    /// Enable a disabled user again: their keys and keypairs work again.
    EnableUser { email: String },
    /// Change a user's role.
    SetRole {
        email: String,
        /// user, admin or superadmin
        #[arg(long)]
        role: String,
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
    /// Set what a launch in a resource group gets when it names no environment or no
    /// resources (one left out: the group's most used environment, the smallest preset that
    /// fits).
    SetDefaults {
        group: String,
        /// An image (`repository:tag`).
        #[arg(long)]
        image: Option<String>,
        /// A preset's name.
        #[arg(long)]
        preset: Option<String>,
    },
    /// List an image in the catalogue: shown whatever its labels say, hidden (never offered,
    /// refused to a launch), or as its labels say (berth's `ai.berth.image` or Backend.AI's
    /// `ai.backend.*`; the stack's servers never).
    ListImage {
        image: String,
        #[arg(long, value_enum)]
        listing: Listing,
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
        /// Most processes in each container of a user's sessions (absent: 4096).
        #[arg(long)]
        max_pids: Option<u32>,
        /// Most bytes of each kernel's output kept, the most recent (absent: 1 MiB).
        #[arg(long)]
        max_log_bytes: Option<u64>,
        /// Most GiB each folder of a user's may hold: uploads past it are refused (absent:
        /// no limit).
        #[arg(long)]
        max_folder_gib: Option<f64>,
    },
    /// Admit or revoke agents.
    #[command(subcommand)]
    Agent(AgentAdminCommand),
    /// Store or remove the credential agents pull a registry's images with.
    #[command(subcommand)]
    Registry(RegistryAdminCommand),
    /// Print the NATS server's `authorization` block: the control plane's user (from the
    /// user and password in BERTH_NATS_URL) with every right, and each admitted agent (as
    /// `GET /v1/admin/agents` lists them) by its key with its own subjects only. Include it in
    /// the server's configuration and reload the server (SIGHUP) after each admission or
    /// revocation. Without BERTH_API_KEY it reads the admitted agents from the database
    /// (BERTH_DATABASE_URL): the control plane may be down for want of this very block.
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

#[derive(Subcommand)]
pub enum RegistryAdminCommand {
    /// Store the credential every agent pulls `registry`'s images with (replacing one set
    /// before): its images are then offered to every user. The password is read from
    /// BERTH_NEW_PASSWORD when set, else from the first line of standard input.
    Set {
        /// Its host, with its port if any: `cr.example.com`, `192.0.2.2:5000`.
        registry: String,
        #[arg(long)]
        username: String,
    },
    /// Remove a registry's credential: its images are offered no more.
    Rm { registry: String },
}

/// How `berth admin list-image` lists an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Listing {
    Labels,
    Shown,
    Hidden,
}

impl From<Listing> for events::images::ImageListing {
    fn from(listing: Listing) -> Self {
        match listing {
            Listing::Labels => Self::Labels,
            Listing::Shown => Self::Shown,
            Listing::Hidden => Self::Hidden,
        }
    }
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
    Registries,
    Images,
}

/// Runs an admin command: through the gateway with a key, through the database where no key
/// can exist yet.
pub async fn run(
    config: &berth::config::Config,
    command: AdminCommand,
) -> anyhow::Result<ExitCode> {
    match command {
        AdminCommand::Init => bootstrap::init(config).await,
        AdminCommand::IssueKey {
            email: Some(email),
            keypair_for: None,
            expires_in,
            expires_at,
        } if config.api_key.is_none() => {
            bootstrap::issue_key(config, &email, expires_in, expires_at).await
        }
        AdminCommand::NatsAuthorization if config.api_key.is_none() => {
            bootstrap::nats_authorization(config).await
        }
        _ if config.api_key.is_none() => anyhow::bail!(
            "berth admin goes through the gateway (BERTH_GATEWAY_URL) with a superadmin's API key: \
             set BERTH_API_KEY. A fresh install's first key is printed by `berth up` (or \
             `berth admin init`); on a host that holds BERTH_DATABASE_URL, `berth admin \
             issue-key --email <superadmin's email>` without a key issues another"
        ),
        command => http::execute(config, requests::call(command)?).await,
    }
}

/// Prints the NATS server's `authorization` block: the control plane's user (from
/// BERTH_NATS_URL) with every right, and each of the admitted `keys` with its own subjects.
fn print_nats_authorization(
    config: &berth::config::Config,
    keys: &[bus::permissions::AdmittedKey],
) -> anyhow::Result<()> {
    let url = reqwest::Url::parse(&config.nats_url)?;
    anyhow::ensure!(
        !url.username().is_empty() && url.password().is_some(),
        "BERTH_NATS_URL names no user and password for the control plane"
    );
    let block = bus::permissions::authorization(
        &config.agent_bus,
        url.username(),
        url.password().unwrap_or_default(),
        keys,
    );
    println!("authorization: {}", serde_json::to_string_pretty(&block)?);
    Ok(())
}
