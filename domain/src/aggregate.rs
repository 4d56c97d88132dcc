//! Folding a stream's events into the state they describe (state + event -> state).
//!
//! Pure functions, used by `berth audit stream --as-of` to show what a stream looked like at
//! any moment, and by services that need an aggregate's current state.

use serde::{Deserialize, Serialize};

use crate::catalogue::Event;
use crate::payloads::{
    AgentAdmitted, KernelPlacement, ResourceSlots, SessionRequested, SessionStatus,
};
use crate::RecordedEvent;

/// How often an agent says it is alive. Heartbeats are kept outside the log (liveness is
/// not history); the agent sends them, the scheduler judges by them.
pub const HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// How long an agent may go unheard before nothing more is placed on it: two heartbeats
/// missed. Well before the reconciler's timeout calls it lost.
pub const SILENT_AFTER: std::time::Duration =
    std::time::Duration::from_secs(2 * HEARTBEAT_EVERY.as_secs());

/// What an agent stream folds into.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentState {
    pub agent_id: String,
    pub resource_group: String,
    pub capacity: ResourceSlots,
    pub images: Vec<String>,
    pub last_heartbeat: Option<chrono::DateTime<chrono::Utc>>,
    pub lost: Option<String>,
    /// What an operator admitted it to, unless revoked since.
    pub admitted: Option<AgentAdmitted>,
    /// Why its admission was revoked, if it was (and not admitted again since).
    pub revoked: Option<String>,
    /// Where it said its published ports are reached, when it last registered: the only
    /// address its kernels may say they are at ([`AgentState::may_publish_on`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// What a session stream folds into.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// Exempted from the idle checks by its owner or an admin.
    #[serde(default)]
    pub idle_exempt: bool,
    /// The commit to an image in progress, if any.
    #[serde(default)]
    pub commit: Option<crate::payloads::SessionCommitRequested>,
    /// When it entered its status, by the log's clock (set by [`fold`], which reads the
    /// events' times; `None` before its first move): where the phase it is in began, for its
    /// history row's sub-steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_since: Option<chrono::DateTime<chrono::Utc>>,
    /// The last progress its agent reported of the pull of its image in this placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<crate::payloads::SessionPullProgressed>,
}

/// The state of one stream, by its category.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum StreamState {
    Agent(Box<AgentState>),
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
                self.address = e.address.clone();
                self.lost = None;
            }
            Event::AgentHeartbeated(e) => self.last_heartbeat = Some(e.at),
            Event::AgentLost(e) => self.lost = Some(e.reason.clone()),
            Event::AgentReturned(_) => self.lost = None,
            Event::AgentDeparted(e) => self.lost = Some(e.lost()),
            Event::AgentAdmitted(e) => {
                self.agent_id = e.agent_id.clone();
                self.admitted = Some(e.clone());
                self.revoked = None;
            }
            Event::AgentRevoked(e) => {
                self.admitted = None;
                self.revoked = Some(e.reason.clone());
            }
            _ => {}
        }
        self
    }

    /// Whether the agent may register `group` with `capacity`: it is admitted (not revoked)
    /// into that group, and offers no more than it was admitted with. Pure.
    pub fn may_register(
        &self,
        group: &str,
        capacity: ResourceSlots,
    ) -> Result<(), RegistrationRefused> {
        let agent = || self.agent_id.clone();
        let admitted = self.admission()?;
        if admitted.resource_group != group {
            return Err(RegistrationRefused::OtherGroup {
                agent: agent(),
                admitted: admitted.resource_group.clone(),
                asked: group.to_owned(),
            });
        }
        let max = admitted.max_capacity;
        let over = [
            ("cpu", capacity.cpu_milli, max.cpu_milli),
            ("memory", capacity.memory_bytes, max.memory_bytes),
            ("gpu", capacity.gpu_milli, max.gpu_milli),
        ]
        .into_iter()
        .find(|(_, offered, most)| offered > most);
        match over {
            Some((what, offered, most)) => Err(RegistrationRefused::OverCapacity {
                agent: agent(),
                what,
                offered,
                most,
            }),
            None => Ok(()),
        }
    }
}

impl AgentState {
    /// Whether an agent may register saying its published ports are reached at `address`:
    /// an address a host can have, which the app proxy may dial
    /// ([`crate::outbound::check_agent_address`]; none is fine: it publishes nothing). Pure.
    pub fn may_offer_address(address: Option<&str>) -> Result<(), RegistrationRefused> {
        match address {
            Some(address) => crate::outbound::check_agent_address(address)
                .map(|_| ())
                .map_err(RegistrationRefused::Address),
            None => Ok(()),
        }
    }

    /// Whether a kernel this agent started may be recorded as published at `address`: only
    /// at the address the agent registered with (none is fine: nothing published), so an
    /// agent cannot point the app proxy at another host. Pure.
    pub fn may_publish_on(&self, address: Option<&str>) -> Result<(), ForeignAddress> {
        let Some(address) = address else {
            return Ok(());
        };
        let own = self
            .address
            .as_deref()
            .and_then(|a| a.parse::<std::net::IpAddr>().ok());
        match address.parse::<std::net::IpAddr>() {
            Ok(ip) if Some(ip) == own => Ok(()),
            _ => Err(ForeignAddress {
                agent: self.agent_id.clone(),
                address: address.to_owned(),
                registered: self.address.clone(),
            }),
        }
    }

    /// Whether the agent may say it departs: it is admitted (a revoked agent's departure
    /// would hide why it is offered no more). Pure.
    pub fn may_depart(&self) -> Result<(), RegistrationRefused> {
        self.admission().map(|_| ())
    }

    /// Its admission, or why it has none.
    fn admission(&self) -> Result<&AgentAdmitted, RegistrationRefused> {
        self.admitted.as_ref().ok_or_else(|| match &self.revoked {
            Some(why) => RegistrationRefused::Revoked {
                agent: self.agent_id.clone(),
                why: why.clone(),
            },
            None => RegistrationRefused::NotAdmitted,
        })
    }
}

/// A kernel said to be published at an address its agent did not register with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("agent `{agent}` reported a kernel at `{address}`, not at the address it registered with ({}): the app proxy dials agents only where they registered", registered.as_deref().unwrap_or("none"))]
pub struct ForeignAddress {
    pub agent: String,
    pub address: String,
    pub registered: Option<String>,
}

/// Why an agent may not register as it asks ([`AgentState::may_register`]); the agent is
/// told so in these words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationRefused {
    #[error("agent `{agent}` was revoked: {why}")]
    Revoked { agent: String, why: String },
    #[error("the agent is not admitted (berth admin agent admit)")]
    NotAdmitted,
    #[error("agent `{agent}` is admitted to resource group `{admitted}`, not `{asked}`")]
    OtherGroup {
        agent: String,
        admitted: String,
        asked: String,
    },
    #[error("agent `{agent}` offers {what} {offered}, more than the {most} it was admitted with")]
    OverCapacity {
        agent: String,
        what: &'static str,
        offered: u64,
        most: u64,
    },
    #[error(transparent)]
    Address(crate::outbound::BadAgentAddress),
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
            idle_exempt: false,
            commit: None,
            status_since: None,
            pull: None,
        }
    }

    /// Whether its main kernel is placed on `agent`: the agent that moves it through its
    /// statuses.
    pub fn main_on(&self, agent: &str) -> bool {
        self.agent_id.as_deref() == Some(agent)
    }

    /// Whether kernel `kernel` of its placement is on `agent`.
    pub fn kernel_on(&self, kernel: u32, agent: &str) -> bool {
        self.kernels
            .get(kernel as usize)
            .is_some_and(|k| k.agent_id == agent)
    }

    /// Whether a kernel of it (the main one or another of its cluster) is placed on `agent`:
    /// an agent may ask about and report on only the sessions it holds a kernel of.
    pub fn placed_on(&self, agent: &str) -> bool {
        self.main_on(agent) || self.kernels.iter().any(|k| k.agent_id == agent)
    }

    /// The state after `event`, recorded in the log at `at`: one step of [`fold`] (a change
    /// of status starts the new status's time there).
    pub fn recorded(self, event: &Event, at: chrono::DateTime<chrono::Utc>) -> SessionState {
        let mut state = self.evolve(event);
        if let Event::SessionStatusChanged(_) = event {
            state.status_since = Some(at);
        }
        state
    }

    pub fn evolve(mut self, event: &Event) -> SessionState {
        match event {
            Event::SchedulingAttempted(e) => self.scheduling_attempts = e.attempts,
            Event::SessionScheduled(e) => {
                self.agent_id = Some(e.agent_id.clone());
                self.reserved = Some(e.resources);
                self.kernels = e.kernels.clone();
                self.kernels_started.clear();
                self.pull = None;
            }
            Event::SessionPullProgressed(e) => self.pull = Some(e.clone()),
            Event::KernelStarted(e) => {
                if let Err(at) = self.kernels_started.binary_search(&e.kernel) {
                    self.kernels_started.insert(at, e.kernel);
                }
            }
            Event::SessionStatusChanged(e) => {
                self.status = e.to;
                self.status_reason = e.reason.clone();
                if e.to == SessionStatus::Pending {
                    // Back in the queue, it is placed nowhere: the agent it left may no longer
                    // report on it (its late reports are refused) nor find it live.
                    self.agent_id = None;
                    self.kernels.clear();
                    self.kernels_started.clear();
                }
                if e.exit_code.is_some() {
                    self.exit_code = e.exit_code;
                }
            }
            Event::SessionRenamed(e) => self.name = e.new_name.clone(),
            Event::SessionPriorityChanged(e) => self.request.priority = e.to,
            Event::SessionTerminationRequested(_) => self.termination_requested = true,
            Event::SessionIdleExempted(_) => self.idle_exempt = true,
            Event::SessionCommitRequested(e) => self.commit = Some(e.clone()),
            Event::SessionCommitEnded(e)
                if self
                    .commit
                    .as_ref()
                    .is_some_and(|c| c.commit_id == e.commit_id) =>
            {
                self.commit = None;
            }
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
                    let mut s = SessionState::requested(r);
                    s.status_since = Some(recorded.recorded_at);
                    StreamState::Session(Box::new(s))
                }
                (StreamState::Session(s), event) => {
                    StreamState::Session(Box::new(s.recorded(event, recorded.recorded_at)))
                }
                (StreamState::Agent(a), event) => StreamState::Agent(Box::new(a.evolve(event))),
                (
                    StreamState::Empty,
                    event @ (Event::AgentRegistered(_) | Event::AgentAdmitted(_)),
                ) => StreamState::Agent(Box::new(AgentState::default().evolve(event))),
                (other, _) => other,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payloads::AgentRevoked;

    fn slots(cpu: u64) -> ResourceSlots {
        ResourceSlots {
            cpu_milli: cpu * 1000,
            memory_bytes: 8 << 30,
            gpu_milli: 0,
        }
    }

    fn admitted(group: &str, cpu: u64) -> Event {
        Event::AgentAdmitted(AgentAdmitted {
            agent_id: "a1".into(),
            resource_group: group.into(),
            max_capacity: slots(cpu),
            public_key: "UKEY".into(),
        })
    }

    #[test]
    fn an_agent_registers_only_as_it_was_admitted() {
        let none = AgentState::default();
        assert!(none
            .may_register("default", slots(1))
            .unwrap_err()
            .to_string()
            .contains("not admitted"));
        let state = none.evolve(&admitted("default", 4));
        assert_eq!(state.may_register("default", slots(4)), Ok(()));
        assert!(state
            .may_register("gpu", slots(1))
            .unwrap_err()
            .to_string()
            .contains("not `gpu`"));
        let over = state
            .may_register("default", slots(5))
            .unwrap_err()
            .to_string();
        assert!(over.contains("cpu 5000") && over.contains("4000"), "{over}");
        let revoked = state.evolve(&Event::AgentRevoked(AgentRevoked {
            agent_id: "a1".into(),
            reason: "host retired".into(),
        }));
        assert!(revoked
            .may_register("default", slots(1))
            .unwrap_err()
            .to_string()
            .contains("host retired"));
        // Admitted again (a rotated key): it may register again.
        let again = revoked.evolve(&admitted("default", 2));
        assert_eq!(again.may_register("default", slots(2)), Ok(()));
    }

    #[test]
    fn kernels_are_published_only_where_their_agent_registered() {
        use crate::payloads::AgentRegistered;
        assert_eq!(AgentState::may_offer_address(None), Ok(()));
        assert_eq!(AgentState::may_offer_address(Some("10.0.0.5")), Ok(()));
        for bad in ["169.254.169.254", "0.0.0.0", "host.internal"] {
            let refused = AgentState::may_offer_address(Some(bad)).unwrap_err();
            assert!(matches!(refused, RegistrationRefused::Address(_)), "{bad}");
            assert!(refused.to_string().contains(bad), "{refused}");
        }
        let registered = |address: Option<&str>| {
            AgentState::default().evolve(&Event::AgentRegistered(AgentRegistered {
                unlabelled_images: Vec::new(),
                agent_id: "a1".into(),
                resource_group: "default".into(),
                capacity: slots(1),
                images: vec![],
                address: address.map(String::from),
                image_apps: Default::default(),
                network_scope: None,
                volumes: Vec::new(),
            }))
        };
        let state = registered(Some("10.0.0.5"));
        assert_eq!(state.address.as_deref(), Some("10.0.0.5"));
        assert_eq!(state.may_publish_on(None), Ok(()));
        assert_eq!(state.may_publish_on(Some("10.0.0.5")), Ok(()));
        for other in ["10.0.0.6", "169.254.169.254", "127.0.0.1", "db.internal"] {
            let refused = state.may_publish_on(Some(other)).unwrap_err().to_string();
            assert!(
                refused.contains(other) && refused.contains("10.0.0.5"),
                "{refused}"
            );
        }
        // An agent that registered no address publishes nowhere.
        assert!(registered(None).may_publish_on(Some("127.0.0.1")).is_err());
    }

    #[test]
    fn a_departed_agent_is_lost_until_it_registers_and_only_an_admitted_one_departs() {
        use crate::payloads::{AgentDeparted, AgentRegistered};
        assert!(AgentState::default().may_depart().is_err());
        let state = AgentState::default().evolve(&admitted("default", 4));
        assert_eq!(state.may_depart(), Ok(()));
        let departed = state.evolve(&Event::AgentDeparted(AgentDeparted {
            agent_id: "a1".into(),
            reason: "stopped (SIGTERM)".into(),
        }));
        assert_eq!(
            departed.lost.as_deref(),
            Some("departed: stopped (SIGTERM)")
        );
        let back = departed.evolve(&Event::AgentRegistered(AgentRegistered {
            unlabelled_images: Vec::new(),
            agent_id: "a1".into(),
            resource_group: "default".into(),
            capacity: slots(4),
            images: vec![],
            address: None,
            image_apps: Default::default(),
            network_scope: None,
            volumes: Vec::new(),
        }));
        assert_eq!(back.lost, None);
        let revoked = back.evolve(&Event::AgentRevoked(AgentRevoked {
            agent_id: "a1".into(),
            reason: "host retired".into(),
        }));
        assert!(revoked.may_depart().is_err());
    }
}
