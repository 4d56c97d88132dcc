//! Admission, as the backbone keeps it ([`events::admission`]): the recorder folds an agent's
//! stream to decide on each registration; operators admit and revoke through the gateway.

pub use events::admission::*;
