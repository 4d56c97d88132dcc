//! berth's event backbone.
//!
//! - [`catalogue`] and [`payloads`]: every event type, versioned, upcast on read.
//! - [`store`]: the PostgreSQL event store (append with optimistic concurrency, gap-safe
//!   global reads).
//! - [`audit`]: the hash chain sealed behind the horizon, and its verification.
//! - [`relay`]: publishes committed events to NATS JetStream in global order.
//! - [`consumer`]: durable, idempotent handling of those NATS messages.
//! - [`projection`]: read models with checkpoints, rebuilt and compared on demand.
//! - [`lifecycle`]: which status may follow which; commands on a session as events.
//! - [`ledger`]: the write-side tables kept in the same transaction as each append.
//! - [`trace`]: W3C trace context in envelopes and NATS headers.

pub mod aggregate;
pub mod audit;
pub mod catalogue;
pub mod consumer;
pub mod ledger;
pub mod lifecycle;
pub mod payloads;
mod pg;
pub mod projection;
pub mod relay;
pub mod store;
pub mod trace;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

pub use catalogue::{Event, Metadata};
pub use store::{EventStore, ExpectedVersion, LogPosition, ProposedEvent, StoreError};

/// An event as recorded in the log: the envelope and its typed payload.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    pub event_id: Uuid,
    pub stream_id: String,
    pub stream_version: u64,
    /// Place in the global order of the log.
    pub position: LogPosition,
    pub recorded_at: DateTime<Utc>,
    /// The schema version the payload was written with (the typed event is always current).
    pub schema_version: i32,
    pub metadata: Metadata,
    pub event: Event,
}

impl RecordedEvent {
    pub fn event_type(&self) -> &'static str {
        self.event.event_type()
    }

    /// The stream's category: the part of its id before the first `-`.
    pub fn category(&self) -> &str {
        self.stream_id
            .split_once('-')
            .map_or(&self.stream_id, |(c, _)| c)
    }
}

/// The JSON form of a recorded event, as published on NATS and printed by the CLI.
#[derive(Serialize, Deserialize)]
struct WireEvent {
    event_id: Uuid,
    stream_id: String,
    stream_version: u64,
    position: String,
    recorded_at: DateTime<Utc>,
    event_type: String,
    schema_version: i32,
    metadata: Metadata,
    payload: Value,
}

impl Serialize for RecordedEvent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WireEvent {
            event_id: self.event_id,
            stream_id: self.stream_id.clone(),
            stream_version: self.stream_version,
            position: self.position.to_string(),
            recorded_at: self.recorded_at,
            event_type: self.event.event_type().to_owned(),
            schema_version: self.event.schema_version(),
            metadata: self.metadata.clone(),
            payload: self.event.to_payload(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RecordedEvent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let wire = WireEvent::deserialize(deserializer)?;
        let event = Event::decode(&wire.event_type, wire.schema_version, wire.payload)
            .map_err(D::Error::custom)?;
        Ok(RecordedEvent {
            event_id: wire.event_id,
            stream_id: wire.stream_id,
            stream_version: wire.stream_version,
            position: wire.position.parse().map_err(D::Error::custom)?,
            recorded_at: wire.recorded_at,
            schema_version: wire.schema_version,
            metadata: wire.metadata,
            event,
        })
    }
}
