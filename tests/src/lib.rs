//! Home of the workspace-wide tests: `tidy.rs` checks the architecture rules that Cargo and
//! rustc cannot (where SQL may be written, which crate may depend on which).
