//! Multi-node clusters seen from an agent that holds some of another agent's kernels:
//! started when the control plane assigns them (once the main agent is creating its own),
//! kept until the session ends, then removed.

use bollard::container::StopContainerOptions;
use domain::payloads::SessionStatus;
use uuid::Uuid;

use crate::stop_order::StopOrder;

use super::ctx::{load, remove, remove_network, Ctx};
use super::keep::save_final_logs;
use super::kernels::create_kernels;

/// This agent's kernels of a multi-node cluster whose main kernel runs elsewhere: started when
/// the main agent creates its own, kept until the session ends, then removed.
pub(super) async fn run_secondary(ctx: Ctx, id: Uuid, stop: StopOrder) {
    let Ok(Some((state, _))) = load(&ctx, id).await else {
        return;
    };
    // An assignment delivered again, for a cluster that has ended since: nothing to do.
    if state.status.is_terminal() || state.status == SessionStatus::Terminating {
        return;
    }
    let size = state.request.cluster_size.max(1);
    let names = match create_kernels(&ctx, &state, None, std::future::ready(true)).await {
        Ok(Some((names, _))) => names,
        Ok(None) => return,
        Err(reason) => {
            // The session stays CREATING until the reconciler's deadline ends it with a reason.
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
    watch_secondary(ctx, id, kernels, state.releases, stop).await;
}

/// Resumes keeping `kernels` of another agent's session, left by an earlier run of this
/// agent, for the session's placement now.
pub(super) async fn adopt_secondary(
    ctx: Ctx,
    id: Uuid,
    kernels: Vec<(u32, String)>,
    stop: StopOrder,
) {
    // Unknown (the control plane is away, or the session gone): any placement's stop ends them.
    let placement = match load(&ctx, id).await {
        Ok(Some((state, _))) => state.releases,
        _ => 0,
    };
    watch_secondary(ctx, id, kernels, placement, stop).await;
}

/// Keeps this agent's kernels of placement `placement` of another agent's session until
/// the session ends or gives the placement back, then stops them, keeps their output and
/// removes them.
async fn watch_secondary(
    ctx: Ctx,
    id: Uuid,
    kernels: Vec<(u32, String)>,
    placement: u32,
    stop: StopOrder,
) {
    stop.given(placement).await;
    for (k, name) in &kernels {
        let _ = ctx
            .docker
            .stop_container(name, Some(StopContainerOptions { t: 1 }))
            .await;
        save_final_logs(&ctx, id, *k, name, &Default::default()).await;
        remove(&ctx, name).await;
    }
    remove_network(&ctx, id).await;
}
