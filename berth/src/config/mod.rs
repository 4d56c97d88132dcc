//! Configuration: every `BERTH_*` setting is declared once, in [`Settings`]
//! (`settings.rs`), as a flag with its environment variable, its type and its default. clap
//! parses it, so a value that does not parse stops the process at start naming the variable
//! (never a silent default); a command's `--help` lists the settings that command reads, with
//! their variables and defaults; `berth config` prints the values in force with secrets
//! masked. [`load`] reads the command line and the variables under the rules the process and
//! the tests share (`load.rs`); [`Config`] is what the parts read, made from the settings,
//! with the CLI's profile (`profile.rs`) and the Backend.AI master key (`master_key.rs`).
//!
//! Not settings, and so not here: `RUST_LOG` and the `OTEL_*` variables (logging and the
//! OTLP exporter read them), the inputs of two commands (`BERTH_NEW_PASSWORD`,
//! `BERTH_CURRENT_PASSWORD`), and where the scratch servers of tests and benchmarks find
//! their programs (`BERTH_PG_BIN`, `BERTH_NATS_SERVER`, read where those programs start).

mod load;
mod master_key;
mod profile;
mod settings;

use std::path::PathBuf;
use std::time::Duration;

use events::relay::Topology;

pub use load::{load, Loaded, Variables};
pub use master_key::{MasterKey, DEFAULT_MASTER_KEY_FILE, MIN_MASTER_KEY_BYTES};
pub use settings::{
    mask, proxy_ports, shown_by_what_each_reads, AgentSettings, BackendAiSettings, ClientSettings,
    ControlPlaneSettings, DatabaseSettings, GatewaySettings, Group, LogSettings, MetricsSettings,
    NatsSettings, ProxyPorts, Settings, WebhookAllow, DEFAULT_DATABASE_URL, DEFAULT_GATEWAY,
    DEFAULT_NATS_URL, DEFAULT_PROXY_IDLE, DEFAULT_PROXY_PORTS,
};

/// Where PostgreSQL, NATS and the gateway are, the caller's API key, and the timings.
#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: String,
    pub nats_url: String,
    /// The JetStream stream and subject prefix events are published on.
    pub topology: Topology,
    /// The subjects and streams agents and the control plane meet on.
    pub agent_bus: bus::Subjects,
    /// Address the gateway serves the HTTP API on (port 0: any free port).
    pub gateway_listen: String,
    /// Where the CLI finds the gateway.
    pub gateway_url: String,
    pub api_key: Option<String>,
    /// The first superadmin's key on a fresh install, when the operator chose it.
    pub first_api_key: Option<String>,
    /// Where an agent keeps folders on its host.
    pub agent_data_dir: PathBuf,
    /// The file holding an agent's credential (its nkey seed), if it has one.
    pub agent_credential: Option<PathBuf>,
    /// berth's runtime lent to every container (`BERTH_AGENT_RUNTIME`), if any.
    pub agent_runtime: Option<PathBuf>,
    /// The directory of a NATS server's authorization that berth keeps in step with the
    /// agents admitted (`BERTH_NATS_AUTHORIZATION_DIR`, which `infra/services.sh` sets for the
    /// server it runs); none where an operator makes the authorization by hand
    /// (`berth admin nats-authorization`). See [`crate::nats_authority`].
    pub nats_authorization: Option<PathBuf>,
    /// Where agents push customized images and pull those their host lacks
    /// (`BERTH_REGISTRY`); none keeps them on the host that committed them.
    pub registry: Option<String>,
    /// The file holding the registry's credential, `user:password`
    /// (`BERTH_REGISTRY_CREDENTIAL`).
    pub registry_credential: Option<PathBuf>,
    /// The shared volumes an agent's host mounts, by name, and where (`BERTH_VOLUMES`).
    pub volumes: std::collections::BTreeMap<String, PathBuf>,
    /// The volume a folder is made on when its request names none (`BERTH_DEFAULT_VOLUME`).
    pub default_volume: String,
    /// The host address an agent publishes app and preopen ports on, where the proxy reaches
    /// them (`BERTH_AGENT_ADDRESS`; loopback by default, for one machine).
    pub agent_address: String,
    /// The app proxy's pool of ports (`BERTH_PROXY_PORTS`, `first-last`; `off` for none).
    pub proxy_ports: Option<(u16, u16)>,
    /// Where the proxy's circuits listen (`BERTH_PROXY_ADDRESS`); the gateway's address
    /// when unset.
    pub proxy_address: Option<std::net::IpAddr>,
    /// How long a circuit nobody uses stays open (`BERTH_PROXY_IDLE_SECS`, Backend.AI's hour
    /// by default; `0`: until its session ends or it is closed).
    pub proxy_idle: Option<Duration>,
    /// The subdomain mode's domain (`BERTH_APPS_DOMAIN`): each web app is served at
    /// `<circuit>.<domain>` on the gateway's listener; none: every app on a port of the pool.
    pub apps_domain: Option<String>,
    /// The serving domain (`BERTH_SERVE_DOMAIN`): each model endpoint answers also at
    /// `<endpoint id>.<domain>` on the gateway's listener; none: at its path alone.
    pub serve_domain: Option<String>,
    /// Session creates the gateway takes in flight at once (`BERTH_CREATE_QUEUE`, 64 by
    /// default); one more is answered 503 `busy` with `Retry-After`, so a slow PostgreSQL
    /// makes clients wait and retry rather than pile up connections.
    pub create_queue: usize,
    /// TLS to NATS (`BERTH_NATS_CA`, `BERTH_NATS_CERT`, `BERTH_NATS_KEY`: PEM files of the
    /// server's CA and of this process's client certificate and key); any of them, or a
    /// `tls://` URL, makes the connection TLS.
    pub nats_tls: bus::link::NatsTls,
    /// The gateway's certificate chain and key (`BERTH_GATEWAY_TLS_CERT`,
    /// `BERTH_GATEWAY_TLS_KEY`, PEM): with both, it serves HTTPS only.
    pub gateway_tls_cert: Option<PathBuf>,
    pub gateway_tls_key: Option<PathBuf>,
    /// A CA (PEM) the CLI trusts for the gateway besides the system's (`BERTH_GATEWAY_CA`):
    /// a gateway with a private or self-signed certificate.
    pub gateway_ca: Option<PathBuf>,
    /// A CA (PEM) webhook deliveries trust besides the system's (`BERTH_WEBHOOK_CA`).
    pub webhook_ca: Option<PathBuf>,
    /// Where webhooks may be delivered: public addresses, and the special ranges
    /// (loopback, private, link-local, ...) that `BERTH_WEBHOOK_ALLOW` admits. The gateway
    /// refuses a webhook whose host is a refused address; the notification service checks
    /// every address a host name resolves to when it delivers.
    pub webhook_policy: domain::outbound::WebhookPolicy,
    /// Whether the process records metrics (`BERTH_METRICS`, `on` by default; `off`: no
    /// recorder, no `/metrics`, no HTTP request metrics, as for the benchmark's baseline).
    pub metrics: bool,
    /// Where the process serves its metrics on a listener of its own (`BERTH_METRICS_LISTEN`,
    /// e.g. `0.0.0.0:9480`): for a process without a gateway (`berth scheduler`, an agent,
    /// where `--metrics-listen` says the same); none by default.
    pub metrics_listen: Option<String>,
    /// How logs are written to stderr (`BERTH_LOG_FORMAT`, `text` or `json`).
    pub log_format: LogFormat,
    /// The simulated GPUs an agent declares instead of NVML's (`BERTH_MOCK_GPUS` of them,
    /// `BERTH_MOCK_GPU_MEMORY_GIB`, `BERTH_MOCK_GPU_MODEL`, their use read from
    /// `BERTH_MOCK_GPU_USAGE`); none by default: the agent's GPUs are those NVML finds.
    pub mock_gpus: Option<agent::gpu::MockGpus>,
    /// How many shares make one GPU on an agent's host (`BERTH_GPU_SHARES_PER_DEVICE`,
    /// 1 to 1,000; 1,000 by default): a fraction gets whole shares of a device's compute and
    /// memory.
    pub gpu_shares_per_device: u64,
    /// The pipe directory of the host's CUDA MPS daemon (`BERTH_GPU_MPS_PIPE_DIR`), which
    /// fractional sessions' containers get to reach it; none by default (no daemon).
    pub gpu_mps_pipe_dir: Option<PathBuf>,
    /// How an agent fences its sessions' networks (`BERTH_SESSION_SUBNETS`,
    /// `BERTH_SESSION_ALLOW`, `BERTH_SESSION_FIREWALL`, `BERTH_SESSION_SPARE_NETWORKS`).
    pub session_fence: agent::docker::fence::NetworkFence,
    /// Backend.AI's API beside berth's, and where its master key comes from; `None`: off.
    pub backendai: Option<MasterKey>,
    pub timings: Timings,
}

/// How logs are written: lines for a person, or one JSON object a line for a collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// How often each service looks again, and how long it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timings {
    /// How long an agent may be silent before it is marked lost.
    pub heartbeat_timeout: Duration,
    /// How long an agent that departed (SIGTERM, SIGINT) may stay silent before the reconciler
    /// takes it for lost, as it does a silent one: its sessions, kept running for its return,
    /// then end (inference sessions run again elsewhere).
    pub agent_departed_timeout: Duration,
    /// How long an agent may be silent before the scheduler places nothing more on it: two
    /// heartbeat intervals (`events::aggregate::SILENT_AFTER`), well before it is lost.
    pub agent_silent_after: Duration,
    /// The reconciler's round.
    pub reconcile_every: Duration,
    /// Longest time between scheduler passes when nothing wakes the scheduler: a safety net,
    /// since the events that can change a decision wake it through NATS and its own deadlines
    /// (reserved starts, pending timeouts) wake it on time.
    pub scheduler_interval: Duration,
    /// How often the streams projection reads the log when it is caught up while the log is
    /// active (once it is quiet, it rests until an append in its process or 250 ms).
    pub streams_poll: Duration,
    /// How often the sessions projection reads the log when it is caught up while the log is
    /// active (once it is quiet, as above).
    pub sessions_poll: Duration,
    /// How long the sealer rests when nothing is left to seal: the chain trails a quiet log
    /// by at most this (`berth audit verify` seals what is left before it checks), and a
    /// busy log by a tenth of a second (`events::audit::keep_sealing`).
    pub sealer_idle: Duration,
    /// Longest time the gateway serves a session's detail from memory when no event says it
    /// changed (events evict it at once).
    pub detail_cache_ttl: Duration,
    /// How long a stopping container gets before it is killed.
    pub agent_stop_grace: Duration,
    /// How often an agent reads its host's images again.
    pub agent_image_refresh: Duration,
    /// How long a simulated agent keeps a session in each status.
    pub simulated_step: Duration,
    /// How often an agent samples a running container's usage (what the idle-reaper's
    /// utilization and network checkers decide on).
    pub agent_usage_every: Duration,
    /// How often the idle-reaper compares what it knows with the clock.
    pub reaper_tick: Duration,
    /// How long an agent has to finish a commit before the image-commit service fails it.
    pub commit_deadline: Duration,
    /// How long a stopped agent (SIGTERM, SIGINT) has to say it departs and send its outbox
    /// before it exits anyway, with a warning; `berth agent --drain` adds the stop grace,
    /// for its sessions' ends.
    pub agent_leave: Duration,
    /// How long the control plane's parts have to stop (SIGTERM, SIGINT) before the process
    /// exits non-zero naming those that did not.
    pub stop_within: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            heartbeat_timeout: Timings::HEARTBEAT_TIMEOUT,
            agent_departed_timeout: Timings::AGENT_DEPARTED_TIMEOUT,
            agent_silent_after: events::aggregate::SILENT_AFTER,
            reconcile_every: Timings::RECONCILE_EVERY,
            scheduler_interval: Timings::SCHEDULER_INTERVAL,
            streams_poll: Duration::from_millis(20),
            sessions_poll: Duration::from_millis(10),
            sealer_idle: Duration::from_secs(1),
            detail_cache_ttl: Duration::from_secs(5),
            agent_stop_grace: Timings::AGENT_STOP_GRACE,
            agent_image_refresh: Duration::from_secs(10),
            simulated_step: Duration::from_secs(1),
            agent_usage_every: Timings::AGENT_USAGE_EVERY,
            reaper_tick: Timings::REAPER_TICK,
            commit_deadline: Timings::COMMIT_DEADLINE,
            agent_leave: Timings::AGENT_LEAVE,
            stop_within: Timings::STOP_WITHIN,
        }
    }
}

/// The timings' defaults that are settings, each written once: the flag's default
/// ([`Settings`]) and [`Timings::default`] both read it.
impl Timings {
    pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(30);
    pub const AGENT_DEPARTED_TIMEOUT: Duration = Duration::from_secs(600);
    pub const RECONCILE_EVERY: Duration = Duration::from_secs(2);
    pub const SCHEDULER_INTERVAL: Duration = scheduler::run::INTERVAL;
    pub const AGENT_STOP_GRACE: Duration = Duration::from_secs(10);
    pub const AGENT_USAGE_EVERY: Duration = Duration::from_secs(5);
    pub const REAPER_TICK: Duration = Duration::from_millis(250);
    pub const COMMIT_DEADLINE: Duration = Duration::from_secs(30 * 60);
    pub const AGENT_LEAVE: Duration = Duration::from_secs(10);
    pub const STOP_WITHIN: Duration = Duration::from_secs(15);
}

/// A setting that is not usable, named.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A variable's value does not parse as its setting's type.
    #[error("{variable}={value}: {reason}")]
    BadValue {
        variable: String,
        value: String,
        reason: String,
    },
    /// The command line does not parse, or asks for help or the version: clap's own error,
    /// to print or exit with as clap does.
    #[error("{0}")]
    Command(clap::Error),
    #[error("profiles file {path}: {reason}")]
    Profiles { path: String, reason: String },
}

impl Config {
    /// The configuration the settings describe, the CLI's profile filling in the gateway and
    /// the API key where neither a flag nor a variable gives them.
    fn from_settings(settings: &Settings) -> Result<Config, ConfigError> {
        let Settings {
            database,
            nats,
            gateway,
            backendai,
            control_plane,
            client,
            agent,
            logs,
            metrics,
        } = settings;
        let profile = if client.gateway_url.is_none() || client.api_key.is_none() {
            profile::read(client.profiles_file.as_ref(), client.profile.as_deref())?
        } else {
            profile::Profile::default()
        };
        let secs = Duration::from_secs;
        let millis = Duration::from_millis;
        Ok(Config {
            database_url: database.database_url.clone(),
            nats_url: nats.nats_url.clone(),
            topology: Topology {
                stream: nats.nats_stream.clone(),
                prefix: nats.nats_prefix.clone(),
            },
            agent_bus: bus::Subjects {
                root: nats.nats_agent_root.clone(),
                commands_stream: nats.nats_commands_stream.clone(),
                telemetry_stream: nats.nats_telemetry_stream.clone(),
            },
            gateway_url: client
                .gateway_url
                .clone()
                .or(profile.gateway.map(|g| g.trim_end_matches('/').to_owned()))
                .unwrap_or_else(|| {
                    // A gateway with a certificate serves HTTPS only.
                    let scheme = match gateway.gateway_tls_cert {
                        Some(_) => "https",
                        None => "http",
                    };
                    format!("{scheme}://{}", gateway.gateway_listen)
                }),
            gateway_listen: gateway.gateway_listen.to_string(),
            api_key: client.api_key.clone().or(profile.api_key),
            first_api_key: gateway.first_api_key.clone(),
            agent_data_dir: agent.agent_data.clone(),
            agent_credential: agent.agent_credential.clone(),
            agent_runtime: agent.agent_runtime.clone(),
            nats_authorization: nats.nats_authorization_dir.clone(),
            registry: agent.registry.clone(),
            registry_credential: agent.registry_credential.clone(),
            volumes: agent.volumes.iter().cloned().collect(),
            default_volume: gateway.default_volume.clone(),
            agent_address: agent.agent_address.to_string(),
            proxy_ports: match gateway.proxy_ports {
                ProxyPorts::Off => None,
                ProxyPorts::Range(first, last) => Some((first, last)),
            },
            proxy_address: gateway.proxy_address,
            proxy_idle: Some(secs(gateway.proxy_idle_secs)).filter(|d| !d.is_zero()),
            apps_domain: gateway.apps_domain.clone(),
            serve_domain: gateway.serve_domain.clone(),
            create_queue: gateway.create_queue.get(),
            nats_tls: bus::link::NatsTls {
                ca: nats.nats_ca.clone(),
                cert: nats.nats_cert.clone(),
                key: nats.nats_key.clone(),
            },
            gateway_tls_cert: gateway.gateway_tls_cert.clone(),
            gateway_tls_key: gateway.gateway_tls_key.clone(),
            gateway_ca: client.gateway_ca.clone(),
            webhook_ca: control_plane.webhook_ca.clone(),
            webhook_policy: domain::outbound::WebhookPolicy {
                allow: control_plane.webhook_allow.0.clone(),
            },
            metrics: metrics.metrics,
            metrics_listen: metrics.metrics_listen.map(|a| a.to_string()),
            log_format: logs.log_format,
            mock_gpus: (agent.mock_gpus > 0).then(|| agent::gpu::MockGpus {
                count: agent.mock_gpus,
                memory_bytes: (agent.mock_gpu_memory_gib * (1u64 << 30) as f64) as u64,
                model: agent.mock_gpu_model.clone(),
                usage_file: agent.mock_gpu_usage.clone(),
            }),
            gpu_shares_per_device: agent.gpu_shares_per_device,
            gpu_mps_pipe_dir: agent.gpu_mps_pipe_dir.clone(),
            session_fence: agent::docker::fence::NetworkFence {
                subnets: agent.session_subnets,
                allow: agent.session_allow.clone(),
                firewall: agent.session_firewall,
                spares: agent.session_spare_networks,
            },
            backendai: backendai
                .backendai
                .then(|| match &backendai.backendai_master_key {
                    Some(key) => MasterKey::Given(key.as_bytes().to_vec()),
                    None => MasterKey::File(backendai.backendai_master_key_file.clone()),
                }),
            timings: Timings {
                heartbeat_timeout: secs(control_plane.heartbeat_timeout_secs),
                agent_departed_timeout: secs(control_plane.agent_departed_timeout_secs),
                reconcile_every: millis(control_plane.reconcile_every_ms),
                scheduler_interval: millis(control_plane.scheduler_interval_ms),
                reaper_tick: millis(control_plane.reaper_tick_ms),
                commit_deadline: secs(control_plane.commit_deadline_secs),
                stop_within: secs(control_plane.stop_within_secs),
                agent_stop_grace: secs(agent.agent_stop_grace_secs),
                agent_usage_every: millis(agent.agent_usage_every_ms),
                agent_leave: secs(agent.agent_leave_secs),
                ..Timings::default()
            },
        })
    }

    /// The configuration `source` describes (a variable's value by name), every other
    /// setting at its default and no profile read unless `BERTH_PROFILES_FILE` names one:
    /// tests and benchmarks.
    pub fn from_source(source: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let command = <Settings as clap::Args>::augment_args(clap::Command::new("berth"));
        let mut loaded: Loaded<Settings> = load(
            command,
            [std::ffi::OsString::from("berth")],
            Variables::Given(&source),
        )?;
        loaded
            .settings
            .client
            .profiles_file
            .get_or_insert_with(|| PathBuf::from("/nonexistent/berth/profiles.toml"));
        loaded.config()
    }

    /// Every setting at its default: tests and benchmarks, which then set what they need.
    pub fn defaults() -> Config {
        Config::from_source(|_| None).expect("the defaults parse")
    }
}

/// The configuration `pairs` of variables describe: the unit tests' source.
#[cfg(test)]
fn with(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_source(move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    })
}
