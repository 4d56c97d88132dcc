//! Home of the workspace-wide tests: `tidy.rs` checks the architecture rules that Cargo and
//! rustc cannot (where SQL may be written, which crate may depend on which); `e2e/` runs the
//! whole platform against real PostgreSQL, NATS and Docker.
