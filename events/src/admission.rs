//! Admission: an operator admits an agent into one resource group, up to a capacity, and gets
//! its credential, an nkey seed, shown once; only the public key is recorded
//! (`AgentAdmitted`). The recorder lets an agent register only as it was admitted. Admitting
//! an agent again gives it a new key (the old one stops working once the NATS server's
//! authorization is made again); revoking it (`AgentRevoked`) refuses its registrations and
//! takes it out of scheduling.
//!
//! Here, in the backbone, because two services write it: the gateway's superadmin endpoints
//! (`berth admin agent ...` goes through them) and the recorder, which folds the agent's
//! stream to decide on each registration.

use bus::permissions::AdmittedKey;
use deadpool_postgres::Pool;

use crate::aggregate::{fold, AgentState, StreamState};
use crate::catalogue::Event;
use crate::ledger::{self, LedgerError};
use crate::payloads::{AgentAdmitted, AgentRevoked, ResourceSlots};
use crate::store::ExpectedVersion;
use crate::EventStore;

/// What an operator admits an agent to.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    pub agent_id: String,
    pub resource_group: String,
    pub max_capacity: ResourceSlots,
}

#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// Bad input: `field` names it.
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("agent `{0}` is not admitted")]
    NotAdmitted(String),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// The stream of agent `agent_id`'s events.
pub fn agent_stream(agent_id: &str) -> String {
    format!("agent-{agent_id}")
}

/// Admits the agent and returns its credential (an nkey seed), which is recorded nowhere.
pub async fn admit(pool: &Pool, admission: &Admission, by: &str) -> Result<String, AdmissionError> {
    if !bus::subjects::is_valid_agent_id(&admission.agent_id) {
        return Err(AdmissionError::Invalid {
            field: "agent_id",
            message: format!(
                "`{}`: 1 to 64 letters, digits, `-` and `_`",
                admission.agent_id
            ),
        });
    }
    let key = nkeys::KeyPair::new_user();
    let seed = key.seed().expect("a new user key has a seed");
    let event = Event::AgentAdmitted(AgentAdmitted {
        agent_id: admission.agent_id.clone(),
        resource_group: admission.resource_group.clone(),
        max_capacity: admission.max_capacity,
        public_key: key.public_key(),
    });
    let metadata = crate::trace::metadata(by, None);
    let stream = agent_stream(&admission.agent_id);
    ledger::record_now(pool, &stream, ExpectedVersion::Any, &[event], &metadata).await?;
    Ok(seed)
}

/// Revokes the agent's admission.
pub async fn revoke(
    pool: &Pool,
    agent_id: &str,
    reason: &str,
    by: &str,
) -> Result<(), AdmissionError> {
    let state = agent_state(pool, agent_id).await?;
    if state.admitted.is_none() {
        return Err(AdmissionError::NotAdmitted(agent_id.to_owned()));
    }
    let event = Event::AgentRevoked(AgentRevoked {
        agent_id: agent_id.to_owned(),
        reason: reason.to_owned(),
    });
    let metadata = crate::trace::metadata(by, None);
    ledger::record_now(
        pool,
        &agent_stream(agent_id),
        ExpectedVersion::Any,
        &[event],
        &metadata,
    )
    .await?;
    Ok(())
}

/// The agent's stream, folded.
pub async fn agent_state(pool: &Pool, agent_id: &str) -> Result<AgentState, LedgerError> {
    let recorded = EventStore::new(pool.clone())
        .read_stream(&agent_stream(agent_id))
        .await
        .map_err(LedgerError::from)?;
    Ok(match fold(&recorded) {
        StreamState::Agent(state) => *state,
        _ => AgentState::default(),
    })
}

/// The agents admitted now (not revoked since), with their keys, by id.
pub async fn admitted_keys(pool: &Pool) -> Result<Vec<AdmittedKey>, LedgerError> {
    let mut keys = Vec::new();
    for agent_id in ledger::ever_admitted(pool).await? {
        if let Some(admitted) = agent_state(pool, &agent_id).await?.admitted {
            keys.push(AdmittedKey {
                agent_id,
                public_key: admitted.public_key,
            });
        }
    }
    Ok(keys)
}
