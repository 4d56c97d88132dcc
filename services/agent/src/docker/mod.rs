//! The container runtime: turns a session placed on this agent into Docker containers and
//! back, through the Docker Engine API (bollard).
//!
//! The control plane assigns a session with a command; one task per session then owns its
//! container: it moves the session through PREPARING, (PULLING,) PREPARED and CREATING,
//! reports its kernels started (the control plane moves the session to RUNNING once every
//! kernel of it has), waits for the container to exit, sends its output as telemetry,
//! removes it (so the scratch of /home/work is gone), and reports how it ended. Containers carry labels naming their session and agent, so an agent that
//! starts again adopts the containers of live sessions (its kernels of other agents'
//! clusters included), removes the others, and ends in ERROR the live sessions whose
//! container is gone.
//!
//! - [`spec`]: what each kernel's container is (pure, unit-tested).
//! - `kernels`: the cluster network, GPUs, containers created, started and recorded.
//! - `session`: one session's task, and how it ended (`outcome`, pure).
//! - `cluster`: kernels of another agent's multi-node session.
//! - `adopt`: what an earlier run left, taken back at start.
//! - `keep`: output and usage kept while a container runs.
//! - `engine`: the engine's absence waited out, never taken for a session's end.
//! - this module: the engine connection, the shared context and the agent's loop.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use bollard::container::RemoveContainerOptions;
use bollard::Docker;
use bus::protocol::{Answer, Command, Fact};
use bus::Link;
use domain::aggregate::SessionState;
use domain::apps::ServicePort;
use domain::payloads::*;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::commands::Commands;
use crate::{keep_alive, register, AgentError, AgentSpec, HEARTBEAT_EVERY};

mod adopt;
mod apps;
mod cluster;
mod commit;
mod engine;
mod keep;
mod kernels;
mod session;
pub mod spec;

use spec::network_name;

const LABEL_SESSION: &str = "ai.berth.session";
const LABEL_AGENT: &str = "ai.berth.agent";
const LABEL_KERNEL: &str = "ai.berth.kernel";
/// The GPUs a container holds (`gpu::GpuShare::to_label`).
const LABEL_GPUS: &str = "ai.berth.gpus";

/// How the runtime is set up.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where folders live on this host (`<data>/folders/<owner>/<name>`).
    pub data_dir: PathBuf,
    /// Seconds a stopping container gets before it is killed.
    pub stop_grace_secs: i64,
    /// How often the images offered are read again from the engine, so an image built or
    /// pulled on the host is offered without a restart; `None` when they were given fixed.
    pub image_refresh: Option<Duration>,
    /// How often a running container's usage is sampled (a first sample at its start).
    pub usage_every: Duration,
    /// Where customized images are pushed once committed (`host[:port][/path]`); none
    /// keeps them on this host.
    pub registry: Option<String>,
    /// The host address app and preopen ports are published on, and where berth's proxy
    /// reaches them: loopback on a single machine, never every interface.
    pub publish_address: String,
}

/// Connects to the local engine (`DOCKER_HOST` when it names a Unix socket), agreeing on an
/// API version it speaks; while the engine is out of reach it waits, saying so once.
pub async fn connect() -> Result<Docker, bollard::errors::Error> {
    let connect = || async {
        Docker::connect_with_local_defaults()?
            .negotiate_version()
            .await
    };
    bus::patience::until_up("the Docker engine", connect, engine::unreachable).await
}

/// The host's CPU cores and memory, as the engine sees them.
pub async fn host_capacity(docker: &Docker) -> Result<ResourceSlots, bollard::errors::Error> {
    let info = docker.info().await?;
    Ok(ResourceSlots {
        cpu_milli: info.ncpu.unwrap_or(1).max(1) as u64 * 1000,
        memory_bytes: info.mem_total.unwrap_or(0).max(0) as u64,
        gpu_milli: 0,
    })
}

/// The images present on the host, and the apps those that declare some declare.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostImages {
    /// Every `repository:tag`, sorted.
    pub names: Vec<String>,
    pub apps: BTreeMap<String, Vec<ServicePort>>,
}

/// Every `repository:tag` present on the host, with its apps (an image whose service-ports
/// label cannot be read is offered without apps, and the label's fault is logged).
pub async fn local_images(docker: &Docker) -> Result<HostImages, bollard::errors::Error> {
    let images = docker
        .list_images::<String>(Some(bollard::image::ListImagesOptions::default()))
        .await?;
    let mut host = HostImages::default();
    for image in images {
        let apps = domain::apps::image_apps(|name| image.labels.get(name).map(String::as_str))
            .unwrap_or_else(|e| {
                tracing::warn!(tags = ?image.repo_tags, error = %e, "an image's apps are unreadable");
                Vec::new()
            });
        for tag in image.repo_tags.into_iter().filter(|t| t != "<none>:<none>") {
            if !apps.is_empty() {
                host.apps.insert(tag.clone(), apps.clone());
            }
            host.names.push(tag);
        }
    }
    host.names.sort();
    host.names.dedup();
    Ok(host)
}

fn container_name(session_id: Uuid, kernel: u32) -> String {
    format!("berth-{}-{kernel}", session_id.simple())
}

#[derive(Clone)]
struct Ctx {
    gpus: std::sync::Arc<crate::gpu::Discovery>,
    /// Taken while GPUs are chosen and their containers created.
    gpu_turn: std::sync::Arc<tokio::sync::Mutex<()>>,
    link: Link,
    docker: Docker,
    /// Whether the engine is out of reach, for every task of the agent.
    engine: engine::EngineWatch,
    agent_id: String,
    config: RuntimeConfig,
    /// The agent's own stop: a request to the control plane waits for an answer until then.
    stop: CancellationToken,
}

/// A session's state, and the trace its journey belongs to (its creation's traceparent),
/// as the control plane answers for a session placed here.
async fn load(
    ctx: &Ctx,
    session_id: Uuid,
) -> Result<Option<(SessionState, Option<String>)>, AgentError> {
    crate::session(&ctx.link, session_id, &ctx.stop).await
}

/// The session's status now, as the control plane has it.
async fn status_now(ctx: &Ctx, session_id: Uuid) -> Result<Option<SessionStatus>, AgentError> {
    Ok(load(ctx, session_id).await?.map(|(s, _)| s.status))
}

/// Reports that the session moved; false when the control plane refused the move (it moved
/// on meanwhile: terminated, forced, ...).
async fn moved(
    ctx: &Ctx,
    session_id: Uuid,
    to: SessionStatus,
    reason: Option<String>,
    exit_code: Option<i32>,
) -> bool {
    let fact = Fact::Moved {
        to,
        reason,
        exit_code,
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
async fn moved_through(ctx: &Ctx, session_id: Uuid, through: Vec<SessionStatus>) -> bool {
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

async fn remove(ctx: &Ctx, container: &str) {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    let removed = engine::patiently(ctx, || {
        ctx.docker.remove_container(container, Some(options))
    })
    .await;
    if let Err(e) = removed {
        tracing::debug!(container, error = %e, "remove");
    }
}

/// Removes the containers this agent created (and only those: other agents' kernels of the
/// same cluster may share this engine).
async fn remove_all(ctx: &Ctx, names: &[String]) {
    for name in names {
        remove(ctx, name).await;
    }
}

/// Removes the session's containers (kernels 0..size, whichever exist) and its network.
async fn cleanup(ctx: &Ctx, session_id: Uuid, _created: &[String], size: u32) {
    for k in 0..size {
        remove(ctx, &container_name(session_id, k)).await;
    }
    if size > 1 {
        let _ = ctx.docker.remove_network(&network_name(session_id)).await;
    }
}

/// The agent with its container runtime: registers, heartbeats, reconciles what it finds on
/// the host, then starts and stops sessions placed on it until `stop`.
/// The session tasks of this agent: one per session it runs (or holds kernels of), each
/// with a token that ends it. They live and die with the agent (dropping the set aborts
/// them), as they would with its process.
struct SessionTasks {
    tasks: HashMap<Uuid, CancellationToken>,
    running: tokio::task::JoinSet<()>,
    stop: CancellationToken,
}

impl SessionTasks {
    fn token(&mut self, id: Uuid) -> CancellationToken {
        let token = self.stop.child_token();
        self.tasks.insert(id, token.clone());
        token
    }

    /// Starts the task that runs session `id` from SCHEDULED.
    fn run(&mut self, ctx: &Ctx, id: Uuid) {
        let (ctx, token) = (ctx.clone(), self.token(id));
        self.running.spawn(async move {
            if let Err(e) = session::run_session(ctx, id, token).await {
                tracing::warn!(session = %id, error = %e, "session task failed");
            }
        });
    }

    /// Takes session `id` back: its main container is `container`, left by an earlier run.
    fn adopt(&mut self, ctx: &Ctx, id: Uuid, container: String) {
        let (ctx, token) = (ctx.clone(), self.token(id));
        self.running.spawn(async move {
            if let Err(e) = session::adopt_session(ctx, id, container, token).await {
                tracing::warn!(session = %id, error = %e, "session task failed");
            }
        });
    }

    /// Starts this agent's kernels of another agent's session `id`.
    fn run_secondary(&mut self, ctx: &Ctx, id: Uuid) {
        let token = self.token(id);
        self.running
            .spawn(cluster::run_secondary(ctx.clone(), id, token));
    }

    /// Keeps `kernels` of another agent's session `id`, left by an earlier run.
    fn watch_secondary(&mut self, ctx: &Ctx, id: Uuid, kernels: Vec<(u32, String)>) {
        let token = self.token(id);
        self.running
            .spawn(cluster::watch_secondary(ctx.clone(), id, kernels, token));
    }

    /// Forgets tasks whose sessions ended (their token was cancelled or they finished).
    fn forget_ended(&mut self) {
        self.tasks.retain(|_, token| !token.is_cancelled());
        while self.running.try_join_next().is_some() {}
    }
}

pub async fn run(
    link: Link,
    docker: Docker,
    spec: AgentSpec,
    config: RuntimeConfig,
    stop: CancellationToken,
) -> Result<(), AgentError> {
    register(&link, &spec, &stop).await?;
    let kept = link.drain_outbox(&stop).await?;
    if kept > 0 {
        tracing::info!(kept, "sent the reports an earlier run kept");
    }
    let gpus = crate::gpu::discover();
    if let crate::gpu::Discovery::None(why) = &gpus {
        tracing::info!(%why, "no GPUs on this host");
    }
    let ctx = Ctx {
        gpus: std::sync::Arc::new(gpus),
        gpu_turn: Default::default(),
        link: link.clone(),
        docker: docker.clone(),
        engine: Default::default(),
        agent_id: spec.agent_id.clone(),
        config: config.clone(),
        stop: stop.clone(),
    };
    let mut sessions = SessionTasks {
        tasks: HashMap::new(),
        running: tokio::task::JoinSet::new(),
        stop: stop.clone(),
    };
    adopt::adopt_leftovers(&ctx, &mut sessions).await?;
    sessions
        .running
        .spawn(keep_alive(link.clone(), HEARTBEAT_EVERY, stop.clone()));
    if let Some(every) = config.image_refresh {
        let (link, docker, stop) = (link.clone(), docker.clone(), stop.clone());
        sessions
            .running
            .spawn(refresh_images(link, docker, spec, every, stop));
    }
    let app_turns = apps::Turns::default();
    let mut commands = Commands::new(link);
    while let Some(command) = commands.next(&stop).await {
        sessions.forget_ended();
        match command {
            Command::Assign { session_id, main } if !sessions.tasks.contains_key(&session_id) => {
                if main {
                    sessions.run(&ctx, session_id);
                } else {
                    sessions.run_secondary(&ctx, session_id);
                }
            }
            Command::Assign { .. } => {}
            Command::Stop { session_id } => {
                if let Some(token) = sessions.tasks.get(&session_id) {
                    token.cancel();
                }
            }
            Command::Commit {
                session_id,
                commit_id,
                owner,
                image,
            } => {
                let order = commit::CommitOrder {
                    session_id,
                    commit_id,
                    owner,
                    image,
                };
                sessions.running.spawn(commit::commit(ctx.clone(), order));
            }
            Command::RemoveImage { image, .. } => {
                let ctx = ctx.clone();
                sessions
                    .running
                    .spawn(async move { commit::remove_image(&ctx, &image).await });
            }
            Command::StartApp {
                session_id,
                start_id,
                app,
                port,
            } => {
                let (ctx, turns) = (ctx.clone(), app_turns.clone());
                sessions
                    .running
                    .spawn(apps::start(ctx, turns, session_id, start_id, app, port));
            }
        }
    }
    // Stopping the agent leaves its sessions' containers running; a restarted agent adopts them.
    sessions.running.abort_all();
    Ok(())
}

/// Reads the host's images every `every`; a change is a new registration, with the rest
/// unchanged, which is how the launcher learns that an image built or pulled here is offered.
async fn refresh_images(
    link: Link,
    docker: Docker,
    mut spec: AgentSpec,
    every: Duration,
    stop: CancellationToken,
) {
    let mut unreadable = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let read = local_images(&docker).await;
        // An engine out of reach is said once, not every round.
        if read.is_ok() {
            unreadable = false;
        }
        match read {
            Ok(host) if host.names != spec.images || host.apps != spec.image_apps => {
                tracing::info!(images = ?host.names, "the images on this host changed");
                spec.images = host.names;
                spec.image_apps = host.apps;
                if let Err(e) = register(&link, &spec, &stop).await {
                    tracing::warn!(error = %e, "the new images were not registered");
                }
            }
            Ok(_) => {}
            Err(e) if !unreadable => {
                unreadable = true;
                tracing::warn!(error = %e, "could not list the host's images; offering those last read");
            }
            Err(_) => {}
        }
    }
}
