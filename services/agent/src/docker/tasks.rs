//! The session tasks of the agent: one per session it runs, or holds kernels of, started
//! from SCHEDULED, taken back from an earlier run, or kept for another agent's cluster.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::ctx::Ctx;
use super::{cluster, session};

/// The session tasks of this agent: one per session it runs (or holds kernels of), each
/// with a token that ends it. They live and die with the agent (dropping the set aborts
/// them), as they would with its process.
pub(super) struct SessionTasks {
    pub(super) tasks: HashMap<Uuid, CancellationToken>,
    pub(super) running: tokio::task::JoinSet<()>,
    stop: CancellationToken,
}

impl SessionTasks {
    /// No task yet; each task's token is a child of `stop`, the agent's.
    pub(super) fn new(stop: CancellationToken) -> SessionTasks {
        SessionTasks {
            tasks: HashMap::new(),
            running: tokio::task::JoinSet::new(),
            stop,
        }
    }

    fn token(&mut self, id: Uuid) -> CancellationToken {
        let token = self.stop.child_token();
        self.tasks.insert(id, token.clone());
        token
    }

    /// Starts the task that runs session `id` from SCHEDULED.
    pub(super) fn run(&mut self, ctx: &Ctx, id: Uuid) {
        let (ctx, token) = (ctx.clone(), self.token(id));
        self.running.spawn(async move {
            if let Err(e) = session::run_session(ctx, id, token).await {
                tracing::warn!(session = %id, error = %e, "session task failed");
            }
        });
    }

    /// Takes session `id` back: its main container is `container`, left by an earlier run.
    pub(super) fn adopt(&mut self, ctx: &Ctx, id: Uuid, container: String) {
        let (ctx, token) = (ctx.clone(), self.token(id));
        self.running.spawn(async move {
            if let Err(e) = session::adopt_session(ctx, id, container, token).await {
                tracing::warn!(session = %id, error = %e, "session task failed");
            }
        });
    }

    /// Starts this agent's kernels of another agent's session `id`.
    pub(super) fn run_secondary(&mut self, ctx: &Ctx, id: Uuid) {
        let token = self.token(id);
        self.running
            .spawn(cluster::run_secondary(ctx.clone(), id, token));
    }

    /// Keeps `kernels` of another agent's session `id`, left by an earlier run.
    pub(super) fn watch_secondary(&mut self, ctx: &Ctx, id: Uuid, kernels: Vec<(u32, String)>) {
        let token = self.token(id);
        self.running
            .spawn(cluster::watch_secondary(ctx.clone(), id, kernels, token));
    }

    /// Forgets tasks whose sessions ended (their token was cancelled or they finished).
    pub(super) fn forget_ended(&mut self) {
        self.tasks.retain(|_, token| !token.is_cancelled());
        while self.running.try_join_next().is_some() {}
    }
}
