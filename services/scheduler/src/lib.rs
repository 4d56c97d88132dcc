//! The scheduler: places pending sessions on agents and records why, and the reconciler that
//! keeps sessions from getting stuck.
//!
//! - [`core`]: the pure decisions (queue order, policy, agent choice, give-up).
//! - [`advice`]: when a session is expected to start, and what would start sooner: the live
//!   queue run forward in simulated time through [`core`].
//! - [`fair_share`]: past use decayed by age, and the factor a fair-share queue is ordered by.
//! - [`policy`]: the order a queue is decided in (fifo, backfill, lifo, drf, fair-share,
//!   priorities, the starvation bound), with the figures that set it.
//! - [`free_index`]: agents ordered by what they have free, so choosing one is not a scan.
//! - [`run`]: the I/O around it: load a group's snapshot from the ledger, decide, record.
//! - [`parts`]: a large pass's decisions cut along their agents, to be recorded side by side.
//! - [`wake`]: the events on NATS that wake the scheduler.
//! - [`reconcile`]: deadlines for every intermediate status, lost agents.
//! - [`whatif`]: what-if replays: a recorded workload run through another policy in
//!   simulated time with [`core`], measured next to what really happened.
//! - [`db`]: the ledger reads of both, the crate's only SQL.

pub mod advice;
pub mod answer;
pub mod core;
pub mod db;
pub mod fair_share;
pub mod free_index;
pub mod parts;
pub mod policy;
pub mod reconcile;
pub mod run;
pub mod wake;
pub mod whatif;
pub use run::describe_metrics;
