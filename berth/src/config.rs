//! Configuration: every `BERTH_*` setting is declared once, in [`Settings`], as a flag with
//! its environment variable, its type and its default. clap parses it, so a value that does
//! not parse stops the process at start naming the variable (never a silent default), and
//! `--help` lists every variable with its default; `berth config` prints the values in
//! force with secrets masked. [`Config`] is what the parts read, made from the settings.
//!
//! Not settings, and so not here: `RUST_LOG` and the `OTEL_*` variables (logging and the
//! OTLP exporter read them), the inputs of two commands (`BERTH_NEW_PASSWORD`,
//! `BERTH_CURRENT_PASSWORD`), and where the scratch servers of tests and benchmarks find
//! their programs (`BERTH_PG_BIN`, `BERTH_NATS_SERVER`, read where those programs start).

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, FromArgMatches};

use events::relay::Topology;

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
    /// The directory of a NATS server's authorization that berth keeps in step with the
    /// agents admitted (`BERTH_NATS_AUTHORIZATION_DIR`, which `infra/services.sh` sets for the
    /// server it runs); none where an operator makes the authorization by hand
    /// (`berth admin nats-authorization`). See [`crate::nats_authority`].
    pub nats_authorization: Option<PathBuf>,
    /// Where agents push customized images (`BERTH_REGISTRY`); none keeps them on the host.
    pub registry: Option<String>,
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

/// Whether `text` turns a switch on: `on`, `true`, `1`, `yes` (`off`, `false`, `0`, `no`: off).
fn switch(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(format!("`{text}` is neither on nor off")),
    }
}

/// Where the gateway finds the master key that Backend.AI keypairs' secret keys are derived
/// with (it is never in the database or the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterKey {
    /// Given as a setting (`BERTH_BACKENDAI_MASTER_KEY`).
    Given(Vec<u8>),
    /// Kept in a file, made (mode 0600, 32 random bytes as hex) when missing.
    File(PathBuf),
}

/// Where the master key is kept when no setting names it.
pub const DEFAULT_MASTER_KEY_FILE: &str = ".berth/backendai-master.key";

impl MasterKey {
    /// The key: given, or read from its file, which is made when missing.
    pub fn load(&self) -> anyhow::Result<Vec<u8>> {
        use anyhow::Context;
        let path = match self {
            MasterKey::Given(key) => return Ok(key.clone()),
            MasterKey::File(path) => path,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let key = text.trim().as_bytes().to_vec();
                anyhow::ensure!(
                    key.len() >= MIN_MASTER_KEY_BYTES,
                    "{}: a master key has at least {MIN_MASTER_KEY_BYTES} characters",
                    path.display()
                );
                Ok(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("create {}", dir.display()))?;
                }
                let bytes: [u8; 32] = rand::random();
                let key = hex::encode(bytes);
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .and_then(|mut f| f.write_all(key.as_bytes()))
                    .with_context(|| {
                        format!("write the Backend.AI master key to {}", path.display())
                    })?;
                tracing::info!(path = %path.display(), "made a Backend.AI master key");
                Ok(key.into_bytes())
            }
            Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
        }
    }
}

/// Fewest characters a master key has.
pub const MIN_MASTER_KEY_BYTES: usize = 32;

fn master_key(text: &str) -> Result<String, String> {
    if text.len() >= MIN_MASTER_KEY_BYTES {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "a master key has at least {MIN_MASTER_KEY_BYTES} characters (e.g. `$(openssl rand -hex 32)`)"
        ))
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
    /// busy log is sealed without rest.
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
            heartbeat_timeout: Duration::from_secs(30),
            agent_departed_timeout: Duration::from_secs(600),
            agent_silent_after: events::aggregate::SILENT_AFTER,
            reconcile_every: Duration::from_secs(2),
            scheduler_interval: Duration::from_secs(10),
            streams_poll: Duration::from_millis(20),
            sessions_poll: Duration::from_millis(10),
            sealer_idle: Duration::from_secs(1),
            detail_cache_ttl: Duration::from_secs(5),
            agent_stop_grace: Duration::from_secs(10),
            agent_image_refresh: Duration::from_secs(10),
            simulated_step: Duration::from_secs(1),
            agent_usage_every: Duration::from_secs(5),
            reaper_tick: Duration::from_millis(250),
            commit_deadline: Duration::from_secs(30 * 60),
            agent_leave: Duration::from_secs(10),
            stop_within: Duration::from_secs(15),
        }
    }
}

pub const DEFAULT_DATABASE_URL: &str = "postgres://berth@127.0.0.1:55432/berth";
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:54222";
pub const DEFAULT_GATEWAY: &str = "127.0.0.1:8480";
pub const DEFAULT_PROXY_PORTS: &str = "10200-10299";
pub const DEFAULT_PROXY_IDLE: Duration = Duration::from_secs(3600);

/// Every setting, each a flag (global: it may follow any command) and a `BERTH_*`
/// environment variable; a flag wins over its variable, a variable over the profile, the
/// profile over the default. An empty variable counts as unset.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Settings (each flag is also read from the BERTH_* variable shown)")]
pub struct Settings {
    /// PostgreSQL, as a libpq URL (`sslmode` and friends included).
    #[arg(long, global = true, env = "BERTH_DATABASE_URL", value_name = "URL",
          default_value = DEFAULT_DATABASE_URL, hide_env_values = true)]
    pub database_url: String,
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
    /// Address the gateway serves the HTTP API on (port 0: any free port).
    #[arg(long, global = true, env = "BERTH_GATEWAY_LISTEN", value_name = "ADDR", default_value = DEFAULT_GATEWAY)]
    pub gateway_listen: SocketAddr,
    /// Where the CLI finds the gateway (default: the profile's, else http:// and the listen address).
    #[arg(long = "gateway", global = true, env = "BERTH_GATEWAY_URL", value_name = "URL", value_parser = gateway_url)]
    pub gateway_url: Option<String>,
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
    /// A CA (PEM) the CLI trusts for the gateway besides the system's.
    #[arg(long, global = true, env = "BERTH_GATEWAY_CA", value_name = "FILE")]
    pub gateway_ca: Option<PathBuf>,
    /// A CA (PEM) webhook deliveries trust besides the system's.
    #[arg(long, global = true, env = "BERTH_WEBHOOK_CA", value_name = "FILE")]
    pub webhook_ca: Option<PathBuf>,
    /// Whether the process records metrics (`off`: no recorder, `/metrics` answers 404).
    #[arg(long, global = true, env = "BERTH_METRICS", value_name = "on|off", default_value = "on", value_parser = switch, action = clap::ArgAction::Set)]
    pub metrics: bool,
    /// Where the process serves `/metrics` on a listener of its own (a part run without a
    /// gateway; `berth agent --metrics-listen` says the same for an agent).
    #[arg(long, global = true, env = "BERTH_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// How logs are written to standard error: lines for a person, or one JSON object a line.
    #[arg(long, global = true, env = "BERTH_LOG_FORMAT", value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The CLI's API key (default: the profile's).
    #[arg(
        long,
        global = true,
        env = "BERTH_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub api_key: Option<String>,
    /// The first superadmin's API key on a fresh install (`berth_` and 40 hex digits), for an
    /// automated install that must know it; made at random and printed once when unset.
    #[arg(long, global = true, env = "BERTH_FIRST_API_KEY", value_name = "KEY",
          hide_env_values = true, value_parser = first_api_key)]
    pub first_api_key: Option<String>,
    /// The profile of the CLI's file (`~/.config/berth/profiles.toml`, or BERTH_PROFILES_FILE)
    /// that gives the gateway and the API key when neither flag nor variable does.
    #[arg(long, global = true, env = "BERTH_PROFILE", value_name = "NAME")]
    pub profile: Option<String>,
    /// The CLI's profiles file.
    #[arg(long, global = true, env = "BERTH_PROFILES_FILE", value_name = "FILE")]
    pub profiles_file: Option<PathBuf>,
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
    /// The directory of a NATS server's authorization that berth keeps in step with the
    /// agents admitted.
    #[arg(
        long,
        global = true,
        env = "BERTH_NATS_AUTHORIZATION_DIR",
        value_name = "DIR"
    )]
    pub nats_authorization_dir: Option<PathBuf>,
    /// Where agents push customized images (none: kept on the host).
    #[arg(long, global = true, env = "BERTH_REGISTRY", value_name = "REGISTRY")]
    pub registry: Option<String>,
    /// The host address an agent publishes app and preopen ports on.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_ADDRESS",
        value_name = "IP",
        default_value = "127.0.0.1"
    )]
    pub agent_address: IpAddr,
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
    /// Session creates the gateway takes in flight at once; one more is answered 503 `busy`.
    #[arg(long, global = true, env = "BERTH_CREATE_QUEUE", value_name = "N", default_value_t = NonZeroUsize::new(gateway::DEFAULT_CREATE_QUEUE).expect("non-zero"))]
    pub create_queue: NonZeroUsize,
    /// How long an agent may be silent before it is marked lost.
    #[arg(
        long,
        global = true,
        env = "BERTH_HEARTBEAT_TIMEOUT_SECS",
        value_name = "SECS",
        default_value_t = 30
    )]
    pub heartbeat_timeout_secs: u64,
    /// How long an agent that departed may stay silent before it is taken for lost.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_DEPARTED_TIMEOUT_SECS",
        value_name = "SECS",
        default_value_t = 600
    )]
    pub agent_departed_timeout_secs: u64,
    /// The reconciler's round.
    #[arg(
        long,
        global = true,
        env = "BERTH_RECONCILE_EVERY_MS",
        value_name = "MS",
        default_value_t = 2000
    )]
    pub reconcile_every_ms: u64,
    /// Longest time between scheduler passes when nothing wakes the scheduler.
    #[arg(
        long,
        global = true,
        env = "BERTH_SCHEDULER_INTERVAL_MS",
        value_name = "MS",
        default_value_t = 10_000
    )]
    pub scheduler_interval_ms: u64,
    /// How long a stopping container gets before it is killed.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_STOP_GRACE_SECS",
        value_name = "SECS",
        default_value_t = 10
    )]
    pub agent_stop_grace_secs: u64,
    /// How often an agent samples a running container's usage.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_USAGE_EVERY_MS",
        value_name = "MS",
        default_value_t = 5000
    )]
    pub agent_usage_every_ms: u64,
    /// How often the idle-reaper compares what it knows with the clock.
    #[arg(
        long,
        global = true,
        env = "BERTH_REAPER_TICK_MS",
        value_name = "MS",
        default_value_t = 250
    )]
    pub reaper_tick_ms: u64,
    /// How long an agent has to finish a commit.
    #[arg(
        long,
        global = true,
        env = "BERTH_COMMIT_DEADLINE_SECS",
        value_name = "SECS",
        default_value_t = 1800
    )]
    pub commit_deadline_secs: u64,
    /// How long a stopped agent has to depart before it exits anyway.
    #[arg(
        long,
        global = true,
        env = "BERTH_AGENT_LEAVE_SECS",
        value_name = "SECS",
        default_value_t = 10
    )]
    pub agent_leave_secs: u64,
    /// How long the control plane's parts have to stop before the process exits non-zero.
    #[arg(
        long,
        global = true,
        env = "BERTH_STOP_WITHIN_SECS",
        value_name = "SECS",
        default_value_t = 15
    )]
    pub stop_within_secs: u64,
    /// Simulated GPUs an agent declares instead of those NVML finds (0: none, NVML's).
    #[arg(
        long,
        global = true,
        env = "BERTH_MOCK_GPUS",
        value_name = "COUNT",
        default_value_t = 0
    )]
    pub mock_gpus: u32,
    /// Whether the gateway serves Backend.AI's API for its official client beside berth's.
    // `--backendai-api`, not `--backendai`: that names a user or a key in `berth admin
    // issue-key --backendai EMAIL` and `revoke-key --backendai AK`.
    #[arg(long = "backendai-api", global = true, env = "BERTH_BACKENDAI", value_name = "on|off", default_value = "on", value_parser = switch, action = clap::ArgAction::Set)]
    pub backendai: bool,
    /// The master key Backend.AI keypairs' secret keys are derived with (at least 32
    /// characters; every gateway of one installation needs the same). Default: the file of
    /// BERTH_BACKENDAI_MASTER_KEY_FILE.
    #[arg(long, global = true, env = "BERTH_BACKENDAI_MASTER_KEY", value_name = "KEY",
          hide_env_values = true, value_parser = master_key)]
    pub backendai_master_key: Option<String>,
    /// The file that keeps the master key, made (0600) when missing.
    #[arg(long, global = true, env = "BERTH_BACKENDAI_MASTER_KEY_FILE", value_name = "FILE",
          default_value = DEFAULT_MASTER_KEY_FILE)]
    pub backendai_master_key_file: PathBuf,
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
    /// sessions' containers get it and the host's IPC namespace, to have their limits enforced.
    #[arg(
        long,
        global = true,
        env = "BERTH_GPU_MPS_PIPE_DIR",
        value_name = "DIR"
    )]
    pub gpu_mps_pipe_dir: Option<PathBuf>,
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

/// An `http://` or `https://` URL with a host.
fn gateway_url(text: &str) -> Result<String, String> {
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

impl Settings {
    /// The settings `source` describes (a variable's value by name; an empty value is unset),
    /// every other one at its default: a map in tests. A value that does not parse is an
    /// error naming its variable.
    pub fn from_source(source: impl Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
        let command = Settings::augment_args(clap::Command::new("berth"));
        let mut argv = vec!["berth".to_owned()];
        let mut given = Vec::new();
        for arg in command.get_arguments() {
            let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
                continue;
            };
            let env = env.to_string_lossy().into_owned();
            if let Some(value) = source(&env).filter(|v| !v.is_empty()) {
                argv.push(format!("--{long}={value}"));
                given.push((long.to_owned(), env, value));
            }
        }
        // The variables reach clap as flags here, so that the process's own environment
        // plays no part.
        let command = command.mut_args(|arg| arg.env(None::<&str>));
        let matches = command.try_get_matches_from(argv).map_err(|e| {
            ConfigError::from_clap(&e, |long| {
                given
                    .iter()
                    .find(|(l, ..)| l == long)
                    .map(|(_, env, value)| (env.clone(), value.clone()))
            })
        })?;
        Settings::from_arg_matches(&matches).map_err(|e| ConfigError::Invalid(e.to_string()))
    }

    /// Each setting's variable, its value as `berth config` shows it (secrets masked) and
    /// where it came from, in declaration order.
    pub fn listing(matches: &clap::ArgMatches) -> Vec<(String, String, &'static str)> {
        let command = Settings::augment_args(clap::Command::new("berth"));
        command
            .get_arguments()
            .filter_map(|arg| {
                let env = arg.get_env()?.to_string_lossy().into_owned();
                let id = arg.get_id().as_str();
                let value = matches
                    .get_raw(id)
                    .and_then(|mut values| values.next())
                    .map(|v| v.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let source = match matches.value_source(id) {
                    Some(clap::parser::ValueSource::CommandLine) => "flag",
                    Some(clap::parser::ValueSource::EnvVariable) => "environment",
                    Some(clap::parser::ValueSource::DefaultValue) => "default",
                    _ => "unset",
                };
                let shown = if arg.is_hide_env_values_set() {
                    mask(&value)
                } else {
                    value
                };
                Some((env, shown, source))
            })
            .collect()
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
    #[error("{0}")]
    Invalid(String),
    #[error("profiles file {path}: {reason}")]
    Profiles { path: String, reason: String },
}

impl ConfigError {
    /// clap's error, with the variable named where the value came from one: `given(long)`
    /// says which variable and value stand behind a flag.
    pub fn from_clap(
        error: &clap::Error,
        given: impl Fn(&str) -> Option<(String, String)>,
    ) -> ConfigError {
        use clap::error::{ContextKind, ContextValue};
        let arg = match error.get(ContextKind::InvalidArg) {
            Some(ContextValue::String(arg)) => arg.clone(),
            _ => return ConfigError::Invalid(error.to_string()),
        };
        let long = arg
            .trim_start_matches("--")
            .split([' ', '='])
            .next()
            .unwrap_or_default()
            .to_owned();
        let reason = error
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned();
        match given(&long) {
            Some((variable, value)) => ConfigError::BadValue {
                variable,
                value,
                reason,
            },
            None => ConfigError::Invalid(error.to_string()),
        }
    }
}

/// The CLI's profiles file: `[NAME]` tables with `gateway` and `api_key`; `default` is used
/// when no profile is named.
#[derive(Debug, Default, serde::Deserialize)]
struct Profile {
    gateway: Option<String>,
    api_key: Option<String>,
}

fn profiles_file(settings: &Settings) -> Option<PathBuf> {
    settings.profiles_file.clone().or_else(|| {
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".config")))?;
        Some(config.join("berth").join("profiles.toml"))
    })
}

fn profile(settings: &Settings) -> Result<Profile, ConfigError> {
    let Some(path) = profiles_file(settings) else {
        return Ok(Profile::default());
    };
    let failed = |reason: String| ConfigError::Profiles {
        path: path.display().to_string(),
        reason,
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        // No file is no profile, unless one was asked for by name.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && settings.profile.is_none() => {
            return Ok(Profile::default())
        }
        Err(e) => return Err(failed(e.to_string())),
    };
    let mut profiles: std::collections::BTreeMap<String, Profile> =
        toml::from_str(&text).map_err(|e| failed(e.to_string()))?;
    let name = settings.profile.as_deref().unwrap_or("default");
    match profiles.remove(name) {
        Some(profile) => {
            if let Some(gateway) = &profile.gateway {
                gateway_url(gateway).map_err(|e| failed(format!("[{name}] gateway: {e}")))?;
            }
            Ok(profile)
        }
        None if settings.profile.is_none() => Ok(Profile::default()),
        None => Err(failed(format!("no profile [{name}]"))),
    }
}

impl Config {
    /// The configuration the settings describe, the CLI's profile filling in the gateway and
    /// the API key where neither a flag nor a variable gives them.
    pub fn from_settings(settings: &Settings) -> Result<Config, ConfigError> {
        let profile = if settings.gateway_url.is_none() || settings.api_key.is_none() {
            profile(settings)?
        } else {
            Profile::default()
        };
        let secs = Duration::from_secs;
        let millis = Duration::from_millis;
        let defaults = Timings::default();
        Ok(Config {
            database_url: settings.database_url.clone(),
            nats_url: settings.nats_url.clone(),
            topology: Topology {
                stream: settings.nats_stream.clone(),
                prefix: settings.nats_prefix.clone(),
            },
            agent_bus: bus::Subjects {
                root: settings.nats_agent_root.clone(),
                commands_stream: settings.nats_commands_stream.clone(),
                telemetry_stream: settings.nats_telemetry_stream.clone(),
            },
            gateway_url: settings
                .gateway_url
                .clone()
                .or(profile.gateway.map(|g| g.trim_end_matches('/').to_owned()))
                .unwrap_or_else(|| {
                    // A gateway with a certificate serves HTTPS only.
                    let scheme = match settings.gateway_tls_cert {
                        Some(_) => "https",
                        None => "http",
                    };
                    format!("{scheme}://{}", settings.gateway_listen)
                }),
            gateway_listen: settings.gateway_listen.to_string(),
            api_key: settings.api_key.clone().or(profile.api_key),
            first_api_key: settings.first_api_key.clone(),
            agent_data_dir: settings.agent_data.clone(),
            agent_credential: settings.agent_credential.clone(),
            nats_authorization: settings.nats_authorization_dir.clone(),
            registry: settings.registry.clone(),
            agent_address: settings.agent_address.to_string(),
            proxy_ports: match settings.proxy_ports {
                ProxyPorts::Off => None,
                ProxyPorts::Range(first, last) => Some((first, last)),
            },
            proxy_address: settings.proxy_address,
            proxy_idle: Some(secs(settings.proxy_idle_secs)).filter(|d| !d.is_zero()),
            create_queue: settings.create_queue.get(),
            nats_tls: bus::link::NatsTls {
                ca: settings.nats_ca.clone(),
                cert: settings.nats_cert.clone(),
                key: settings.nats_key.clone(),
            },
            gateway_tls_cert: settings.gateway_tls_cert.clone(),
            gateway_tls_key: settings.gateway_tls_key.clone(),
            gateway_ca: settings.gateway_ca.clone(),
            webhook_ca: settings.webhook_ca.clone(),
            metrics: settings.metrics,
            metrics_listen: settings.metrics_listen.map(|a| a.to_string()),
            log_format: settings.log_format,
            mock_gpus: (settings.mock_gpus > 0).then(|| agent::gpu::MockGpus {
                count: settings.mock_gpus,
                memory_bytes: (settings.mock_gpu_memory_gib * (1u64 << 30) as f64) as u64,
                model: settings.mock_gpu_model.clone(),
                usage_file: settings.mock_gpu_usage.clone(),
            }),
            gpu_shares_per_device: settings.gpu_shares_per_device,
            gpu_mps_pipe_dir: settings.gpu_mps_pipe_dir.clone(),
            backendai: settings
                .backendai
                .then(|| match &settings.backendai_master_key {
                    Some(key) => MasterKey::Given(key.as_bytes().to_vec()),
                    None => MasterKey::File(settings.backendai_master_key_file.clone()),
                }),
            timings: Timings {
                heartbeat_timeout: secs(settings.heartbeat_timeout_secs),
                agent_departed_timeout: secs(settings.agent_departed_timeout_secs),
                reconcile_every: millis(settings.reconcile_every_ms),
                scheduler_interval: millis(settings.scheduler_interval_ms),
                agent_stop_grace: secs(settings.agent_stop_grace_secs),
                agent_usage_every: millis(settings.agent_usage_every_ms),
                reaper_tick: millis(settings.reaper_tick_ms),
                commit_deadline: secs(settings.commit_deadline_secs),
                agent_leave: secs(settings.agent_leave_secs),
                stop_within: secs(settings.stop_within_secs),
                ..defaults
            },
        })
    }

    /// The configuration `source` describes (a variable's value by name), every other
    /// setting at its default and no profile read: tests and benchmarks.
    pub fn from_source(source: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let mut settings = Settings::from_source(source)?;
        settings
            .profiles_file
            .get_or_insert_with(|| PathBuf::from("/nonexistent/berth/profiles.toml"));
        Config::from_settings(&settings)
    }

    /// Every setting at its default: tests and benchmarks, which then set what they need.
    pub fn defaults() -> Config {
        Config::from_source(|_| None).expect("the defaults parse")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn defaults_match_the_local_services_and_variables_override_them() {
        let config = Config::defaults();
        assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(config.gateway_url, "http://127.0.0.1:8480");
        assert_eq!(config.timings, Timings::default());
        assert_eq!(config.topology, Topology::default());
        assert_eq!(config.agent_bus, bus::Subjects::default());
        assert_eq!(config.proxy_idle, Some(DEFAULT_PROXY_IDLE));
        assert!(config.metrics, "metrics are on by default");
        assert_eq!(config.metrics_listen, None);
        assert_eq!(config.log_format, LogFormat::Text);
        assert_eq!(config.proxy_ports, Some((10200, 10299)));
        assert_eq!(config.create_queue, gateway::DEFAULT_CREATE_QUEUE);
        assert_eq!(config.mock_gpus, None, "the GPUs are NVML's by default");
        assert_eq!(config.gpu_shares_per_device, 1000);
        assert_eq!(config.gpu_mps_pipe_dir, None);
        assert_eq!(
            config.backendai,
            Some(MasterKey::File(DEFAULT_MASTER_KEY_FILE.into())),
            "Backend.AI's API is on, its key in a file"
        );

        let config = with(&[
            ("BERTH_GATEWAY_LISTEN", "0.0.0.0:9000"),
            ("BERTH_SCHEDULER_INTERVAL_MS", "250"),
            ("BERTH_HEARTBEAT_TIMEOUT_SECS", "7"),
            ("BERTH_AGENT_DEPARTED_TIMEOUT_SECS", "90"),
            ("BERTH_NATS_STREAM", "T_1"),
            ("BERTH_API_KEY", ""),
            ("BERTH_PROXY_IDLE_SECS", "0"),
            ("BERTH_PROXY_PORTS", "off"),
            ("BERTH_METRICS", "off"),
            ("BERTH_METRICS_LISTEN", "127.0.0.1:9480"),
            ("BERTH_LOG_FORMAT", "json"),
            ("BERTH_MOCK_GPUS", "2"),
            ("BERTH_MOCK_GPU_MEMORY_GIB", "16"),
            ("BERTH_MOCK_GPU_MODEL", "Mock A100"),
            ("BERTH_MOCK_GPU_USAGE", "/tmp/gpu-use.json"),
            ("BERTH_GPU_SHARES_PER_DEVICE", "5"),
            ("BERTH_GPU_MPS_PIPE_DIR", "/tmp/nvidia-mps"),
        ])
        .unwrap();
        assert_eq!(
            config.mock_gpus,
            Some(agent::gpu::MockGpus {
                count: 2,
                memory_bytes: 16 << 30,
                model: "Mock A100".into(),
                usage_file: Some("/tmp/gpu-use.json".into()),
            })
        );
        assert_eq!(config.gpu_shares_per_device, 5);
        assert_eq!(
            config.gpu_mps_pipe_dir.as_deref(),
            Some(std::path::Path::new("/tmp/nvidia-mps"))
        );
        assert_eq!(config.gateway_url, "http://0.0.0.0:9000");
        assert_eq!(
            config.timings.scheduler_interval,
            Duration::from_millis(250)
        );
        assert_eq!(config.timings.heartbeat_timeout, Duration::from_secs(7));
        assert_eq!(
            config.timings.agent_departed_timeout,
            Duration::from_secs(90)
        );
        assert_eq!(config.topology.stream, "T_1");
        assert_eq!(config.api_key, None, "an empty variable is unset");
        assert_eq!(config.proxy_idle, None, "0: circuits never idle out");
        assert_eq!(config.proxy_ports, None);
        assert!(!config.metrics);
        assert_eq!(config.metrics_listen.as_deref(), Some("127.0.0.1:9480"));
        assert_eq!(config.log_format, LogFormat::Json);
    }

    #[test]
    fn a_value_that_does_not_parse_is_refused_naming_its_variable_and_value() {
        for (variable, value) in [
            ("BERTH_PROXY_PORTS", "10200:10299"),
            ("BERTH_PROXY_PORTS", "0-10"),
            ("BERTH_HEARTBEAT_TIMEOUT_SECS", "30s"),
            ("BERTH_SCHEDULER_INTERVAL_MS", "-1"),
            ("BERTH_PROXY_ADDRESS", "proxy.example"),
            ("BERTH_AGENT_ADDRESS", "10.0.0"),
            ("BERTH_GATEWAY_LISTEN", "localhost"),
            ("BERTH_GATEWAY_URL", "ftp://gateway"),
            ("BERTH_CREATE_QUEUE", "0"),
            ("BERTH_FIRST_API_KEY", "secret"),
            ("BERTH_METRICS", "maybe"),
            ("BERTH_METRICS_LISTEN", "9480"),
            ("BERTH_LOG_FORMAT", "xml"),
            ("BERTH_MOCK_GPUS", "-1"),
            ("BERTH_MOCK_GPU_MEMORY_GIB", "0"),
            ("BERTH_GPU_SHARES_PER_DEVICE", "0"),
            ("BERTH_GPU_SHARES_PER_DEVICE", "1001"),
        ] {
            let error = with(&[(variable, value)]).expect_err(variable).to_string();
            assert!(
                error.starts_with(&format!("{variable}={value}: ")),
                "{variable}={value} gave {error}"
            );
        }
    }

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
    fn a_profile_gives_the_gateway_and_key_that_no_flag_or_variable_gives() {
        let dir = std::env::temp_dir().join(format!("berth-profiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("profiles.toml");
        std::fs::write(
            &file,
            "[default]\ngateway = \"https://lab.example:8480/\"\napi_key = \"bk_default\"\n\n[other]\ngateway = \"http://other:8480\"\n",
        )
        .unwrap();
        let file_text = file.display().to_string();
        let config = with(&[("BERTH_PROFILES_FILE", &file_text)]).unwrap();
        assert_eq!(config.gateway_url, "https://lab.example:8480");
        assert_eq!(config.api_key.as_deref(), Some("bk_default"));
        let config = with(&[
            ("BERTH_PROFILES_FILE", &file_text),
            ("BERTH_PROFILE", "other"),
            ("BERTH_API_KEY", "bk_env"),
        ])
        .unwrap();
        assert_eq!(config.gateway_url, "http://other:8480");
        assert_eq!(
            config.api_key.as_deref(),
            Some("bk_env"),
            "a variable wins over the profile"
        );
        let missing = with(&[
            ("BERTH_PROFILES_FILE", &file_text),
            ("BERTH_PROFILE", "nope"),
        ]);
        assert!(missing
            .unwrap_err()
            .to_string()
            .contains("no profile [nope]"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
