//! How agents and the control plane speak over NATS. An agent holds a NATS connection and
//! nothing else: it receives [`protocol::Command`]s from a JetStream consumer of its own,
//! reports facts and asks questions as [`protocol::Request`]s that the control plane's
//! recorder answers, and sends its sessions' output and usage as [`protocol::LogChunk`] and
//! [`protocol::UsageSample`] telemetry.
//!
//! - [`subjects`]: every subject and stream name, from one root so tests can run apart.
//! - [`command`]: the control plane's one way to send an agent a command.
//! - [`protocol`]: the messages, as Rust types (JSON on the wire).
//! - [`link`]: the agent's side: requests answered or retried, reports kept in an on-disk
//!   outbox until the control plane has recorded them, commands, telemetry.
//! - [`patience`]: an outage logged once at its start and once at its end, and a dependency
//!   waited for at start (the control plane's and the agent's).
//! - [`permissions`]: what each agent may publish and subscribe to, and the NATS server's
//!   authorization block made from it.
//! - [`trace`]: W3C trace context in event metadata and NATS headers.
//!
//! The crate depends on the pure domain and on NATS, never on PostgreSQL: the agent is built
//! on it, and `tests/tidy.rs` checks that no database client reaches the agent.

pub mod command;
pub mod link;
pub mod patience;
pub mod permissions;
pub mod protocol;
pub mod subjects;
pub mod trace;

pub use link::{Link, LinkError};
pub use subjects::Subjects;

use async_nats::jetstream::{consumer, context, stream};

/// What can fail making the streams agents meet on and following them: NATS's own errors,
/// kept as they are.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// One of the streams [`ensure_streams`] makes (`what`: commands or telemetry).
    #[error("the {what} stream `{stream}`: {source}")]
    Stream {
        what: &'static str,
        stream: String,
        source: context::CreateStreamError,
    },
    #[error(transparent)]
    GetStream(#[from] context::GetStreamError),
    #[error(transparent)]
    Consumer(#[from] stream::ConsumerError),
    #[error(transparent)]
    Messages(#[from] consumer::StreamError),
    /// A command ([`command::send`]) was not published.
    #[error(transparent)]
    Publish(#[from] context::PublishError),
    /// A command was published but the stream did not say it has it.
    #[error("command to `{agent}`: {source}")]
    Unacknowledged {
        agent: String,
        source: context::PublishError,
    },
}

/// Makes the two JetStream streams agents meet on exist: commands (kept until taken, each
/// agent's consumer taking its own) and telemetry (kept an hour; the telemetry sink and the
/// idle-reaper read it).
pub async fn ensure_streams(
    js: &async_nats::jetstream::Context,
    subjects: &Subjects,
) -> Result<(), BusError> {
    use async_nats::jetstream::stream::{Config, RetentionPolicy};
    use std::time::Duration;
    js.get_or_create_stream(Config {
        name: subjects.commands_stream.clone(),
        subjects: vec![subjects.all_commands()],
        retention: RetentionPolicy::WorkQueue,
        max_age: Duration::from_secs(7 * 24 * 3600),
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .map_err(|source| BusError::Stream {
        what: "commands",
        stream: subjects.commands_stream.clone(),
        source,
    })?;
    js.get_or_create_stream(Config {
        name: subjects.telemetry_stream.clone(),
        subjects: vec![subjects.all_telemetry()],
        max_age: Duration::from_secs(TELEMETRY_KEPT_SECS),
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .map_err(|source| BusError::Stream {
        what: "telemetry",
        stream: subjects.telemetry_stream.clone(),
        source,
    })?;
    Ok(())
}

/// How long the telemetry stream keeps what agents send.
pub const TELEMETRY_KEPT_SECS: u64 = 3600;
