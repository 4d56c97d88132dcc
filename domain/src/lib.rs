//! berth's domain: what happens to sessions and agents, with no I/O.
//!
//! - [`catalogue`] and [`payloads`]: every event type, versioned, upcast on read; the one
//!   serialised boundary every service shares.
//! - [`advice`]: when a session is expected to start and what would start sooner, as the
//!   scheduler answers the launcher and records for a waiting session.
//! - [`apps`]: the apps a session offers (the terminal, its image's, its preopen ports) and
//!   the rules of the proxy circuits that reach them.
//! - [`credentials`]: the rule a password keeps, how long a web-console sign-in and an API key
//!   last, and who may change whose account.
//! - [`event_filter`]: which events of the log a reader wants (types, categories, streams,
//!   a session's owner and group).
//! - [`defaults`]: the environment and preset a launch that names none gets (the group's,
//!   as set, else the most used and the smallest that fits).
//! - [`fair_share`]: decayed past use, fair-share factors and dominant shares, which order a
//!   resource group's queue under `fair-share` and `drf`.
//! - [`aggregate`]: the folds of a session's and an agent's stream (state + event -> state).
//! - [`history`]: the history rows of the phases an agent takes a session through (prepare,
//!   pull, create, start, terminate) and of its clean-up, made from its moves.
//! - [`idleness`]: the idle checkers (lifetime, network idle, utilization) on what a session
//!   did and a clock.
//! - [`notices`]: which events a session's owner is told about, in what words.
//! - [`usage`]: a session's usage over its whole life, in minute and hour buckets, bounded.
//! - [`outbound`]: which addresses berth connects to on a user's or an agent's say (webhooks,
//!   the app proxy's upstreams).
//! - [`images`]: image references, customized images' names and owners.
//! - [`files`]: paths inside a folder, as the files API takes them (never leaving it).
//! - [`folders`]: a folder's usage mode and its life (renamed, trashed, restored, purged).
//! - [`launches`]: a user's recent launches, their names and pins.
//! - [`lifecycle`]: which status may follow which, and the events a command on a session
//!   turns into (state + command -> events).
//! - `fixtures` (feature `fixtures`, for other crates' tests): example payloads, such as
//!   one `SessionRequested` every test starts from.
//! - [`RecordedEvent`] and [`LogPosition`]: an event as the log returns it, and its place in
//!   the log's global order.
//!
//! Architecture invariant: this crate depends on serde, serde_json, chrono, uuid and
//! thiserror only (the workspace's `tidy` test checks it), so every rule here is tested
//! without a server and no service can reach a database or the bus through it.

pub mod advice;
pub mod aggregate;
pub mod apps;
pub mod authorization;
pub mod catalogue;
pub mod credentials;
pub mod defaults;
pub mod event_filter;
pub mod fair_share;
pub mod files;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod folders;
pub mod history;
pub mod idleness;
pub mod images;
pub mod launches;
pub mod lifecycle;
pub mod notices;
pub mod outbound;
pub mod payloads;
pub mod serving;
pub mod sharing;
pub mod subscriptions;
pub mod usage;
pub mod volumes;

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

pub use catalogue::{Event, Metadata};

/// A place in the global order of the log. `LogPosition::START` is before every event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogPosition {
    /// Id of the transaction that committed the event.
    pub tx: u64,
    /// Insert sequence of the event; unique, with gaps.
    pub seq: i64,
}

impl LogPosition {
    pub const START: LogPosition = LogPosition { tx: 0, seq: 0 };
}

impl fmt::Display for LogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.tx, self.seq)
    }
}

impl FromStr for LogPosition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (tx, seq) = s.split_once(':').ok_or("a position is written TX:SEQ")?;
        Ok(LogPosition {
            tx: tx.parse().map_err(|_| "TX is not a number")?,
            seq: seq.parse().map_err(|_| "SEQ is not a number")?,
        })
    }
}

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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

#[cfg(feature = "schema")]
impl RecordedEvent {
    /// The JSON Schema (draft 2020-12) of a recorded event as it is published and served:
    /// the envelope, with `payload` any object (each type's is in
    /// [`catalogue::payload_schemas`]).
    pub fn wire_schema() -> Value {
        serde_json::to_value(schemars::schema_for!(WireEvent)).expect("a schema serialises")
    }
}

/// [`WireEvent`] as it is written: borrowed from the recorded event, its payload serialised
/// straight from the typed event (no JSON value in between). The same fields, in the same
/// order.
#[derive(Serialize)]
struct WireEventRef<'a> {
    event_id: Uuid,
    stream_id: &'a str,
    stream_version: u64,
    position: String,
    recorded_at: DateTime<Utc>,
    event_type: &'static str,
    schema_version: i32,
    metadata: &'a Metadata,
    payload: catalogue::PayloadOf<'a>,
}

impl Serialize for RecordedEvent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WireEventRef {
            event_id: self.event_id,
            stream_id: &self.stream_id,
            stream_version: self.stream_version,
            position: self.position.to_string(),
            recorded_at: self.recorded_at,
            event_type: self.event.event_type(),
            schema_version: self.event.schema_version(),
            metadata: &self.metadata,
            payload: catalogue::PayloadOf(&self.event),
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
