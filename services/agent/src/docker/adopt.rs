//! What an earlier run of this agent left behind, taken back at start: the containers of
//! live sessions are adopted (their tasks resume), kernels of other agents' live clusters are
//! kept, every other container of this agent is removed, and a live session whose container
//! is gone ends in ERROR with the reason.

use std::collections::{HashMap, HashSet};

use bollard::container::ListContainersOptions;
use events::payloads::SessionStatus;
use uuid::Uuid;

use super::{
    db, moved, network_name, remove, Ctx, SessionTasks, LABEL_AGENT, LABEL_KERNEL, LABEL_SESSION,
};
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
    let client = ctx.pool.get().await.map_err(db)?;
    let live: HashMap<Uuid, String> = crate::db::holding_sessions(&client, &ctx.agent_id).await?;
    // Sessions of other agents with kernels here (multi-node clusters), still going.
    let live_elsewhere: HashSet<Uuid> =
        crate::db::secondaries_going(&client, &ctx.agent_id).await?;
    drop(client);
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
        let session = labels
            .get(LABEL_SESSION)
            .and_then(|s| Uuid::parse_str(s).ok());
        let kernel: u32 = labels
            .get(LABEL_KERNEL)
            .and_then(|k| k.parse().ok())
            .unwrap_or(0);
        let main = kernel == 0;
        match session {
            Some(id) if live_elsewhere.contains(&id) => {
                adopted_elsewhere
                    .entry(id)
                    .or_default()
                    .push((kernel, name));
            }
            Some(id) if live.get(&id).is_some_and(|s| s != "SCHEDULED") && !main => {
                others.push((id, name));
            }
            Some(id)
                if live.get(&id).is_some_and(|s| s != "SCHEDULED") && !adopted.contains(&id) =>
            {
                adopted.insert(id);
                tracing::info!(session = %id, container = %name, "adopting a live session's container");
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
        if status != "SCHEDULED" && !adopted.contains(id) {
            moved(ctx, *id, SessionStatus::Error,
                Some(format!("the agent `{}` restarted and the session's container was gone (it was {status})", ctx.agent_id)), None).await;
            for (_, name) in others.iter().filter(|(s, _)| s == id) {
                remove(ctx, name).await;
            }
            let _ = ctx.docker.remove_network(&network_name(*id)).await;
        }
    }
    Ok(())
}
