//! The ground the agent's rooms stand on: how the runtime is set up, the context every task
//! of the agent shares, and the calls they all make through it: a session's state asked of
//! the control plane, its moves reported, its containers removed. It calls down only (into
//! `engine`, `spec` and `tty`), never up into the rooms that use it.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bollard::container::RemoveContainerOptions;
use bollard::models::ContainerStateStatusEnum;
use bollard::Docker;
use bus::protocol::{Answer, Fact};
use bus::Link;
use chrono::{DateTime, Utc};
use domain::aggregate::SessionState;
use domain::payloads::SessionStatus;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::engine::{self, EngineWatch};
use super::spec::{container_name, network_name, sandbox_name};
use crate::AgentError;

/// How the runtime is set up.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where folders live on this host (`<data>/folders/<owner>/<name>`), those on a shared
    /// volume aside.
    pub data_dir: PathBuf,
    /// The shared volumes this host mounts, by name, and where (`BERTH_VOLUMES`): a folder on
    /// one lives at `<mount>/folders/<owner>/<name>`, the same on every host that mounts it.
    pub volumes: std::collections::BTreeMap<String, PathBuf>,
    /// Seconds a stopping container gets before it is killed.
    pub stop_grace_secs: i64,
    /// How often the images offered are read again from the engine, so an image built or
    /// pulled on the host is offered without a restart; `None` when they were given fixed.
    pub image_refresh: Option<Duration>,
    /// How often a running container's usage is sampled (a first sample at its start).
    pub usage_every: Duration,
    /// Where customized images are pushed once committed, and pulled from by a host that
    /// lacks one; none keeps them on the host that committed them.
    pub registry: Option<super::registry::Registry>,
    /// The host address app and preopen ports are published on, and where berth's proxy
    /// reaches them: loopback on a single machine, never every interface.
    pub publish_address: String,
    /// Where the host's GPUs come from (NVML, or mock devices) and how finely they are
    /// shared.
    pub gpus: crate::gpu::GpuConfig,
    /// Each session's network: the pool its subnets come from, and the host firewall that
    /// keeps sessions from the host and the metadata address.
    pub fence: super::fence::NetworkFence,
    /// berth's runtime (`infra/runtime.sh`: tmux with its own loader and libraries), lent
    /// read-only to every container at [`RUNTIME_MOUNT`](super::spec::RUNTIME_MOUNT), so the
    /// terminal is tmux whatever the image holds; none: the image's own tmux, bash or sh.
    pub runtime: Option<PathBuf>,
}

/// What every task of the agent shares: its link to the control plane, the engine, the
/// host's GPUs, its settings and its stop.
#[derive(Clone)]
pub(super) struct Ctx {
    pub(super) gpus: Arc<crate::gpu::Discovery>,
    /// Taken while GPUs are chosen and their containers created.
    pub(super) gpu_turn: Arc<tokio::sync::Mutex<()>>,
    pub(super) link: Link,
    pub(super) docker: Docker,
    /// Whether the engine is out of reach, for every task of the agent.
    pub(super) engine: EngineWatch,
    pub(super) agent_id: String,
    pub(super) config: RuntimeConfig,
    /// The agent's own stop: a request to the control plane waits for an answer until then.
    pub(super) stop: CancellationToken,
    /// Held (shared) by each session task while it starts the session's containers: an
    /// agent that leaves takes it whole, so it leaves no start half done.
    pub(super) starting: Arc<tokio::sync::RwLock<()>>,
    /// The agent is being drained: a session it stops ends for that reason.
    pub(super) draining: Arc<std::sync::atomic::AtomicBool>,
    /// The terminals it serves: their tokens' key, and which are served now.
    pub(super) terminals: super::tty::Terminals,
    /// The engine is a node of a swarm: a cluster whose kernels are on several agents gets
    /// an attachable overlay network, which the other engines' kernels join.
    pub(super) swarm: bool,
    /// The MTU of the engine's default bridge, which every session's network is given: read
    /// from the engine once, at the first session's start, rather than at each (a daemon's
    /// MTU changes only with its restart, and a session's start waits on every call).
    pub(super) bridge_mtu: Arc<tokio::sync::OnceCell<Option<String>>>,
    /// Bridges made ahead for single kernels, and which session holds which.
    pub(super) spares: super::spares::Spares,
}

impl Ctx {
    /// Runs `call` until the engine answers it, waiting out its absence (see
    /// [`engine::patiently`]); gives up only when the agent stops, with the last error.
    pub(super) async fn patiently<T, F, Fut>(&self, call: F) -> Result<T, bollard::errors::Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, bollard::errors::Error>>,
    {
        engine::patiently(&self.engine, &self.stop, call).await
    }

    pub(super) fn draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until the engine answers a ping (or the agent stops).
    pub(super) async fn wait_for_engine(&self) {
        let _ = self.patiently(|| self.docker.ping()).await;
    }
}

/// A session's state, and the trace its journey belongs to (its creation's traceparent),
/// as the control plane answers for a session placed here.
pub(super) async fn load(
    ctx: &Ctx,
    session_id: Uuid,
) -> Result<Option<(SessionState, Option<String>)>, AgentError> {
    crate::session(&ctx.link, session_id, &ctx.stop).await
}

/// The session's status now, as the control plane has it.
pub(super) async fn status_now(
    ctx: &Ctx,
    session_id: Uuid,
) -> Result<Option<SessionStatus>, AgentError> {
    Ok(load(ctx, session_id).await?.map(|(s, _)| s.status))
}

/// Reports that the session moved; false when the control plane refused the move (it moved
/// on meanwhile: terminated, forced, ...).
pub(super) async fn moved(
    ctx: &Ctx,
    session_id: Uuid,
    to: SessionStatus,
    reason: Option<String>,
    exit_code: Option<i32>,
) -> bool {
    moved_at(ctx, session_id, to, reason, exit_code, None).await
}

/// [`moved`], for a move that happened at `at` by this host's clock (a container's end),
/// not as it is reported.
pub(super) async fn moved_at(
    ctx: &Ctx,
    session_id: Uuid,
    to: SessionStatus,
    reason: Option<String>,
    exit_code: Option<i32>,
    at: Option<DateTime<Utc>>,
) -> bool {
    let fact = Fact::Moved {
        to,
        reason,
        exit_code,
        at,
    };
    match ctx.link.report(session_id, fact, &ctx.stop).await {
        Ok(Answer::Recorded { .. }) => true,
        Ok(other) => {
            tracing::info!(%session_id, ?to, answer = ?other, "session not moved");
            false
        }
        Err(e) => {
            tracing::info!(%session_id, ?to, error = %e, "session not moved");
            false
        }
    }
}

/// Reports that the session moved through `through`, in order; false when the control plane
/// refused (it moved on meanwhile).
pub(super) async fn moved_through(
    ctx: &Ctx,
    session_id: Uuid,
    through: Vec<SessionStatus>,
) -> bool {
    match ctx
        .link
        .report(session_id, Fact::MovedThrough { through }, &ctx.stop)
        .await
    {
        Ok(Answer::Recorded { .. }) => true,
        answered => {
            tracing::info!(%session_id, ?answered, "session not moved");
            false
        }
    }
}

pub(super) async fn remove(ctx: &Ctx, container: &str) {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    let removed = ctx
        .patiently(|| ctx.docker.remove_container(container, Some(options)))
        .await;
    if let Err(e) = removed {
        tracing::debug!(container, error = %e, "remove");
    }
}

/// Removes the containers this agent created (and only those: other agents' kernels of the
/// same cluster may share this engine).
pub(super) async fn remove_all(ctx: &Ctx, names: &[String]) {
    for name in names {
        remove(ctx, name).await;
    }
}

/// Removes the session's containers (kernels 0..size, whichever exist) and its network
/// (every session has one; another agent's kernels of a cluster still on it keep it, and
/// that agent removes it after them).
pub(super) async fn cleanup(ctx: &Ctx, session_id: Uuid, _created: &[String], size: u32) {
    for k in 0..size {
        remove(ctx, &container_name(session_id, k)).await;
    }
    remove_network(ctx, session_id).await;
}

/// Removes session `session_id`'s network (its own, or the spare it took, with its sandbox)
/// once no container is on it. On one engine, the last agent whose kernels leave a cluster's
/// bridge removes it (the engine refuses while another's are on it). A swarm's overlay may be
/// removed only by a manager, which its workers' agents are not: there each agent waits up to
/// 30 s for the other engines' kernels to leave, so that the main kernel's agent, whose engine
/// made it, removes it last.
pub(super) async fn remove_network(ctx: &Ctx, session_id: Uuid) {
    if let Some(spare) = ctx.spares.release(session_id) {
        return remove_spare(ctx, &spare).await;
    }
    let name = network_name(session_id);
    for _ in 0..300 {
        match ctx.docker.remove_network(&name).await {
            Err(e) if ctx.swarm && e.to_string().contains("active endpoints") => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            _ => return,
        }
    }
    tracing::warn!(session = %session_id, "the cluster's overlay network still had kernels after 30 s; left for the next start's sweep");
}

/// Removes spare `network` ([`super::spares`]): its sandbox first (a bridge with a container
/// on it stays), then the bridge. Either may be gone already.
pub(super) async fn remove_spare(ctx: &Ctx, network: &str) {
    remove(ctx, &sandbox_name(network)).await;
    let _ = ctx.docker.remove_network(network).await;
}

/// A container's run as its engine tells it: whether it ever started, and when it ended by
/// the engine's clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Run {
    /// Created and never started.
    pub(super) created: bool,
    /// `State.FinishedAt`: when its process exited (the engine takes it from the exit).
    pub(super) finished_at: Option<DateTime<Utc>>,
}

/// What the engine says of `container`'s run; `None` when it cannot say (no such container,
/// or the agent stopping while the engine is away).
pub(super) async fn run_of(ctx: &Ctx, container: &str) -> Option<Run> {
    let inspected = ctx
        .patiently(|| ctx.docker.inspect_container(container, None))
        .await
        .ok()?;
    let state = inspected.state?;
    Some(Run {
        created: state.status == Some(ContainerStateStatusEnum::CREATED),
        finished_at: state.finished_at.as_deref().and_then(engine_time),
    })
}

/// A time as the engine writes it (RFC 3339, nanoseconds); `None` for its zero time
/// (`0001-01-01T00:00:00Z`: a container never started, or not ended). Pure.
pub(super) fn engine_time(text: &str) -> Option<DateTime<Utc>> {
    let at = DateTime::parse_from_rfc3339(text).ok()?.with_timezone(&Utc);
    (at.timestamp() > 0).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_times_are_read_and_its_zero_time_is_none() {
        let at = engine_time("2026-11-25T18:42:29.091621345Z").unwrap();
        assert_eq!(at.timestamp_subsec_nanos(), 91_621_345);
        assert_eq!(engine_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(engine_time(""), None);
    }
}
