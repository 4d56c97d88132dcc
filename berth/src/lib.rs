//! berth as a library: the one composition of its control plane ([`app`]) and its
//! configuration ([`config`]). The `berth` binary and the end-to-end tests both start berth
//! through [`app::start`].

pub mod app;
pub mod config;
