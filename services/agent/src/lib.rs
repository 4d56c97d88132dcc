//! The agent: it runs on a compute host and speaks only NATS, through a [`bus::Link`]. It
//! registers what it offers, says it is alive, takes the commands the control plane sends it
//! (assign a session's kernels, stop them) from a consumer of its own, and reports facts
//! about its sessions, which the control plane checks and records. It holds no database
//! credential and makes no SQL. [`host::start`] is its one start (for `berth agent`, the
//! tests and the benchmarks), and [`host::AgentHost::leave`] its graceful end (a departure,
//! recorded, so nothing more is placed on it); [`docker`] runs sessions as containers; `simulate` moves
//! them without containers (demo, benchmarks), over the same bus.

mod commands;
pub mod docker;
pub mod gpu;
pub mod host;
mod simulate;
mod stop_order;

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
    /// Those of `images` that are no session image by their labels.
    pub unlabelled_images: Vec<String>,
    /// The apps each image declares (only images that declare some).
    pub image_apps: std::collections::BTreeMap<String, Vec<domain::apps::ServicePort>>,
    /// Where its published ports are reached.
    pub address: Option<String>,
    /// The cluster network it shares with other agents (`engine:<Docker engine id>`); none
    /// for a simulated agent, which shares none.
    pub network_scope: Option<String>,
    /// The shared volumes it mounts (checked before it registers), by name.
    pub volumes: Vec<String>,
}

impl AgentSpec {
    pub fn offer(&self) -> Offer {
        Offer {
            resource_group: self.resource_group.clone(),
            capacity: self.capacity,
            images: self.images.clone(),
            address: self.address.clone(),
            image_apps: self.image_apps.clone(),
            network_scope: self.network_scope.clone(),
            volumes: self.volumes.clone(),
            unlabelled_images: self.unlabelled_images.clone(),
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
    #[error(
        "NATS has refused this agent's credential for {refused_for} s: it was never admitted, \
         or it was revoked (`berth admin agent admit` gives a new one)"
    )]
    CredentialRefused { refused_for: u64 },
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

/// How an agent leaves when asked to ([`host::AgentHost::leave`]): it says so (the
/// control plane places nothing more on it), takes no more commands, sends what its outbox
/// holds and ends. Its sessions' containers keep running, to be adopted when it returns,
/// unless `end_sessions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leave {
    /// Why, in the agent's words; recorded with its departure.
    pub reason: String,
    /// End its sessions first (each stopped as a termination stops it, and waited for): the
    /// host is being decommissioned.
    pub end_sessions: bool,
}

/// A request to leave, shared by the host's handle and its runtime: `asked` is cancelled
/// once `how` is set (and with the agent's stop, which ends its commands as well).
#[derive(Clone)]
pub(crate) struct Leaving {
    pub(crate) asked: CancellationToken,
    how: std::sync::Arc<std::sync::Mutex<Option<Leave>>>,
}

impl Leaving {
    /// Not asked yet; `asked` is cancelled with `stop` too.
    pub(crate) fn new(stop: &CancellationToken) -> Leaving {
        Leaving {
            asked: stop.child_token(),
            how: Default::default(),
        }
    }

    pub(crate) fn ask(&self, how: Leave) {
        *self.how.lock().unwrap_or_else(|e| e.into_inner()) = Some(how);
        self.asked.cancel();
    }

    /// How it was asked to leave; `None` when it was not (it was stopped).
    pub(crate) fn how(&self) -> Option<Leave> {
        self.how.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Says the agent departs, for `reason`, and waits for the control plane to have it (or for
/// `stop`). A departure not recorded is logged: the reconciler will call the agent lost
/// once its heartbeats are missed, as it would after a crash.
pub async fn depart(link: &Link, reason: &str, stop: &CancellationToken) -> bool {
    let request = Request::Depart {
        reason: reason.to_owned(),
    };
    match link.ask(&request, stop).await {
        Ok(Answer::Done) => {
            tracing::info!(%reason, "departed: nothing more is placed on this agent");
            true
        }
        Ok(other) => {
            tracing::warn!(answer = ?other, "the departure was not taken");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "the departure was not sent");
            false
        }
    }
}

/// How often an agent says it is alive: the domain's, which the scheduler judges silence by.
pub use domain::aggregate::HEARTBEAT_EVERY;

pub const COMMANDS: &str = "berth_agent_commands_total";

/// Describes the agent's metrics to the installed recorder.
pub fn describe_metrics() {
    metrics::describe_counter!(
        COMMANDS,
        "Commands this agent took from the control plane, by command: `assign`, `stop`, \
         `commit`, `remove_image`, `start_app`"
    );
}
