//! The container runtime: turns a session placed on this agent into Docker containers and
//! back, through the Docker Engine API (bollard).
//!
//! The control plane assigns a session with a command; one task per session then owns its
//! container: it moves the session through PREPARING, (PULLING,) PREPARED and CREATING,
//! reports its kernels started (the control plane moves the session to RUNNING once every
//! kernel of it has), waits for the container to exit, sends its output as telemetry,
//! removes it (so the scratch of /home/work is gone), and reports how it ended. Containers
//! carry labels naming their session and agent, so an agent that starts again adopts the
//! containers of live sessions (its kernels of other agents' clusters included), removes the
//! others, and ends in ERROR the live sessions whose container is gone.
//!
//! The rooms, from the ground up; each imports only from the floors below it:
//! - [`spec`]: what each kernel's container is, its name and labels (pure, unit-tested).
//! - [`fence`]: each session's own bridge and subnet, and the host firewall that keeps
//!   sessions from the host's ports and the metadata address.
//! - `engine`: the engine's absence waited out, never taken for a session's end.
//! - `tty`: the terminals' tokens and which are served (read by every room through `ctx`).
//! - `ctx`: the settings ([`RuntimeConfig`]) and the context every task shares, with the
//!   calls they all make through it (a session's state asked, its moves reported, its
//!   containers removed).
//! - `keep`: output and usage kept while a container runs.
//! - `terminal`: a session's terminal, served by the agent (ttyd's protocol, a shell exec'd
//!   in the main kernel), on the door that `transfer` (files in and out of the main kernel
//!   as the engine's tar archives) and `execute` (code and commands run there) also serve.
//! - `apps`, `commit`: an app started in a running container; a container committed.
//! - `kernels`: the cluster network, GPUs, containers created, started and recorded.
//! - `folders`: what a session's folders hold, measured once it ended.
//! - `session`: one session's task, and how it ended (`outcome`, pure).
//! - `cluster`: kernels of another agent's multi-node session.
//! - `tasks`: the session tasks of the agent, one per session.
//! - `adopt`: what an earlier run left, taken back at start.
//! - this module, on top: the engine connection, the host's capacity and images, and the
//!   agent's loop.

use std::collections::BTreeMap;
use std::time::Duration;

use bollard::Docker;
use bus::protocol::Command;
use bus::Link;
use domain::apps::ServicePort;
use domain::payloads::ResourceSlots;
use tokio_util::sync::CancellationToken;

use crate::commands::Commands;
use crate::{keep_alive, register, AgentError, AgentSpec, Leave, Leaving, HEARTBEAT_EVERY};

mod adopt;
mod apps;
mod cluster;
mod commit;
mod ctx;
mod engine;
mod execute;
pub mod fence;
mod folders;
mod keep;
mod kernels;
mod pull;
pub mod registry;
mod session;
mod spares;
pub mod spec;
mod tasks;
mod terminal;
mod transfer;
mod tty;

use ctx::Ctx;
pub use ctx::RuntimeConfig;
use tasks::SessionTasks;

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

/// The cluster network scope of the agents of this engine, which the scheduler keeps a
/// multi-node cluster's kernels within:
/// - `swarm:<node ID>` where the engine is a node of a Docker swarm: every engine of the
///   swarm reaches the others' containers over an attachable overlay network. The swarm is
///   told by the lowest node ID of its managers, which its workers see too (only managers
///   see the swarm's own ID); adding or removing managers may change it, and agents tell
///   the new one when they next start.
/// - `engine:<its ID>` otherwise (`docker info`), which every agent of the same engine
///   reports, so a cluster (whose network is then a bridge of one engine) stays on it.
pub async fn network_scope(docker: &Docker) -> Result<String, bollard::errors::Error> {
    let info = docker.info().await?;
    if let Some(swarm) = info.swarm.as_ref().and_then(swarm_of) {
        return Ok(format!("swarm:{swarm}"));
    }
    let id = info.id.filter(|id| !id.is_empty());
    // An engine that tells no ID is told by its name.
    Ok(format!("engine:{}", id.or(info.name).unwrap_or_default()))
}

/// The swarm an engine is an active node of, by its managers' lowest node ID.
fn swarm_of(swarm: &bollard::models::SwarmInfo) -> Option<String> {
    if swarm.local_node_state != Some(bollard::models::LocalNodeState::ACTIVE) {
        return None;
    }
    swarm
        .remote_managers
        .iter()
        .flatten()
        .filter_map(|m| m.node_id.clone())
        .min()
}

/// Whether a network scope is a swarm's, whose clusters across agents get an overlay network.
pub fn is_swarm(scope: &str) -> bool {
    scope.starts_with("swarm:")
}

/// The images present on the host, and the apps those that declare some declare.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostImages {
    /// Every `repository:tag`, sorted.
    pub names: Vec<String>,
    /// Those of `names` that are no session image by their labels
    /// ([`domain::images::is_session_image`]), sorted.
    pub unlabelled: Vec<String>,
    pub apps: BTreeMap<String, Vec<ServicePort>>,
}

/// Every `repository:tag` present on the host, with its apps (an image whose service-ports
/// label cannot be read is offered without apps, and the label's fault is logged) and whether
/// its labels make it a session image.
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
        let session = domain::images::is_session_image(
            image.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        // The agent's own sandbox image is no session's.
        let tags = image.repo_tags.into_iter();
        for tag in tags.filter(|t| t != "<none>:<none>" && t != spares::SANDBOX_IMAGE) {
            if !apps.is_empty() {
                host.apps.insert(tag.clone(), apps.clone());
            }
            if !session {
                host.unlabelled.push(tag.clone());
            }
            host.names.push(tag);
        }
    }
    host.names.sort();
    host.names.dedup();
    host.unlabelled.sort();
    host.unlabelled.dedup();
    Ok(host)
}

/// The agent with its container runtime: registers, heartbeats, reconciles what it finds on
/// the host, then starts and stops sessions placed on it until `stop`, or until it is asked
/// to leave ([`leave`]).
pub(crate) async fn run(
    link: Link,
    docker: Docker,
    spec: AgentSpec,
    config: RuntimeConfig,
    gpus: crate::gpu::Discovery,
    stop: CancellationToken,
    leaving: Leaving,
) -> Result<(), AgentError> {
    let terminals = tty::Terminals::open(&config.data_dir, &spec.agent_id).map_err(|e| {
        AgentError::Runtime(format!(
            "the terminals' key under {}: {e}",
            config.data_dir.display()
        ))
    })?;
    // No session runs unfenced: the host's rules are put up (renewed) before any is taken.
    if config.fence.firewall {
        fence::install(&config.fence).await.map_err(|e| {
            AgentError::Runtime(format!(
                "the sessions' firewall (BERTH_SESSION_FIREWALL=off only where the host's own firewall fences sessions): {e}"
            ))
        })?;
    }
    register(&link, &spec, &stop).await?;
    let kept = link.drain_outbox(&stop).await?;
    if kept > 0 {
        tracing::info!(kept, "sent the reports an earlier run kept");
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
        starting: Default::default(),
        draining: Default::default(),
        terminals,
        swarm: spec.network_scope.as_deref().is_some_and(is_swarm),
        bridge_mtu: Default::default(),
        spares: Default::default(),
    };
    let mut sessions = SessionTasks::new();
    adopt::adopt_leftovers(&ctx, &mut sessions).await?;
    // The task that keeps spare bridges ready is the agent's own: aborted with it (the set is
    // dropped), or let finish the spare it is making when the agent stops.
    let spares_stop = stop.child_token();
    let mut spare_keeper = tokio::task::JoinSet::new();
    spare_keeper.spawn(spares::keep_ready(ctx.clone(), spares_stop.clone()));
    // Heartbeats and registrations end before a departure: a registration would undo it.
    let offering = stop.child_token();
    sessions
        .running
        .spawn(keep_alive(link.clone(), HEARTBEAT_EVERY, offering.clone()));
    if let Some(every) = config.image_refresh {
        let (link, docker, offering) = (link.clone(), docker.clone(), offering.clone());
        sessions
            .running
            .spawn(refresh_images(link, docker, spec, every, offering));
    }
    let app_turns = apps::Turns::default();
    let mut commands = Commands::new(link);
    while let Some(command) = commands.next(&leaving.asked).await {
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
            Command::Stop {
                session_id,
                placement,
            } => sessions.stop(session_id, placement),
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
    if let Some(how) = leaving.how().filter(|_| !stop.is_cancelled()) {
        offering.cancel();
        leave(&ctx, &mut sessions, &how).await;
    }
    // Stopping the agent leaves its sessions' containers running; a restarted agent adopts them.
    sessions.abort_all();
    // Its spares go, bridges and sandboxes (a restarted agent would remove them anyway), the
    // one being made once it is, for a few seconds at most: an engine out of reach does not
    // hold up the stop.
    spares_stop.cancel();
    let removed = async {
        while spare_keeper.join_next().await.is_some() {}
        for spare in &ctx.spares.drain_ready() {
            ctx::remove_spare(&ctx, &spare.network).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), removed).await;
    Ok(())
}

/// The agent leaves as `how` says, its commands no longer taken and its heartbeats ended:
/// it says it departs (nothing more is placed on it), ends its sessions first if asked
/// (waiting for their ends), lets a session whose containers are being started get them
/// started, and sends what its outbox holds. Each step gives up on the agent's stop, which
/// the host's bound on a departure cancels.
async fn leave(ctx: &Ctx, sessions: &mut SessionTasks, how: &Leave) {
    let stop = &ctx.stop;
    crate::depart(&ctx.link, &how.reason, stop).await;
    if how.end_sessions {
        ctx.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::info!(
            sessions = sessions.tasks.len(),
            "draining: ending this agent's sessions"
        );
        sessions.end_all(stop).await;
    }
    tokio::select! {
        _ = stop.cancelled() => return,
        _ = ctx.starting.write() => {}
    }
    // A task's report is kept in the outbox before it is sent: what the aborted tasks had
    // not got answered is sent now, and the rest waits there for the agent's return.
    sessions.shut_down().await;
    match ctx.link.drain_outbox(stop).await {
        Ok(sent) => tracing::info!(sent, "the outbox is sent; leaving"),
        Err(e) => tracing::warn!(error = %e, "the outbox was not all sent; it is sent on return"),
    }
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
            Ok(host)
                if host.names != spec.images
                    || host.apps != spec.image_apps
                    || host.unlabelled != spec.unlabelled_images =>
            {
                tracing::info!(images = ?host.names, "the images on this host changed");
                spec.images = host.names;
                spec.unlabelled_images = host.unlabelled;
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
