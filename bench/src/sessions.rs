//! `berth bench schedule`, `gateway`, `start` and `wake`: the figures of sessions.
//!
//! - schedule: 1,000 registered agents and 10,000 pending sessions. First the scheduling core
//!   alone (placement decisions per second, in memory), then end to end: scheduler passes
//!   until the queue is empty, every decision committed with its events and history.
//! - gateway: session-detail reads per second and their latency percentiles, with concurrent
//!   clients on the same machine.
//! - start: an in-process launch (no HTTP, authentication or key lookup) to RUNNING through
//!   the Docker runtime (RUNNING as the relayed event stream shows it to a client), next to
//!   the Engine API's bare create + start (the like-for-like baseline: what the agent calls)
//!   and `docker run -d` (which also pays a CLI process spawn); then a burst of the same batch
//!   sessions next to as many parallel `docker run -d`, each burst on an engine as quiet as
//!   the other's.
//! - wake: create to placement, the scheduler woken by the bus next to an in-process poke.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::Utc;
use deadpool_postgres::Pool;
use events::catalogue::Event;
use events::payloads::*;
use events::store::ExpectedVersion;
use scheduler::core::{self, AgentView, GroupRules, OwnerLoad, PendingSession, Snapshot};
use uuid::Uuid;

use crate::db;

const GIB: u64 = 1 << 30;

pub(crate) fn agent_capacity() -> ResourceSlots {
    ResourceSlots {
        cpu_milli: 16_000,
        memory_bytes: 64 * GIB,
        gpu_milli: 0,
    }
}

fn session_size() -> ResourceSlots {
    ResourceSlots {
        cpu_milli: 1_000,
        memory_bytes: 2 * GIB,
        gpu_milli: 0,
    }
}

/// The scheduling core alone on an in-memory snapshot, its group under `policy`: ten owners'
/// sessions interleaved, all of which fit.
fn core_figures(policy: QueuePolicy, agents: usize, sessions: usize, rounds: usize) -> f64 {
    let owners: Vec<Uuid> = (0..10).map(|_| Uuid::now_v7()).collect();
    let snapshot = Snapshot {
        group: GroupRules {
            name: "default".into(),
            queue_policy: policy,
            agent_selection: AgentSelection::Concentrated,
            max_attempts: 5,
            skip_after: 3,
            pending_timeout_secs: 3600,
            fair_share: Default::default(),
            starve_after_secs: 0,
        },
        agents: (0..agents)
            .map(|i| AgentView {
                agent_id: format!("agent{i:04}"),
                capacity: agent_capacity(),
                used: ResourceSlots::default(),
                unheard_for: Some(Duration::from_secs(1)),
                network_scope: "engine:bench".into(),
                volumes: Default::default(),
            })
            .collect(),
        silent_after: events::aggregate::SILENT_AFTER,
        queue: (0..sessions)
            .map(|i| PendingSession {
                session_id: Uuid::now_v7(),
                version: 0,
                owner: owners[i % owners.len()],
                per_kernel: session_size(),
                cluster_mode: ClusterMode::SingleNode,
                cluster_size: 1,
                wanted_agent: None,
                starts_at: None,
                queued_at: Utc::now(),
                attempts: 0,
                last_result: None,
                last_error_code: None,
                priority: 0,
                project: None,
                volumes: Default::default(),
                image: "berth/python:3.12".into(),
                image_on: Default::default(),
            })
            .collect(),
        held: HashMap::new(),
        usage: Default::default(),
        owners: owners
            .iter()
            .map(|o| {
                (
                    *o,
                    OwnerLoad {
                        policy: "default".into(),
                        sessions: 0,
                        used: ResourceSlots::default(),
                        max_sessions: 1_000_000,
                        max_total: ResourceSlots {
                            cpu_milli: u64::MAX / 4,
                            memory_bytes: u64::MAX / 4,
                            gpu_milli: 0,
                        },
                    },
                )
            })
            .collect::<HashMap<_, _>>(),
        now: Utc::now(),
        capacity_grew: true,
    };
    let mut best = Duration::MAX;
    for _ in 0..rounds {
        let mut s = snapshot.clone();
        let started = Instant::now();
        let decisions = core::plan(&mut s);
        let took = started.elapsed();
        assert_eq!(
            decisions.iter().filter(|d| d.placement.is_some()).count(),
            sessions
        );
        best = best.min(took);
    }
    let rate = sessions as f64 / best.as_secs_f64();
    println!(
        "scheduling core ({}): {sessions} pending on {agents} agents placed in {:.1} ms (best of {rounds}) = {rate:.0} decisions/s",
        policy.as_str(),
        best.as_secs_f64() * 1000.0
    );
    rate
}

/// Registers the agents and records the pending sessions through the launcher.
/// The default policy with room for any number of sessions.
pub(crate) async fn fill_policy(pool: &Pool) -> anyhow::Result<()> {
    launcher::access::set_policy(
        pool,
        ResourcePolicySet {
            name: "default".into(),
            max_concurrent_sessions: 1_000_000,
            max_total: ResourceSlots {
                cpu_milli: 1 << 40,
                memory_bytes: 1 << 60,
                gpu_milli: 0,
            },
            max_session_lifetime_secs: None,
            max_custom_images: None,
            max_session_priority: None,
            max_pids: None,
            max_log_bytes: None,
            max_folder_bytes: None,
        },
    )
    .await?;
    Ok(())
}

pub(crate) async fn fill(pool: &Pool, agents: usize, sessions: usize) -> anyhow::Result<()> {
    launcher::access::bootstrap(pool).await?;
    fill_policy(pool).await?;
    register_agents(pool, agents, agent_capacity()).await?;
    let mut users = Vec::new();
    for u in 0..10 {
        let (_, key) = launcher::access::create_user(
            pool,
            &format!("bench{u}@berth.local"),
            Role::User,
            "default",
            &["default".into()],
        )
        .await?;
        let client = pool.get().await?;
        users.push(
            events::ledger::key_owner(&client, &key)
                .await?
                .expect("the key was just issued"),
        );
    }
    let started = Instant::now();
    let per_request = 100;
    for r in 0..sessions.div_ceil(per_request) {
        let request = launcher::launch::CreateSession {
            image: "berth/shell:latest".into(),
            resources: launcher::launch::ResourceRequest {
                cpu: Some(1.0),
                memory: Some(launcher::launch::ByteSize::Bytes(2 * GIB)),
                ..Default::default()
            },
            count: Some(per_request.min(sessions - r * per_request) as u32),
            ..Default::default()
        };
        launcher::launch::launch(pool, &users[r % users.len()], request).await?;
    }
    let took = started.elapsed().as_secs_f64();
    println!("launcher: {sessions} sessions requested in {took:.2} s = {:.0} sessions/s (100 per request)", sessions as f64 / took);
    Ok(())
}

/// Registers `agents` agents of `capacity` in the `default` group, in one transaction; their
/// ids.
pub(crate) async fn register_agents(
    pool: &Pool,
    agents: usize,
    capacity: ResourceSlots,
) -> anyhow::Result<Vec<String>> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let metadata = events::trace::metadata("bench", None);
    let mut ids = Vec::with_capacity(agents);
    for i in 0..agents {
        let id = format!("agent{i:04}");
        let event = Event::AgentRegistered(AgentRegistered {
            unlabelled_images: Vec::new(),
            agent_id: id.clone(),
            resource_group: "default".into(),
            capacity,
            images: vec!["berth/shell:latest".into()],
            address: None,
            image_apps: Default::default(),
            network_scope: None,
            volumes: Default::default(),
        });
        events::ledger::record(
            &tx,
            &format!("agent-{id}"),
            ExpectedVersion::Any,
            &[event],
            &metadata,
        )
        .await?;
        ids.push(id);
    }
    tx.commit().await?;
    Ok(ids)
}

/// The relay publishing the bench database's log on NATS, as in service, on a stream of the
/// bench's own: the NATS client, JetStream, and the stream's topology.
pub(crate) async fn relay_on_bus(
    nats_url: &str,
    url: &str,
    pool: &Pool,
    stop: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<(
    async_nats::Client,
    async_nats::jetstream::Context,
    events::relay::Topology,
)> {
    let nats = bus::link::connect_as_url_says(nats_url).await?;
    let js = async_nats::jetstream::new(nats.clone());
    let topology = events::relay::Topology {
        stream: format!("BENCH_{}", std::process::id()),
        prefix: format!("bench{}.evt", std::process::id()),
    };
    tokio::spawn(events::relay::run(
        pool.clone(),
        url.to_owned(),
        js.clone(),
        topology.clone(),
        Default::default(),
        stop.clone(),
    ));
    Ok((nats, js, topology))
}

/// Admits a bench's agent into `default` with room for whatever it offers.
pub(crate) async fn admit_for_bench(pool: &Pool, agent_id: &str) -> anyhow::Result<String> {
    let admission = recorder::admission::Admission {
        agent_id: agent_id.into(),
        resource_group: "default".into(),
        max_capacity: ResourceSlots {
            cpu_milli: u64::MAX,
            memory_bytes: u64::MAX,
            gpu_milli: u64::MAX,
        },
    };
    Ok(recorder::admission::admit(pool, &admission, "bench").await?)
}

/// What a simulated bench agent offers: `berth/shell` alone.
pub(crate) fn shell_image() -> agent::docker::HostImages {
    agent::docker::HostImages {
        names: vec!["berth/shell:latest".into()],
        ..Default::default()
    }
}

/// The Docker engine a bench's agent runs on, and the images on its host.
pub(crate) struct BenchEngine {
    pub(crate) docker: bollard::Docker,
    pub(crate) images: agent::docker::HostImages,
    /// The shared volumes its host mounts, for its agents to offer.
    pub(crate) volumes: std::collections::BTreeMap<String, std::path::PathBuf>,
    /// How many fenced bridges its agents keep made ahead (`BERTH_SESSION_SPARE_NETWORKS`).
    pub(crate) spare_networks: usize,
    /// berth's runtime, lent to its agents' containers as `infra/up.sh` lends it (and so a
    /// sandbox on each spare bridge, [`agent::docker`]'s spares).
    pub(crate) runtime: Option<std::path::PathBuf>,
}

/// The local engine, whose host must hold `image` (`infra/images.sh` builds it).
pub(crate) async fn bench_engine(image: &str) -> anyhow::Result<BenchEngine> {
    let docker = agent::docker::connect().await?;
    holding(docker, image, "run infra/images.sh first").await
}

/// The engine `docker` with its images, which must hold `image` (else `lacking` says why).
async fn holding(
    docker: bollard::Docker,
    image: &str,
    lacking: &str,
) -> anyhow::Result<BenchEngine> {
    let images = agent::docker::local_images(&docker).await?;
    anyhow::ensure!(images.names.iter().any(|i| i == image), "{lacking}");
    Ok(BenchEngine {
        docker,
        images,
        volumes: Default::default(),
        spare_networks: agent::docker::fence::NetworkFence::default().spares,
        runtime: Some(berth_runtime().await?),
    })
}

/// berth's runtime ([`testkit::berth_runtime`]), made off the async threads.
async fn berth_runtime() -> anyhow::Result<std::path::PathBuf> {
    tokio::task::spawn_blocking(testkit::berth_runtime)
        .await?
        .map_err(anyhow::Error::msg)
}

/// Admits and starts a Docker agent `agent_id` for a bench, through the agent's one start,
/// over `nats` on `subjects`, until `stop`: it offers `capacity` and the engine's images,
/// publishes ports on loopback, gives a stopping container a second, samples usage every
/// 5 s, and keeps its folders and outbox in a temporary directory of its own.
pub(crate) async fn bench_docker_agent(
    pool: &Pool,
    agent_id: &str,
    capacity: ResourceSlots,
    engine: &BenchEngine,
    nats: async_nats::Client,
    subjects: bus::Subjects,
    stop: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<agent::host::AgentHost> {
    use agent::host::{HostConfig, Nats, Offered, Runtime};
    admit_for_bench(pool, agent_id).await?;
    let data = std::env::temp_dir().join(format!("berth-bench-{agent_id}"));
    std::fs::create_dir_all(&data)?;
    let config = HostConfig {
        agent_id: agent_id.into(),
        resource_group: "default".into(),
        offer: Offered::fixed(capacity, engine.images.clone()),
        nats: Nats::Client(nats),
        subjects,
        outbox: agent::host::outbox_in(&data, agent_id),
        runtime: Runtime::Docker {
            engine: engine.docker.clone(),
            config: agent::docker::RuntimeConfig {
                data_dir: data,
                stop_grace_secs: 1,
                image_refresh: None,
                usage_every: Duration::from_secs(5),
                registry: None,
                volumes: engine.volumes.clone(),
                publish_address: "127.0.0.1".into(),
                gpus: agent::gpu::GpuConfig::nvml(),
                fence: agent::docker::fence::NetworkFence {
                    spares: engine.spare_networks,
                    ..Default::default()
                },
                runtime: engine.runtime.clone(),
            },
        },
    };
    Ok(agent::host::start(config, stop.clone()).await?)
}

/// The agents' side of the control plane (recorder, dispatcher, telemetry sink) on
/// subjects of this bench's own; those subjects.
pub(crate) fn recorder_on_bus(
    nats: &async_nats::Client,
    pool: &Pool,
    topology: &events::relay::Topology,
    stop: &tokio_util::sync::CancellationToken,
) -> bus::Subjects {
    let id = std::process::id();
    let subjects = bus::Subjects {
        root: format!("bench{id}"),
        commands_stream: format!("BENCH_CMDS_{id}"),
        telemetry_stream: format!("BENCH_TEL_{id}"),
    };
    tokio::spawn(recorder::run(
        nats.clone(),
        pool.clone(),
        subjects.clone(),
        topology.clone(),
        stop.clone(),
    ));
    subjects
}

/// A scheduler woken as in service, by the events on `topology`'s subjects; its wake-up,
/// for a bench that also pokes it in process.
pub(crate) fn woken_scheduler(
    pool: &Pool,
    nats: async_nats::Client,
    topology: &events::relay::Topology,
    config: scheduler::run::SchedulerConfig,
    stop: &tokio_util::sync::CancellationToken,
) -> Arc<tokio::sync::Notify> {
    let wake = Arc::new(tokio::sync::Notify::new());
    tokio::spawn(scheduler::wake::follow(
        nats,
        pool.clone(),
        topology.clone(),
        wake.clone(),
        stop.clone(),
    ));
    let scheduler = scheduler::run::Scheduler::new(pool.clone(), config);
    tokio::spawn(scheduler.run(wake.clone(), stop.clone()));
    wake
}

/// A superadmin who launches the bench's sessions.
pub(crate) async fn superadmin(
    pool: &Pool,
    email: &str,
) -> anyhow::Result<events::ledger::KeyOwner> {
    let (_, key) = launcher::access::create_user(
        pool,
        email,
        Role::Superadmin,
        "default",
        &["default".into()],
    )
    .await?;
    let client = pool.get().await?;
    Ok(events::ledger::key_owner(&client, &key)
        .await?
        .expect("just issued"))
}

/// `count` interactive `berth/shell` sessions of 0.25 cores and 64 MiB.
pub(crate) fn small_shell(count: u32) -> launcher::launch::CreateSession {
    launcher::launch::CreateSession {
        image: "berth/shell:latest".into(),
        resources: launcher::launch::ResourceRequest {
            cpu: Some(0.25),
            memory: Some(launcher::launch::ByteSize::Bytes(64 << 20)),
            ..Default::default()
        },
        count: Some(count),
        ..Default::default()
    }
}

/// `count` batch `berth/shell` sessions of 0.25 cores and 64 MiB running the command the
/// start bench's plain containers run: the same container on both sides. (An interactive
/// session also publishes its SSH server's port, which costs the engine a `docker-proxy`.)
pub(crate) fn sleeping_batch(count: u32) -> launcher::launch::CreateSession {
    launcher::launch::CreateSession {
        session_type: Some(SessionType::Batch),
        startup_command: Some(SLEEPER.into()),
        ..small_shell(count)
    }
}

/// Ends session `id` at once.
pub(crate) async fn end_session(pool: &Pool, id: Uuid) -> anyhow::Result<()> {
    let metadata = events::trace::metadata("bench", None);
    events::lifecycle::command(pool, id, &metadata, |s| {
        s.terminate(true, "bench over".into())
    })
    .await?;
    Ok(())
}

/// `docker run -d` of the container the start bench compares with.
async fn docker_run_d(name: &str) -> anyhow::Result<std::process::ExitStatus> {
    Ok(tokio::process::Command::new("docker")
        .args([
            "run",
            "-d",
            "--name",
            name,
            "--cpus",
            "0.25",
            "-m",
            "64m",
            "--label",
            "ai.berth.bench=1",
            "berth/shell:latest",
            "sh",
            "-c",
            SLEEPER,
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .await?)
}

/// The subnet of the fenced baseline's network: outside berth's own pool for sessions
/// (10.213.0.0/16 by default), so the bench's network never takes a session's block.
const FENCED_SUBNET: &str = "10.254.254.0/28";

/// What the compared containers run: sleep until stopped.
const SLEEPER: &str = "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done";

/// The same container through the Engine API alone: create, then start.
async fn bare_create_and_start(docker: &bollard::Docker, name: &str) -> anyhow::Result<()> {
    bare_create_and_start_on(docker, name, None).await
}

/// [`bare_create_and_start`] on the network `network` when given.
async fn bare_create_and_start_on(
    docker: &bollard::Docker,
    name: &str,
    network: Option<&str>,
) -> anyhow::Result<()> {
    let config = bollard::container::Config {
        image: Some("berth/shell:latest".to_string()),
        cmd: Some(vec!["sh".into(), "-c".into(), SLEEPER.into()]),
        labels: Some(HashMap::from([(
            "ai.berth.bench".to_string(),
            "1".to_string(),
        )])),
        host_config: Some(bollard::models::HostConfig {
            nano_cpus: Some(250_000_000),
            memory: Some(64 << 20),
            network_mode: network.map(str::to_owned),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = bollard::container::CreateContainerOptions {
        name: name.to_string(),
        platform: None,
    };
    docker.create_container(Some(options), config).await?;
    docker.start_container::<String>(name, None).await?;
    Ok(())
}

/// [`bare_create_and_start`] on a network of the container's own, made first as berth's
/// agent makes each session's (a bridge with traffic between its containers off, on a subnet
/// of its own: the fence every session now has), the network's making timed with the rest.
/// Returns the network's name, for [`remove_bench_network`] once the container is removed.
async fn bare_fenced_create_and_start(
    docker: &bollard::Docker,
    name: &str,
    subnet: &str,
) -> anyhow::Result<String> {
    let network = format!("{name}-net");
    let create = bollard::network::CreateNetworkOptions {
        name: network.clone(),
        driver: "bridge".into(),
        check_duplicate: true,
        options: HashMap::from([(
            "com.docker.network.bridge.enable_icc".to_string(),
            "false".to_string(),
        )]),
        ipam: bollard::models::Ipam {
            config: Some(vec![bollard::models::IpamConfig {
                subnet: Some(subnet.to_owned()),
                ..Default::default()
            }]),
            ..Default::default()
        },
        labels: HashMap::from([("ai.berth.bench".to_string(), "1".to_string())]),
        ..Default::default()
    };
    docker.create_network(create).await?;
    bare_create_and_start_on(docker, name, Some(&network)).await?;
    Ok(network)
}

/// A network made as [`bare_fenced_create_and_start`] makes it, and a container `{name}-ns`
/// started on it, whose namespace [`bare_create_and_start`]'s container joins (as a kernel
/// joins a spare's sandbox): the network and the sandbox made first, untimed. Only the join's
/// create and start are timed; the network's name, to remove.
async fn bare_joined_create_and_start(
    docker: &bollard::Docker,
    name: &str,
    subnet: &str,
) -> anyhow::Result<(Duration, String)> {
    let sandbox = format!("{name}-ns");
    let network = bare_fenced_create_and_start(docker, &sandbox, subnet).await?;
    let started = Instant::now();
    bare_create_and_start_on(docker, name, Some(&format!("container:{sandbox}"))).await?;
    let took = started.elapsed();
    remove_bench_container(docker, name).await;
    remove_bench_container(docker, &sandbox).await;
    Ok((took, network))
}

/// Whether session `id`'s main kernel runs in a spare's sandbox's network namespace.
async fn joined_a_sandbox(docker: &bollard::Docker, id: Uuid) -> bool {
    let name = format!("berth-{}-0", id.simple());
    let Ok(inspected) = docker.inspect_container(&name, None).await else {
        return false;
    };
    inspected
        .host_config
        .and_then(|h| h.network_mode)
        .is_some_and(|mode| mode.starts_with("container:"))
}

async fn remove_bench_network(docker: &bollard::Docker, network: &str) {
    let _ = docker.remove_network(network).await;
}

async fn remove_bench_container(docker: &bollard::Docker, name: &str) {
    let options = bollard::container::RemoveContainerOptions {
        force: true,
        ..Default::default()
    };
    let _ = docker.remove_container(name, Some(options)).await;
}

/// The value at quantile `q` of `sorted`.
pub(crate) fn percentile<T: Copy>(sorted: &[T], q: f64) -> T {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// The scheduling core under `fifo` and `drf` side by side, on the same snapshot.
pub fn core_policies(agents: usize, sessions: usize) {
    let fifo = core_figures(QueuePolicy::Fifo, agents, sessions, 5);
    let drf = core_figures(QueuePolicy::Drf, agents, sessions, 5);
    println!("drf decides at {:.0}% of fifo's rate", drf / fifo * 100.0);
}

pub async fn schedule(
    url: &str,
    agents: usize,
    sessions: usize,
    core_only: bool,
) -> anyhow::Result<()> {
    core_policies(agents, sessions);
    if core_only {
        return Ok(());
    }
    let pool = events::store::pool(url, 16)?;
    berth::app::migrate(&pool).await?;
    fill(&pool, agents, sessions).await?;
    let mut scheduler = scheduler::run::Scheduler::new(
        pool.clone(),
        scheduler::run::SchedulerConfig::new(Duration::from_secs(1)),
    );
    let started = Instant::now();
    let mut placed = 0;
    let mut passes = 0;
    while placed < sessions {
        let pass = scheduler.pass().await?;
        passes += 1;
        placed += pass.placed;
        anyhow::ensure!(
            pass.placed > 0,
            "a pass placed nothing with {} left",
            sessions - placed
        );
    }
    let took = started.elapsed().as_secs_f64();
    let client = pool.get().await?;
    let written: i64 = db::count_events(
        &client,
        &[
            "SchedulingAttempted",
            "SessionScheduled",
            "SessionStatusChanged",
        ],
    )
    .await?;
    println!(
        "end to end: {placed} sessions scheduled in {took:.2} s over {passes} passes = {:.0} sessions/s ({written} events committed with the ledger)",
        placed as f64 / took
    );
    // What it costs an operator to check that the ledger is still the log's fold.
    let started = Instant::now();
    let replay = events::ledger::replay(&pool).await?;
    let took = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        replay.equal(),
        "the ledger differs from its fold: {:?}",
        replay.differences
    );
    println!(
        "ledger replay: {} events folded into {} tables and compared in {took:.2} s = {:.0} events/s; equal",
        replay.events,
        replay.tables,
        replay.events as f64 / took
    );
    Ok(())
}

pub async fn gateway(
    nats_url: &str,
    url: &str,
    sessions: usize,
    seconds: u64,
    clients: usize,
    cache: bool,
) -> anyhow::Result<()> {
    let bench = GatewayBench::prepare(nats_url, url, sessions).await?;
    // Without NATS the gateway keeps no detail cache: every read is a projection query.
    let follow = cache.then(|| bench.nats.clone());
    let state = gateway::AppState::new(bench.pool.clone(), follow, bench.topology.clone());
    let address = bench.serve(state).await?;
    let mut all = bench
        .load(address, clients, Duration::from_secs(seconds))
        .await?;
    bench.finish().await?;
    all.sort_unstable();
    let measured = seconds.saturating_sub(1).max(1) as f64;
    let at = |q: f64| percentile(&all, q).as_secs_f64() * 1000.0;
    println!(
        "gateway session detail ({}): {} requests in {measured:.0} s = {:.0} req/s with {clients} clients; p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        if cache { "detail cache on" } else { "no cache" },
        all.len(),
        all.len() as f64 / measured,
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    Ok(())
}

/// `berth bench metrics`: the session-detail reads of `berth bench gateway` against two
/// gateways over the same state in one process, one measuring every request and serving
/// `/metrics` (scraped every second meanwhile), one built with metrics off, in alternating
/// rounds so that neither gains from going second, after a round each that fills the detail
/// cache they share. The recorder is installed for the whole
/// run (a global recorder cannot be taken back); nothing on the off gateway's request path
/// records a metric, so its rounds are what `BERTH_METRICS=off` serves.
pub async fn metrics(
    nats_url: &str,
    url: &str,
    sessions: usize,
    seconds: u64,
    rounds: usize,
    clients: usize,
) -> anyhow::Result<()> {
    let bench = GatewayBench::prepare(nats_url, url, sessions).await?;
    let handle = berth::metrics::install().context("a metrics recorder of another kind")?;
    let off = gateway::AppState::new(
        bench.pool.clone(),
        Some(bench.nats.clone()),
        bench.topology.clone(),
    );
    let on = off.clone().with_metrics(berth::metrics::renderer(handle));
    let (off, on) = (bench.serve(off).await?, bench.serve(on).await?);
    let scraper = {
        let stop = bench.stop.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut scraped = 0usize;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                let body = http.get(format!("http://{on}/metrics")).send().await?;
                anyhow::ensure!(body.status().is_success(), "/metrics {}", body.status());
                body.bytes().await?;
                scraped += 1;
            }
            anyhow::Ok(scraped)
        })
    };
    let phase = Duration::from_secs(seconds);
    // The two share one detail cache: a round each, not counted, fills it for both.
    for address in [off, on] {
        bench.load(address, clients, phase).await?;
    }
    let (mut off_all, mut on_all) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which goes first, so warming and a neighbour's load fall on both.
        let order = if round % 2 == 0 { [off, on] } else { [on, off] };
        for address in order {
            let latencies = bench.load(address, clients, phase).await?;
            if address == on {
                on_all.extend(latencies);
            } else {
                off_all.extend(latencies);
            }
        }
    }
    bench.stop.cancel();
    let scraped = scraper.await??;
    bench.finish().await?;
    let measured = (seconds.saturating_sub(1).max(1) as usize * rounds) as f64;
    let line = |what: &str, all: &mut Vec<Duration>| {
        all.sort_unstable();
        let at = |q: f64| percentile(all, q).as_secs_f64() * 1000.0;
        let rate = all.len() as f64 / measured;
        println!(
            "{what}: {:.0} req/s with {clients} clients; p50 {:.2} ms, p99 {:.2} ms",
            rate,
            at(0.5),
            at(0.99)
        );
        rate
    };
    println!(
        "berth bench metrics: session-detail reads, {rounds} rounds of {seconds} s each way, alternating"
    );
    let off_rate = line("metrics off", &mut off_all);
    let on_rate = line("metrics on (scraped every second)", &mut on_all);
    println!(
        "metrics on serve {:.1}% of metrics off's requests per second ({scraped} scrapes)",
        100.0 * on_rate / off_rate
    );
    Ok(())
}

/// What the gateway benchmarks read: sessions (10,000 by default) placed and projected, a
/// superadmin's key, and the relay on the bus so the detail cache follows the session events.
struct GatewayBench {
    pool: Pool,
    ids: Arc<Vec<Uuid>>,
    key: String,
    nats: async_nats::Client,
    js: async_nats::jetstream::Context,
    topology: events::relay::Topology,
    stop: tokio_util::sync::CancellationToken,
}

impl GatewayBench {
    async fn prepare(nats_url: &str, url: &str, sessions: usize) -> anyhow::Result<GatewayBench> {
        anyhow::ensure!(
            sessions > 0,
            "--sessions: the reads need at least one session"
        );
        let pool = events::store::pool(url, 32)?;
        berth::app::migrate(&pool).await?;
        fill(&pool, 100, sessions).await?;
        let mut scheduler = scheduler::run::Scheduler::new(
            pool.clone(),
            scheduler::run::SchedulerConfig::new(Duration::from_secs(1)),
        );
        while scheduler.pass().await?.placed > 0 {}
        let view = gateway::projection::SessionsView;
        events::projection::install(&pool, &view).await?;
        events::projection::catch_up(&pool, &view).await?;
        let ids: Vec<Uuid> = db::session_ids(&pool.get().await?).await?;
        let (_, key) = launcher::access::create_user(
            &pool,
            "reader@berth.local",
            Role::Superadmin,
            "default",
            &[],
        )
        .await?;
        // The relay and NATS run as in production: the detail cache follows the session events.
        let stop = tokio_util::sync::CancellationToken::new();
        let (nats, js, topology) = relay_on_bus(nats_url, url, &pool, &stop).await?;
        Ok(GatewayBench {
            pool,
            ids: Arc::new(ids),
            key,
            nats,
            js,
            topology,
            stop,
        })
    }

    /// Serves `state` on a port of its own until the bench stops.
    async fn serve(&self, state: gateway::AppState) -> anyhow::Result<std::net::SocketAddr> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        tokio::spawn(gateway::run::serve(
            listener.into(),
            state,
            self.stop.clone(),
        ));
        Ok(address)
    }

    /// `clients` reading session details from `address` for `phase`: the latencies of the
    /// requests started after its first second.
    async fn load(
        &self,
        address: std::net::SocketAddr,
        clients: usize,
        phase: Duration,
    ) -> anyhow::Result<Vec<Duration>> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(clients)
            .build()?;
        let deadline = Instant::now() + phase;
        let warmup = Instant::now() + Duration::from_secs(1);
        let mut tasks = Vec::new();
        for c in 0..clients {
            let (http, ids, key) = (http.clone(), self.ids.clone(), self.key.clone());
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = c * 7919;
                while Instant::now() < deadline {
                    i = (i + 104_729) % ids.len();
                    let started = Instant::now();
                    let response = http
                        .get(format!("http://{address}/v1/sessions/{}", ids[i]))
                        .header("x-api-key", &key)
                        .send()
                        .await?;
                    anyhow::ensure!(
                        response.status().is_success(),
                        "status {}",
                        response.status()
                    );
                    response.bytes().await?;
                    if started > warmup {
                        latencies.push(started.elapsed());
                    }
                }
                Ok::<_, anyhow::Error>(latencies)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await??);
        }
        Ok(all)
    }

    async fn finish(self) -> anyhow::Result<()> {
        self.stop.cancel();
        self.js.delete_stream(&self.topology.stream).await?;
        Ok(())
    }
}

/// `berth bench start`: create request to RUNNING through the Docker runtime, next to a plain
/// `docker run -d` of the same image, and sessions started per second in a burst. The
/// scheduler is woken as in service: the relay publishes the create on NATS, and the wake
/// follower pokes it.
pub async fn start(
    nats_url: &str,
    url: &str,
    sessions: usize,
    burst: usize,
    spare_networks: usize,
    sandboxes: bool,
) -> anyhow::Result<()> {
    let pool = events::store::pool(url, 16)?;
    berth::app::migrate(&pool).await?;
    launcher::access::bootstrap(&pool).await?;
    let mut engine = bench_engine("berth/shell:latest").await?;
    engine.spare_networks = spare_networks;
    if !sandboxes {
        engine.runtime = None;
    }
    println!("the agent keeps {spare_networks} fenced bridges made ahead (--spare-networks)");
    if sandboxes {
        println!("each with a sandbox whose network namespace a batch kernel joins (--no-sandboxes: none)");
    } else {
        println!("with no sandbox on them: every kernel has a network endpoint of its own (--no-sandboxes)");
    }
    let docker = engine.docker.clone();
    let agent_id = format!("bench{}", std::process::id());
    let stop = tokio_util::sync::CancellationToken::new();
    let (nats, js, topology) = relay_on_bus(nats_url, url, &pool, &stop).await?;
    let subjects = recorder_on_bus(&nats, &pool, &topology, &stop);
    let capacity = ResourceSlots {
        cpu_milli: 64_000,
        memory_bytes: 64 * GIB,
        gpu_milli: 0,
    };
    let agent = bench_docker_agent(
        &pool,
        &agent_id,
        capacity,
        &engine,
        nats.clone(),
        subjects.clone(),
        &stop,
    )
    .await?;
    let config = scheduler::run::SchedulerConfig::new(Duration::from_millis(200));
    woken_scheduler(&pool, nats.clone(), &topology, config, &stop);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let admin = superadmin(&pool, "starter@berth.local").await?;
    // RUNNING as a client of `/v1/events` sees it: the status change on the relayed stream.
    let mut watch = StatusWatch::new(&nats, &topology).await?;
    // Until the sessions ended and their containers are gone from the engine.
    let gone = |ids: Vec<Uuid>| {
        let (pool, docker, agent_id) = (pool.clone(), docker.clone(), agent_id.clone());
        async move {
            wait_ended(&pool, &ids).await?;
            wait_containers_gone(&docker, &agent_id, spare_networks, sandboxes).await
        }
    };
    let end_all = |ids: Vec<Uuid>| {
        let pool = pool.clone();
        async move {
            for id in ids {
                end_session(&pool, id).await?;
            }
            anyhow::Ok(())
        }
    };

    // The agent's spares ready before the first start, as before every later one.
    wait_containers_gone(&docker, &agent_id, spare_networks, sandboxes).await?;
    // One at a time: berth, then plain `docker run -d`, then the Engine API's bare create
    // and start of the same container, in turn.
    let mut berth_times = Vec::new();
    let mut interactive_times = Vec::new();
    let mut plain_times = Vec::new();
    let mut api_times = Vec::new();
    let mut fenced_times = Vec::new();
    let mut joined_times = Vec::new();
    let mut joined = 0;
    let mut started_ids = Vec::new();
    for i in 0..sessions {
        // Each start on a quiet engine: the session before it has left its agent.
        for interactive in [false, true] {
            let create = if interactive {
                small_shell(1)
            } else {
                sleeping_batch(1)
            };
            let started = Instant::now();
            let launched = launcher::launch::launch(&pool, &admin, create).await?;
            let ids: Vec<Uuid> = launched.iter().map(|l| l.session_id).collect();
            watch.running(&ids).await?;
            if interactive {
                interactive_times.push(started.elapsed());
            } else {
                berth_times.push(started.elapsed());
                started_ids.extend(ids.iter().copied());
                for id in &ids {
                    joined += usize::from(joined_a_sandbox(&docker, *id).await);
                }
            }
            end_all(ids.clone()).await?;
            gone(ids).await?;
        }

        let name = format!("berth-bench-plain-{}-{i}", std::process::id());
        let started = Instant::now();
        let status = docker_run_d(&name).await?;
        anyhow::ensure!(status.success(), "docker run -d failed");
        plain_times.push(started.elapsed());
        remove_bench_container(&docker, &name).await;

        let name = format!("berth-bench-api-{}-{i}", std::process::id());
        let started = Instant::now();
        bare_create_and_start(&docker, &name).await?;
        api_times.push(started.elapsed());
        remove_bench_container(&docker, &name).await;

        let name = format!("berth-bench-fenced-{}-{i}", std::process::id());
        let started = Instant::now();
        let network = bare_fenced_create_and_start(&docker, &name, FENCED_SUBNET).await?;
        fenced_times.push(started.elapsed());
        remove_bench_container(&docker, &name).await;
        remove_bench_network(&docker, &network).await;

        let name = format!("berth-bench-joined-{}-{i}", std::process::id());
        let (took, network) = bare_joined_create_and_start(&docker, &name, FENCED_SUBNET).await?;
        joined_times.push(took);
        remove_bench_network(&docker, &network).await;
    }
    let pct = |v: &mut Vec<Duration>, q: f64| {
        v.sort_unstable();
        percentile(v, q).as_secs_f64() * 1000.0
    };
    let (b50, b99) = (pct(&mut berth_times, 0.5), pct(&mut berth_times, 0.99));
    let (i50, i99) = (
        pct(&mut interactive_times, 0.5),
        pct(&mut interactive_times, 0.99),
    );
    let (p50, p99) = (pct(&mut plain_times, 0.5), pct(&mut plain_times, 0.99));
    let (a50, a99) = (pct(&mut api_times, 0.5), pct(&mut api_times, 0.99));
    println!("launch to RUNNING over {sessions} sessions (an in-process launch: no HTTP, authentication or key lookup): berth (a batch session running the same command) p50 {b50:.1} ms, p99 {b99:.1} ms; bare Engine API create + start p50 {a50:.1} ms, p99 {a99:.1} ms; plain `docker run -d` (a CLI process spawn more) p50 {p50:.1} ms, p99 {p99:.1} ms");
    println!(
        "  an interactive session (its SSH server's port published) p50 {i50:.1} ms, p99 {i99:.1} ms"
    );
    println!(
        "berth/bare API at p50 = {:.2}, at p99 = {:.2} (like for like); berth/docker run at p50 = {:.2}, at p99 = {:.2}",
        b50 / a50,
        b99 / a99,
        b50 / p50,
        b99 / p99,
    );
    let (f50, f99) = (pct(&mut fenced_times, 0.5), pct(&mut fenced_times, 0.99));
    println!(
        "bare Engine API with a network of the container's own made first, as berth fences each session: p50 {f50:.1} ms, p99 {f99:.1} ms; the network's share p50 {:.1} ms; berth/that at p50 = {:.2}, at p99 = {:.2}",
        f50 - a50,
        b50 / f50,
        b99 / f99,
    );
    let (j50, j99) = (pct(&mut joined_times, 0.5), pct(&mut joined_times, 0.99));
    println!(
        "bare Engine API joining the namespace of a container on such a network, both made first (as a kernel joins a spare's sandbox): p50 {j50:.1} ms, p99 {j99:.1} ms; berth/that at p50 = {:.2}, at p99 = {:.2}; {joined} of {sessions} batch sessions ran in a spare's sandbox",
        b50 / j50,
        b99 / j99,
    );

    // Where berth's time goes, by the log's clock: each step's p50 after the request.
    let steps = db::start_steps(&pool.get().await?, &started_ids).await?;
    println!(
        "berth's steps after the request, p50: {}",
        steps_reached(&steps, |times| percentile(times, 0.5))
    );
    watch.relayed_after.sort_unstable_by(f64::total_cmp);
    println!(
        "RUNNING reached the event stream {:.1} ms (p50) after its row was written",
        percentile(&watch.relayed_after, 0.5)
    );

    // A burst: `burst` sessions in one request.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let launched = launcher::launch::launch(&pool, &admin, sleeping_batch(burst as u32)).await?;
    let ids: Vec<Uuid> = launched.iter().map(|l| l.session_id).collect();
    watch.running(&ids).await?;
    let took = started.elapsed().as_secs_f64();
    let berth_rate = burst as f64 / took;
    // Where the burst's time goes: the middle session's steps, and the last to reach each.
    let steps = db::start_steps(&pool.get().await?, &ids).await?;
    let last = |times: &[f64]| times.last().copied().unwrap_or_default();
    println!(
        "the burst's steps after its request, p50: {}; the last session: {}",
        steps_reached(&steps, |times| percentile(times, 0.5)),
        steps_reached(&steps, last),
    );
    // The same number of plain `docker run -d`, all at once, on an engine as quiet as berth's
    // burst had: berth's sessions ended and their containers gone (the agent stops and removes
    // them, which would otherwise compete with the baseline for the same cores).
    end_all(ids.clone()).await?;
    gone(ids).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let names: Vec<String> = (0..burst)
        .map(|i| format!("berth-bench-burst-{}-{i}", std::process::id()))
        .collect();
    let started = Instant::now();
    let runs = futures::future::join_all(names.iter().map(|n| docker_run_d(n))).await;
    let plain_took = started.elapsed().as_secs_f64();
    for run in runs {
        anyhow::ensure!(run?.success(), "docker run -d failed");
    }
    for name in &names {
        remove_bench_container(&docker, name).await;
    }
    let plain_rate = burst as f64 / plain_took;
    println!("burst of {burst}: berth all RUNNING after {took:.2} s = {berth_rate:.1} sessions started/s; {burst} parallel `docker run -d` after {plain_took:.2} s = {plain_rate:.1}/s; berth/docker = {:.2}", berth_rate / plain_rate);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.cancel();
    let _ = agent.finished().await;
    js.delete_stream(&topology.stream).await?;
    for stream in [&subjects.commands_stream, &subjects.telemetry_stream] {
        let _ = js.delete_stream(stream).await;
    }
    remove_agent_leftovers(&agent_id).await;
    Ok(())
}

/// Whatever is left of agent `agent_id`'s containers, then of its sessions' networks, goes:
/// a stopped agent leaves its sessions' containers for its return, which a bench's never has.
pub(crate) async fn remove_agent_leftovers(agent_id: &str) {
    let label = format!("label=ai.berth.agent={agent_id}");
    let _ = tokio::process::Command::new("sh")
        .args(["-c", &format!("docker ps -aq --filter {label} | xargs -r docker rm -f >/dev/null; docker network ls -q --filter {label} | xargs -r docker network rm >/dev/null")])
        .status()
        .await;
}

/// The session status changes the relay publishes, as `/v1/events` streams them to a client:
/// how the start bench learns that a session runs, the moment it is known, with no query of
/// its own competing with the engine's start.
struct StatusWatch {
    events: async_nats::Subscriber,
    seen_running: std::collections::HashSet<Uuid>,
    seen_ended: std::collections::HashSet<Uuid>,
    /// For each RUNNING seen: how long after its row was written (the relay's share).
    relayed_after: Vec<f64>,
}

impl StatusWatch {
    async fn new(
        nats: &async_nats::Client,
        topology: &events::relay::Topology,
    ) -> anyhow::Result<StatusWatch> {
        let events = nats.subscribe(topology.category_subject("session")).await?;
        Ok(StatusWatch {
            events,
            seen_running: Default::default(),
            seen_ended: Default::default(),
            relayed_after: Vec::new(),
        })
    }

    /// Until every session of `ids` was seen RUNNING; an error if one ended first.
    async fn running(&mut self, ids: &[Uuid]) -> anyhow::Result<()> {
        use futures::StreamExt;
        while !ids.iter().all(|id| self.seen_running.contains(id)) {
            anyhow::ensure!(
                !ids.iter().any(|id| self.seen_ended.contains(id)),
                "a session ended before it ran"
            );
            let message = tokio::time::timeout(Duration::from_secs(60), self.events.next())
                .await
                .map_err(|_| anyhow::anyhow!("no session event for a minute"))?
                .ok_or_else(|| anyhow::anyhow!("the event subscription ended"))?;
            let recorded: events::RecordedEvent = serde_json::from_slice(&message.payload)?;
            if let Event::SessionStatusChanged(change) = recorded.event {
                match change.to {
                    SessionStatus::Running => {
                        let after = Utc::now() - recorded.recorded_at;
                        self.relayed_after
                            .push(after.num_microseconds().unwrap_or(0) as f64 / 1000.0);
                        self.seen_running.insert(change.session_id)
                    }
                    to if to.is_terminal() => self.seen_ended.insert(change.session_id),
                    _ => false,
                };
            }
        }
        Ok(())
    }
}

/// `berth bench wake`: the time from a create to its placement, by the log's clock, for
/// `sessions` sessions created one after another. First woken only by the bus (the relay
/// publishes the `SessionRequested`, the scheduler's follower pokes it), then, in the same
/// run and with the same scheduler, also poked in process right after the create (the
/// gateway's old shortcut), as the baseline.
pub async fn wake(nats_url: &str, url: &str, sessions: usize) -> anyhow::Result<()> {
    let pool = events::store::pool(url, 16)?;
    berth::app::migrate(&pool).await?;
    launcher::access::bootstrap(&pool).await?;
    let offer = bus::protocol::Offer {
        unlabelled_images: Vec::new(),
        resource_group: "default".into(),
        capacity: ResourceSlots {
            cpu_milli: 1_000_000,
            memory_bytes: 1 << 50,
            gpu_milli: 0,
        },
        images: vec!["berth/shell:latest".into()],
        address: None,
        image_apps: Default::default(),
        network_scope: None,
        volumes: Default::default(),
    };
    admit_for_bench(&pool, "wake1").await?;
    recorder::record::register(&pool, "wake1", &offer).await?;
    let admin = superadmin(&pool, "waker@berth.local").await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let (nats, js, topology) = relay_on_bus(nats_url, url, &pool, &stop).await?;
    let wake = woken_scheduler(
        &pool,
        nats,
        &topology,
        scheduler::run::SchedulerConfig::new(Duration::from_secs(1)),
        &stop,
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The two ways take turns, session by session, so both run on a log of the same length.
    let mut took = [Vec::with_capacity(sessions), Vec::with_capacity(sessions)];
    for _ in 0..sessions {
        for poke in [false, true] {
            let launched = launcher::launch::launch(&pool, &admin, small_shell(1)).await?;
            if poke {
                wake.notify_one();
            }
            let id = launched[0].session_id;
            let waited = Instant::now();
            let seconds = loop {
                let client = pool.get().await?;
                if let Some(s) = db::request_to_placement(&client, id).await? {
                    break s;
                }
                anyhow::ensure!(
                    waited.elapsed() < Duration::from_secs(30),
                    "session {id} was not placed within 30 s"
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            };
            took[usize::from(poke)].push(seconds * 1000.0);
            // Ended at once, so the owner's policy never holds the next one back.
            end_session(&pool, id).await?;
        }
    }
    let figures: Vec<(f64, f64)> = took
        .iter_mut()
        .map(|took| {
            took.sort_by(f64::total_cmp);
            (percentile(took, 0.5), percentile(took, 0.99))
        })
        .collect();
    stop.cancel();
    let ((bus50, bus99), (poke50, poke99)) = (figures[0], figures[1]);
    println!(
        "create to placement over {sessions} sessions each way, one at a time, the two ways taking turns (log clock): woken by the bus p50 {bus50:.1} ms, p99 {bus99:.1} ms; poked in process (baseline) p50 {poke50:.1} ms, p99 {poke99:.1} ms; bus/poke at p50 = {:.2}",
        bus50 / poke50
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    js.delete_stream(&topology.stream).await?;
    Ok(())
}

/// The control plane a bench's Docker agents meet on the bus: a migrated database, the relay,
/// the recorder and a scheduler woken by the bus, until `stop`.
struct ControlPlane {
    pool: Pool,
    stop: tokio_util::sync::CancellationToken,
    nats: async_nats::Client,
    topology: events::relay::Topology,
    subjects: bus::Subjects,
}

impl ControlPlane {
    async fn start(nats_url: &str, url: &str) -> anyhow::Result<ControlPlane> {
        let pool = events::store::pool(url, 16)?;
        berth::app::migrate(&pool).await?;
        launcher::access::bootstrap(&pool).await?;
        let stop = tokio_util::sync::CancellationToken::new();
        let (nats, _js, topology) = relay_on_bus(nats_url, url, &pool, &stop).await?;
        let subjects = recorder_on_bus(&nats, &pool, &topology, &stop);
        let config = scheduler::run::SchedulerConfig::new(Duration::from_millis(200));
        woken_scheduler(&pool, nats.clone(), &topology, config, &stop);
        Ok(ControlPlane {
            pool,
            stop,
            nats,
            topology,
            subjects,
        })
    }
}

/// An engine at a Unix socket (another host's, `infra/host.sh`), whose host must hold
/// `image`.
async fn bench_engine_at(socket: &std::path::Path, image: &str) -> anyhow::Result<BenchEngine> {
    let path = socket
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("the socket's path is not UTF-8"))?;
    let docker = bollard::Docker::connect_with_unix(path, 120, bollard::API_DEFAULT_VERSION)?
        .negotiate_version()
        .await?;
    let lacking = format!(
        "the engine at {} lacks {image} (infra/host.sh load N {image})",
        socket.display()
    );
    holding(docker, image, &lacking).await
}

/// `berth bench start-cluster`: a multi-node cluster of two kernels from its request to
/// RUNNING, one at a time, each kernel on an agent of its own: the two agents on two engines
/// joined in a swarm (`engines`, e.g. hosts 2 and 3 of `infra/host.sh swarm 2 3`: an overlay
/// network), next to two agents on this machine's engine (a bridge), in the same run.
pub async fn start_cluster(
    nats_url: &str,
    url: &str,
    engines: &[std::path::PathBuf; 2],
    sessions: usize,
) -> anyhow::Result<()> {
    let ControlPlane {
        pool,
        stop,
        nats,
        topology,
        subjects,
    } = ControlPlane::start(nats_url, url).await?;
    let admin = superadmin(&pool, "clusters@berth.local").await?;
    let mut watch = StatusWatch::new(&nats, &topology).await?;
    // Each agent has room for one kernel: a cluster of two takes both.
    let one_kernel = ResourceSlots {
        cpu_milli: 1_000,
        memory_bytes: 4 * GIB,
        gpu_milli: 0,
    };
    let cluster = launcher::launch::CreateSession {
        session_type: Some(SessionType::Batch),
        startup_command: Some(SLEEPER.into()),
        cluster_mode: Some(ClusterMode::MultiNode),
        cluster_size: Some(2),
        resources: launcher::launch::ResourceRequest {
            cpu: Some(1.0),
            memory: Some(launcher::launch::ByteSize::Bytes(64 << 20)),
            ..Default::default()
        },
        ..small_shell(1)
    };
    let local = bench_engine("berth/shell:latest").await?;
    let remote = [
        bench_engine_at(&engines[0], "berth/shell:latest").await?,
        bench_engine_at(&engines[1], "berth/shell:latest").await?,
    ];
    let mut report = Vec::new();
    for (label, pair) in [
        ("2 kernels on one engine (a bridge)", [&local, &local]),
        (
            "2 kernels on two engines of a swarm (an overlay)",
            [&remote[0], &remote[1]],
        ),
    ] {
        let mut agents = Vec::new();
        for (i, engine) in pair.iter().enumerate() {
            let id = format!("cl{}x{i}{}", report.len(), std::process::id());
            let agent = bench_docker_agent(
                &pool,
                &id,
                one_kernel,
                engine,
                nats.clone(),
                subjects.clone(),
                &stop,
            )
            .await?;
            agents.push((id, agent));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut times = Vec::with_capacity(sessions);
        for _ in 0..sessions {
            let started = Instant::now();
            let launched = launcher::launch::launch(&pool, &admin, cluster.clone()).await?;
            let ids: Vec<Uuid> = launched.iter().map(|l| l.session_id).collect();
            watch.running(&ids).await?;
            times.push(started.elapsed());
            for id in &ids {
                end_session(&pool, *id).await?;
            }
            // Each start on quiet engines: the cluster's kernels and network gone first.
            wait_ended(&pool, &ids).await?;
            for (engine, (id, _)) in pair.iter().zip(&agents) {
                let sandboxes = engine.runtime.is_some();
                wait_containers_gone(&engine.docker, id, engine.spare_networks, sandboxes).await?;
            }
        }
        for (_, agent) in agents {
            let how = agent::Leave {
                reason: "the bench moves on".into(),
                end_sessions: true,
            };
            agent.leave(how, Duration::from_secs(30)).await?;
        }
        times.sort_unstable();
        let p50 = percentile(&times, 0.5).as_secs_f64() * 1000.0;
        let p99 = percentile(&times, 0.99).as_secs_f64() * 1000.0;
        report.push((label, p50, p99));
    }
    stop.cancel();
    // The engines alone, as the baseline: the network made, then the two containers created
    // and started at once (as the two agents do), on a bridge of this machine's engine and on
    // an overlay across the two.
    let mut bare = Vec::new();
    for (label, pair, driver) in [
        ("one engine, a bridge", [&local, &local], "bridge"),
        (
            "two engines, an overlay",
            [&remote[0], &remote[1]],
            "overlay",
        ),
    ] {
        let mut times = Vec::with_capacity(sessions);
        for round in 0..sessions {
            let network = format!("berth-bench-net-{}-{round}", std::process::id());
            let names = [0, 1].map(|k| format!("{network}-{k}"));
            let started = Instant::now();
            let create = bollard::network::CreateNetworkOptions {
                name: network.clone(),
                driver: driver.to_owned(),
                attachable: driver == "overlay",
                ..Default::default()
            };
            pair[0].docker.create_network(create).await?;
            let (a, b) = tokio::join!(
                bare_create_and_start_on(&pair[0].docker, &names[0], Some(&network)),
                bare_create_and_start_on(&pair[1].docker, &names[1], Some(&network)),
            );
            a?;
            b?;
            times.push(started.elapsed());
            for (engine, name) in pair.iter().zip(&names) {
                remove_bench_container(&engine.docker, name).await;
            }
            pair[0].docker.remove_network(&network).await?;
        }
        times.sort_unstable();
        let p50 = percentile(&times, 0.5).as_secs_f64() * 1000.0;
        let p99 = percentile(&times, 0.99).as_secs_f64() * 1000.0;
        bare.push((label, p50, p99));
    }
    println!("a 2-node cluster from its request to RUNNING over {sessions} sessions:");
    for (label, p50, p99) in &report {
        println!("  berth, {label}: p50 {p50:.1} ms, p99 {p99:.1} ms");
    }
    println!(
        "  across engines berth adds {:.1} ms at p50, {:.1} ms at p99",
        report[1].1 - report[0].1,
        report[1].2 - report[0].2
    );
    println!("the engines alone (network made, two containers created and started at once):");
    for (label, p50, p99) in &bare {
        println!("  {label}: p50 {p50:.1} ms, p99 {p99:.1} ms");
    }
    println!(
        "  across engines the engines add {:.1} ms at p50, {:.1} ms at p99",
        bare[1].1 - bare[0].1,
        bare[1].2 - bare[0].2
    );
    Ok(())
}

/// Until every session of `ids` has ended.
async fn wait_ended(pool: &Pool, ids: &[Uuid]) -> anyhow::Result<()> {
    loop {
        let client = pool.get().await?;
        if db::count_in_status(&client, ids, &SessionStatus::TERMINAL).await? as usize == ids.len()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each step of a start (placed, the agent's first report, CREATING, the kernel started,
/// RUNNING) as `at` sums up the sessions' times after their request (sorted, in ms).
fn steps_reached(steps: &[[Option<f64>; 5]], at: impl Fn(&[f64]) -> f64) -> String {
    let names = [
        "placed",
        "agent's first report (PREPARING)",
        "CREATING",
        "kernel started",
        "RUNNING",
    ];
    let reached: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(step, name)| {
            let mut times: Vec<f64> = steps.iter().filter_map(|s| s[step]).collect();
            times.sort_unstable_by(f64::total_cmp);
            match times.is_empty() {
                true => format!("{name}: never"),
                false => format!("{name} {:.1} ms", at(&times)),
            }
        })
        .collect();
    reached.join(", ")
}

/// Until agent `agent_id` has no container left on `docker`, nor a session's network, and
/// its `spares` bridges made ahead are made again, each with its sandbox running where
/// `sandboxes`.
async fn wait_containers_gone(
    docker: &bollard::Docker,
    agent_id: &str,
    spares: usize,
    sandboxes: bool,
) -> anyhow::Result<()> {
    // The agent's, with every one of `more` labels too.
    let label = |more: &[&str]| {
        let mut labels = vec![format!("ai.berth.agent={agent_id}")];
        labels.extend(more.iter().map(|l| l.to_string()));
        HashMap::from([("label".to_string(), labels)])
    };
    loop {
        // The sessions' containers (the spares' sandboxes stay).
        let filters = label(&["ai.berth.session"]);
        let options = bollard::container::ListContainersOptions::<String> {
            all: true,
            filters,
            ..Default::default()
        };
        if docker.list_containers(Some(options)).await?.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Then the sessions' own networks, which the agent removes after their containers, and
    // the spares (bridge and sandbox) it makes again (as many as its fence keeps, and no
    // more: a spare a session used is removed with it): the engine's making or removal of a
    // bridge or a sandbox would otherwise run beside the next start measured. A spare the
    // engine did not make is not waited for past a bound.
    let bound = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let options = bollard::network::ListNetworksOptions {
            filters: label(&[]),
        };
        let networks = docker.list_networks(Some(options)).await?;
        let sessions = networks
            .iter()
            .filter(|n| {
                n.labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("ai.berth.session"))
            })
            .count();
        // And the sandbox on each spare running, where the agent lends its runtime.
        let mut filters = label(&["ai.berth.spare"]);
        filters.insert("status".to_string(), vec!["running".to_string()]);
        let options = bollard::container::ListContainersOptions::<String> {
            filters,
            ..Default::default()
        };
        let running = docker.list_containers(Some(options)).await?.len();
        let ready = networks.len() == spares && running == if sandboxes { spares } else { 0 };
        if sessions == 0 && (ready || tokio::time::Instant::now() > bound) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `berth bench volume-write`: `mib` MiB written (and synced) from inside a session into a
/// folder on a shared volume, next to the same write into a host-local folder and, on the
/// host, into each of the two directories, `rounds` times each (the median of each). The
/// shared volume here is a directory of this machine the engine bind-mounts (`--volume-dir`,
/// e.g. an NFS mount to measure that).
pub async fn volume_write(
    nats_url: &str,
    url: &str,
    volume_dir: Option<std::path::PathBuf>,
    mib: u32,
    rounds: usize,
) -> anyhow::Result<()> {
    let ControlPlane {
        pool,
        stop,
        nats,
        subjects,
        ..
    } = ControlPlane::start(nats_url, url).await?;
    let admin = superadmin(&pool, "writer@berth.local").await?;
    let volume_dir = volume_dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("berth-bench-volume-{}", std::process::id()))
    });
    std::fs::create_dir_all(&volume_dir)?;
    let mut engine = bench_engine("berth/shell:latest").await?;
    engine.volumes.insert("shared".into(), volume_dir.clone());
    let agent_id = format!("writer{}", std::process::id());
    let agent = bench_docker_agent(
        &pool,
        &agent_id,
        ResourceSlots {
            cpu_milli: 4_000,
            memory_bytes: 8 * GIB,
            gpu_milli: 0,
        },
        &engine,
        nats.clone(),
        subjects.clone(),
        &stop,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let owner = admin.user_id.simple().to_string();
    let agent_data = std::env::temp_dir().join(format!("berth-bench-{agent_id}"));
    let places = [
        ("onvolume", "shared", volume_dir.clone()),
        ("onhost", events::volumes::HOST_LOCAL, agent_data.clone()),
    ];
    for (folder, volume, _) in &places {
        launcher::launch::create_folder(
            &pool,
            &admin,
            folder,
            volume,
            events::folders::UsageMode::General,
        )
        .await?;
    }
    // Round by round, each of the four writes in turn, the order turned about every round
    // (which place first, session or host first), so that no position favours one: the disk
    // writes back what the write before left.
    let mut in_session = [Vec::new(), Vec::new()];
    let mut on_the_host = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (folder, _, root) = &places[i];
            let on_host = root.join("folders").join(&owner).join(folder);
            for session_first in [round % 2 == 0, round % 2 != 0] {
                if session_first {
                    in_session[i]
                        .push(write_in_session(&pool, &admin, folder, &on_host, mib).await?);
                } else {
                    on_the_host[i].push(write_on_host(&on_host, mib).await?);
                }
            }
        }
    }
    let report: Vec<_> = places
        .iter()
        .zip(in_session.iter_mut().zip(on_the_host.iter_mut()))
        .map(|((_, volume, root), (session, host))| (volume, root, median(session), median(host)))
        .collect();
    stop.cancel();
    let _ = agent.finished().await;
    remove_agent_leftovers(&agent_id).await;
    println!("{mib} MiB written and synced, median of {rounds}:");
    for (volume, root, session, host) in &report {
        let rate = |secs: f64| f64::from(mib) / secs;
        println!(
            "  folder on `{volume}` ({}): from a session {:.0} MiB/s; the same dd on the host's path {:.0} MiB/s: {:.0}%",
            root.display(),
            rate(*session),
            rate(*host),
            100.0 * host / session
        );
    }
    Ok(())
}

/// `mib` MiB written and synced into `folder` from inside a batch session of `admin`'s (the
/// folder at `on_host` on this host): the seconds it took, by BusyBox's `time` (its dd
/// prints none), `real 0m 1.23s`.
async fn write_in_session(
    pool: &Pool,
    admin: &events::ledger::KeyOwner,
    folder: &str,
    on_host: &std::path::Path,
    mib: u32,
) -> anyhow::Result<f64> {
    let command = format!(
        "time dd if=/dev/zero of=/home/work/{folder}/blob bs=1M count={mib} conv=fsync \
         2> /home/work/{folder}/dd.txt; rm -f /home/work/{folder}/blob"
    );
    let create = launcher::launch::CreateSession {
        session_type: Some(SessionType::Batch),
        startup_command: Some(command),
        mounts: vec![folder.into()],
        resources: launcher::launch::ResourceRequest {
            cpu: Some(1.0),
            memory: Some(launcher::launch::ByteSize::Bytes(512 << 20)),
            ..Default::default()
        },
        ..small_shell(1)
    };
    let launched = launcher::launch::launch(pool, admin, create).await?;
    let ids: Vec<Uuid> = launched.iter().map(|l| l.session_id).collect();
    wait_ended(pool, &ids).await?;
    real_seconds(&std::fs::read_to_string(on_host.join("dd.txt"))?)
}

/// The same write on the host into `on_host`, by the same BusyBox dd and `time` the session
/// image runs (Debian's `busybox-static`, which `infra/test.sh` installs): the seconds it
/// took.
async fn write_on_host(on_host: &std::path::Path, mib: u32) -> anyhow::Result<f64> {
    let out = tokio::process::Command::new("busybox")
        .args(["time", "busybox", "dd", "if=/dev/zero"])
        .arg(format!("of={}", on_host.join("host-blob").display()))
        .args(["bs=1M", &format!("count={mib}"), "conv=fsync"])
        .output()
        .await
        .context("busybox (Debian's busybox-static) on the host")?;
    anyhow::ensure!(out.status.success(), "dd on the host failed");
    std::fs::remove_file(on_host.join("host-blob"))?;
    real_seconds(&String::from_utf8_lossy(&out.stderr))
}

/// The seconds BusyBox's `time` says a command took (`real\t0m 1.23s`).
fn real_seconds(output: &str) -> anyhow::Result<f64> {
    let real = output
        .lines()
        .find_map(|l| l.strip_prefix("real"))
        .ok_or_else(|| anyhow::anyhow!("no `real` time in: {output}"))?;
    let (minutes, seconds) = real
        .trim()
        .split_once('m')
        .ok_or_else(|| anyhow::anyhow!("`real{real}` is not `<m>m <s>s`"))?;
    let minutes: f64 = minutes.trim().parse()?;
    let seconds: f64 = seconds.trim().trim_end_matches('s').parse()?;
    Ok(minutes * 60.0 + seconds)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_unstable_by(f64::total_cmp);
    values[values.len() / 2]
}
