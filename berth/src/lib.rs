//! berth as a library: the one composition of its control plane ([`app`]), its
//! configuration ([`config`]), its logging and tracing ([`telemetry`]), its metrics' recorder
//! and listener ([`metrics`]), backups that keep the
//! log's order across a restore ([`backup`]), each part kept running through outages of
//! PostgreSQL and NATS ([`supervise`]), the client side of its app proxy ([`console`]:
//! tunnels and the terminal), the authorization of a NATS server on this host kept in step
//! with the agents admitted ([`nats_authority`]), and dependencies of one's own to take away
//! and give back ([`scratch`], for the fault-injection tests and `berth bench recovery`), and
//! the signals that stop every process gracefully ([`signals`]), and Backend.AI's official
//! client installed for the test and the bench that drive berth with it
//! ([`backendai_client`]). The
//! `berth` binary and the end-to-end tests both start berth through [`app::start`].

pub mod app;
pub mod backendai_client;
pub mod backup;
pub mod config;
pub mod console;
pub mod metrics;
pub mod nats_authority;
pub mod scratch;
pub mod signals;
pub mod supervise;
pub mod telemetry;
