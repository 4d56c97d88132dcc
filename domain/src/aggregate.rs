//! Folding a stream's events into the state they describe (state + event -> state).
//!
//! Pure functions, used by `berth audit stream --as-of` to show what a stream looked like at
//! any moment, and by services that need an aggregate's current state.

use serde::{Deserialize, Serialize};

use crate::catalogue::Event;
use crate::payloads::{KernelPlacement, ResourceSlots, SessionRequested, SessionStatus};
use crate::RecordedEvent;

/// What an agent stream folds into.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentState {
    pub agent_id: String,
    pub resource_group: String,
    pub capacity: ResourceSlots,
    pub images: Vec<String>,
    pub last_heartbeat: Option<chrono::DateTime<chrono::Utc>>,
    pub lost: Option<String>,
}

/// What a session stream folds into.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionState {
    pub request: SessionRequested,
    pub name: String,
    pub status: SessionStatus,
    pub status_reason: Option<String>,
    pub agent_id: Option<String>,
    /// What the session holds on its agents now; `None` once released (or never placed).
    pub reserved: Option<ResourceSlots>,
    pub kernels: Vec<KernelPlacement>,
    /// The kernels of the current placement whose `KernelStarted` is recorded, ascending.
    #[serde(default)]
    pub kernels_started: Vec<u32>,
    /// Reservations given back so far (one per placement).
    pub releases: u32,
    pub scheduling_attempts: u32,
    pub termination_requested: bool,
    pub exit_code: Option<i32>,
}

/// The state of one stream, by its category.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum StreamState {
    Agent(AgentState),
    Session(Box<SessionState>),
    /// No events yet, or a category with no fold.
    Empty,
}

impl AgentState {
    pub fn evolve(mut self, event: &Event) -> AgentState {
        match event {
            Event::AgentRegistered(e) => {
                self.agent_id = e.agent_id.clone();
                self.resource_group = e.resource_group.clone();
                self.capacity = e.capacity;
                self.images = e.images.clone();
                self.lost = None;
            }
            Event::AgentHeartbeated(e) => self.last_heartbeat = Some(e.at),
            Event::AgentLost(e) => self.lost = Some(e.reason.clone()),
            _ => {}
        }
        self
    }
}

impl SessionState {
    /// The state a session starts in once requested.
    pub fn requested(request: &SessionRequested) -> SessionState {
        SessionState {
            name: request.name.clone(),
            request: request.clone(),
            status: SessionStatus::Pending,
            status_reason: None,
            agent_id: None,
            reserved: None,
            kernels: Vec::new(),
            kernels_started: Vec::new(),
            releases: 0,
            scheduling_attempts: 0,
            termination_requested: false,
            exit_code: None,
        }
    }

    pub fn evolve(mut self, event: &Event) -> SessionState {
        match event {
            Event::SchedulingAttempted(e) => self.scheduling_attempts = e.attempts,
            Event::SessionScheduled(e) => {
                self.agent_id = Some(e.agent_id.clone());
                self.reserved = Some(e.resources);
                self.kernels = e.kernels.clone();
                self.kernels_started.clear();
            }
            Event::KernelStarted(e) => {
                if let Err(at) = self.kernels_started.binary_search(&e.kernel) {
                    self.kernels_started.insert(at, e.kernel);
                }
            }
            Event::SessionStatusChanged(e) => {
                self.status = e.to;
                self.status_reason = e.reason.clone();
                if e.exit_code.is_some() {
                    self.exit_code = e.exit_code;
                }
            }
            Event::SessionRenamed(e) => self.name = e.new_name.clone(),
            Event::SessionTerminationRequested(_) => self.termination_requested = true,
            Event::SessionResourcesReleased(_) => {
                self.reserved = None;
                self.releases += 1;
            }
            _ => {}
        }
        self
    }
}

/// Folds events of one stream, oldest first.
pub fn fold<'a>(events: impl IntoIterator<Item = &'a RecordedEvent>) -> StreamState {
    events
        .into_iter()
        .fold(StreamState::Empty, |state, recorded| {
            match (state, &recorded.event) {
                (StreamState::Empty, Event::SessionRequested(r)) => {
                    StreamState::Session(Box::new(SessionState::requested(r)))
                }
                (StreamState::Session(s), event) => StreamState::Session(Box::new(s.evolve(event))),
                (StreamState::Agent(a), event) => StreamState::Agent(a.evolve(event)),
                (StreamState::Empty, event @ Event::AgentRegistered(_)) => {
                    StreamState::Agent(AgentState::default().evolve(event))
                }
                (other, _) => other,
            }
        })
}
