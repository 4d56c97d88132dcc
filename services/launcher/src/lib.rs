//! The launcher: who may launch what, and turning a create request into validated
//! `SessionRequested` events.
//!
//! - [`domain`]: the pure rules of a request (no I/O).
//! - [`launch`]: the request checked against owner, project, group, policy and agents, then
//!   recorded, all sessions or none.
//! - [`access`]: users, API keys, projects, resource groups, policies and presets.

pub mod access;
pub mod domain;
pub mod launch;
