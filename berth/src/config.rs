//! Configuration from environment variables, with defaults that match `infra/services.sh`.

/// Where PostgreSQL and NATS are.
#[derive(Debug, Clone)]
pub struct Config {
    pub database_url: String,
    pub nats_url: String,
}

pub const DEFAULT_DATABASE_URL: &str = "postgres://berth@127.0.0.1:55432/berth";
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:54222";

impl Config {
    pub fn from_env() -> Config {
        let var = |name: &str, default: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        Config {
            database_url: var("BERTH_DATABASE_URL", DEFAULT_DATABASE_URL),
            nats_url: var("BERTH_NATS_URL", DEFAULT_NATS_URL),
        }
    }
}
