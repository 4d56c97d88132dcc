//! berth as a library: the one composition of its control plane ([`app`]), its
//! configuration ([`config`]) and its logging and tracing ([`telemetry`]). The `berth`
//! binary and the end-to-end tests both start berth through [`app::start`].

pub mod app;
pub mod config;
pub mod telemetry;
