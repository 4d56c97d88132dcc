//! The launcher: who may launch what, and turning a create request into validated
//! `SessionRequested` events.
//!
//! - [`domain`]: the pure rules of a request (no I/O).
//! - [`decide`]: the launch decision, pure: a request and the facts it depends on (a
//!   `LaunchContext`) in, `SessionRequested` events or the field at fault out.
//! - [`launch`]: the request types; loads the context, decides, records all sessions or none.
//! - [`schema`]: the create request as the OpenAPI document states it, beside its rules.
//! - [`db`]: the ledger reads above, the crate's only SQL.
//! - [`access`]: users, API keys, projects, resource groups, policies and presets.
//! - [`credentials`]: passwords, set by an admin or by their user, and web-console sign-ins.
//! - [`registries`]: the credentials an admin stores for registries, whose images every agent
//!   pulls.

pub mod access;
pub mod credentials;
pub mod db;
pub mod decide;
pub mod domain;
pub mod launch;
pub mod listings;
pub mod registries;
pub mod schema;
