//! Fair share over past use and dominant resource fairness, pure: the domain's
//! [`events::fair_share`] (decayed usage, factors, dominant shares), re-exported here where
//! the scheduler's callers (the what-if replay among them) look for it.

pub use events::fair_share::*;
