//! The security review's attacks (`../shared/notes/security-review-1.md`), each tried as an
//! attacker would against the whole platform, and each a test that it now fails: one module
//! per group of findings, each test naming the findings it covers.

mod apps;
mod containers;
mod credentials;
mod outbound;
mod secrets;
