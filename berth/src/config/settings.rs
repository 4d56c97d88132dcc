//! The settings as clap declares them: each one a flag, its `BERTH_*` variable, its type and
//! its default, written once here. They come in groups by who reads them ([`Group`]): each
//! group is a `--help` heading, and a command's `--help` lists the groups that command reads
//! ([`shown_by_what_each_reads`]); every command still takes every setting.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use events::relay::Topology;

use super::master_key::{parse_master_key, DEFAULT_MASTER_KEY_FILE};
use super::{LogFormat, Timings};

pub const DEFAULT_DATABASE_URL: &str = "postgres://berth@127.0.0.1:55432/berth";
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:54222";
pub const DEFAULT_GATEWAY: &str = "127.0.0.1:8480";
pub const DEFAULT_PROXY_PORTS: &str = "10200-10299";
pub const DEFAULT_PROXY_IDLE: Duration = Duration::from_secs(3600);

/// Every setting, each a flag (global: it may follow any command) and a `BERTH_*`
/// environment variable; a flag wins over its variable, a variable over the profile, the
/// profile over the default. An empty variable counts as unset (see [`super::load`]).
#[derive(Args, Debug, Clone)]
pub struct Settings {
    #[command(flatten)]
    pub database: DatabaseSettings,
    #[command(flatten)]
    pub nats: NatsSettings,
    #[command(flatten)]
    pub gateway: GatewaySettings,
    #[command(flatten)]
    pub backendai: BackendAiSettings,
    #[command(flatten)]
    pub control_plane: ControlPlaneSettings,
    #[command(flatten)]
    pub client: ClientSettings,
    #[command(flatten)]
    pub agent: AgentSettings,
    #[command(flatten)]
    pub logs: LogSettings,
    #[command(flatten)]
    pub metrics: MetricsSettings,
}

/// The settings' groups, by who reads them; each is one heading of `--help`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Database,
    Nats,
    Gateway,
    BackendAi,
    ControlPlane,
    Client,
    Agent,
    Logs,
    Metrics,
}

impl Group {
    /// Every group: `berth config`, which prints them all.
    pub const ALL: &'static [Group] = &[
        Group::Database,
        Group::Nats,
        Group::Gateway,
        Group::BackendAi,
        Group::ControlPlane,
        Group::Client,
        Group::Agent,
        Group::Logs,
        Group::Metrics,
    ];

    /// What the control plane's processes read: `berth up` and each part run alone.
    pub const CONTROL_PLANE: &'static [Group] = &[
        Group::Database,
        Group::Nats,
        Group::Gateway,
        Group::BackendAi,
        Group::ControlPlane,
        Group::Logs,
        Group::Metrics,
    ];

    /// The group's `--help` heading, which is also how an argument is known to be in it.
    pub const fn heading(self) -> &'static str {
        match self {
            Group::Database => "Settings: PostgreSQL",
            Group::Nats => "Settings: NATS",
            Group::Gateway => "Settings: the gateway and its app proxy",
            Group::BackendAi => "Settings: Backend.AI's API",
            Group::ControlPlane => "Settings: the control plane",
            Group::Client => "Settings: the CLI's gateway and key",
            Group::Agent => "Settings: an agent",
            Group::Logs => "Settings: logs",
            Group::Metrics => "Settings: metrics",
        }
    }
}

/// Where the database is: the control plane, and the commands that reach it.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = Group::Database.heading())]
pub struct DatabaseSettings {
    /// PostgreSQL, as a libpq URL (`sslmode` and friends included).
    #[arg(long, global = true, env = "BERTH_DATABASE_URL", value_name = "URL",
          default_value = DEFAULT_DATABASE_URL, hide_env_values = true)]
    pub database_url: String,
}

/// Where NATS is, how it is reached and what is published on it: the control plane and
/// every agent.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = Group::Nats.heading())]
pub struct NatsSettings {
    /// NATS with JetStream (user and password in the URL, for the control plane).
    #[arg(long, global = true, env = "BERTH_NATS_URL", value_name = "URL",
          default_value = DEFAULT_NATS_URL, hide_env_values = true)]
    pub nats_url: String,
    /// The JetStream stream events are published on.
    #[arg(long, global = true, env = "BERTH_NATS_STREAM", value_name = "NAME", default_value_t = Topology::default().stream)]
    pub nats_stream: String,
    /// The subject prefix events are published under.
    #[arg(long, global = true, env = "BERTH_NATS_PREFIX", value_name = "PREFIX", default_value_t = Topology::default().prefix)]
    pub nats_prefix: String,
    /// The subject root agents and the control plane meet under.
    #[arg(long, global = true, env = "BERTH_NATS_AGENT_ROOT", value_name = "ROOT", default_value_t = bus::Subjects::default().root)]
    pub nats_agent_root: String,
    /// The JetStream stream of commands to agents.
    #[arg(long, global = true, env = "BERTH_NATS_COMMANDS_STREAM", value_name = "NAME", default_value_t = bus::Subjects::default().commands_stream)]
    pub nats_commands_stream: String,
    /// The JetStream stream of agents' telemetry.
    #[arg(long, global = true, env = "BERTH_NATS_TELEMETRY_STREAM", value_name = "NAME", default_value_t = bus::Subjects::default().telemetry_stream)]
    pub nats_telemetry_stream: String,
    /// The CA (PEM) of the NATS server's certificate; it, a client certificate or a `tls://`
    /// URL makes the connection to NATS TLS.
    #[arg(long, global = true, env = "BERTH_NATS_CA", value_name = "FILE")]
    pub nats_ca: Option<PathBuf>,
    /// This process's client certificate (PEM) for NATS, with BERTH_NATS_KEY.
    #[arg(
        long,
        global = true,
        env = "BERTH_NATS_CERT",
        value_name = "FILE",
        requires = "nats_key"
    )]
    pub nats_cert: Option<PathBuf>,
    /// The key (PEM) of BERTH_NATS_CERT.
    #[arg(
        long,
        global = true,
        env = "BERTH_NATS_KEY",
        value_name = "FILE",
        requires = "nats_cert"
    )]
    pub nats_key: Option<PathBuf>,
    /// The directory of a NATS server's authorization that berth keeps in step with the
    /// agents admitted.
    #[arg(
        long,
        global = true,
        env = "BERTH_NATS_AUTHORIZATION_DIR",
        value_name = "DIR"
    )]
    pub nats_authorization_dir: Option<PathBuf>,
}

/// What the gateway serves and how: its address, its certificate, its app proxy, the first
/// superadmin's key.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = Group::Gateway.heading())]
pub struct GatewaySettings {
    /// Address the gateway serves the HTTP API on (port 0: any free port).
    #[arg(long, global = true, env = "BERTH_GATEWAY_LISTEN", value_name = "ADDR", default_value = DEFAULT_GATEWAY)]
    pub gateway_listen: SocketAddr,
    /// The gateway's certificate chain (PEM): with its key, the gateway serves HTTPS only.
    #[arg(
        long,
        global = true,
        env = "BERTH_GATEWAY_TLS_CERT",
        value_name = "FILE",
        requires = "gateway_tls_key"
    )]
    pub gateway_tls_cert: Option<PathBuf>,
    /// The key (PEM) of BERTH_GATEWAY_TLS_CERT.
    #[arg(
        long,
        global = true,
        env = "BERTH_GATEWAY_TLS_KEY",
        value_name = "FILE",
        requires = "gateway_tls_cert"
    )]
    pub gateway_tls_key: Option<PathBuf>,
    /// The first superadmin's API key on a fresh install (`berth_` and 40 hex digits), for an
    /// automated install that must know it; made at random and printed once when unset.
    #[arg(long, global = true, env = "BERTH_FIRST_API_KEY", value_name = "KEY",
          hide_env_values = true, value_parser = first_api_key)]
    pub first_api_key: Option<String>,
    /// The app proxy's pool of ports, `first-last`, or `off` for no proxy.
    #[arg(long, global = true, env = "BERTH_PROXY_PORTS", value_name = "FIRST-LAST|off",
          default_value = DEFAULT_PROXY_PORTS, value_parser = proxy_ports)]
    pub proxy_ports: ProxyPorts,
    /// Where the proxy's circuits listen (default: the gateway's address).
    #[arg(long, global = true, env = "BERTH_PROXY_ADDRESS", value_name = "IP")]
    pub proxy_address: Option<IpAddr>,
    /// How long a circuit nobody uses stays open (0: until its session ends).
    #[arg(long, global = true, env = "BERTH_PROXY_IDLE_SECS", value_name = "SECS", default_value_t = DEFAULT_PROXY_IDLE.as_secs())]
    pub proxy_idle_secs: u64,
    /// A domain whose every name (`*.DOMAIN`) resolves to the gateway: each web app is then
    /// served on a host of its own, `<circuit>.DOMAIN`, on the gateway's port, not on a port
    /// of the pool (cookies ignore ports; only hosts keep apps apart).
    #[arg(long, global = true, env = "BERTH_APPS_DOMAIN", value_name = "DOMAIN", value_parser = apps_domain)]
    pub apps_domain: Option<String>,
    /// A domain whose every name (`*.DOMAIN`) resolves to the gateway: each model endpoint
    /// then answers also at a host of its own, `<endpoint id>.DOMAIN`, on the gateway's port
    /// (besides its path `/serve/<endpoint id>/`).
    #[arg(long, global = true, env = "BERTH_SERVE_DOMAIN", value_name = "DOMAIN", value_parser = apps_domain)]
    pub serve_domain: Option<String>,
    /// The volume a folder is made on when its request names none: `host-local` (the data
    /// directory of whichever agent runs a session of it) or a shared volume agents mount.
    #[arg(long, global = true, env = "BERTH_DEFAULT_VOLUME", value_name = "VOLUME",
          default_value = domain::volumes::HOST_LOCAL)]
    pub default_volume: String,
    /// Session creates the gateway takes in flight at once; one more is answered 503 `busy`.
    #[arg(long, global = true, env = "BERTH_CREATE_QUEUE", value_name = "N", default_value_t = NonZeroUsize::new(gateway::DEFAULT_CREATE_QUEUE).expect("non-zero"))]
    pub create_queue: NonZeroUsize,
}

/// Backend.AI's API beside berth's, and the master key its keypairs are derived with.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = Group::BackendAi.heading())]
pub struct BackendAiSettings {
    /// Whether the gateway serves Backend.AI's API for its official client beside berth's.
    // `--backendai-api`, not `--backendai`: that names a user or a key in `berth admin
    // issue-key --backendai EMAIL` and `revoke-key --backendai AK`.
    #[arg(long = "backendai-api", global = true, env = "BERTH_BACKENDAI", value_name = "on|off", default_value = "on", value_parser = switch, action = clap::ArgAction::Set)]
    pub backendai: bool,
    /// The master key Backend.AI keypairs' secret keys are derived with (at least 32
    /// characters; every gateway of one installation needs the same). Default: the file of
    /// BERTH_BACKENDAI_MASTER_KEY_FILE.
    #[arg(long, global = true, env = "BERTH_BACKENDAI_MASTER_KEY", value_name = "KEY",
          hide_env_values = true, value_parser = parse_master_key)]
    pub backendai_master_key: Option<String>,
    /// The file that keeps the master key, made (0600) when missing.
    #[arg(long, global = true, env = "BERTH_BACKENDAI_MASTER_KEY_FILE", value_name = "FILE",
          default_value = DEFAULT_MASTER_KEY_FILE)]
    pub backendai_master_key_file: PathBuf,
}

/// The control plane's timings, and the CA its webhooks trust.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = Group::ControlPlane.heading())]
pub struct ControlPlaneSettings {
    /// How long an agent may be silent before it is marked lost.
    #[arg(
        long,
        global = true,
        env = "BERTH_HEARTBEAT_TIMEOUT_SECS",
        value_name = "SECS",
        default_value_t = Timings::HEARTBEAT_TIMEOUT.as_secs()
    )]
    pub heartbeat_timeout_secs: u64,
    /// How long an agent that departed may stay silent before it is taken for lost.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_DEPARTED_TIMEOUT_SECS",
        value_name = "SECS",
        default_value_t = Timings::AGENT_DEPARTED_TIMEOUT.as_secs()
    )]
    pub agent_departed_timeout_secs: u64,
    /// The reconciler's round.
    #[arg(
        long,
        global = true,
        env = "BERTH_RECONCILE_EVERY_MS",
        value_name = "MS",
        default_value_t = millis(Timings::RECONCILE_EVERY)
    )]
    pub reconcile_every_ms: u64,
    /// Longest time between scheduler passes when nothing wakes the scheduler.
    #[arg(
        long,
        global = true,
        env = "BERTH_SCHEDULER_INTERVAL_MS",
        value_name = "MS",
        default_value_t = millis(Timings::SCHEDULER_INTERVAL)
    )]
    pub scheduler_interval_ms: u64,
    /// How often the idle-reaper compares what it knows with the clock.
    #[arg(
        long,
        global = true,
        env = "BERTH_REAPER_TICK_MS",
        value_name = "MS",
        default_value_t = millis(Timings::REAPER_TICK)
    )]
    pub reaper_tick_ms: u64,
    /// How long an agent has to finish a commit.
    #[arg(
        long,
        global = true,
        env = "BERTH_COMMIT_DEADLINE_SECS",
        value_name = "SECS",
        default_value_t = Timings::COMMIT_DEADLINE.as_secs()
    )]
    pub commit_deadline_secs: u64,
    /// How long the control plane's parts have to stop before the process exits non-zero.
    #[arg(
        long,
        global = true,
        env = "BERTH_STOP_WITHIN_SECS",
        value_name = "SECS",
        default_value_t = Timings::STOP_WITHIN.as_secs()
    )]
    pub stop_within_secs: u64,
    /// A CA (PEM) webhook deliveries trust besides the system's.
    #[arg(long, global = true, env = "BERTH_WEBHOOK_CA", value_name = "FILE")]
    pub webhook_ca: Option<PathBuf>,
    /// Address ranges webhooks may reach besides public addresses (CIDRs, comma-separated,
    /// e.g. `10.20.0.0/16,fd00::/8`): loopback, private, link-local, CGNAT, unique-local and
    /// other special ranges are refused unless listed here.
    #[arg(long, global = true, env = "BERTH_WEBHOOK_ALLOW", value_name = "CIDRS",
          default_value = "", value_parser = webhook_allow)]
    pub webhook_allow: WebhookAllow,
}

/// `BERTH_WEBHOOK_ALLOW`'s ranges, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookAllow(pub Vec<domain::outbound::Cidr>);

fn webhook_allow(text: &str) -> Result<WebhookAllow, String> {
    domain::outbound::parse_cidrs(text)
        .map(WebhookAllow)
        .map_err(|e| e.to_string())
}

/// Where the CLI finds the gateway, and with which key (`berth session`, `berth admin`).
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = Group::Client.heading())]
pub struct ClientSettings {
    /// Where the CLI finds the gateway (default: the profile's, else http:// and the listen address).
    #[arg(long = "gateway", global = true, env = "BERTH_GATEWAY_URL", value_name = "URL", value_parser = gateway_url)]
    pub gateway_url: Option<String>,
    /// The CLI's API key (default: the profile's).
    #[arg(
        long,
        global = true,
        env = "BERTH_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
    /// The profile of the CLI's file (`~/.config/berth/profiles.toml`, or BERTH_PROFILES_FILE)
    /// that gives the gateway and the API key when neither flag nor variable does.
    #[arg(long, global = true, env = "BERTH_PROFILE", value_name = "NAME")]
    pub profile: Option<String>,
    /// The CLI's profiles file.
    #[arg(long, global = true, env = "BERTH_PROFILES_FILE", value_name = "FILE")]
    pub profiles_file: Option<PathBuf>,
    /// A CA (PEM) the CLI trusts for the gateway besides the system's.
    #[arg(long, global = true, env = "BERTH_GATEWAY_CA", value_name = "FILE")]
    pub gateway_ca: Option<PathBuf>,
}

/// An agent's host: its data, credential, registry, address, timings and GPUs.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = Group::Agent.heading())]
pub struct AgentSettings {
    /// Where an agent keeps folders and its outbox on its host.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_DATA",
        value_name = "DIR",
        default_value = ".berth/agent-data"
    )]
    pub agent_data: PathBuf,
    /// The file holding an agent's credential (its nkey seed).
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_CREDENTIAL",
        value_name = "FILE"
    )]
    pub agent_credential: Option<PathBuf>,
    /// berth's runtime, lent read-only to every container at /opt/berth (tmux with its own
    /// libraries, so every terminal is tmux): a directory `infra/runtime.sh` makes.
    #[arg(long, global = true, env = "BERTH_AGENT_RUNTIME", value_name = "DIR")]
    pub agent_runtime: Option<PathBuf>,
    /// Where agents push customized images, and pull those their host lacks (none: kept on
    /// the host that committed them).
    #[arg(long, global = true, env = "BERTH_REGISTRY", value_name = "REGISTRY")]
    pub registry: Option<String>,
    /// The file holding the registry's credential, `user:password` (none: it takes none).
    #[arg(
        long,
        global = true,
        env = "BERTH_REGISTRY_CREDENTIAL",
        value_name = "FILE"
    )]
    pub registry_credential: Option<PathBuf>,
    /// The host address an agent publishes app and preopen ports on.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_ADDRESS",
        value_name = "IP",
        default_value = "127.0.0.1"
    )]
    pub agent_address: IpAddr,
    /// How long a stopping container gets before it is killed.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_STOP_GRACE_SECS",
        value_name = "SECS",
        default_value_t = Timings::AGENT_STOP_GRACE.as_secs()
    )]
    pub agent_stop_grace_secs: u64,
    /// How often an agent samples a running container's usage.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_USAGE_EVERY_MS",
        value_name = "MS",
        default_value_t = millis(Timings::AGENT_USAGE_EVERY)
    )]
    pub agent_usage_every_ms: u64,
    /// How long a stopped agent has to depart before it exits anyway.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_LEAVE_SECS",
        value_name = "SECS",
        default_value_t = Timings::AGENT_LEAVE.as_secs()
    )]
    pub agent_leave_secs: u64,
    /// Simulated GPUs an agent declares instead of those NVML finds (0: none, NVML's).
    #[arg(
        long,
        global = true,
        env = "BERTH_MOCK_GPUS",
        value_name = "COUNT",
        default_value_t = 0
    )]
    pub mock_gpus: u32,
    /// The memory of each simulated GPU, in GiB.
    #[arg(long, global = true, env = "BERTH_MOCK_GPU_MEMORY_GIB", value_name = "GIB",
          default_value_t = 16.0, value_parser = positive_gib)]
    pub mock_gpu_memory_gib: f64,
    /// The model the simulated GPUs are named.
    #[arg(
        long,
        global = true,
        env = "BERTH_MOCK_GPU_MODEL",
        value_name = "NAME",
        default_value = "Mock GPU"
    )]
    pub mock_gpu_model: String,
    /// A JSON file saying what each simulated GPU is doing (`{"mock-gpu-0":
    /// {"utilization_percent": 0, "memory_used_bytes": 0}}`), read at each usage sample;
    /// without it they are not measured.
    #[arg(long, global = true, env = "BERTH_MOCK_GPU_USAGE", value_name = "FILE")]
    pub mock_gpu_usage: Option<PathBuf>,
    /// How many shares make one GPU on an agent's host: a fraction of a device gets whole
    /// shares of its compute and memory (5: 0.2 GPU a share).
    #[arg(long, global = true, env = "BERTH_GPU_SHARES_PER_DEVICE", value_name = "SHARES",
          default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub gpu_shares_per_device: u64,
    /// The pipe directory of the host's CUDA MPS daemon (e.g. /tmp/nvidia-mps): fractional
    /// sessions' containers get it and the daemon's shared memory (the host's /dev/shm), to
    /// share a device through it. Their limits are MPS client settings, which a session can
    /// change: they are not enforced against a hostile tenant (see docs/operations.md).
    #[arg(
        long,
        global = true,
        env = "BERTH_GPU_MPS_PIPE_DIR",
        value_name = "DIR"
    )]
    pub gpu_mps_pipe_dir: Option<PathBuf>,
    /// Where each session's own network takes its subnet from (a /28 a session, larger for
    /// big clusters); keep it clear of the host's networks.
    #[arg(long, global = true, env = "BERTH_SESSION_SUBNETS", value_name = "CIDR",
          default_value = "10.213.0.0/16", value_parser = ipv4_net)]
    pub session_subnets: agent::docker::fence::Ipv4Net,
    /// Addresses (CIDR, comma-separated) sessions may reach although they are this host's
    /// own or link-local (169.254.169.254, the cloud's metadata): none by default.
    #[arg(long, global = true, env = "BERTH_SESSION_ALLOW", value_name = "CIDR,...",
          value_delimiter = ',', value_parser = ipv4_net)]
    pub session_allow: Vec<agent::docker::fence::Ipv4Net>,
    /// Whether the agent puts up the host firewall rules that keep sessions from the host's
    /// ports and the metadata address (iptables, as root); off only where the host's own
    /// firewall does.
    #[arg(long, global = true, env = "BERTH_SESSION_FIREWALL", value_name = "on|off", default_value = "on", value_parser = switch, action = clap::ArgAction::Set)]
    pub session_firewall: bool,
    /// How many fenced bridges the agent keeps made ahead for single-kernel sessions, each
    /// serving one session's start (the engine's making of a bridge is then not part of it);
    /// 0 makes each session's bridge at its start.
    #[arg(
        long,
        global = true,
        env = "BERTH_SESSION_SPARE_NETWORKS",
        value_name = "COUNT",
        default_value_t = 2
    )]
    pub session_spare_networks: usize,
    /// The shared volumes this host mounts (`name=/mount/path`, comma-separated, e.g.
    /// `shared=/mnt/nfs/berth`): folders on them live at `<path>/folders/...` on every host
    /// that mounts them, and sessions of them go only to such hosts. Each must be a
    /// directory the agent can write in, or it does not start.
    #[arg(long, global = true, env = "BERTH_VOLUMES", value_name = "NAME=PATH,...",
          value_delimiter = ',', value_parser = volume_mount)]
    pub volumes: Vec<(String, PathBuf)>,
}

/// `name=/mount/path`: a shared volume and where this host mounts it.
fn volume_mount(text: &str) -> Result<(String, PathBuf), String> {
    let (name, path) = text
        .trim()
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not `name=/mount/path`"))?;
    let name = domain::volumes::volume_name(name)
        .map_err(|e| format!("`{name}`: {e}"))?
        .to_owned();
    if name == domain::volumes::HOST_LOCAL {
        return Err(format!(
            "`{name}` is every agent's own data directory, not a shared volume"
        ));
    }
    let path = PathBuf::from(path);
    if !path.is_absolute() {
        return Err(format!(
            "volume `{name}`: `{}` is not an absolute path",
            path.display()
        ));
    }
    Ok((name, path))
}

/// An IPv4 network (`10.0.0.0/8`), or one address (`10.0.0.5`: its /32).
fn ipv4_net(text: &str) -> Result<agent::docker::fence::Ipv4Net, String> {
    let text = text.trim();
    text.parse()
        .or_else(|_| text.parse::<std::net::Ipv4Addr>().map(Into::into))
        .map_err(|_| format!("`{text}` is not an IPv4 network (10.0.0.0/8) or address"))
}

/// How every process writes its logs.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = Group::Logs.heading())]
pub struct LogSettings {
    /// How logs are written to standard error: lines for a person, or one JSON object a line.
    #[arg(long, global = true, env = "BERTH_LOG_FORMAT", value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Whether a process records metrics, and where it serves them without a gateway.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = Group::Metrics.heading())]
pub struct MetricsSettings {
    /// Whether the process records metrics (`off`: no recorder, `/metrics` answers 404).
    #[arg(long, global = true, env = "BERTH_METRICS", value_name = "on|off", default_value = "on", value_parser = switch, action = clap::ArgAction::Set)]
    pub metrics: bool,
    /// Where the process serves `/metrics` on a listener of its own (a part run without a
    /// gateway; `berth agent --metrics-listen` says the same for an agent).
    #[arg(long, global = true, env = "BERTH_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
}

/// A duration as the whole milliseconds its setting is written in.
const fn millis(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

/// Whether `text` turns a switch on: `on`, `true`, `1`, `yes` (`off`, `false`, `0`, `no`: off).
fn switch(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(format!("`{text}` is neither on nor off")),
    }
}

/// A memory size in GiB above zero.
fn positive_gib(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(gib) if gib > 0.0 && gib.is_finite() => Ok(gib),
        _ => Err("a number of GiB above 0".into()),
    }
}

/// The app proxy's pool of ports, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyPorts {
    Off,
    Range(u16, u16),
}

impl std::fmt::Display for ProxyPorts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProxyPorts::Off => f.write_str("off"),
            ProxyPorts::Range(first, last) => write!(f, "{first}-{last}"),
        }
    }
}

/// `off`, or `first-last` with `0 < first <= last`.
pub fn proxy_ports(text: &str) -> Result<ProxyPorts, String> {
    if text.trim() == "off" {
        return Ok(ProxyPorts::Off);
    }
    let bad = || {
        format!("`{text}` is neither `off` nor a range of ports `first-last` (e.g. {DEFAULT_PROXY_PORTS})")
    };
    let (first, last) = text.split_once('-').ok_or_else(bad)?;
    let (first, last): (u16, u16) = (
        first.trim().parse().map_err(|_| bad())?,
        last.trim().parse().map_err(|_| bad())?,
    );
    if first == 0 || first > last {
        return Err(format!(
            "`{text}`: the first port must be above 0 and not above the last"
        ));
    }
    Ok(ProxyPorts::Range(first, last))
}

/// A DNS name of two labels or more (letters, digits, `-`), kept in lower case: the apps
/// domain.
pub fn apps_domain(text: &str) -> Result<String, String> {
    let name = text.trim().trim_end_matches('.').to_ascii_lowercase();
    let label_fits = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    let labels: Vec<&str> = name.split('.').collect();
    if labels.len() < 2 || name.len() > 200 || !labels.iter().all(|l| label_fits(l)) {
        return Err(format!(
            "`{text}` is not a domain name of two labels or more, e.g. apps.example.com (its \
             every name, *.apps.example.com, must resolve to the gateway)"
        ));
    }
    Ok(name)
}

/// An `http://` or `https://` URL with a host.
pub(super) fn gateway_url(text: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(text).map_err(|e| format!("`{text}` is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!(
            "`{text}`: the gateway is reached over http:// or https://, with a host"
        ));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

fn first_api_key(text: &str) -> Result<String, String> {
    if launcher::access::is_api_key_shaped(text) {
        Ok(text.to_owned())
    } else {
        Err("a key is `berth_` and 40 hex digits (e.g. `berth_$(openssl rand -hex 20)`)".into())
    }
}

/// A secret as `berth config` prints it: a URL keeps all but its password; anything else
/// keeps its first four characters.
pub fn mask(value: &str) -> String {
    if value.is_empty() {
        return String::new();
    }
    if let Ok(mut url) = reqwest::Url::parse(value) {
        if url.has_host() {
            if url.password().is_some() {
                let _ = url.set_password(Some("****"));
            }
            return url.to_string();
        }
    }
    let kept: String = value.chars().take(4).collect();
    format!("{kept}****")
}

/// Whether `arg` is a setting of `group`.
fn in_group(arg: &clap::Arg, group: Group) -> bool {
    arg.get_help_heading() == Some(group.heading())
}

/// `command`, which flattens [`Settings`], with each subcommand's `--help` (and its own
/// subcommands') listing the settings of the groups `reads` gives for its name, and the
/// top level's none. The other settings are hidden there, not removed: every command still
/// takes each one as a flag or a variable, as before, and `berth config` shows them all.
pub fn shown_by_what_each_reads(
    command: clap::Command,
    reads: impl Fn(&str) -> &'static [Group],
) -> clap::Command {
    let settings: Vec<clap::Arg> = command
        .get_arguments()
        .filter(|arg| Group::ALL.iter().any(|&group| in_group(arg, group)))
        .cloned()
        .collect();
    let names: Vec<String> = command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    let mut command = command.mut_args(|arg| {
        if Group::ALL.iter().any(|&group| in_group(&arg, group)) {
            arg.hide(true)
        } else {
            arg
        }
    });
    for name in names {
        let groups = reads(&name);
        let shown: Vec<clap::Arg> = settings
            .iter()
            .filter(|arg| groups.iter().any(|&group| in_group(arg, group)))
            .cloned()
            .collect();
        // A global argument reaches a subcommand only where none of its own has the same id
        // (`berth agent --metrics-listen`): put the shown copy there first, under that rule.
        command = command.mut_subcommand(name, |mut sub| {
            for arg in shown {
                if sub.get_arguments().all(|own| own.get_id() != arg.get_id()) {
                    sub = sub.arg(arg);
                }
            }
            sub
        });
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_and_the_rest_shown() {
        assert_eq!(
            mask("nats://berth:s3cret@127.0.0.1:54222"),
            "nats://berth:****@127.0.0.1:54222"
        );
        assert_eq!(
            mask("postgres://berth@db/berth"),
            "postgres://berth@db/berth"
        );
        assert_eq!(mask("bk_0123456789"), "bk_0****");
        assert_eq!(mask(""), "");
    }

    #[test]
    fn every_setting_is_in_one_group_and_has_a_variable() {
        let command = Settings::augment_args(clap::Command::new("berth"));
        for arg in command.get_arguments() {
            let groups = Group::ALL.iter().filter(|&&g| in_group(arg, g)).count();
            assert_eq!(groups, 1, "{:?} is in {groups} groups", arg.get_id());
            assert!(
                arg.get_env().is_some(),
                "{:?} has no variable",
                arg.get_id()
            );
            assert!(arg.is_global_set(), "{:?} is not global", arg.get_id());
        }
    }
}
