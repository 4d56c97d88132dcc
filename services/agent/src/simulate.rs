//! An agent without containers: it takes the same commands and sends the same reports as
//! the Docker runtime, over the same bus, and moves each session placed on it through
//! PREPARING, PREPARED and CREATING to RUNNING with kernels that do not exist; a batch
//! session ends TERMINATED with exit code 0 after `batch_runs_for`, and a stop ends a
//! session TERMINATED. The demo and the control plane's benchmarks run on it.

use std::collections::HashMap;
use std::time::Duration;

use bus::protocol::{Answer, Command, Fact, StartedKernel};
use bus::Link;
use domain::aggregate::SessionState;
use domain::payloads::{SessionStatus, SessionType};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::commands::Commands;
use crate::stop_order::StopOrder;
use crate::{keep_alive, register, AgentError, AgentSpec, Leaving, HEARTBEAT_EVERY};

/// Runs a simulated agent until `stop`, or until it is asked to leave: then it says it
/// departs and ends (its sessions have no containers to adopt; the reconciler's deadlines
/// settle them, or it ends them first when asked to).
pub(crate) async fn simulate(
    link: Link,
    spec: AgentSpec,
    batch_runs_for: Duration,
    stop: CancellationToken,
    leaving: Leaving,
) -> Result<(), AgentError> {
    register(&link, &spec, &stop).await?;
    link.drain_outbox(&stop).await?;
    let mut running = tokio::task::JoinSet::new();
    let offering = stop.child_token();
    running.spawn(keep_alive(link.clone(), HEARTBEAT_EVERY, offering.clone()));
    let mut tasks: HashMap<Uuid, StopOrder> = HashMap::new();
    let mut commands = Commands::new(link.clone());
    while let Some(command) = commands.next(&leaving.asked).await {
        tasks.retain(|_, order| !order.is_ended());
        while running.try_join_next().is_some() {}
        match command {
            Command::Assign { session_id, main } if !tasks.contains_key(&session_id) => {
                let order = StopOrder::default();
                tasks.insert(session_id, order.clone());
                let link = link.clone();
                running.spawn(async move {
                    // A finished task is forgotten at the next command.
                    let _forgotten = order.ended_on_drop();
                    if let Err(e) = run(&link, session_id, main, batch_runs_for, order.clone()).await {
                        tracing::info!(session = %session_id, error = %e, "simulated session ended early");
                    }
                });
            }
            Command::Assign { .. } => {}
            Command::Stop {
                session_id,
                placement,
            } => {
                if let Some(order) = tasks.get(&session_id) {
                    order.give(placement);
                }
            }
            // No container, no image: a simulated commit fails, saying so.
            Command::Commit {
                session_id,
                commit_id,
                ..
            } => {
                let fact = bus::protocol::Fact::CommitEnded {
                    commit_id,
                    outcome: domain::payloads::CommitOutcome::Failed {
                        reason: "a simulated agent has no container to commit".into(),
                    },
                };
                let link = link.clone();
                let stop = stop.clone();
                running.spawn(async move {
                    let _ = link.report(session_id, fact, &stop).await;
                });
            }
            Command::RemoveImage { .. } => {}
            // No container: a simulated app fails to start, saying so.
            Command::StartApp {
                session_id,
                start_id,
                app,
                ..
            } => {
                let fact = bus::protocol::Fact::AppStartEnded {
                    start_id,
                    app,
                    outcome: domain::payloads::AppStartOutcome::Failed {
                        reason: "a simulated agent has no container to start an app in".into(),
                    },
                };
                let link = link.clone();
                let stop = stop.clone();
                running.spawn(async move {
                    let _ = link.report(session_id, fact, &stop).await;
                });
            }
        }
    }
    if let Some(how) = leaving.how().filter(|_| !stop.is_cancelled()) {
        offering.cancel();
        crate::depart(&link, &how.reason, &stop).await;
        if how.end_sessions {
            for order in tasks.values() {
                order.end();
            }
            while !stop.is_cancelled() && !running.is_empty() {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = running.join_next() => {}
                }
            }
        }
    }
    running.abort_all();
    Ok(())
}

/// One simulated session, from its assignment to its end.
async fn run(
    link: &Link,
    session_id: Uuid,
    main: bool,
    batch_runs_for: Duration,
    stop: StopOrder,
) -> Result<(), AgentError> {
    // Requests wait on the agent's own stop, not the session's: a stop must still be reported.
    let agent_stop = CancellationToken::new();
    let Some((state, _)) = crate::session(link, session_id, &agent_stop).await? else {
        return Ok(());
    };
    let mine = kernels_here(&state, link.agent_id());
    if !main {
        report(link, session_id, started(&mine), &agent_stop).await?;
        return Ok(());
    }
    if state.status != SessionStatus::Scheduled {
        return Ok(());
    }
    for to in [
        SessionStatus::Preparing,
        SessionStatus::Prepared,
        SessionStatus::Creating,
    ] {
        let fact = Fact::Moved {
            to,
            reason: None,
            exit_code: None,
            at: None,
        };
        if !report(link, session_id, fact, &agent_stop).await? {
            return Ok(());
        }
    }
    if !report(link, session_id, started(&mine), &agent_stop).await? {
        return Ok(());
    }
    let batch = state.request.session_type == SessionType::Batch;
    let (reason, exit_code) = tokio::select! {
        _ = stop.given(state.releases) => ("stopped on request", None),
        _ = tokio::time::sleep(batch_runs_for), if batch => ("the batch command exited with code 0", Some(0)),
    };
    let fact = Fact::Moved {
        to: SessionStatus::Terminated,
        reason: Some(reason.into()),
        exit_code,
        at: None,
    };
    report(link, session_id, fact, &agent_stop).await?;
    Ok(())
}

/// The kernels of the session placed on `agent`.
fn kernels_here(state: &SessionState, agent: &str) -> Vec<u32> {
    (0..state.kernels.len().max(1) as u32)
        .filter(|k| {
            state
                .kernels
                .get(*k as usize)
                .map_or(state.agent_id.as_deref() == Some(agent), |p| {
                    p.agent_id == agent
                })
        })
        .collect()
}

fn started(kernels: &[u32]) -> Fact {
    Fact::KernelsStarted {
        kernels: kernels
            .iter()
            .map(|&kernel| StartedKernel {
                kernel,
                container_id: format!("simulated-{kernel}"),
                ports: vec![],
                hostname: None,
                address: None,
                started_at: None,
            })
            .collect(),
    }
}

/// Reports `fact`; whether it was recorded (false: the session moved on).
async fn report(
    link: &Link,
    session_id: Uuid,
    fact: Fact,
    stop: &CancellationToken,
) -> Result<bool, AgentError> {
    Ok(matches!(
        link.report(session_id, fact, stop).await?,
        Answer::Recorded { .. }
    ))
}
