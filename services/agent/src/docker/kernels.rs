//! Creating a session's kernels on this host: the cluster network, the GPUs each kernel
//! gets, the containers as [`super::spec`] describes them, started, and reported started
//! with their published ports.

use std::collections::HashMap;
use std::time::Duration;

use bollard::container::{CreateContainerOptions, ListContainersOptions};
use bus::protocol::{Answer, Fact, StartedKernel};
use chrono::{DateTime, Utc};
use domain::aggregate::SessionState;
use domain::payloads::{PublishedPort, SessionStatus};

use super::ctx::{engine_time, remove, remove_all, remove_network, run_of, Ctx};
use super::spec::{
    self, container_name, LABEL_AGENT, LABEL_GPUS, LABEL_SESSION, LABEL_TERMINAL_PORT,
};

/// What the containers that may still run hold of each GPU, from their labels: every
/// container of the engine for devices the engine attaches (another agent on this host shares
/// them), this agent's own for simulated ones (each agent's are its own, whatever their names).
async fn gpus_held(ctx: &Ctx) -> Result<HashMap<String, u64>, String> {
    let mut labels = vec![LABEL_GPUS.to_string()];
    if !ctx.config.gpus.source.attachable() {
        labels.push(format!("{LABEL_AGENT}={}", ctx.agent_id));
    }
    let filters = HashMap::from([
        ("label".to_string(), labels),
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
/// reports them started; the names of their containers (the main kernel's first, when it is
/// here) and the session's status after the report. `terminal_port`, the port the agent
/// serves the session's terminal on, is labelled on the main kernel and reported as the
/// terminal's host port.
///
/// The containers are created while `go_ahead` is awaited (the report of the moves to
/// CREATING, whose round trip through the control plane would otherwise come first) and
/// started only when it says yes: no user code runs for a session the control plane did not
/// move on. `None` when it said no; what was created is removed.
pub(super) async fn create_kernels(
    ctx: &Ctx,
    state: &SessionState,
    terminal_port: Option<u16>,
    go_ahead: impl std::future::Future<Output = bool>,
) -> Result<Option<(Vec<String>, SessionStatus)>, String> {
    let request = &state.request;
    let id = request.session_id;
    let mut layout = spec::layout(state, &ctx.agent_id);
    if layout.cluster() {
        return create_and_start(ctx, state, &layout, false, terminal_port, go_ahead).await;
    }
    // A single kernel runs on a bridge made ahead when one is ready ([`super::spares`]), in
    // the namespace of the sandbox on it unless it publishes ports.
    let spare = ctx.spares.take(id);
    if let Some(spare) = &spare {
        layout.network = spare.network.clone();
        layout.sandbox = spare
            .sandbox
            .clone()
            .filter(|_| !spec::publishes_ports(state));
    }
    let mut started = create_and_start(
        ctx,
        state,
        &layout,
        spare.is_some(),
        terminal_port,
        go_ahead,
    )
    .await;
    // A spare removed under the agent (`docker network prune` removes every network no
    // container is on; a sandbox removed by hand): the engine refuses the start, and the
    // session's own network is made instead (its move to CREATING went through already).
    if let (Some(spare), Err(reason)) = (&spare, &started) {
        if spare_gone(reason, &spare.network, spare.sandbox.as_deref()) {
            tracing::info!(session = %id, network = %spare.network, "the spare was gone; making the session's own network");
            ctx.spares.release(id);
            super::ctx::remove_spare(ctx, &spare.network).await;
            layout.network = spec::network_name(id);
            layout.sandbox = None;
            let go_ahead = std::future::ready(true);
            started = create_and_start(ctx, state, &layout, false, terminal_port, go_ahead).await;
        }
    }
    // A start that did not go through leaves no network behind (its own, or the spare).
    if !matches!(started, Ok(Some(_))) {
        remove_network(ctx, id).await;
    }
    // Spares are made again once the start is through, not beside it: the one it took, or
    // those an engine out of reach kept from being made.
    ctx.spares.make_missing();
    started
}

/// Whether a start failed because spare `network`, or its sandbox (by its id), was not there:
/// the engine names what it did not find (`network berth-… not found`, `No such container:
/// <id>`), or refuses to join a sandbox that no longer runs (only a kernel on a sandbox joins
/// another container's namespace).
fn spare_gone(reason: &str, network: &str, sandbox: Option<&str>) -> bool {
    let missing = reason.contains("not found") || reason.contains("No such container");
    let named = reason.contains(network) || sandbox.is_some_and(|id| reason.contains(id));
    (named && missing) || reason.contains("cannot join network of a non running container")
}

/// [`create_kernels`] on `layout`, its network a `spare` made ahead or not.
async fn create_and_start(
    ctx: &Ctx,
    state: &SessionState,
    layout: &spec::Layout,
    spare: bool,
    terminal_port: Option<u16>,
    go_ahead: impl std::future::Future<Output = bool>,
) -> Result<Option<(Vec<String>, SessionStatus)>, String> {
    let request = &state.request;
    let id = request.session_id;
    // Choosing GPUs and creating the containers that hold them is one step per host, so two
    // sessions starting at once cannot both take the same free GPU.
    let wants_gpus = request.resources.gpu_milli > 0;
    if wants_gpus && ctx.gpus.gpus().is_empty() {
        // Never a GPU session without GPUs: it would run on the CPU and say nothing.
        return Err(format!(
            "the session asks for {} GPUs, and this host has none ({})",
            request.resources.gpu_milli as f64 / 1000.0,
            ctx.gpus.describe()
        ));
    }
    let _gpu_turn = if wants_gpus {
        Some(ctx.gpu_turn.lock().await)
    } else {
        None
    };
    let creating = create_containers(ctx, state, layout, spare, wants_gpus, terminal_port);
    let (created, go) = tokio::join!(creating, go_ahead);
    let created = match (created, go) {
        (Ok(created), true) => created,
        (Ok(created), false) => {
            remove_all(ctx, &names_of(&created)).await;
            return Ok(None);
        }
        (Err(_), false) => return Ok(None),
        (Err(reason), true) => return Err(reason),
    };
    let names = names_of(&created);
    // A container cannot have started before it was asked to: the time its run is counted
    // from, by this host's clock, where the engine is not asked again.
    let asked = Utc::now();
    if let Err(e) = start_all(ctx, &names).await {
        remove_all(ctx, &names).await;
        return Err(format!("starting the container failed: {e}"));
    }
    // An interactive session's key is written and kept before its start is reported, beside
    // the reading of its containers: a session that runs has the key its owner downloads.
    let keyed = async {
        if layout.mine.contains(&0) && request.session_type.is_attended() {
            super::apps::install_ssh_key(ctx, id).await;
        }
    };
    let (started, ()) = tokio::join!(started_kernels(ctx, &layout.mine, &created, asked), keyed);
    let fact = Fact::KernelsStarted { kernels: started };
    match ctx.link.report(id, fact, &ctx.stop).await {
        Ok(Answer::Recorded { status }) => Ok(Some((names, status))),
        answered => {
            remove_all(ctx, &names).await;
            Err(format!(
                "the kernels started were not recorded: {answered:?}"
            ))
        }
    }
}

/// Starts containers `names`, the others first, so the main kernel (the first) finds them
/// when it starts.
async fn start_all(ctx: &Ctx, names: &[String]) -> Result<(), bollard::errors::Error> {
    for name in names.iter().skip(1).chain(names.iter().take(1)) {
        // On a swarm, another engine's agent may still be making the cluster's overlay: a
        // start that does not find it yet waits for it, up to 30 s.
        let mut tries = 0;
        let started = loop {
            let started = ctx
                .patiently(|| ctx.docker.start_container::<String>(name, None))
                .await;
            match started {
                Err(e) if ctx.swarm && tries < 300 && overlay_not_there_yet(&e) => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                started => break started,
            }
        };
        match started {
            // 304: started already (a start the engine's absence cut had gone through).
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 304, ..
            }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether a start failed for a network the swarm does not know (yet).
fn overlay_not_there_yet(e: &bollard::errors::Error) -> bool {
    let e = e.to_string();
    e.contains("network") && e.contains("not found")
}

/// A kernel's container as its creation described it: enough to report it started without
/// asking the engine again, unless it publishes ports (the engine picks their host ports when
/// it starts the container) or has the agent's terminal.
struct Created {
    name: String,
    id: String,
    /// The host name it was given, on a cluster's network; else the engine's default.
    hostname: Option<String>,
    publishes_ports: bool,
}

fn names_of(created: &[Created]) -> Vec<String> {
    created.iter().map(|c| c.name.clone()).collect()
}

/// How many subnets of the pool a session's network tries before it gives up (each try
/// another block: another session, or another agent of the engine, may hold one).
const SUBNET_TRIES: u32 = 16;

/// The session's own network ([`super::fence`]), with traffic between its containers off
/// unless it is a cluster (whose kernels are one tenant's). One the session made already (a
/// second try, or another agent's kernels of its cluster on this engine) is taken as it is:
/// the engine's refusal of the name says so, without a look before every start.
async fn create_network(
    ctx: &Ctx,
    state: &SessionState,
    layout: &spec::Layout,
) -> Result<(), String> {
    let id = state.request.session_id;
    let labels = HashMap::from([
        (LABEL_SESSION.to_string(), id.to_string()),
        (LABEL_AGENT.to_string(), ctx.agent_id.clone()),
    ]);
    make_bridge(
        ctx,
        &layout.network,
        id,
        layout.hosts.len() as u32,
        layout.cluster(),
        labels,
    )
    .await
}

/// Makes bridge network `name` for `hosts` containers: its interface named and its subnet
/// picked from `id` ([`super::fence`]), on the agent's pool, inter-container traffic on only
/// when `icc`, the MTU of the engine's default bridge (the engine gives its own networks the
/// host's, not the daemon's setting), labelled `labels`. One of that name made already is
/// taken as it is.
pub(super) async fn make_bridge(
    ctx: &Ctx,
    name: &str,
    id: uuid::Uuid,
    hosts: u32,
    icc: bool,
    labels: HashMap<String, String>,
) -> Result<(), String> {
    let mtu = ctx
        .bridge_mtu
        .get_or_try_init(|| async {
            let bridge = ctx.docker.inspect_network::<String>("bridge", None).await?;
            Ok::<_, bollard::errors::Error>(
                bridge
                    .options
                    .and_then(|o| o.get("com.docker.network.driver.mtu").cloned()),
            )
        })
        .await
        .ok()
        .cloned()
        .flatten();
    let mut options = HashMap::from([
        (
            "com.docker.network.bridge.name".to_string(),
            super::fence::bridge_name(id),
        ),
        (
            "com.docker.network.bridge.enable_icc".to_string(),
            icc.to_string(),
        ),
    ]);
    if let Some(mtu) = mtu {
        options.insert("com.docker.network.driver.mtu".to_string(), mtu);
    }
    let mut last = String::new();
    for attempt in 0..SUBNET_TRIES {
        let subnet = super::fence::subnet(ctx.config.fence.subnets, id, hosts, attempt);
        let create = bollard::network::CreateNetworkOptions {
            name: name.to_owned(),
            driver: "bridge".into(),
            check_duplicate: true,
            options: options.clone(),
            ipam: bollard::models::Ipam {
                config: Some(vec![bollard::models::IpamConfig {
                    subnet: Some(subnet.to_string()),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            labels: labels.clone(),
            ..Default::default()
        };
        match ctx.docker.create_network(create).await {
            Ok(_) => return Ok(()),
            Err(e) if e.to_string().contains("already exists") => return Ok(()),
            // Another network holds the block: the next one.
            Err(e) if e.to_string().contains("overlap") => last = e.to_string(),
            Err(e) => {
                // Made meanwhile by another try for this session (the engine then refuses a
                // second bridge of the same name): take the one that is there.
                if network_exists(ctx, name).await {
                    return Ok(());
                }
                // Gone again by the time it was looked for: a leftover of this session that
                // a restarted agent's clean-up was removing. Once it is, the name is free.
                if e.to_string().contains("same bridge name") {
                    last = e.to_string();
                    tokio::time::sleep(std::time::Duration::from_millis(
                        200 * (u64::from(attempt) + 1),
                    ))
                    .await;
                    continue;
                }
                return Err(format!("creating the session's network failed: {e}"));
            }
        }
    }
    Err(format!(
        "creating the session's network failed {SUBNET_TRIES} times (no free subnet in {}, or its bridge's name held): {last}",
        ctx.config.fence.subnets
    ))
}

/// The overlay network of a cluster on several engines of a swarm: attachable (the kernels
/// are plain containers, not swarm services), on a subnet the swarm hands out (one for the
/// whole swarm, so no two engines' choices collide), with the engine's MTU for overlays. Its
/// kernels are one tenant's; no other container is on it. Only a manager's engine may make
/// it: on a worker's the engine's refusal is the session's reason. One made already is taken.
async fn create_overlay(
    ctx: &Ctx,
    state: &SessionState,
    layout: &spec::Layout,
) -> Result<(), String> {
    let id = state.request.session_id;
    let create = bollard::network::CreateNetworkOptions {
        name: layout.network.clone(),
        driver: "overlay".into(),
        attachable: true,
        check_duplicate: true,
        labels: HashMap::from([
            (LABEL_SESSION.to_string(), id.to_string()),
            (LABEL_AGENT.to_string(), ctx.agent_id.clone()),
        ]),
        ..Default::default()
    };
    match ctx.docker.create_network(create).await {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("already exists") => Ok(()),
        Err(e) => Err(format!(
            "creating the cluster's overlay network failed (the main kernel's engine must be a swarm manager): {e}"
        )),
    }
}

/// Whether the engine has a network named `name`.
async fn network_exists(ctx: &Ctx, name: &str) -> bool {
    ctx.docker
        .inspect_network::<String>(name, None)
        .await
        .is_ok()
}

/// This agent's kernels' folders, session network (unless it is a `spare` made ahead) and
/// containers, created, not started.
async fn create_containers(
    ctx: &Ctx,
    state: &SessionState,
    layout: &spec::Layout,
    spare: bool,
    wants_gpus: bool,
    terminal_port: Option<u16>,
) -> Result<Vec<Created>, String> {
    let request = &state.request;
    let id = request.session_id;
    let mut binds = Vec::new();
    for (host, bind) in spec::folders(state, &ctx.config.data_dir, &ctx.config.volumes)? {
        std::fs::create_dir_all(&host).map_err(|e| format!("folder `{}`: {e}", host.display()))?;
        binds.push(bind);
    }
    if let Some(runtime) = &ctx.config.runtime {
        binds.push(format!("{}:{}:ro", runtime.display(), spec::RUNTIME_MOUNT));
    }
    let net = &layout.network;
    // A cluster on agents of several engines of a swarm: an overlay, which workers' engines
    // do not see until a kernel of theirs joins it (their start waits for it instead).
    let overlay = ctx.swarm && layout.spans_agents;
    if spare {
        // Made ahead, and there.
    } else if layout.mine.contains(&0) {
        // The main kernel's agent makes the network; the others wait for it.
        if overlay {
            create_overlay(ctx, state, layout).await?;
        } else {
            create_network(ctx, state, layout).await?;
        }
    } else if !overlay {
        let mut waited = 0;
        while !network_exists(ctx, net).await {
            waited += 1;
            if waited > 300 {
                return Err(format!("the cluster network `{net}` did not appear"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut held = if wants_gpus {
        gpus_held(ctx).await?
    } else {
        HashMap::new()
    };
    let mut created: Vec<Created> = Vec::with_capacity(layout.mine.len());
    for &k in &layout.mine {
        let gpu = crate::gpu::assign(
            request.resources.gpu_milli,
            ctx.gpus.gpus(),
            &held,
            ctx.config.gpus.shares_per_device,
            ctx.config.gpus.source.attachable(),
        )
        .through_mps(ctx.config.gpus.mps_pipe_dir.as_deref());
        crate::gpu::add_held(&gpu.to_label(), &mut held);
        let mut config = spec::kernel_config(
            state,
            &ctx.agent_id,
            layout,
            k,
            &binds,
            &gpu,
            &ctx.config.publish_address,
        );
        let terminal = terminal_port.filter(|_| k == 0);
        config.labels.get_or_insert_with(HashMap::new).insert(
            LABEL_TERMINAL_PORT.to_owned(),
            terminal.map(|p| p.to_string()).unwrap_or_default(),
        );
        let name = container_name(id, k);
        let options = CreateContainerOptions {
            name: name.clone(),
            platform: None,
        };
        // A leftover of an earlier try is removed first; so, when the engine went away, is
        // a create that went through before the connection was cut. A name still taken after
        // the removal is a create an earlier run of this agent sent and died before it was
        // answered: the engine holds the name from the create's start, but the container can
        // be removed only once the create ends (seconds on a loaded engine). So a taken name
        // is removed again, a little later each time, for up to about 10 s.
        let create = || async {
            remove(ctx, &name).await;
            ctx.docker
                .create_container(Some(options.clone()), config.clone())
                .await
        };
        let mut answer = ctx.patiently(create).await;
        for wait_ms in [100, 200, 400, 800, 1_600, 3_200, 3_200] {
            if !matches!(
                answer,
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 409,
                    ..
                })
            ) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
            answer = ctx.patiently(create).await;
        }
        match answer {
            Ok(answer) => created.push(Created {
                name,
                id: answer.id,
                // A kernel in a sandbox's namespace has the sandbox's host name.
                hostname: config.hostname.clone().or_else(|| {
                    let sandbox = layout.sandbox.as_deref()?;
                    sandbox.get(..12).map(str::to_owned)
                }),
                publishes_ports: terminal.is_some()
                    || config
                        .host_config
                        .as_ref()
                        .and_then(|h| h.port_bindings.as_ref())
                        .is_some_and(|bindings| !bindings.is_empty()),
            }),
            Err(e) => {
                remove_all(ctx, &names_of(&created)).await;
                return Err(format!("creating the container of kernel {k} failed: {e}"));
            }
        }
    }
    Ok(created)
}

/// This agent's kernels `mine`, just started in containers `created`, as the control plane
/// records them. Only a container that publishes ports is inspected (for the host ports the
/// engine chose); another is described from its creation, its host name the engine's
/// default, its id's first 12 characters, its start the moment it was `asked` to start.
async fn started_kernels(
    ctx: &Ctx,
    mine: &[u32],
    created: &[Created],
    asked: DateTime<Utc>,
) -> Vec<StartedKernel> {
    let mut started = Vec::with_capacity(created.len());
    for (&k, kernel) in mine.iter().zip(created) {
        if kernel.publishes_ports {
            let name = std::slice::from_ref(&kernel.name);
            let inspected = inspect_started(ctx, &[k], name).await;
            started.extend(inspected.into_iter().map(|kernel| StartedKernel {
                started_at: Some(asked),
                ..kernel
            }));
        } else {
            started.push(StartedKernel {
                kernel: k,
                container_id: kernel.id.clone(),
                ports: Vec::new(),
                hostname: kernel
                    .hostname
                    .clone()
                    .or_else(|| kernel.id.get(..12).map(str::to_owned)),
                address: Some(ctx.config.publish_address.clone()),
                started_at: Some(asked),
            });
        }
    }
    started
}

/// This agent's kernels `mine`, started in containers `names`, as the control plane records
/// them: container ids, published ports, host names, and, for when each started, the engine's
/// time of its creation. That is a bound its run cannot start before: the engine stamps
/// `State.StartedAt` only after the process started (measured up to 0.3 s later on a
/// loaded host, which would make a session's elapsed time shorter than its command ran), and
/// an agent starts a container as soon as it is created and the control plane agreed.
async fn inspect_started(ctx: &Ctx, mine: &[u32], names: &[String]) -> Vec<StartedKernel> {
    let mut started = Vec::with_capacity(names.len());
    for (&k, name) in mine.iter().zip(names) {
        let inspected = ctx
            .patiently(|| ctx.docker.inspect_container(name, None))
            .await
            .ok();
        let mut ports: Vec<PublishedPort> = inspected
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
        // The terminal is the agent's, on the port its label names.
        let terminal = inspected
            .as_ref()
            .and_then(|c| c.config.as_ref()?.labels.as_ref()?.get(LABEL_TERMINAL_PORT))
            .and_then(|port| port.parse().ok());
        if let Some(host) = terminal {
            ports.push(PublishedPort {
                container: domain::apps::TERMINAL_PORT,
                host,
            });
        }
        let hostname = inspected
            .as_ref()
            .and_then(|c| c.config.as_ref())
            .and_then(|c| c.hostname.clone());
        let started_at = inspected
            .as_ref()
            .and_then(|c| c.created.as_deref())
            .and_then(engine_time);
        started.push(StartedKernel {
            kernel: k,
            container_id: inspected.and_then(|c| c.id).unwrap_or_default(),
            ports,
            hostname,
            address: Some(ctx.config.publish_address.clone()),
            started_at,
        });
    }
    started
}

/// Reports the kernels of a session an earlier run of this agent created and did not get to
/// report (the session is still CREATING), with when each started (see
/// [`inspect_started`]): the containers ran, so the session reaches RUNNING (at its
/// containers' start) before it ends.
/// A container the earlier run created but was stopped before it started (its move to
/// CREATING was recorded: it may run) is started first; one that ran and exited is not
/// started again. Whether the control plane recorded them.
pub(super) async fn report_adopted(ctx: &Ctx, state: &SessionState) -> bool {
    let layout = spec::layout(state, &ctx.agent_id);
    let names: Vec<String> = layout
        .mine
        .iter()
        .map(|&k| container_name(state.request.session_id, k))
        .collect();
    let mut never_started = Vec::new();
    for name in &names {
        if run_of(ctx, name).await.is_some_and(|run| run.created) {
            never_started.push(name.clone());
        }
    }
    let asked = Utc::now();
    if !never_started.is_empty() {
        tracing::info!(session = %state.request.session_id, containers = ?never_started, "starting adopted containers that never started");
        if let Err(e) = start_all(ctx, &never_started).await {
            tracing::warn!(session = %state.request.session_id, error = %e, "an adopted container did not start");
        }
    }
    let mut started = inspect_started(ctx, &layout.mine, &names).await;
    // Those started here ran from now on.
    for (kernel, name) in started.iter_mut().zip(&names) {
        if never_started.contains(name) {
            kernel.started_at = Some(asked);
        }
    }
    let fact = Fact::KernelsStarted { kernels: started };
    matches!(
        ctx.link
            .report(state.request.session_id, fact, &ctx.stop)
            .await,
        Ok(Answer::Recorded { .. })
    )
}

#[cfg(test)]
mod tests {
    use super::spare_gone;

    #[test]
    fn a_start_refused_for_a_spare_or_its_sandbox_not_there_is_told_from_other_failures() {
        let (net, sandbox) = ("berth-0f3a", Some("c6963412056672d5d748"));
        for reason in [
            "creating the container failed: Docker responded with status code 404: network berth-0f3a not found",
            "starting the container failed: Docker responded with status code 404: No such container: c6963412056672d5d748",
            "starting the container failed: Docker responded with status code 500: cannot join network of a non running container: c6963412056672d5",
        ] {
            assert!(spare_gone(reason, net, sandbox), "{reason}");
        }
        for reason in [
            "creating the container failed: Docker responded with status code 404: No such image: busybox:9",
            "creating the container failed: Docker responded with status code 404: network berth-other not found",
        ] {
            assert!(!spare_gone(reason, net, sandbox), "{reason}");
        }
    }
}
