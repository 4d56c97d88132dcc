//! Multi-node clusters seen from an agent that holds some of another agent's kernels:
//! started when the main agent creates its own, kept until the session ends, then removed;
//! and the main agent's wait for the others.

use std::collections::HashSet;
use std::time::Duration;

use bollard::container::StopContainerOptions;
use events::catalogue::{stream_id, Event};
use events::EventStore;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::keep::save_logs;
use super::kernels::create_kernels;
use super::spec::network_name;
use super::{load, remove, Ctx};

/// This agent's kernels of a multi-node cluster whose main kernel runs elsewhere: started when
/// the main agent creates its own, kept until the session ends, then removed.
pub(super) async fn run_secondary(ctx: Ctx, id: Uuid, stop: CancellationToken) {
    let Ok(Some((state, _))) = load(&ctx.pool, id).await else {
        return;
    };
    let size = state.request.cluster_size.max(1);
    let names = match create_kernels(&ctx, &state).await {
        Ok(names) => names,
        Err(reason) => {
            // The main agent's wait for the kernels runs out and ends the session with a reason.
            tracing::warn!(session = %id, %reason, "kernels not started");
            return;
        }
    };
    let kernels: Vec<(u32, String)> = (0..size)
        .filter(|k| {
            state
                .kernels
                .get(*k as usize)
                .is_some_and(|p| p.agent_id == ctx.agent_id)
        })
        .zip(names)
        .collect();
    watch_secondary(ctx, id, kernels, stop).await;
}

/// Keeps this agent's kernels of another agent's session until the session ends, then stops
/// them, keeps their output and removes them. A restarted agent resumes here for the kernels
/// it finds still running.
pub(super) async fn watch_secondary(
    ctx: Ctx,
    id: Uuid,
    kernels: Vec<(u32, String)>,
    stop: CancellationToken,
) {
    stop.cancelled().await;
    for (k, name) in &kernels {
        let _ = ctx
            .docker
            .stop_container(name, Some(StopContainerOptions { t: 1 }))
            .await;
        save_logs(&ctx, id, *k, name, true, &Default::default()).await;
        remove(&ctx, name).await;
    }
    let _ = ctx.docker.remove_network(&network_name(id)).await;
}

/// Whether every kernel of the session has started (its `KernelStarted` is in the log),
/// waiting up to 120 s.
pub(super) async fn others_started(ctx: &Ctx, id: Uuid, size: u32) -> bool {
    let store = EventStore::new(ctx.pool.clone());
    for _ in 0..600 {
        if let Ok(recorded) = store.read_stream(&stream_id("session", id)).await {
            let started: HashSet<u32> = recorded
                .iter()
                .filter_map(|e| match &e.event {
                    Event::KernelStarted(k) => Some(k.kernel),
                    _ => None,
                })
                .collect();
            if (0..size).all(|k| started.contains(&k)) {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}
