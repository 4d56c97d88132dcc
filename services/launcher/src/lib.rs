//! The launcher: turns a create request into a validated `SessionRequested` event.
//!
//! `domain` holds the pure rules (no I/O, no async); the wiring to the store and the gateway
//! arrives with the rest of the sessions issue.

pub mod domain;
