//! Configuration from environment variables, with defaults that match `infra/services.sh`.
//! Every `BERTH_*` variable is read here and nowhere else (`RUST_LOG` and the `OTEL_*`
//! variables belong to logging and tracing: `telemetry` and the OTLP exporter read them), and
//! every service timing (poll intervals, grace periods) is a field of [`Timings`] with today's
//! value as default.

use std::path::PathBuf;
use std::time::Duration;

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
    /// Whether the process records metrics (`BERTH_METRICS`, `on` by default; `off`: no
    /// recorder, no `/metrics`, no HTTP request metrics, as for the benchmark's baseline).
    pub metrics: bool,
    /// Where the process serves its metrics on a listener of its own (`BERTH_METRICS_LISTEN`,
    /// e.g. `0.0.0.0:9480`): for a process without a gateway (`berth scheduler`, an agent,
    /// where `--metrics-listen` says the same); none by default.
    pub metrics_listen: Option<String>,
    /// How logs are written to stderr (`BERTH_LOG_FORMAT`, `text` or `json`).
    pub log_format: LogFormat,
    pub timings: Timings,
}

/// How logs are written: lines for a person, or one JSON object a line for a collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl LogFormat {
    /// `text` or `json` (any case); anything else is not a format.
    pub fn parse(text: &str) -> Option<LogFormat> {
        match text.trim().to_ascii_lowercase().as_str() {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }
}

/// Whether `text` turns a switch on: `on`, `true`, `1`, `yes` (`off`, `false`, `0`, `no`: off).
fn switch(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Some(true),
        "off" | "false" | "0" | "no" => Some(false),
        _ => None,
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

/// `first-last` as a range of ports (`None` for `off` or anything unreadable).
pub fn port_range(text: &str) -> Option<(u16, u16)> {
    let (first, last) = text.split_once('-')?;
    let (first, last): (u16, u16) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    (0 < first && first <= last).then_some((first, last))
}

impl Config {
    /// The configuration the process environment describes.
    pub fn from_env() -> Config {
        Config::from_source(|name| std::env::var(name).ok())
    }

    /// The configuration `source` describes (a variable's value by name): the environment
    /// in production, a map in tests.
    pub fn from_source(source: impl Fn(&str) -> Option<String>) -> Config {
        let var = |name: &str| source(name).filter(|v| !v.is_empty());
        let or = |name: &str, default: &str| var(name).unwrap_or_else(|| default.to_owned());
        let duration = |name: &str, unit: fn(u64) -> Duration, default: Duration| {
            var(name).and_then(|v| v.parse().ok()).map_or(default, unit)
        };
        let listen = or("BERTH_GATEWAY_LISTEN", DEFAULT_GATEWAY);
        let defaults = Timings::default();
        let secs = Duration::from_secs;
        let millis = Duration::from_millis;
        let topology = Topology::default();
        let agent_bus = bus::Subjects::default();
        Config {
            database_url: or("BERTH_DATABASE_URL", DEFAULT_DATABASE_URL),
            nats_url: or("BERTH_NATS_URL", DEFAULT_NATS_URL),
            topology: Topology {
                stream: or("BERTH_NATS_STREAM", &topology.stream),
                prefix: or("BERTH_NATS_PREFIX", &topology.prefix),
            },
            agent_bus: bus::Subjects {
                root: or("BERTH_NATS_AGENT_ROOT", &agent_bus.root),
                commands_stream: or("BERTH_NATS_COMMANDS_STREAM", &agent_bus.commands_stream),
                telemetry_stream: or("BERTH_NATS_TELEMETRY_STREAM", &agent_bus.telemetry_stream),
            },
            gateway_url: var("BERTH_GATEWAY_URL").unwrap_or_else(|| format!("http://{listen}")),
            gateway_listen: listen,
            api_key: var("BERTH_API_KEY"),
            agent_data_dir: or("BERTH_AGENT_DATA", ".berth/agent-data").into(),
            agent_credential: var("BERTH_AGENT_CREDENTIAL").map(PathBuf::from),
            nats_authorization: var("BERTH_NATS_AUTHORIZATION_DIR").map(PathBuf::from),
            registry: var("BERTH_REGISTRY"),
            agent_address: or("BERTH_AGENT_ADDRESS", "127.0.0.1"),
            proxy_ports: port_range(&or("BERTH_PROXY_PORTS", DEFAULT_PROXY_PORTS)),
            proxy_address: var("BERTH_PROXY_ADDRESS").and_then(|a| a.parse().ok()),
            proxy_idle: Some(duration("BERTH_PROXY_IDLE_SECS", secs, DEFAULT_PROXY_IDLE))
                .filter(|d| !d.is_zero()),
            create_queue: var("BERTH_CREATE_QUEUE")
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or(gateway::DEFAULT_CREATE_QUEUE),
            metrics: var("BERTH_METRICS")
                .and_then(|v| switch(&v))
                .unwrap_or(true),
            metrics_listen: var("BERTH_METRICS_LISTEN"),
            log_format: var("BERTH_LOG_FORMAT")
                .and_then(|v| LogFormat::parse(&v))
                .unwrap_or_default(),
            timings: Timings {
                heartbeat_timeout: duration(
                    "BERTH_HEARTBEAT_TIMEOUT_SECS",
                    secs,
                    defaults.heartbeat_timeout,
                ),
                agent_departed_timeout: duration(
                    "BERTH_AGENT_DEPARTED_TIMEOUT_SECS",
                    secs,
                    defaults.agent_departed_timeout,
                ),
                reconcile_every: duration(
                    "BERTH_RECONCILE_EVERY_MS",
                    millis,
                    defaults.reconcile_every,
                ),
                scheduler_interval: duration(
                    "BERTH_SCHEDULER_INTERVAL_MS",
                    millis,
                    defaults.scheduler_interval,
                ),
                agent_stop_grace: duration(
                    "BERTH_AGENT_STOP_GRACE_SECS",
                    secs,
                    defaults.agent_stop_grace,
                ),
                agent_usage_every: duration(
                    "BERTH_AGENT_USAGE_EVERY_MS",
                    millis,
                    defaults.agent_usage_every,
                ),
                reaper_tick: duration("BERTH_REAPER_TICK_MS", millis, defaults.reaper_tick),
                commit_deadline: duration(
                    "BERTH_COMMIT_DEADLINE_SECS",
                    secs,
                    defaults.commit_deadline,
                ),
                agent_leave: duration("BERTH_AGENT_LEAVE_SECS", secs, defaults.agent_leave),
                stop_within: duration("BERTH_STOP_WITHIN_SECS", secs, defaults.stop_within),
                ..defaults
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_local_services_and_variables_override_them() {
        let config = Config::from_source(|_| None);
        assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(config.gateway_url, "http://127.0.0.1:8480");
        assert_eq!(config.timings, Timings::default());
        assert_eq!(config.topology, Topology::default());
        assert_eq!(config.proxy_idle, Some(DEFAULT_PROXY_IDLE));
        assert!(config.metrics, "metrics are on by default");
        assert_eq!(config.metrics_listen, None);
        assert_eq!(config.log_format, LogFormat::Text);

        let config = Config::from_source(|name| match name {
            "BERTH_GATEWAY_LISTEN" => Some("0.0.0.0:9000".into()),
            "BERTH_SCHEDULER_INTERVAL_MS" => Some("250".into()),
            "BERTH_HEARTBEAT_TIMEOUT_SECS" => Some("7".into()),
            "BERTH_AGENT_DEPARTED_TIMEOUT_SECS" => Some("90".into()),
            "BERTH_NATS_STREAM" => Some("T_1".into()),
            "BERTH_API_KEY" => Some(String::new()),
            "BERTH_PROXY_IDLE_SECS" => Some("0".into()),
            "BERTH_METRICS" => Some("off".into()),
            "BERTH_METRICS_LISTEN" => Some("127.0.0.1:9480".into()),
            "BERTH_LOG_FORMAT" => Some("JSON".into()),
            _ => None,
        });
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
        assert!(!config.metrics);
        assert_eq!(config.metrics_listen.as_deref(), Some("127.0.0.1:9480"));
        assert_eq!(config.log_format, LogFormat::Json);
    }
}
