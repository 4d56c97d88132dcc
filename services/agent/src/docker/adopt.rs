//! What an earlier run of this agent left behind, taken back at start: the containers of
//! live sessions are adopted (their tasks resume), kernels of other agents' live clusters are
//! kept, every other container of this agent is removed, and a live session whose container
//! is gone ends in ERROR with the reason. A container that exited meanwhile is adopted too:
//! its session task reads its output, exit code and times from the engine before removing it.

use std::collections::{HashMap, HashSet};

use bollard::container::ListContainersOptions;
use bus::protocol::{Answer, Request};
use domain::payloads::SessionStatus;
use uuid::Uuid;

use super::ctx::{moved, remove, remove_network, Ctx};
use super::spares::LABEL_SPARE;
use super::spec::{network_name, LABEL_AGENT, LABEL_KERNEL, LABEL_NETWORK, LABEL_SESSION};
use super::tasks::SessionTasks;
use crate::AgentError;

/// Takes back what an earlier run left, starting the tasks of what it adopts in `sessions`.
pub(super) async fn adopt_leftovers(
    ctx: &Ctx,
    sessions: &mut SessionTasks,
) -> Result<(), AgentError> {
    // What a previous run of this agent left behind.
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("{LABEL_AGENT}={}", ctx.agent_id)],
    )]);
    let found = ctx
        .docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters,
            ..Default::default()
        }))
        .await
        .map_err(|e| AgentError::Runtime(format!("listing containers: {e}")))?;
    let found_live = match ctx.link.ask(&Request::Sync, &ctx.stop).await? {
        Answer::Live { sessions } => sessions,
        other => return Err(AgentError::Denied(format!("{other:?}"))),
    };
    // This agent's live sessions, and other agents' clusters with kernels here still going.
    let live: HashMap<Uuid, SessionStatus> = found_live
        .iter()
        .filter(|s| s.main)
        .map(|s| (s.session_id, s.status))
        .collect();
    let live_elsewhere: HashSet<Uuid> = found_live
        .iter()
        .filter(|s| !s.main)
        .map(|s| s.session_id)
        .collect();
    let mut adopted = HashSet::new();
    let mut adopted_elsewhere: HashMap<Uuid, Vec<(u32, String)>> = HashMap::new();
    // Kernels other than the main one, kept while their session lives.
    let mut others: Vec<(Uuid, String)> = Vec::new();
    for c in found {
        let name = c
            .names
            .unwrap_or_default()
            .first()
            .map(|n| n.trim_start_matches('/').to_owned())
            .unwrap_or_default();
        let labels = c.labels.unwrap_or_default();
        // A spare's sandbox goes with its spare's bridge (below), unless a live session's
        // kernel is in its namespace.
        if labels.contains_key(LABEL_SPARE) {
            continue;
        }
        // Exited while no run of the agent watched it: its output, exit code and times are
        // still the engine's, read before it is removed (see `session`).
        let exited = matches!(c.state.as_deref(), Some("exited" | "dead"));
        let session = labels
            .get(LABEL_SESSION)
            .and_then(|s| Uuid::parse_str(s).ok());
        let kernel: u32 = labels
            .get(LABEL_KERNEL)
            .and_then(|k| k.parse().ok())
            .unwrap_or(0);
        let main = kernel == 0;
        // A live session's container on a spare bridge: the session holds it, and it goes
        // with the session.
        if let (Some(id), Some(network)) = (session, labels.get(LABEL_NETWORK)) {
            if live.contains_key(&id) && *network != network_name(id) {
                ctx.spares.hold(id, network.clone());
            }
        }
        match session {
            Some(id) if live_elsewhere.contains(&id) => {
                adopted_elsewhere
                    .entry(id)
                    .or_default()
                    .push((kernel, name));
            }
            Some(id)
                if live
                    .get(&id)
                    .is_some_and(|s| *s != SessionStatus::Scheduled)
                    && !main =>
            {
                others.push((id, name));
            }
            Some(id)
                if live
                    .get(&id)
                    .is_some_and(|s| *s != SessionStatus::Scheduled)
                    && !adopted.contains(&id) =>
            {
                adopted.insert(id);
                if exited {
                    tracing::info!(session = %id, container = %name, "adopting a container that exited while the agent was away");
                } else {
                    tracing::info!(session = %id, container = %name, "adopting a live session's container");
                }
                sessions.adopt(ctx, id, name);
            }
            _ => {
                tracing::info!(container = %name, "removing a container without a live session");
                remove(ctx, &name).await;
            }
        }
    }
    for (id, kernels) in adopted_elsewhere {
        tracing::info!(session = %id, ?kernels, "adopting kernels of another agent's session");
        sessions.watch_secondary(ctx, id, kernels);
    }
    for (id, status) in &live {
        if adopted.contains(id) {
            continue;
        }
        match leftover(*status) {
            Leftover::Start => {
                // Its assignment was taken but the session not started, or its image was
                // being pulled: start it now (the pull resumes).
                sessions.run(ctx, *id);
                continue;
            }
            Leftover::Requeue => {
                let reason = format!("the agent `{}` restarted before the session's container ran (it was {status}); back in the queue", ctx.agent_id);
                moved(ctx, *id, SessionStatus::Pending, Some(reason), None).await;
            }
            Leftover::Lost => {
                let reason = format!("the agent `{}` restarted and the session's container was gone (it was {status})", ctx.agent_id);
                moved(ctx, *id, SessionStatus::Error, Some(reason), None).await;
            }
        }
        {
            for (_, name) in others.iter().filter(|(s, _)| s == id) {
                remove(ctx, name).await;
            }
            remove_network(ctx, *id).await;
        }
    }
    remove_leftover_networks(ctx, &live, &live_elsewhere).await;
    Ok(())
}

/// Removes the networks this agent made for sessions that are no longer live (their
/// containers are gone: the engine refuses to remove a network still in use), and its spares
/// (bridge and sandbox) but those a live session holds, which its kernel's label told above.
async fn remove_leftover_networks(
    ctx: &Ctx,
    live: &HashMap<Uuid, SessionStatus>,
    live_elsewhere: &HashSet<Uuid>,
) {
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("{LABEL_AGENT}={}", ctx.agent_id)],
    )]);
    let Ok(networks) = ctx
        .docker
        .list_networks(Some(bollard::network::ListNetworksOptions { filters }))
        .await
    else {
        return;
    };
    for network in networks {
        let labels = network.labels.unwrap_or_default();
        if labels.contains_key(LABEL_SPARE) {
            if let Some(name) = network.name.as_ref().filter(|n| !ctx.spares.is_held(n)) {
                super::ctx::remove_spare(ctx, name).await;
                tracing::info!(network = %name, "removed a spare no live session holds");
            }
            continue;
        }
        let session = labels
            .get(LABEL_SESSION)
            .and_then(|s| Uuid::parse_str(s).ok());
        let Some(id) = session else { continue };
        if live.contains_key(&id) || live_elsewhere.contains(&id) {
            continue;
        }
        tracing::info!(session = %id, "removing a network without a live session");
        remove_network(ctx, id).await;
    }
}

/// What becomes of a live session of this agent whose main container an agent that starts
/// again does not find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftover {
    /// Not started yet, or caught pulling its image: start it (the pull resumes).
    Start,
    /// Caught before its container ran user code: back to the queue, to be placed again.
    Requeue,
    /// Its container ran and is gone: its output and exit are lost, so it ends in ERROR.
    Lost,
}

/// Pure.
fn leftover(status: SessionStatus) -> Leftover {
    match status {
        SessionStatus::Scheduled | SessionStatus::Pulling => Leftover::Start,
        SessionStatus::Preparing | SessionStatus::Prepared | SessionStatus::Creating => {
            Leftover::Requeue
        }
        _ => Leftover::Lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::lifecycle::can_move;
    use domain::payloads::SessionType;

    #[test]
    fn a_session_caught_before_its_container_ran_is_started_or_requeued() {
        assert_eq!(leftover(SessionStatus::Scheduled), Leftover::Start);
        assert_eq!(
            leftover(SessionStatus::Pulling),
            Leftover::Start,
            "the pull resumes"
        );
        for status in [
            SessionStatus::Preparing,
            SessionStatus::Prepared,
            SessionStatus::Creating,
        ] {
            assert_eq!(leftover(status), Leftover::Requeue, "{status}");
            // The lifecycle allows the move, for every kind of session.
            for kind in [
                SessionType::Interactive,
                SessionType::Batch,
                SessionType::Inference,
            ] {
                assert!(
                    can_move(kind, status, SessionStatus::Pending),
                    "{status} {kind:?}"
                );
            }
        }
        for status in [
            SessionStatus::Running,
            SessionStatus::Restarting,
            SessionStatus::Terminating,
        ] {
            assert_eq!(leftover(status), Leftover::Lost, "{status}");
        }
    }
}
