//! The container runtime: turns a session placed on this agent into Docker containers and
//! back, through the Docker Engine API (bollard).
//!
//! One task per session owns its container: it moves the session through PREPARING,
//! (PULLING,) PREPARED, CREATING and RUNNING, waits for the container to exit, keeps its
//! output in `session_logs`, removes it (so the scratch of /home/work is gone), and reports
//! how it ended. Containers carry labels naming their session and agent, so an agent that
//! starts again adopts the containers of live sessions (its kernels of other agents'
//! clusters included), removes the others, and ends in ERROR the live sessions whose
//! container is gone.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use bollard::container::{
    Config, CreateContainerOptions, ListContainersOptions, RemoveContainerOptions,
    StopContainerOptions, WaitContainerOptions,
};
use bollard::image::CreateImageOptions;
use bollard::models::{HostConfig, PortBinding};
use bollard::Docker;
use deadpool_postgres::Pool;
use events::aggregate::{fold, SessionState, StreamState};
use events::catalogue::{stream_id, Event};
use events::ledger::{self, LedgerError};
use events::payloads::*;
use events::store::ExpectedVersion;
use events::EventStore;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use crate::{heartbeat, register, report, AgentError, AgentSpec};

mod keep;
use keep::{sample_usage, save_logs, LogCursor};

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
    /// How often the agent looks for work.
    pub poll: Duration,
    /// How often the images offered are read again from the engine, so an image built or
    /// pulled on the host is offered without a restart; `None` when they were given fixed.
    pub image_refresh: Option<Duration>,
}

/// Connects to the local engine, agreeing on an API version it speaks.
pub async fn connect() -> Result<Docker, bollard::errors::Error> {
    Docker::connect_with_local_defaults()?
        .negotiate_version()
        .await
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

/// Every `repository:tag` present on the host.
pub async fn local_images(docker: &Docker) -> Result<Vec<String>, bollard::errors::Error> {
    let images = docker
        .list_images::<String>(Some(bollard::image::ListImagesOptions::default()))
        .await?;
    let mut tags: Vec<String> = images
        .into_iter()
        .flat_map(|i| i.repo_tags)
        .filter(|t| t != "<none>:<none>")
        .collect();
    tags.sort();
    tags.dedup();
    Ok(tags)
}

fn container_name(session_id: Uuid, kernel: u32) -> String {
    format!("berth-{}-{kernel}", session_id.simple())
}

#[derive(Clone)]
struct Ctx {
    gpus: std::sync::Arc<crate::gpu::Discovery>,
    /// Taken while GPUs are chosen and their containers created.
    gpu_turn: std::sync::Arc<tokio::sync::Mutex<()>>,
    pool: Pool,
    docker: Docker,
    agent_id: String,
    config: RuntimeConfig,
}

fn db(e: impl Into<LedgerError>) -> AgentError {
    AgentError::Ledger(e.into())
}

/// A session's state, and the trace its journey belongs to (its creation's traceparent).
async fn load(
    pool: &Pool,
    session_id: Uuid,
) -> Result<Option<(SessionState, Option<String>)>, AgentError> {
    let recorded = EventStore::new(pool.clone())
        .read_stream(&stream_id("session", session_id))
        .await
        .map_err(db)?;
    let traceparent = recorded
        .first()
        .and_then(|first| first.metadata.traceparent.clone());
    Ok(match fold(&recorded) {
        StreamState::Session(s) => Some((*s, traceparent)),
        _ => None,
    })
}

/// Moves the session, ignoring a refusal (it moved on meanwhile: terminated, forced, ...).
async fn moved(
    ctx: &Ctx,
    session_id: Uuid,
    to: SessionStatus,
    reason: Option<String>,
    exit_code: Option<i32>,
) -> bool {
    match report(&ctx.pool, &ctx.agent_id, session_id, to, reason, exit_code).await {
        Ok(_) => true,
        Err(e) => {
            tracing::info!(%session_id, ?to, error = %e, "session not moved");
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
    if let Err(e) = ctx.docker.remove_container(container, Some(options)).await {
        tracing::debug!(container, error = %e, "remove");
    }
}

/// Prepares, creates and starts the session's container; returns its name, or `None` when
/// the session ended on the way (the reason is recorded).
async fn start(ctx: &Ctx, state: &SessionState) -> Result<Option<String>, AgentError> {
    let request = &state.request;
    let id = request.session_id;
    if !moved(ctx, id, SessionStatus::Preparing, None, None).await {
        return Ok(None);
    }
    if ctx.docker.inspect_image(&request.image).await.is_err() {
        if !moved(ctx, id, SessionStatus::Pulling, None, None).await {
            return Ok(None);
        }
        let options = CreateImageOptions::<String> {
            from_image: request.image.clone(),
            ..Default::default()
        };
        let mut pull = ctx.docker.create_image(Some(options), None, None);
        let mut failure = None;
        while let Some(step) = pull.next().await {
            if let Err(e) = step {
                failure = Some(e.to_string());
                break;
            }
        }
        if let Some(reason) = failure {
            moved(
                ctx,
                id,
                SessionStatus::Error,
                Some(format!("pulling `{}` failed: {reason}", request.image)),
                None,
            )
            .await;
            return Ok(None);
        }
    }
    if !moved(ctx, id, SessionStatus::Prepared, None, None).await
        || !moved(ctx, id, SessionStatus::Creating, None, None).await
    {
        return Ok(None);
    }
    let names = match create_kernels(ctx, state).await {
        Ok(names) => names,
        Err(reason) => {
            moved(ctx, id, SessionStatus::Error, Some(reason), None).await;
            return Ok(None);
        }
    };
    let size = request.cluster_size.max(1);
    // A multi-node cluster is RUNNING once the other agents have started their kernels too.
    if (names.len() as u32) < size && !others_started(ctx, id, size).await {
        cleanup(ctx, id, &names, size).await;
        let reason = "the other agents of the cluster did not start their kernels within 120 s";
        moved(ctx, id, SessionStatus::Error, Some(reason.into()), None).await;
        return Ok(None);
    }
    if !moved(ctx, id, SessionStatus::Running, None, None).await {
        cleanup(ctx, id, &names, size).await;
        return Ok(None);
    }
    Ok(Some(container_name(id, 0)))
}

/// This agent's kernels of a multi-node cluster whose main kernel runs elsewhere: started when
/// the main agent creates its own, kept until the session ends, then removed.
async fn run_secondary(ctx: Ctx, id: Uuid, stop: CancellationToken) {
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
async fn watch_secondary(ctx: Ctx, id: Uuid, kernels: Vec<(u32, String)>, stop: CancellationToken) {
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
async fn others_started(ctx: &Ctx, id: Uuid, size: u32) -> bool {
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

/// What the containers on this host that may still run hold of each GPU, from their labels.
async fn gpus_held(ctx: &Ctx) -> Result<HashMap<String, u64>, String> {
    let filters = HashMap::from([
        ("label".to_string(), vec![LABEL_GPUS.to_string()]),
        (
            "status".to_string(),
            ["created", "running", "restarting", "paused"]
                .map(String::from)
                .to_vec(),
        ),
    ]);
    let containers = ctx
        .docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters,
            ..Default::default()
        }))
        .await
        .map_err(|e| format!("listing the containers that hold GPUs failed: {e}"))?;
    let mut held = HashMap::new();
    for label in containers
        .iter()
        .filter_map(|c| c.labels.as_ref()?.get(LABEL_GPUS))
    {
        crate::gpu::add_held(label, &mut held);
    }
    Ok(held)
}

/// Creates and starts this agent's kernels of a session, on the cluster's network, and
/// records them; the names of their containers (the main kernel's first, when it is here).
async fn create_kernels(ctx: &Ctx, state: &SessionState) -> Result<Vec<String>, String> {
    let request = &state.request;
    let id = request.session_id;

    let mut env: Vec<String> = request
        .environment
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !request.environment.contains_key("OMP_NUM_THREADS") {
        env.push(format!("OMP_NUM_THREADS={}", request.omp_num_threads));
    }
    env.push(format!("BERTH_SESSION_ID={id}"));
    env.push(format!("BERTH_SESSION_NAME={}", state.name));
    let mut binds = Vec::new();
    for folder in &request.mounts {
        let host = ctx
            .config
            .data_dir
            .join("folders")
            .join(request.owner.user_id.simple().to_string())
            .join(folder);
        std::fs::create_dir_all(&host).map_err(|e| format!("folder `{folder}`: {e}"))?;
        binds.push(format!("{}:/home/work/{folder}", host.display()));
    }
    let exposed: HashMap<String, HashMap<(), ()>> = request
        .preopen_ports
        .iter()
        .map(|p| (format!("{p}/tcp"), HashMap::new()))
        .collect();
    let bindings: HashMap<String, Option<Vec<PortBinding>>> = request
        .preopen_ports
        .iter()
        .map(|p| {
            (
                format!("{p}/tcp"),
                Some(vec![PortBinding {
                    host_ip: Some("0.0.0.0".into()),
                    host_port: Some(String::new()),
                }]),
            )
        })
        .collect();
    const IDLE: &str = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";
    // The main kernel runs the startup command (or idles until terminated); the others idle.
    let main_command = vec![
        "/bin/sh".to_string(),
        "-c".into(),
        request
            .startup_command
            .clone()
            .unwrap_or_else(|| IDLE.into()),
    ];
    // A cluster's kernels share a private network where each is known by its host name.
    let size = request.cluster_size.max(1);
    // The kernels placed on this agent (all of them unless a multi-node cluster spread them).
    let mine: Vec<u32> = if state.kernels.is_empty() {
        (0..size).collect()
    } else {
        (0..size)
            .filter(|k| {
                state
                    .kernels
                    .get(*k as usize)
                    .is_none_or(|p| p.agent_id == ctx.agent_id)
            })
            .collect()
    };
    let hosts: Vec<String> = (0..size)
        .map(|k| {
            if k == 0 {
                "main1".to_string()
            } else {
                format!("sub{k}")
            }
        })
        .collect();
    let network = (size > 1).then(|| network_name(id));
    if let Some(net) = &network {
        if mine.contains(&0) {
            // The main kernel's agent makes the network; the others wait for it.
            let options = bollard::network::CreateNetworkOptions {
                name: net.clone(),
                driver: "bridge".into(),
                check_duplicate: true,
                labels: HashMap::from([(LABEL_SESSION.to_string(), id.to_string())]),
                ..Default::default()
            };
            if let Err(e) = ctx.docker.create_network(options).await {
                if !e.to_string().contains("already exists") {
                    return Err(format!("creating the cluster network failed: {e}"));
                }
            }
        } else {
            let mut waited = 0;
            while ctx
                .docker
                .inspect_network::<String>(net, None)
                .await
                .is_err()
            {
                waited += 1;
                if waited > 300 {
                    return Err(format!("the cluster network `{net}` did not appear"));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        env.push(format!("BERTH_CLUSTER_SIZE={size}"));
        env.push(format!("BERTH_CLUSTER_HOSTS={}", hosts.join(",")));
    }
    // Choosing GPUs and creating the containers that hold them is one step per host, so two
    // sessions starting at once cannot both take the same free GPU.
    let wants_gpus = request.resources.gpu_milli > 0 && !ctx.gpus.gpus().is_empty();
    let _gpu_turn = if wants_gpus {
        Some(ctx.gpu_turn.lock().await)
    } else {
        None
    };
    let mut gpus_held = if wants_gpus {
        gpus_held(ctx).await?
    } else {
        HashMap::new()
    };
    let mut names = Vec::with_capacity(size as usize);
    for &k in &mine {
        let main = k == 0;
        let mut kernel_env = env.clone();
        let gpu = crate::gpu::assign(request.resources.gpu_milli, ctx.gpus.gpus(), &gpus_held);
        crate::gpu::add_held(&gpu.to_label(), &mut gpus_held);
        if let Some(percentage) = gpu.mps_percentage {
            kernel_env.push(format!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={percentage}"));
        }
        let device_requests = (!gpu.devices.is_empty()).then(|| {
            vec![bollard::models::DeviceRequest {
                driver: Some("nvidia".into()),
                device_ids: Some(gpu.device_ids()),
                capabilities: Some(vec![vec!["gpu".into()]]),
                ..Default::default()
            }]
        });
        if network.is_some() {
            kernel_env.push(format!(
                "BERTH_CLUSTER_ROLE={}",
                if main { "main" } else { "sub" }
            ));
            kernel_env.push(format!("BERTH_CLUSTER_IDX={k}"));
            kernel_env.push(format!("BERTH_CLUSTER_HOST={}", hosts[k as usize]));
        }
        let mut labels = HashMap::from([
            (LABEL_SESSION.to_string(), id.to_string()),
            (LABEL_AGENT.to_string(), ctx.agent_id.clone()),
            (LABEL_KERNEL.to_string(), k.to_string()),
        ]);
        if !gpu.devices.is_empty() {
            labels.insert(LABEL_GPUS.to_string(), gpu.to_label());
        }
        let networking_config = network
            .as_ref()
            .map(|net| bollard::container::NetworkingConfig {
                endpoints_config: HashMap::from([(
                    net.clone(),
                    bollard::models::EndpointSettings {
                        aliases: Some(vec![hosts[k as usize].clone()]),
                        ..Default::default()
                    },
                )]),
            });
        let config = Config {
            image: Some(request.image.clone()),
            cmd: Some(if main {
                main_command.clone()
            } else {
                vec!["/bin/sh".into(), "-c".into(), IDLE.into()]
            }),
            env: Some(kernel_env),
            labels: Some(labels),
            hostname: network.as_ref().map(|_| hosts[k as usize].clone()),
            exposed_ports: main.then(|| exposed.clone()),
            working_dir: Some("/home/work".into()),
            networking_config,
            host_config: Some(HostConfig {
                nano_cpus: Some(request.resources.cpu_milli as i64 * 1_000_000),
                memory: Some(request.resources.memory_bytes as i64),
                memory_swap: Some(request.resources.memory_bytes as i64),
                shm_size: Some(request.shared_memory_bytes as i64),
                binds: Some(binds.clone()),
                port_bindings: main.then(|| bindings.clone()),
                device_requests,
                network_mode: network.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let name = container_name(id, k);
        remove(ctx, &name).await; // a leftover of an earlier try
        let options = CreateContainerOptions {
            name: name.clone(),
            platform: None,
        };
        if let Err(e) = ctx.docker.create_container(Some(options), config).await {
            remove_all(ctx, &names).await;
            return Err(format!("creating the container of kernel {k} failed: {e}"));
        }
        names.push(name);
    }
    // The others first, so the main kernel finds them when it starts.
    for name in names.iter().skip(1).chain(names.iter().take(1)) {
        if let Err(e) = ctx.docker.start_container::<String>(name, None).await {
            remove_all(ctx, &names).await;
            return Err(format!("starting the container failed: {e}"));
        }
    }
    let metadata = events::trace::metadata(&format!("agent:{}", ctx.agent_id), None);
    let mut started = Vec::with_capacity(names.len());
    for (&k, name) in mine.iter().zip(&names) {
        let inspected = ctx.docker.inspect_container(name, None).await.ok();
        let ports = inspected
            .as_ref()
            .and_then(|c| c.network_settings.as_ref())
            .and_then(|n| n.ports.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(port, bindings)| {
                let container = port.split('/').next()?.parse().ok()?;
                let host = bindings?.first()?.host_port.as_ref()?.parse().ok()?;
                Some(PublishedPort { container, host })
            })
            .collect();
        let hostname = inspected
            .as_ref()
            .and_then(|c| c.config.as_ref())
            .and_then(|c| c.hostname.clone());
        started.push(Event::KernelStarted(KernelStarted {
            session_id: id,
            kernel: k,
            agent_id: ctx.agent_id.clone(),
            container_id: inspected.and_then(|c| c.id).unwrap_or_default(),
            ports,
            hostname,
        }));
    }
    let stream = stream_id("session", id);
    let recorded = ledger::record_now(
        &ctx.pool,
        &stream,
        ExpectedVersion::Any,
        &started,
        &metadata,
    )
    .await;
    if let Err(e) = recorded {
        remove_all(ctx, &names).await;
        return Err(format!("recording the kernels failed: {e}"));
    }
    Ok(names)
}

/// Removes the containers this agent created (and only those: other agents' kernels of the
/// same cluster may share this engine).
async fn remove_all(ctx: &Ctx, names: &[String]) {
    for name in names {
        remove(ctx, name).await;
    }
}

fn network_name(session_id: Uuid) -> String {
    format!("berth-{}", session_id.simple())
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

/// Waits for the container to exit; its exit code.
async fn exit_code(ctx: &Ctx, container: &str) -> i64 {
    let mut wait = ctx
        .docker
        .wait_container(container, None::<WaitContainerOptions<String>>);
    match wait.next().await {
        Some(Ok(r)) => r.status_code,
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
        _ => -1,
    }
}

/// Why a container stopped running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Exited,
    Stopped,
    TimedOut,
}

/// Owns one session's container from start (or adoption) to removal, in a span that joins
/// the session's journey: every status it records carries the trace of the session's
/// creation.
async fn run_session(
    ctx: Ctx,
    session_id: Uuid,
    adopted: Option<String>,
    stop: CancellationToken,
) -> Result<(), AgentError> {
    let Some((state, traceparent)) = load(&ctx.pool, session_id).await? else {
        return Ok(());
    };
    let span = tracing::info_span!("session", session = %session_id, agent = %ctx.agent_id);
    events::trace::follow(&span, traceparent.as_deref());
    own_session(ctx, state, adopted, stop)
        .instrument(span)
        .await
}

async fn own_session(
    ctx: Ctx,
    state: SessionState,
    adopted: Option<String>,
    stop: CancellationToken,
) -> Result<(), AgentError> {
    let session_id = state.request.session_id;
    let container = match adopted {
        Some(c) => c,
        None => match start(&ctx, &state).await {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(()),
            Err(e) => {
                // Whatever went wrong, the session does not stay in an intermediate status.
                moved(
                    &ctx,
                    session_id,
                    SessionStatus::Error,
                    Some(format!("starting failed: {e}")),
                    None,
                )
                .await;
                remove(&ctx, &container_name(session_id, 0)).await;
                return Err(e);
            }
        },
    };
    let timeout = state
        .request
        .batch_timeout_secs
        .filter(|_| state.request.session_type == SessionType::Batch)
        .map(Duration::from_secs);
    let started = tokio::time::Instant::now();
    // The output so far is kept every second while the container runs.
    let keeping = CancellationToken::new();
    let log_cursor = std::sync::Arc::new(tokio::sync::Mutex::new(LogCursor::default()));
    {
        let (ctx, container, keeping) = (ctx.clone(), container.clone(), keeping.clone());
        let cursor = log_cursor.clone();
        tokio::spawn(async move {
            let mut tick = 0u64;
            // A first sample at once: a short batch session is gone before the first tick.
            let mut previous = sample_usage(&ctx, session_id, &container, None).await;
            while !keeping.is_cancelled() {
                tokio::select! {
                    _ = keeping.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        save_logs(&ctx, session_id, 0, &container, false, &cursor).await;
                        if tick.is_multiple_of(5) {
                            previous = sample_usage(&ctx, session_id, &container, previous).await;
                        }
                        tick += 1;
                    }
                }
            }
        });
    }
    let _keeper_guard = keeping.clone().drop_guard();
    loop {
        let deadline = timeout.map(|t| started + t);
        let (code, why) = tokio::select! {
            code = exit_code(&ctx, &container) => (code, Ended::Exited),
            _ = stop.cancelled() => {
                // Docker 20.10 can deadlock a container's state when `logs` races `stop`:
                // the keeper is stopped before the container is.
                keeping.cancel();
                let grace = ctx.config.stop_grace_secs;
                let _ = ctx.docker.stop_container(&container, Some(StopContainerOptions { t: grace })).await;
                (exit_code(&ctx, &container).await, Ended::Stopped)
            }
            _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                keeping.cancel();
                let _ = ctx.docker.stop_container(&container, Some(StopContainerOptions { t: 2 })).await;
                (exit_code(&ctx, &container).await, Ended::TimedOut)
            }
        };
        save_logs(&ctx, session_id, 0, &container, true, &log_cursor).await;
        let now = load(&ctx.pool, session_id).await?.map(|(s, _)| s.status);
        let code32 = i32::try_from(code).ok();
        match (why, now) {
            (_, None) => {}
            (_, Some(s)) if events::lifecycle::is_terminal(s) => {}
            (Ended::Stopped, _) | (_, Some(SessionStatus::Terminating)) => {
                moved(
                    &ctx,
                    session_id,
                    SessionStatus::Terminated,
                    Some("stopped on request".into()),
                    code32,
                )
                .await;
            }
            (Ended::TimedOut, _) => {
                let secs = timeout.unwrap_or_default().as_secs();
                moved(
                    &ctx,
                    session_id,
                    SessionStatus::Terminated,
                    Some(format!(
                        "batch timeout: still running after {secs} s, stopped"
                    )),
                    code32,
                )
                .await;
            }
            (Ended::Exited, _) if state.request.session_type == SessionType::Inference => {
                let reason =
                    format!("the container exited unexpectedly with code {code}; restarting");
                if !moved(
                    &ctx,
                    session_id,
                    SessionStatus::Restarting,
                    Some(reason),
                    code32,
                )
                .await
                {
                    // It moved on meanwhile (asked to stop): finish as asked.
                    let now = load(&ctx.pool, session_id).await?.map(|(s, _)| s.status);
                    if now == Some(SessionStatus::Terminating) {
                        let reason = Some("stopped on request".to_string());
                        moved(&ctx, session_id, SessionStatus::Terminated, reason, code32).await;
                    }
                } else if ctx
                    .docker
                    .start_container::<String>(&container, None)
                    .await
                    .is_ok()
                    && moved(&ctx, session_id, SessionStatus::Running, None, None).await
                {
                    continue;
                } else if load(&ctx.pool, session_id).await?.map(|(s, _)| s.status)
                    == Some(SessionStatus::Terminating)
                {
                    let reason = Some("stopped on request".to_string());
                    moved(&ctx, session_id, SessionStatus::Terminated, reason, code32).await;
                } else {
                    let reason = Some(format!("restart after exit code {code} failed"));
                    moved(&ctx, session_id, SessionStatus::Error, reason, code32).await;
                }
            }
            (Ended::Exited, _) if state.request.session_type == SessionType::Batch => {
                let reason = if code == 0 {
                    "the startup command succeeded (exit code 0)".to_string()
                } else {
                    format!("the startup command failed with exit code {code}")
                };
                moved(
                    &ctx,
                    session_id,
                    SessionStatus::Terminated,
                    Some(reason),
                    code32,
                )
                .await;
            }
            (Ended::Exited, _) => {
                moved(
                    &ctx,
                    session_id,
                    SessionStatus::Terminated,
                    Some(format!("the container exited with code {code}")),
                    code32,
                )
                .await;
            }
        }
        let size = state.request.cluster_size.max(1);
        for k in 1..size {
            let name = container_name(session_id, k);
            let _ = ctx
                .docker
                .stop_container(&name, Some(StopContainerOptions { t: 1 }))
                .await;
            save_logs(&ctx, session_id, k, &name, true, &Default::default()).await;
        }
        remove(&ctx, &container).await;
        cleanup(&ctx, session_id, &[], size).await;
        return Ok(());
    }
}

/// The agent with its container runtime: registers, heartbeats, reconciles what it finds on
/// the host, then starts and stops sessions placed on it until `stop`.
pub async fn run(
    pool: Pool,
    docker: Docker,
    mut spec: AgentSpec,
    config: RuntimeConfig,
    stop: CancellationToken,
) -> Result<(), AgentError> {
    register(&pool, &spec).await?;
    let gpus = crate::gpu::discover();
    if let crate::gpu::Discovery::None(why) = &gpus {
        tracing::info!(%why, "no GPUs on this host");
    }
    let ctx = Ctx {
        gpus: std::sync::Arc::new(gpus),
        gpu_turn: Default::default(),
        pool: pool.clone(),
        docker: docker.clone(),
        agent_id: spec.agent_id.clone(),
        config: config.clone(),
    };
    let mut tasks: HashMap<Uuid, CancellationToken> = HashMap::new();
    // Session tasks live and die with the agent (dropping the set aborts them), as they would
    // with its process.
    let mut running = tokio::task::JoinSet::new();

    // What a previous run of this agent left behind.
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("{LABEL_AGENT}={}", spec.agent_id)],
    )]);
    let found = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters,
            ..Default::default()
        }))
        .await
        .map_err(|e| AgentError::Runtime(format!("listing containers: {e}")))?;
    let client = pool.get().await.map_err(db)?;
    let live: HashMap<Uuid, String> = crate::db::holding_sessions(&client, &spec.agent_id).await?;
    // Sessions of other agents with kernels here (multi-node clusters), still going.
    let live_elsewhere: HashSet<Uuid> =
        crate::db::secondaries_going(&client, &spec.agent_id).await?;
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
                let token = stop.child_token();
                tasks.insert(id, token.clone());
                tracing::info!(session = %id, container = %name, "adopting a live session's container");
                let ctx = ctx.clone();
                running.spawn(async move {
                    if let Err(e) = run_session(ctx, id, Some(name), token).await {
                        tracing::warn!(session = %id, error = %e, "session task failed");
                    }
                });
            }
            _ => {
                tracing::info!(container = %name, "removing a container without a live session");
                remove(&ctx, &name).await;
            }
        }
    }
    for (id, kernels) in adopted_elsewhere {
        tracing::info!(session = %id, ?kernels, "adopting kernels of another agent's session");
        let token = stop.child_token();
        tasks.insert(id, token.clone());
        running.spawn(watch_secondary(ctx.clone(), id, kernels, token));
    }
    for (id, status) in &live {
        if status != "SCHEDULED" && !adopted.contains(id) {
            moved(&ctx, *id, SessionStatus::Error,
                Some(format!("the agent `{}` restarted and the session's container was gone (it was {status})", spec.agent_id)), None).await;
            for (_, name) in others.iter().filter(|(s, _)| s == id) {
                remove(&ctx, name).await;
            }
            let _ = docker.remove_network(&network_name(*id)).await;
        }
    }

    let mut last_beat = tokio::time::Instant::now();
    let mut images_read = tokio::time::Instant::now();
    while !stop.is_cancelled() {
        if last_beat.elapsed() > Duration::from_secs(5) {
            heartbeat(&pool, &spec.agent_id).await?;
            last_beat = tokio::time::Instant::now();
        }
        if config
            .image_refresh
            .is_some_and(|every| images_read.elapsed() >= every)
        {
            images_read = tokio::time::Instant::now();
            match local_images(&docker).await {
                // A new registration, with the rest unchanged, is how the launcher learns.
                Ok(images) if images != spec.images => {
                    tracing::info!(?images, "the images on this host changed");
                    spec.images = images;
                    register(&pool, &spec).await?;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "could not list the host's images"),
            }
        }
        let tracked: Vec<Uuid> = tasks.keys().copied().collect();
        let rows = crate::db::work(&pool, &spec.agent_id, &tracked).await?;
        for (id, status) in rows {
            match (status.as_str(), tasks.get(&id)) {
                ("SCHEDULED", None) => {
                    let token = stop.child_token();
                    tasks.insert(id, token.clone());
                    let ctx = ctx.clone();
                    running.spawn(async move {
                        if let Err(e) = run_session(ctx, id, None, token).await {
                            tracing::warn!(session = %id, error = %e, "session task failed");
                        }
                    });
                }
                ("SECONDARY", None) => {
                    let token = stop.child_token();
                    tasks.insert(id, token.clone());
                    running.spawn(run_secondary(ctx.clone(), id, token));
                }
                ("TERMINATING" | "TERMINATED" | "ERROR" | "CANCELLED", Some(token)) => {
                    token.cancel()
                }
                _ => {}
            }
        }
        // Forget tasks whose sessions ended (their token was cancelled or they finished).
        tasks.retain(|_, token| !token.is_cancelled());
        while running.try_join_next().is_some() {}
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(config.poll) => {}
        }
    }
    // Stopping the agent leaves its sessions' containers running; a restarted agent adopts them.
    running.abort_all();
    Ok(())
}
