//! The agent: it registers its resource group, capacity and images, heartbeats, and reports
//! the sessions placed on it moving through their statuses. [`docker`] runs them as
//! containers; [`simulate`] moves them without containers (demo, benchmarks); tests may also
//! drive [`report`] directly. `db` holds every SQL statement the agent still makes (rule 8
//! moves agents onto NATS alone).

mod db;
pub mod docker;
pub mod gpu;

use std::time::Duration;

use chrono::Utc;
use deadpool_postgres::Pool;
use events::catalogue::Event;
use events::ledger::{self, LedgerError};
use events::lifecycle::{self, CommandError, TransitionError};
use events::payloads::*;
use events::store::ExpectedVersion;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// What an agent offers.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSpec {
    pub agent_id: String,
    pub resource_group: String,
    pub capacity: ResourceSlots,
    pub images: Vec<String>,
    pub address: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error("container runtime: {0}")]
    Runtime(String),
    #[error("session {session} is not placed on agent `{agent}`")]
    NotMine { session: Uuid, agent: String },
}

fn stream(agent_id: &str) -> String {
    format!("agent-{agent_id}")
}

fn metadata(agent_id: &str) -> events::Metadata {
    events::trace::metadata(&format!("agent:{agent_id}"), None)
}

/// Registers (or re-registers) the agent with what it offers.
pub async fn register(pool: &Pool, spec: &AgentSpec) -> Result<(), AgentError> {
    let event = Event::AgentRegistered(AgentRegistered {
        agent_id: spec.agent_id.clone(),
        resource_group: spec.resource_group.clone(),
        capacity: spec.capacity,
        images: spec.images.clone(),
        address: spec.address.clone(),
    });
    ledger::record_now(
        pool,
        &stream(&spec.agent_id),
        ExpectedVersion::Any,
        &[event],
        &metadata(&spec.agent_id),
    )
    .await?;
    Ok(())
}

/// Says the agent is alive.
pub async fn heartbeat(pool: &Pool, agent_id: &str) -> Result<(), AgentError> {
    let event = Event::AgentHeartbeated(AgentHeartbeated {
        agent_id: agent_id.to_owned(),
        at: Utc::now(),
    });
    ledger::record_now(
        pool,
        &stream(agent_id),
        ExpectedVersion::Any,
        &[event],
        &metadata(agent_id),
    )
    .await?;
    Ok(())
}

/// Heartbeats every `every` until `stop`.
pub async fn keep_alive(pool: Pool, agent_id: String, every: Duration, stop: CancellationToken) {
    while !stop.is_cancelled() {
        if let Err(e) = heartbeat(&pool, &agent_id).await {
            tracing::warn!(error = %e, %agent_id, "heartbeat failed");
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// Reports that a session placed on this agent moved to `to` (with the reason, and the exit
/// code of a batch session). Refused when the session is not on this agent or the move is
/// not allowed.
pub async fn report(
    pool: &Pool,
    agent_id: &str,
    session_id: Uuid,
    to: SessionStatus,
    reason: Option<String>,
    exit_code: Option<i32>,
) -> Result<SessionState, AgentError> {
    let mut not_mine = false;
    let state = lifecycle::command(pool, session_id, &metadata(agent_id), |state| {
        if state.agent_id.as_deref() != Some(agent_id) {
            not_mine = true;
            return Err(TransitionError::Forbidden {
                from: state.status,
                to,
            });
        }
        state.transition(to, reason.clone(), exit_code)
    })
    .await;
    match state {
        Err(_) if not_mine => Err(AgentError::NotMine {
            session: session_id,
            agent: agent_id.to_owned(),
        }),
        other => Ok(other?),
    }
}

pub use events::aggregate::SessionState;

/// Drives the sessions placed on this agent without containers: SCHEDULED ones through
/// PREPARING, PREPARED and CREATING to RUNNING, TERMINATING ones to TERMINATED; a batch
/// session ends TERMINATED with exit code 0 after `batch_runs_for`. Stands in for the
/// container runtime in the demo and the benchmarks, and heartbeats meanwhile.
pub async fn simulate(
    pool: Pool,
    spec: AgentSpec,
    batch_runs_for: Duration,
    stop: CancellationToken,
) -> Result<(), AgentError> {
    register(&pool, &spec).await?;
    let agent_id = spec.agent_id.clone();
    let mut last_beat = tokio::time::Instant::now();
    while !stop.is_cancelled() {
        if last_beat.elapsed() > Duration::from_secs(5) {
            heartbeat(&pool, &agent_id).await?;
            last_beat = tokio::time::Instant::now();
        }
        let rows = db::simulated_work(&pool, &agent_id).await?;
        for row in rows {
            let session_id = row.session_id;
            let batch = row.session_type == "batch";
            let running_for = Duration::from_secs_f64(row.secs_in_status.max(0.0));
            let steps: &[(SessionStatus, Option<&str>, Option<i32>)] = match row.status.as_str() {
                "SCHEDULED" => &[
                    (SessionStatus::Preparing, None, None),
                    (SessionStatus::Prepared, None, None),
                    (SessionStatus::Creating, None, None),
                    (SessionStatus::Running, None, None),
                ],
                "RUNNING" if batch && running_for >= batch_runs_for => &[(
                    SessionStatus::Terminated,
                    Some("the batch command exited with code 0"),
                    Some(0),
                )],
                "TERMINATING" => &[(SessionStatus::Terminated, Some("stopped on request"), None)],
                _ => &[],
            };
            for (to, reason, exit_code) in steps {
                match report(
                    &pool,
                    &agent_id,
                    session_id,
                    *to,
                    reason.map(str::to_owned),
                    *exit_code,
                )
                .await
                {
                    Ok(_) => {}
                    // Terminated or moved meanwhile: nothing more to do for it now.
                    Err(AgentError::Command(CommandError::Refused(_))) => break,
                    Err(e) => return Err(e),
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
    Ok(())
}
