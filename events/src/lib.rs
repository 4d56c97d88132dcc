//! berth's event backbone.
//!
//! - [`catalogue`], [`payloads`], [`aggregate`]: re-exported from the pure `berth-domain`
//!   crate, so callers keep short paths.
//! - [`admission`]: agents admitted (with their NATS key) and revoked by an operator.
//! - [`activity`]: an in-process hint that the log grew, so its readers rest while it is quiet.
//! - [`store`]: the PostgreSQL event store (append with optimistic concurrency, gap-safe
//!   global reads).
//! - [`migrations`]: the backbone's schema, one migration per version, which the store applies.
//! - [`audit`]: the hash chain sealed behind the horizon, and its verification.
//! - [`relay`]: publishes committed events to NATS JetStream in global order.
//! - [`consumer`]: durable, idempotent handling of those NATS messages.
//! - [`hints`]: published events of chosen types as pokes of a `Notify` (look again now).
//! - [`projection`]: read models with checkpoints, rebuilt and compared on demand.
//! - [`lifecycle`]: the pure moves of `berth-domain`, and `command`, which records them.
//! - [`ledger`]: the write-side tables kept in the same transaction as each append.
//! - [`fault`]: which database failures are an outage (wait and retry) and which a mistake.
//! - [`sql`]: SQL fragments built from the domain's status sets.
//! - [`pg`]: wire types the store needs, and `copy_rows` (a fold in memory written out).
//! - [`tls`]: TLS to PostgreSQL as the URL's `sslmode` says (libpq's modes, over rustls).
//! - [`trace`]: W3C trace context in envelopes and NATS headers.
//! - [`metrics`]: the names and help of the relay's, the projections' and the consumers'
//!   metrics (recorded through the `metrics` facade).

pub mod activity;
pub mod admission;
pub mod audit;
pub mod consumer;
pub mod fault;
pub mod hints;
pub mod ledger;
pub mod lifecycle;
pub mod metrics;
pub mod migrations;
pub mod pg;
pub mod projection;
pub mod relay;
pub mod sql;
pub mod store;
pub mod subscriptions;
pub mod tls;
pub use bus::trace;
pub use metrics::describe_metrics;

pub use domain::{
    advice, aggregate, authorization, catalogue, credentials, event_filter, fair_share, folders,
    idleness, images, notices, outbound, payloads, usage, volumes,
};
pub use domain::{Event, LogPosition, Metadata, RecordedEvent};
pub use store::{EventStore, ExpectedVersion, ProposedEvent, StoreError};
