//! Configuration from environment variables, with defaults that match `infra/services.sh`.

use std::time::Duration;

/// Where PostgreSQL, NATS and the gateway are, and the caller's API key.
#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: String,
    pub nats_url: String,
    /// Address `berth up` serves the HTTP API on.
    pub gateway_listen: String,
    /// Where the CLI finds the gateway.
    pub gateway_url: String,
    pub api_key: Option<String>,
    /// How long an agent may be silent before it is marked lost.
    pub heartbeat_timeout: Duration,
}

pub const DEFAULT_DATABASE_URL: &str = "postgres://berth@127.0.0.1:55432/berth";
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:54222";
pub const DEFAULT_GATEWAY: &str = "127.0.0.1:8480";

impl Config {
    pub fn from_env() -> Config {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let or = |name: &str, default: &str| var(name).unwrap_or_else(|| default.to_owned());
        let listen = or("BERTH_GATEWAY_LISTEN", DEFAULT_GATEWAY);
        Config {
            database_url: or("BERTH_DATABASE_URL", DEFAULT_DATABASE_URL),
            nats_url: or("BERTH_NATS_URL", DEFAULT_NATS_URL),
            gateway_url: var("BERTH_GATEWAY_URL").unwrap_or_else(|| format!("http://{listen}")),
            gateway_listen: listen,
            api_key: var("BERTH_API_KEY"),
            heartbeat_timeout: Duration::from_secs(
                var("BERTH_HEARTBEAT_TIMEOUT_SECS")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(30),
            ),
        }
    }
}
