//! Real containers: sessions through the gateway run by an agent with the Docker runtime,
//! against the real engine and the local images `infra/images.sh` builds.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::*;
use events::payloads::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// An image no registry has: its pull fails.
pub(crate) const ABSENT: &str = "registry.invalid/berth/absent:1";

pub(crate) struct DockerAgent {
    stop: CancellationToken,
    host: agent::host::AgentHost,
}

async fn docker_agent(h: &Harness, id: &str, data_dir: &std::path::Path) -> DockerAgent {
    docker_agent_with(h, id, data_dir, 8_000).await
}

async fn docker_agent_with(
    h: &Harness,
    id: &str,
    data_dir: &std::path::Path,
    cpu_milli: u64,
) -> DockerAgent {
    spawn_agent(h, id, data_dir, cpu_milli, None).await
}

pub(crate) async fn spawn_agent(
    h: &Harness,
    id: &str,
    data_dir: &std::path::Path,
    cpu_milli: u64,
    image_refresh: Option<Duration>,
) -> DockerAgent {
    let gpus = agent::gpu::GpuConfig::nvml();
    start_agent(h, id, data_dir, cpu_milli, image_refresh, gpus, Some(0))
        .await
        .expect("the agent starts")
}

/// A Docker agent with the GPUs of `gpus`, offering `gpu_milli` of them (`None`: those
/// discovery finds); registered when it returns, or the reason it did not start.
pub(crate) async fn start_agent(
    h: &Harness,
    id: &str,
    data_dir: &std::path::Path,
    cpu_milli: u64,
    image_refresh: Option<Duration>,
    gpus: agent::gpu::GpuConfig,
    gpu_milli: Option<u64>,
) -> Result<DockerAgent, agent::host::HostError> {
    let docker = agent::docker::connect()
        .await
        .expect("the Docker engine answers");
    let setup = AgentSetup {
        cpu_milli,
        image_refresh,
        gpus,
        gpu_milli,
        registry: None,
        volumes: Default::default(),
    };
    start_agent_on(h, id, data_dir, docker, setup).await
}

/// How a test's agent is set up: what it offers (CPU, GPUs), whether it reads its images
/// again, and the registry its customized images go to and come from.
pub(crate) struct AgentSetup {
    pub cpu_milli: u64,
    pub image_refresh: Option<Duration>,
    pub gpus: agent::gpu::GpuConfig,
    pub gpu_milli: Option<u64>,
    pub registry: Option<agent::docker::registry::Registry>,
    /// The shared volumes its host mounts, by name.
    pub volumes: std::collections::BTreeMap<String, std::path::PathBuf>,
}

impl AgentSetup {
    /// `cpu_milli` of CPU, no GPU, the images it has when it starts.
    pub(crate) fn cpu(cpu_milli: u64) -> AgentSetup {
        AgentSetup {
            cpu_milli,
            image_refresh: None,
            gpus: agent::gpu::GpuConfig::nvml(),
            gpu_milli: Some(0),
            registry: None,
            volumes: Default::default(),
        }
    }
}

/// berth's runtime, as `berth agent` lends it ([`testkit::berth_runtime`]).
pub(crate) fn berth_runtime() -> std::path::PathBuf {
    testkit::berth_runtime().expect("berth's runtime")
}

/// A Docker agent of the engine `docker` (another host's, say), set up as `setup`.
pub(crate) async fn start_agent_on(
    h: &Harness,
    id: &str,
    data_dir: &std::path::Path,
    docker: bollard::Docker,
    setup: AgentSetup,
) -> Result<DockerAgent, agent::host::HostError> {
    let AgentSetup {
        cpu_milli,
        image_refresh,
        gpus,
        gpu_milli,
        registry,
        volumes,
    } = setup;
    let mut images = agent::docker::local_images(&docker).await.unwrap();
    assert!(
        images.names.iter().any(|i| i == "berth/shell:latest"),
        "run infra/images.sh first (infra/test.sh does)"
    );
    if image_refresh.is_none() {
        images.names.push(ABSENT.into());
    }
    let runtime = agent::docker::RuntimeConfig {
        data_dir: data_dir.to_path_buf(),
        stop_grace_secs: 2,
        image_refresh,
        // Usage every second, so the idle checks decide within a test's patience.
        usage_every: Duration::from_secs(1),
        registry,
        volumes,
        publish_address: "127.0.0.1".into(),
        gpus,
        fence: Default::default(),
        runtime: Some(berth_runtime()),
    };
    let capacity = ResourceSlots {
        cpu_milli,
        memory_bytes: 8 * GIB,
        gpu_milli: 0,
    };
    // The agent speaks only NATS, as `berth agent` does, with the credential it was admitted
    // with.
    let seed = admit(h, id, "default").await;
    let config = agent::host::HostConfig {
        agent_id: id.into(),
        resource_group: "default".into(),
        offer: agent::host::Offered {
            gpu_milli,
            ..agent::host::Offered::fixed(capacity, images)
        },
        nats: agent::host::Nats::Connect {
            url: nats_url(),
            seed: Some(seed),
            tls: bus::link::NatsTls::default(),
        },
        subjects: h.agent_bus.clone(),
        outbox: agent::host::outbox_in(data_dir, id),
        runtime: agent::host::Runtime::Docker {
            engine: docker,
            config: runtime,
        },
    };
    let stop = CancellationToken::new();
    let host = agent::host::start(config, stop.clone()).await?;
    h.wait_registered(id).await;
    Ok(DockerAgent { stop, host })
}

/// The agent leaves as a stopped process does (SIGTERM): it departs, and nothing is placed
/// on it any more; its sessions are left running.
pub(crate) async fn depart(agent: DockerAgent) {
    let how = agent::Leave {
        reason: "the test stops it".into(),
        end_sessions: false,
    };
    let left = agent
        .host
        .leave(how, Duration::from_secs(10))
        .await
        .expect("the agent left without failing");
    assert!(matches!(left, agent::host::Left::InTime), "left in time");
}

/// Kills an agent, as its process dies, which must have been running until then: one that
/// had already failed would otherwise hide behind the kill.
pub(crate) async fn kill(agent: DockerAgent) {
    match agent.host.kill().await {
        None => {}
        Some(Err(e)) => panic!("the agent had failed before it was stopped: {e}"),
        Some(Ok(())) => panic!("the agent had stopped before it was stopped"),
    }
}

/// A Docker agent with a fresh id and data directory of its own.
pub(crate) async fn local_agent(h: &Harness) -> DockerAgent {
    docker_agent(h, &fresh_agent_id(), &data_dir()).await
}

pub(crate) fn fresh_agent_id() -> String {
    format!("dock{}", &Uuid::new_v4().simple().to_string()[..8])
}

pub(crate) fn data_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("berth-test-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn batch(command: &str) -> Value {
    json!({"type": "batch", "image": "berth/shell:latest", "startup_command": command,
           "resources": {"cpu": 1, "memory": "256m"}})
}

pub(crate) async fn run_to_end(h: &Harness, body: Value) -> Value {
    run_as(h, &h.admin_key, body).await
}

/// Creates a session as `key` and waits for it to end; the session.
pub(crate) async fn run_as(h: &Harness, key: &str, body: Value) -> Value {
    let (status, created) = h.create(key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| {
        matches!(
            s["status"].as_str(),
            Some("TERMINATED" | "ERROR" | "CANCELLED")
        )
    })
    .await
}

pub(crate) async fn logs(h: &Harness, id: &str) -> String {
    let (status, body) = h
        .get(&h.admin_key, &format!("/v1/sessions/{id}/logs"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["kernels"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Every container of this engine, running or not, with all of `labels`.
async fn containers_labelled(labels: Vec<String>) -> Vec<bollard::models::ContainerSummary> {
    let docker = agent::docker::connect().await.unwrap();
    let filters = std::collections::HashMap::from([("label".to_string(), labels)]);
    docker
        .list_containers(Some(bollard::container::ListContainersOptions {
            all: true,
            filters,
            ..Default::default()
        }))
        .await
        .unwrap()
}

async fn containers_of(session: &str) -> usize {
    containers_labelled(vec![format!("ai.berth.session={session}")])
        .await
        .len()
}

/// The names of agent `agent_id`'s spares' sandboxes on this host, and whether each runs.
async fn sandboxes_of(agent_id: &str) -> Vec<(String, bool)> {
    let labels = vec![
        format!("ai.berth.agent={agent_id}"),
        "ai.berth.spare".to_string(),
    ];
    let mut found: Vec<(String, bool)> = containers_labelled(labels)
        .await
        .into_iter()
        .map(|c| {
            let name = c.names.unwrap_or_default().concat();
            let running = c.state.as_deref() == Some("running");
            (name.trim_start_matches('/').to_owned(), running)
        })
        .collect();
    found.sort();
    found
}

/// Until agent `agent_id` keeps `count` spares ready: bridges, each with its sandbox running.
async fn wait_spares(agent_id: &str, count: usize) {
    wait_for(|| async {
        let networks = networks_of(agent_id).await;
        let sandboxes = sandboxes_of(agent_id).await;
        let ready = networks.len() == count
            && sandboxes.len() == count
            && sandboxes.iter().all(|(_, running)| *running);
        ready.then_some(())
    })
    .await;
}

/// The name of the container whose network namespace session `session`'s main kernel
/// joined (the engine keeps it by its id); `None`: it has an endpoint of its own.
async fn joined_of(session: &str) -> Option<String> {
    let docker = agent::docker::connect().await.unwrap();
    let name = format!("berth-{}-0", Uuid::parse_str(session).unwrap().simple());
    let inspected = docker.inspect_container(&name, None).await.unwrap();
    let mode = inspected
        .host_config
        .unwrap()
        .network_mode
        .unwrap_or_default();
    let joined = mode.strip_prefix("container:")?;
    let sandbox = docker.inspect_container(joined, None).await.unwrap();
    Some(sandbox.name.unwrap().trim_start_matches('/').to_owned())
}

/// The networks agent `agent_id` made on this host, each with its labels.
async fn networks_of(agent_id: &str) -> Vec<(String, std::collections::HashMap<String, String>)> {
    let docker = agent::docker::connect().await.unwrap();
    let filters = std::collections::HashMap::from([(
        "label".to_string(),
        vec![format!("ai.berth.agent={agent_id}")],
    )]);
    docker
        .list_networks(Some(bollard::network::ListNetworksOptions { filters }))
        .await
        .unwrap()
        .into_iter()
        .map(|n| (n.name.unwrap_or_default(), n.labels.unwrap_or_default()))
        .collect()
}

/// The network session `session`'s main container is on, as its label names it.
async fn network_of(session: &str) -> String {
    let docker = agent::docker::connect().await.unwrap();
    let name = format!("berth-{}-0", Uuid::parse_str(session).unwrap().simple());
    let inspected = docker.inspect_container(&name, None).await.unwrap();
    inspected.config.unwrap().labels.unwrap()["ai.berth.network"].clone()
}

#[tokio::test]
async fn a_batch_session_sees_its_limits_environment_and_exit_code() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let mut body = batch(
        "cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max 2>/dev/null \
         || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/memory/memory.limit_in_bytes; \
         echo FOO=$FOO OMP=$OMP_NUM_THREADS HOST=$(hostname); grep ' /dev/shm ' /proc/mounts",
    );
    body["resources"] = json!({"cpu": 1.5, "memory": "256m", "shared_memory": "32m"});
    body["environment"] = json!({"FOO": "bar"});
    let ended = run_to_end(&h, body).await;
    assert_eq!(ended["status"], "TERMINATED", "{ended}");
    assert_eq!(ended["exit_code"], 0);
    let id = ended["session_id"].as_str().unwrap();
    // The documents PostgreSQL builds are the API's types, to the field.
    let detail: gateway::model::SessionDetail =
        serde_json::from_value(ended.clone()).expect("the detail reads as a SessionDetail");
    assert_eq!(detail.containers.len(), 1);
    for row in h.history(id).await {
        serde_json::from_value::<gateway::model::HistoryEntry>(row.clone())
            .unwrap_or_else(|e| panic!("{e}: {row}"));
    }
    let output = logs(&h, id).await;
    assert!(
        output.contains("150000"),
        "1.5 cores as a CFS quota: {output}"
    );
    assert!(output.contains("268435456"), "256 MiB: {output}");
    assert!(output.contains("FOO=bar OMP=2"), "{output}");
    // Described from its creation, not inspected after its start (it publishes no port):
    // the host name the container has is the one recorded. It is a container's short id:
    // the kernel's own, or its spare sandbox's where one was ready when the session came
    // (a race the test leaves open; the sandbox's case has a test of its own).
    let container = &detail.containers[0];
    let hostname = container.hostname.as_deref().unwrap_or_default();
    assert!(
        hostname.len() == 12 && hostname.bytes().all(|b| b.is_ascii_hexdigit()),
        "{container:?}"
    );
    assert!(output.contains(&format!("HOST={hostname}")), "{output}");
    assert!(
        output.contains("size=32768k"),
        "32 MiB of shared memory: {output}"
    );
    // The container is removed once the end is recorded.
    wait_for(|| async { (containers_of(id).await == 0).then_some(()) }).await;

    // Long enough for the first sample's stats call (a second or more of the engine's time
    // when the machine is loaded) to finish before the container is gone.
    let failed = run_to_end(&h, batch("echo about to fail; sleep 3; exit 3")).await;
    assert_eq!(
        (failed["status"].as_str(), failed["exit_code"].as_i64()),
        (Some("TERMINATED"), Some(3))
    );
    // Sampled once at start, so even a session of seconds shows what it used.
    assert!(
        failed["usage"]["memory_bytes"].as_i64().unwrap_or(0) > 0,
        "{failed}"
    );
    assert!(failed["status_reason"]
        .as_str()
        .unwrap()
        .contains("failed with exit code 3"));
    assert!(logs(&h, failed["session_id"].as_str().unwrap())
        .await
        .contains("about to fail"));
}

#[tokio::test]
async fn timeouts_start_times_and_pull_failures_end_sessions_with_their_reason() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let mut body = batch("sleep 60");
    body["batch_timeout"] = json!(2);
    let ended = run_to_end(&h, body).await;
    assert_eq!(ended["status"], "TERMINATED", "{ended}");
    assert!(
        ended["status_reason"]
            .as_str()
            .unwrap()
            .contains("batch timeout"),
        "{ended}"
    );
    assert!(
        ended["status_reason"]
            .as_str()
            .unwrap()
            .contains("still running after 2 s"),
        "{ended}"
    );
    assert_ne!(ended["exit_code"], 0, "stopped, not finished: {ended}");

    // Three seconds from now by the database's clock, the clock `started_at` is read from.
    let starts_at = h.database_time_in(3).await;
    let mut body = batch("date");
    body["starts_at"] = json!(starts_at);
    let ended = run_to_end(&h, body).await;
    assert_eq!(ended["status"], "TERMINATED", "{ended}");
    let started: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(ended["started_at"].clone()).unwrap();
    assert!(
        started >= starts_at,
        "started {started}, reserved {starts_at}"
    );

    let mut body = batch("true");
    body["image"] = json!(ABSENT);
    let ended = run_to_end(&h, body).await;
    assert_eq!(ended["status"], "ERROR", "{ended}");
    let reason = ended["status_reason"].as_str().unwrap();
    assert!(
        reason.contains("pulling `registry.invalid/berth/absent:1` failed"),
        "{reason}"
    );
    let history = h.history(ended["session_id"].as_str().unwrap()).await;
    assert_eq!(
        history[0]["result"], "SUCCESS",
        "placed first, then the pull failed (`history.rs` reads the pull's own row)"
    );
}

#[tokio::test]
async fn folders_outlive_sessions_scratch_does_not_and_ports_are_published() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let (status, err) = h
        .post(&h.admin_key, "/v1/folders", json!({"name": "../etc"}))
        .await;
    assert_eq!(
        (status, err["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("name"))
    );
    let mut unknown = batch("true");
    unknown["mounts"] = json!(["nope"]);
    let (status, err) = h.create(&h.admin_key, unknown).await;
    assert_eq!(
        (status, err["error"]["field"].as_str()),
        (StatusCode::NOT_FOUND, Some("mounts[0]")),
        "a folder the owner does not have is missing data, not a malformed request"
    );
    let (status, _) = h
        .post(&h.admin_key, "/v1/folders", json!({"name": "data1"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = h
        .post(&h.admin_key, "/v1/folders", json!({"name": "data1"}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let mut first = batch(
        "echo kept > /home/work/data1/note && echo lost > /home/work/scratch && ls /home/work",
    );
    first["mounts"] = json!(["data1"]);
    let ended = run_to_end(&h, first).await;
    assert_eq!(ended["exit_code"], 0, "{ended}");
    let mut second =
        batch("cat /home/work/data1/note; test ! -e /home/work/scratch && echo scratch-gone");
    second["mounts"] = json!(["data1"]);
    let ended = run_to_end(&h, second).await;
    assert_eq!(ended["exit_code"], 0, "{ended}");
    let output = logs(&h, ended["session_id"].as_str().unwrap()).await;
    assert!(
        output.contains("kept") && output.contains("scratch-gone"),
        "{output}"
    );
    // Measured on its volume once a session that mounted it ended: the note alone in it.
    let (_, listed) = h.get(&h.admin_key, "/v1/folders").await;
    assert_eq!(listed["folders"][0]["volume"], "host-local", "{listed}");
    let usage = wait_for(|| async {
        let (_, listed) = h.get(&h.admin_key, "/v1/folders").await;
        let usage = listed["folders"][0]["usage"].clone();
        usage.is_object().then_some(usage)
    })
    .await;
    assert_eq!(usage["files"], 1, "{usage}");
    assert!(usage["bytes"].as_u64().unwrap() >= 5, "{usage}");

    let (status, created) = h
        .create(&h.admin_key, json!({"image": "berth/shell:latest", "resources": {"cpu": 0.5, "memory": "64m"},
            "preopen_ports": [8080], "startup_command": "echo served > index.html && httpd -f -p 8080"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let running = h
        .wait_session(&id, |s| {
            s["status"] == "RUNNING" && s["containers"][0]["ports"][0]["host"].is_u64()
        })
        .await;
    // An interactive session's ports also name its SSH server's and its terminal's.
    let port = running["containers"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["container"] == 8080)
        .expect("the preopen port is published")["host"]
        .as_u64()
        .unwrap();
    let typed: gateway::model::SessionDetail =
        serde_json::from_value(running.clone()).expect("a running detail reads as its type");
    assert_eq!(typed.request.preopen_ports, [8080]);
    events::tls::use_ring();
    let body = wait_for(|| async {
        let r = reqwest::get(format!("http://127.0.0.1:{port}/index.html"))
            .await
            .ok()?;
        r.text().await.ok().filter(|t| t.contains("served"))
    })
    .await;
    assert!(body.contains("served"));
    // Usage is sampled while it runs: memory in use, and the bytes the request moved.
    let sampled = h
        .wait_session(&id, |s| {
            s["usage"]["network_tx_bytes"]
                .as_u64()
                .is_some_and(|b| b > 0)
        })
        .await;
    assert!(
        sampled["usage"]["memory_bytes"].as_u64().unwrap() > 0,
        "{sampled}"
    );
    assert!(
        sampled["usage"]["cpu_seconds"].as_f64().is_some(),
        "{sampled}"
    );
    let (status, _) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let ended = h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    assert_eq!(
        ended["status_reason"], "terminated by admin@berth.local (stopped on request)",
        "who asked, then how the container stopped"
    );
    wait_for(|| async { (containers_of(&id).await == 0).then_some(()) }).await;
}

/// A session an agent was pulling the image of when it stopped is resumed by the agent started
/// again (here the image is there by then): it runs to its end, never ERROR for the restart.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_caught_pulling_by_an_agent_restart_is_resumed() {
    let h = start().await;
    let id = fresh_agent_id();
    // The agent placed on, then "stopped" mid-pull: its moves recorded as it would have.
    h.agent(&id, "default", 8).await;
    let mut body = batch("echo resumed");
    body["agent"] = json!(id);
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let session = ids(&created)[0].clone();
    h.wait_session(&session, |s| s["status"] == "SCHEDULED")
        .await;
    let session_id = Uuid::parse_str(&session).unwrap();
    for to in [SessionStatus::Preparing, SessionStatus::Pulling] {
        recorder::record::move_session(&h.pool, &id, session_id, to, None, None)
            .await
            .unwrap();
    }
    // The agent starts (again) and finds it PULLING, with no container.
    let _agent = docker_agent(&h, &id, &data_dir()).await;
    let ended = h
        .wait_session(&session, |s| {
            matches!(s["status"].as_str(), Some("TERMINATED" | "ERROR"))
        })
        .await;
    assert_eq!(ended["status"], "TERMINATED", "{ended}");
    assert_eq!(ended["exit_code"], 0, "{ended}");
    assert!(logs(&h, &session).await.contains("resumed"));
}

#[tokio::test]
async fn a_killed_agent_started_again_leaves_no_orphan_and_no_session_stuck() {
    let h = start().await;
    let agent_id = fresh_agent_id();
    let dir = data_dir();
    let first = docker_agent(&h, &agent_id, &dir).await;
    // Its two spares made ahead: the sessions' starts take them.
    wait_spares(&agent_id, 2).await;
    // The one that will survive is a batch session, which publishes no port: it runs in the
    // namespace of its spare's sandbox, which the restart must leave to it.
    let (_, created) = h.create(&h.admin_key, batch("sleep 600")).await;
    let survivor = ids(&created)[0].clone();
    h.wait_session(&survivor, |s| s["status"] == "RUNNING")
        .await;
    let sandbox = format!("{}-sandbox", network_of(&survivor).await);
    assert_eq!(joined_of(&survivor).await, Some(sandbox.clone()));
    let interactive =
        json!({"image": "berth/shell:latest", "resources": {"cpu": 0.5, "memory": "64m"}});
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let (_, created) = h.create(&h.admin_key, interactive.clone()).await;
        sessions.push(ids(&created)[0].clone());
    }
    sessions.push(survivor);
    for id in &sessions {
        h.wait_session(id, |s| s["status"] == "RUNNING").await;
    }
    let mut on_spares = 0;
    let mut held = Vec::new();
    for id in &sessions {
        let own = agent::docker::spec::network_name(Uuid::parse_str(id).unwrap());
        let network = network_of(id).await;
        if network != own {
            on_spares += 1;
        }
        held.push(network);
    }
    assert!(on_spares >= 2, "two spares were ready: {on_spares} taken");
    // The spares taken made again (a network for each session, two ready): none is being
    // made when the agent dies, whose making the engine would finish after the restart's
    // clean-up.
    wait_for(|| async { (networks_of(&agent_id).await.len() == 5).then_some(()) }).await;
    // The agent dies without cleaning up.
    kill(first).await;
    // Meanwhile: one session is force-terminated (its container is now an orphan), one loses
    // its container, one keeps running.
    let (status, _) = h
        .delete(
            &h.admin_key,
            &format!("/v1/sessions/{}?force=true", sessions[0]),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let docker = agent::docker::connect().await.unwrap();
    let gone = format!(
        "berth-{}-0",
        Uuid::parse_str(&sessions[1]).unwrap().simple()
    );
    docker
        .remove_container(
            &gone,
            Some(bollard::container::RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        containers_of(&sessions[0]).await,
        1,
        "the orphan is there before the restart"
    );

    let second = docker_agent(&h, &agent_id, &dir).await;
    wait_for(|| async { (containers_of(&sessions[0]).await == 0).then_some(()) }).await;
    // The restart's clean-up removed the spares no live session holds, never the survivor's
    // sandbox, whose namespace its kernel runs in.
    wait_spares_beside(&agent_id, &sandbox).await;
    let lost = h
        .wait_session(&sessions[1], |s| s["status"] == "ERROR")
        .await;
    assert!(
        lost["status_reason"]
            .as_str()
            .unwrap()
            .contains("container was gone"),
        "{lost}"
    );
    // The survivor is adopted: still running, and it stops on request.
    let (status, _) = h
        .delete(&h.admin_key, &format!("/v1/sessions/{}", sessions[2]))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.wait_session(&sessions[2], |s| s["status"] == "TERMINATED")
        .await;
    wait_for(|| async { (containers_of(&sessions[2]).await == 0).then_some(()) }).await;
    // The sessions' networks (their own, or the spares they took, the adopted one's too) are
    // gone: the restarted agent's clean-up of the others, the adopted session's end.
    wait_for(|| async {
        let left: Vec<String> = networks_of(&agent_id)
            .await
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| held.contains(name))
            .collect();
        left.is_empty().then_some(())
    })
    .await;
    assert!(
        !sandboxes_of(&agent_id)
            .await
            .iter()
            .any(|(name, _)| *name == sandbox),
        "the survivor's sandbox went with it"
    );
    second.stop.cancel();
    // Once it stopped, neither are the spares it kept ready.
    wait_for(|| async {
        let gone =
            networks_of(&agent_id).await.is_empty() && sandboxes_of(&agent_id).await.is_empty();
        gone.then_some(())
    })
    .await;
    let client = h.pool.get().await.unwrap();
    let stuck: i64 = client
        .query_one("SELECT count(*) FROM ledger.sessions WHERE status NOT IN ('TERMINATED','ERROR','CANCELLED')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stuck, 0);
    // Whatever the crash interrupted, the ledger is still exactly the fold of the log.
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

/// Until agent `agent_id` has its two spares ready beside the live one whose sandbox is
/// `sandbox`, which still runs.
async fn wait_spares_beside(agent_id: &str, sandbox: &str) {
    wait_for(|| async {
        let sandboxes = sandboxes_of(agent_id).await;
        let kept = sandboxes
            .iter()
            .any(|(name, running)| name == sandbox && *running);
        let ready = sandboxes.len() == 3 && sandboxes.iter().all(|(_, running)| *running);
        (kept && ready).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_batch_session_runs_in_its_spares_sandbox_and_leaves_neither_behind() {
    let h = start().await;
    let (agent_id, dir) = (fresh_agent_id(), data_dir());
    let _agent = docker_agent(&h, &agent_id, &dir).await;
    wait_spares(&agent_id, 2).await;
    let spares = sandboxes_of(&agent_id).await;
    let (status, created) = h
        .create(
            &h.admin_key,
            batch("ip -4 -o addr show eth0; echo HOST=$(hostname); sleep 600"),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let running = h.wait_session(&id, |s| s["status"] == "RUNNING").await;
    let network = network_of(&id).await;
    let sandbox = format!("{network}-sandbox");
    assert!(
        spares.iter().any(|(name, _)| *name == sandbox),
        "one of the spares ready: {sandbox} in {spares:?}"
    );
    assert_eq!(joined_of(&id).await, Some(sandbox.clone()));
    // The kernel has the sandbox's address on the spare's bridge, a subnet of the fence's pool.
    let docker = agent::docker::connect().await.unwrap();
    let bridge = docker
        .inspect_network::<String>(&network, None)
        .await
        .unwrap();
    let subnet = bridge.ipam.unwrap().config.unwrap()[0]
        .subnet
        .clone()
        .unwrap();
    assert!(subnet.starts_with("10.213."), "{subnet}");
    let output = wait_for(|| async {
        let output = logs(&h, &id).await;
        output.contains("inet ").then_some(output)
    })
    .await;
    let prefix = subnet.rsplit_once('.').unwrap().0;
    assert!(
        output.contains(&format!("inet {prefix}.")),
        "{output} on {subnet}"
    );
    // The host name recorded is the one it has: the sandbox's.
    let hostname = running["containers"][0]["hostname"]
        .as_str()
        .unwrap_or_default();
    assert!(!hostname.is_empty(), "{running}");
    let output = wait_for(|| async {
        let output = logs(&h, &id).await;
        output.contains("HOST=").then_some(output)
    })
    .await;
    assert!(
        output.contains(&format!("HOST={hostname}")),
        "{output}: {running}"
    );
    let (status, _) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    // Its sandbox and bridge went with it; two spares are ready again, neither of them its.
    wait_spares(&agent_id, 2).await;
    assert!(!sandboxes_of(&agent_id)
        .await
        .iter()
        .any(|(name, _)| *name == sandbox));
    assert!(!networks_of(&agent_id)
        .await
        .iter()
        .any(|(name, _)| *name == network));
}

#[tokio::test]
async fn a_session_whose_spare_network_was_removed_under_the_agent_runs_on_its_own() {
    let h = start().await;
    let (agent_id, dir) = (fresh_agent_id(), data_dir());
    let first = docker_agent(&h, &agent_id, &dir).await;
    wait_spares(&agent_id, 2).await;
    // An operator's removal of what no session uses (`docker rm -f` of the sandboxes, then
    // `docker network prune`).
    let docker = agent::docker::connect().await.unwrap();
    for (name, labels) in networks_of(&agent_id).await {
        assert!(labels.contains_key("ai.berth.spare"), "{name}: {labels:?}");
        let force = bollard::container::RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        docker
            .remove_container(&format!("{name}-sandbox"), Some(force))
            .await
            .unwrap();
        docker.remove_network(&name).await.unwrap();
    }
    let (status, created) = h.create(&h.admin_key, batch("sleep 600")).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| s["status"] == "RUNNING").await;
    let own = agent::docker::spec::network_name(Uuid::parse_str(&id).unwrap());
    assert_eq!(
        network_of(&id).await,
        own,
        "the session's own network, made at its start"
    );
    // The agent leaves while it makes the two spares again (after the start): once it is gone,
    // the only network of it left is the session's, which goes on running.
    depart(first).await;
    let left: Vec<String> = networks_of(&agent_id)
        .await
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(left, vec![own], "no spare outlives the agent's stop");
    assert_eq!(sandboxes_of(&agent_id).await, vec![], "nor a sandbox");
    let _second = docker_agent(&h, &agent_id, &dir).await;
    let (status, _) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
}

#[tokio::test]
async fn an_inference_session_that_dies_is_restarted_and_the_restart_recorded() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let (status, created) = h
        .create(&h.admin_key, json!({"type": "inference", "image": "berth/shell:latest",
            "resources": {"cpu": 0.5, "memory": "64m"}, "startup_command": "echo serving; sleep 1; exit 5"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let stream = format!("session-{}", Uuid::parse_str(&id).unwrap().simple());
    let reason = wait_for(|| async {
        let client = h.pool.get().await.unwrap();
        client
            .query_opt(
                "SELECT payload->>'reason' FROM events WHERE stream_id = $1
                   AND event_type = 'SessionStatusChanged' AND payload->>'to' = 'RESTARTING' LIMIT 1",
                &[&stream],
            )
            .await
            .unwrap()
            .map(|r| r.get::<_, String>(0))
    })
    .await;
    assert!(
        reason.contains("exited unexpectedly with code 5"),
        "{reason}"
    );
    // It comes back: RESTARTING -> RUNNING is in the log, and the container's output shows
    // its command ran a second time.
    wait_for(|| async {
        let client = h.pool.get().await.unwrap();
        client
            .query_opt(
                "SELECT 1 FROM events WHERE stream_id = $1 AND event_type = 'SessionStatusChanged'
                   AND payload->>'from' = 'RESTARTING' AND payload->>'to' = 'RUNNING'",
                &[&stream],
            )
            .await
            .unwrap()
    })
    .await;
    wait_for(|| async {
        let (_, body) = h
            .get(&h.admin_key, &format!("/v1/sessions/{id}/logs"))
            .await;
        let output = body["kernels"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (output.matches("serving").count() >= 2).then_some(())
    })
    .await;
    // And it still ends on request.
    let (status, _) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let ended = h
        .wait_session(&id, |s| {
            matches!(s["status"].as_str(), Some("TERMINATED" | "ERROR"))
        })
        .await;
    assert_eq!(ended["status"], "TERMINATED", "{ended}");
    wait_for(|| async { (containers_of(&id).await == 0).then_some(()) }).await;
}

#[tokio::test]
async fn a_cluster_of_three_kernels_finds_each_other_by_host_name() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    // A refused connection says the kernel answered (ping needs NET_RAW, which no session has).
    let mut body = batch(
        "echo HOSTS=$BERTH_CLUSTER_HOSTS ROLE=$BERTH_CLUSTER_ROLE; \
         for h in sub1 sub2; do nc -w 2 $h 9 </dev/null 2>&1 | grep -q refused && echo reached-$h; done",
    );
    body["cluster_size"] = json!(3);
    body["resources"] = json!({"cpu": 0.5, "memory": "64m"});
    let ended = run_to_end(&h, body).await;
    assert_eq!(
        (ended["status"].as_str(), ended["exit_code"].as_i64()),
        (Some("TERMINATED"), Some(0)),
        "{ended}"
    );
    // The detail lists each kernel with its host name, as the session detail panel shows it.
    let mut hostnames: Vec<&str> = ended["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["hostname"].as_str().unwrap_or_default())
        .collect();
    hostnames.sort();
    assert_eq!(hostnames, ["main1", "sub1", "sub2"], "{ended}");
    let id = ended["session_id"].as_str().unwrap();
    let output = logs(&h, id).await;
    assert!(
        output.contains("HOSTS=main1,sub1,sub2 ROLE=main"),
        "{output}"
    );
    assert!(
        output.contains("reached-sub1") && output.contains("reached-sub2"),
        "{output}"
    );
    wait_for(|| async { (containers_of(id).await == 0).then_some(()) }).await;
}

#[tokio::test]
async fn logs_stream_while_the_session_runs_and_end_with_it() {
    use futures::StreamExt;
    let h = start().await;
    let _agent = local_agent(&h).await;
    let (status, created) = h
        .create(
            &h.admin_key,
            batch("echo first; sleep 3; for i in 1 2 3 4 5; do echo line$i; sleep 0.3; done; echo second"),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| s["status"] == "RUNNING").await;
    let response = h
        .http
        .get(format!("{}/v1/sessions/{id}/logs?follow=true", h.base))
        .header("x-api-key", &h.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.bytes_stream();
    let mut seen = String::new();
    let mut first_while_running = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !seen.contains("event: end") {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("the stream ends")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if seen.contains("first") && !seen.contains("second") {
            let (_, s) = h.get(&h.admin_key, &format!("/v1/sessions/{id}")).await;
            first_while_running |= s["status"] == "RUNNING";
        }
    }
    assert!(
        first_while_running,
        "output arrived while the session ran: {seen}"
    );
    assert!(seen.contains("second"), "{seen}");
    // Kept a second at a time, read on from where the last keep ended: every line once.
    let kept = h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    assert_eq!(kept["exit_code"], 0, "{kept}");
    assert_eq!(
        logs(&h, &id).await,
        "first\nline1\nline2\nline3\nline4\nline5\nsecond\n"
    );
}

#[tokio::test]
async fn a_multi_node_cluster_spreads_its_kernels_over_agents_that_find_each_other() {
    let h = start().await;
    let suffix = &Uuid::new_v4().simple().to_string()[..8];
    let dir = data_dir();
    // Two agents with room for two half-core kernels each: three kernels need both.
    let _a = docker_agent_with(&h, &format!("nodea{suffix}"), &dir, 1_000).await;
    let _b = docker_agent_with(&h, &format!("nodeb{suffix}"), &dir, 1_000).await;
    let mut body =
        batch("for h in sub1 sub2; do nc -w 2 $h 9 </dev/null 2>&1 | grep -q refused && echo reached-$h; done");
    body["cluster_size"] = json!(3);
    body["cluster_mode"] = json!("multi-node");
    body["resources"] = json!({"cpu": 0.5, "memory": "64m"});
    let ended = run_to_end(&h, body).await;
    assert_eq!(
        (ended["status"].as_str(), ended["exit_code"].as_i64()),
        (Some("TERMINATED"), Some(0)),
        "{ended}"
    );
    let agents: std::collections::HashSet<&str> = ended["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["agent_id"].as_str().unwrap())
        .collect();
    assert_eq!(agents.len(), 2, "kernels on both agents: {ended}");
    let id = ended["session_id"].as_str().unwrap();
    let output = logs(&h, id).await;
    assert!(
        output.contains("reached-sub1") && output.contains("reached-sub2"),
        "{output}"
    );
    wait_for(|| async { (containers_of(id).await == 0).then_some(()) }).await;
}

/// The ids of a session's containers that an agent runs.
async fn container_ids(session: &str, agent: &str) -> Vec<String> {
    let docker = agent::docker::connect().await.unwrap();
    let filters = std::collections::HashMap::from([(
        "label".to_string(),
        vec![
            format!("ai.berth.session={session}"),
            format!("ai.berth.agent={agent}"),
        ],
    )]);
    let mut ids: Vec<String> = docker
        .list_containers(Some(bollard::container::ListContainersOptions {
            filters,
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn an_agent_restarted_mid_cluster_keeps_its_kernels_of_another_agents_session() {
    let h = start().await;
    let suffix = &Uuid::new_v4().simple().to_string()[..8];
    let dir = data_dir();
    let mut agents = std::collections::HashMap::new();
    for name in ["nodea", "nodeb"] {
        let id = format!("{name}{suffix}");
        let handle = docker_agent_with(&h, &id, &dir, 1_000).await;
        agents.insert(id, handle);
    }
    let body = json!({"image": "berth/shell:latest", "cluster_size": 3,
        "cluster_mode": "multi-node", "resources": {"cpu": 0.5, "memory": "64m"}});
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let running = h.wait_session(&id, |s| s["status"] == "RUNNING").await;
    let main_agent = running["agent_id"].as_str().unwrap().to_owned();
    let other = agents.keys().find(|a| **a != main_agent).unwrap().clone();
    let kernels_before = container_ids(&id, &other).await;
    assert!(!kernels_before.is_empty(), "{running}");

    // The agent holding the secondary kernels dies and comes back.
    let dying = agents.remove(&other).unwrap();
    kill(dying).await;
    let _back = docker_agent_with(&h, &other, &dir, 1_000).await;
    let registered = format!("agent-{other}");
    wait_for(|| async {
        let client = h.pool.get().await.unwrap();
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM events WHERE stream_id = $1 AND event_type = 'AgentRegistered'",
                &[&registered],
            )
            .await
            .unwrap()
            .get(0);
        (n == 2).then_some(())
    })
    .await;
    // Give a restart that wrongly cleared them many polls to show it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        container_ids(&id, &other).await,
        kernels_before,
        "the same kernels keep running"
    );
    let detail = h.wait_session(&id, |s| s["status"].is_string()).await;
    assert_eq!(detail["status"], "RUNNING");

    // Ending the session ends the adopted kernels too, with their output kept.
    let (status, _) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    wait_for(|| async { (containers_of(&id).await == 0).then_some(()) }).await;
    let kept = wait_for(|| async {
        let (_, body) = h
            .get(&h.admin_key, &format!("/v1/sessions/{id}/logs"))
            .await;
        let kernels = body["kernels"].as_array().cloned().unwrap_or_default();
        (kernels.len() == 3 && kernels.iter().all(|k| k["complete"] == true)).then_some(kernels)
    })
    .await;
    assert_eq!(kept.len(), 3);
}

#[tokio::test]
async fn an_image_built_on_the_host_is_offered_without_restarting_the_agent() {
    let h = start().await;
    let _agent = spawn_agent(
        &h,
        &fresh_agent_id(),
        &data_dir(),
        8_000,
        Some(Duration::from_millis(100)),
    )
    .await;
    let tag = format!(
        "berth/shell:fresh{}",
        &Uuid::new_v4().simple().to_string()[..8]
    );
    let body = json!({"type": "batch", "image": tag, "startup_command": "echo fresh",
        "resources": {"cpu": 0.5, "memory": "64m"}});
    let (status, refused) = h.create(&h.admin_key, body.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert_eq!(refused["error"]["field"], "image");

    let docker = agent::docker::connect().await.unwrap();
    let (repo, version) = tag.split_once(':').unwrap();
    docker
        .tag_image(
            "berth/shell:latest",
            Some(bollard::image::TagImageOptions { repo, tag: version }),
        )
        .await
        .unwrap();
    let created = wait_for(|| async {
        let (status, created) = h.create(&h.admin_key, body.clone()).await;
        (status == StatusCode::CREATED).then_some(created)
    })
    .await;
    let id = ids(&created)[0].clone();
    let ended = h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    assert_eq!(ended["exit_code"], 0, "{ended}");
    let _ = docker
        .remove_image(&tag, None::<bollard::image::RemoveImageOptions>, None)
        .await;
}
