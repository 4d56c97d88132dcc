//! The session tasks of the agent: one per session it runs, or holds kernels of, started
//! from SCHEDULED, taken back from an earlier run, or kept for another agent's cluster.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::ctx::Ctx;
use super::{cluster, session};

/// The session tasks of this agent: one per session it runs (or holds kernels of), each
/// with a token that ends it (its containers stopped), and beside them the agent's other
/// work (`running`: heartbeats, commits, apps). They live and die with the agent (dropping
/// the set aborts them), as they would with its process: the agent's stop is never a
/// session's, so a stopped agent leaves its containers running.
pub(super) struct SessionTasks {
    pub(super) tasks: HashMap<Uuid, CancellationToken>,
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

    fn token(&mut self, id: Uuid) -> CancellationToken {
        let token = CancellationToken::new();
        self.tasks.insert(id, token.clone());
        token
    }

    /// Ends every session task (each stops its containers and reports how the session
    /// ended), and waits for them, or for `stop`.
    pub(super) async fn end_all(&mut self, stop: &CancellationToken) {
        for token in self.tasks.values() {
            token.cancel();
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
        let (ctx, token) = (ctx.clone(), self.token(id));
        self.sessions.spawn(async move {
            if let Err(e) = session::run_session(ctx, id, token).await {
                tracing::warn!(session = %id, error = %e, "session task failed");
            }
        });
    }

    /// Takes session `id` back: its main container is `container`, left by an earlier run.
    pub(super) fn adopt(&mut self, ctx: &Ctx, id: Uuid, container: String) {
        let (ctx, token) = (ctx.clone(), self.token(id));
        self.sessions.spawn(async move {
            if let Err(e) = session::adopt_session(ctx, id, container, token).await {
                tracing::warn!(session = %id, error = %e, "session task failed");
            }
        });
    }

    /// Starts this agent's kernels of another agent's session `id`.
    pub(super) fn run_secondary(&mut self, ctx: &Ctx, id: Uuid) {
        let token = self.token(id);
        self.sessions
            .spawn(cluster::run_secondary(ctx.clone(), id, token));
    }

    /// Keeps `kernels` of another agent's session `id`, left by an earlier run.
    pub(super) fn watch_secondary(&mut self, ctx: &Ctx, id: Uuid, kernels: Vec<(u32, String)>) {
        let token = self.token(id);
        self.sessions
            .spawn(cluster::watch_secondary(ctx.clone(), id, kernels, token));
    }

    /// Forgets tasks whose sessions ended (their token was cancelled or they finished).
    pub(super) fn forget_ended(&mut self) {
        self.tasks.retain(|_, token| !token.is_cancelled());
        while self.sessions.try_join_next().is_some() {}
        while self.running.try_join_next().is_some() {}
    }
}
