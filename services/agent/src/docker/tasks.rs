//! The session tasks of the agent: one per session it runs, or holds kernels of, started
//! from SCHEDULED, taken back from an earlier run, or kept for another agent's cluster.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::stop_order::StopOrder;

use super::ctx::Ctx;
use super::{cluster, session};

/// The session tasks of this agent: one per session it runs (or holds kernels of), each
/// with the order that ends it (its containers stopped), and beside them the agent's other
/// work (`running`: heartbeats, commits, apps). They live and die with the agent (dropping
/// the set aborts them), as they would with its process: the agent's stop is never a
/// session's, so a stopped agent leaves its containers running.
pub(super) struct SessionTasks {
    pub(super) tasks: HashMap<Uuid, StopOrder>,
    sessions: tokio::task::JoinSet<()>,
    pub(super) running: tokio::task::JoinSet<()>,
}

impl SessionTasks {
    /// No task yet.
    pub(super) fn new() -> SessionTasks {
        SessionTasks {
            tasks: HashMap::new(),
            sessions: tokio::task::JoinSet::new(),
            running: tokio::task::JoinSet::new(),
        }
    }

    fn order(&mut self, id: Uuid) -> StopOrder {
        let order = StopOrder::default();
        self.tasks.insert(id, order.clone());
        order
    }

    /// Carries out a stop command for session `id` (see [`StopOrder::give`]).
    pub(super) fn stop(&self, id: Uuid, placement: Option<u32>) {
        if let Some(order) = self.tasks.get(&id) {
            order.give(placement);
        }
    }

    /// Ends every session task (each stops its containers and reports how the session
    /// ended), and waits for them, or for `stop`.
    pub(super) async fn end_all(&mut self, stop: &CancellationToken) {
        for order in self.tasks.values() {
            order.end();
        }
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                next = self.sessions.join_next() => if next.is_none() { return },
            }
        }
    }

    /// Aborts every task, as the process's end would: containers keep running.
    pub(super) fn abort_all(&mut self) {
        self.sessions.abort_all();
        self.running.abort_all();
    }

    /// Aborts every task, as [`SessionTasks::abort_all`], and waits until none runs.
    pub(super) async fn shut_down(&mut self) {
        self.sessions.shutdown().await;
        self.running.shutdown().await;
    }

    /// Starts the task that runs session `id` from SCHEDULED.
    pub(super) fn run(&mut self, ctx: &Ctx, id: Uuid) {
        let (ctx, order) = (ctx.clone(), self.order(id));
        self.sessions.spawn(async move {
            let _forgotten = order.ended_on_drop();
            if let Err(e) = session::run_session(ctx, id, order.clone()).await {
                tracing::warn!(session = %id, error = %e, "session task failed");
            }
        });
    }

    /// Takes session `id` back: its main container is `container`, left by an earlier run.
    pub(super) fn adopt(&mut self, ctx: &Ctx, id: Uuid, container: String) {
        let (ctx, order) = (ctx.clone(), self.order(id));
        self.sessions.spawn(async move {
            let _forgotten = order.ended_on_drop();
            if let Err(e) = session::adopt_session(ctx, id, container, order.clone()).await {
                tracing::warn!(session = %id, error = %e, "session task failed");
            }
        });
    }

    /// Starts this agent's kernels of another agent's session `id`.
    pub(super) fn run_secondary(&mut self, ctx: &Ctx, id: Uuid) {
        let (ctx, order) = (ctx.clone(), self.order(id));
        self.sessions.spawn(async move {
            let _forgotten = order.ended_on_drop();
            cluster::run_secondary(ctx, id, order.clone()).await;
        });
    }

    /// Keeps `kernels` of another agent's session `id`, left by an earlier run.
    pub(super) fn watch_secondary(&mut self, ctx: &Ctx, id: Uuid, kernels: Vec<(u32, String)>) {
        let (ctx, order) = (ctx.clone(), self.order(id));
        self.sessions.spawn(async move {
            let _forgotten = order.ended_on_drop();
            cluster::adopt_secondary(ctx, id, kernels, order.clone()).await;
        });
    }

    /// Forgets tasks that ended, or whose sessions are ending: an assignment for one of
    /// them later (the session placed here again) starts a task anew.
    pub(super) fn forget_ended(&mut self) {
        self.tasks.retain(|_, order| !order.is_ended());
        while self.sessions.try_join_next().is_some() {}
        while self.running.try_join_next().is_some() {}
    }
}
