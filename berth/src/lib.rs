//! berth as a library: the one composition of its control plane ([`app`]), its
//! configuration ([`config`]), its logging and tracing ([`telemetry`]), its metrics' recorder
//! and listener ([`metrics`]), backups that keep the
//! log's order across a restore ([`backup`]), each part kept running through outages of
//! PostgreSQL and NATS ([`supervise`]), the client side of its app proxy ([`console`]:
//! tunnels and the terminal), the authorization of a NATS server on this host kept in step
//! with the agents admitted ([`nats_authority`]), and the signals that stop every process
//! gracefully ([`signals`]). The `berth` binary, the benchmarks (`berth-bench`) and the
//! end-to-end tests all start berth through [`app::start`]; what only tests and benchmarks
//! need (scratch servers, a certificate authority) is in `berth-testkit`, not here.

pub mod app;
pub mod backup;
pub mod config;
pub mod console;
pub mod event_stream_client;
pub mod metrics;
pub mod nats_authority;
pub mod signals;
pub mod supervise;
pub mod telemetry;
