//! The agent: it runs on a compute host and speaks only NATS, through a [`bus::Link`]. It
//! registers what it offers, says it is alive, takes the commands the control plane sends it
//! (assign a session's kernels, stop them) from a consumer of its own, and reports facts
//! about its sessions, which the control plane checks and records. It holds no database
//! credential and makes no SQL. [`host::start`] is its one start (for `berth agent`, the
//! tests and the benchmarks); [`docker`] runs sessions as containers; `simulate` moves
//! them without containers (demo, benchmarks), over the same bus.

mod commands;
pub mod docker;
pub mod gpu;
pub mod host;
mod simulate;

use std::time::Duration;

use bus::protocol::{Answer, Offer, Request};
use bus::{Link, LinkError};
use domain::aggregate::SessionState;
use domain::payloads::ResourceSlots;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use simulate::simulate;

/// What an agent offers.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSpec {
    pub agent_id: String,
    pub resource_group: String,
    pub capacity: ResourceSlots,
    pub images: Vec<String>,
    /// The apps each image declares (only images that declare some).
    pub image_apps: std::collections::BTreeMap<String, Vec<domain::apps::ServicePort>>,
    /// Where its published ports are reached.
    pub address: Option<String>,
}

impl AgentSpec {
    pub fn offer(&self) -> Offer {
        Offer {
            resource_group: self.resource_group.clone(),
            capacity: self.capacity,
            images: self.images.clone(),
            address: self.address.clone(),
            image_apps: self.image_apps.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Bus(#[from] bus::BusError),
    #[error("the control plane refused: {0}")]
    Denied(String),
    #[error("container runtime: {0}")]
    Runtime(String),
}

/// Registers (or re-registers) the agent with what it offers; waits for the control plane.
pub async fn register(
    link: &Link,
    spec: &AgentSpec,
    stop: &CancellationToken,
) -> Result<(), AgentError> {
    match link.ask(&Request::Register(spec.offer()), stop).await? {
        Answer::Done => Ok(()),
        other => Err(AgentError::Denied(format!("{other:?}"))),
    }
}

/// Says the agent is alive every `every` until `stop`.
pub async fn keep_alive(link: Link, every: Duration, stop: CancellationToken) {
    while !stop.is_cancelled() {
        match link.ask(&Request::Heartbeat, &stop).await {
            Ok(Answer::Done) | Err(LinkError::Stopped) => {}
            Ok(other) => tracing::warn!(answer = ?other, "heartbeat not taken"),
            Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// The session, and the trace its journey belongs to, if a kernel of it is placed here.
pub async fn session(
    link: &Link,
    session_id: Uuid,
    stop: &CancellationToken,
) -> Result<Option<(SessionState, Option<String>)>, AgentError> {
    match link.ask(&Request::Session { session_id }, stop).await? {
        Answer::Session { session } => Ok(session.map(|s| (s.state, s.traceparent))),
        other => Err(AgentError::Denied(format!("{other:?}"))),
    }
}

/// How often an agent says it is alive: the domain's, which the scheduler judges silence by.
pub use domain::aggregate::HEARTBEAT_EVERY;
