//! What each kernel's container is to be, pure: a session, this agent and a GPU share in,
//! the engine's container configuration out (command, environment (GPU ordinals and MPS
//! limits too), folders, published ports, labels, the session's own network and host names,
//! device requests, cgroup limits, and the fence: dropped capabilities, no new privileges,
//! a process limit, a capped log, a private IPC namespace). Nothing here talks to the
//! engine, so every rule is unit-tested.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use bollard::container::{Config, NetworkingConfig};
use bollard::models::{
    DeviceRequest, EndpointSettings, HostConfig, HostConfigLogConfig, PortBinding,
};
use domain::aggregate::SessionState;
use uuid::Uuid;

use crate::gpu::GpuShare;

/// The session's working directory, and its scratch space.
pub const SCRATCH: &str = "/home/work";

/// The command of a kernel that has nothing to run: idle until terminated.
pub const IDLE: &str = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";

/// How a session's kernels are laid out, as far as this agent is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The kernels placed on this agent (all of them unless a multi-node cluster spread
    /// them), by index; 0 is the main kernel.
    pub mine: Vec<u32>,
    /// Each kernel's host name in the cluster (`main1`, `sub1`, `sub2`, ...).
    pub hosts: Vec<String>,
    /// The session's own network (a bridge of its own, for a single kernel too; an overlay
    /// across a swarm's engines for a cluster on several agents): its kernels share it, and
    /// no other session's container is on it.
    pub network: String,
    /// How many of the session's kernels each agent holds, by kernel: `local[k]` counts the
    /// kernels before `k` on `k`'s agent (its rank there).
    pub local_rank: Vec<u32>,
    /// Whether the kernels are on more than one agent.
    pub spans_agents: bool,
    /// The container (by its id) whose network namespace a single kernel joins instead of
    /// an endpoint of its own on `network` (a spare's sandbox, [`super::spares`]); `None` for
    /// the rest.
    pub sandbox: Option<String>,
}

impl Layout {
    /// Whether the session is a cluster (more than one kernel).
    pub fn cluster(&self) -> bool {
        self.hosts.len() > 1
    }
}

/// The capabilities of Docker's default set a session's containers run without:
/// - `NET_RAW`: raw sockets (ARP and DNS spoofing on a bridge, crafted packets);
/// - `MKNOD`: device nodes;
/// - `SETFCAP`, `SETPCAP`: granting file or process capabilities.
///
/// Kept, because sessions' images need them as root without sudo: `CHOWN`, `DAC_OVERRIDE`,
/// `FOWNER`, `FSETID` (package managers, files in mounted folders), `SETUID`, `SETGID`,
/// `SYS_CHROOT`, `AUDIT_WRITE` (sshd's privilege separation and PAM), `KILL`,
/// `NET_BIND_SERVICE` (an app on a low port).
pub const DROPPED_CAPABILITIES: &[&str] = &["NET_RAW", "MKNOD", "SETFCAP", "SETPCAP"];

/// How many files of a container's output the engine keeps, each at most the session's log
/// cap (of the engine's JSON lines, which add some 70 bytes to each line of output): what
/// the agent reads at once is bounded by about twice the cap, and so is the host's disk.
pub const LOG_FILES: u64 = 2;

/// The labels every container of berth carries: its session, its agent and its kernel's
/// index, by which a restarted agent finds what an earlier run left.
pub(super) const LABEL_SESSION: &str = "ai.berth.session";
/// Where berth's runtime is lent to each container, read-only.
pub const RUNTIME_MOUNT: &str = "/opt/berth";
pub(super) const LABEL_AGENT: &str = "ai.berth.agent";
pub(super) const LABEL_KERNEL: &str = "ai.berth.kernel";
/// The GPUs a container holds (`gpu::GpuShare::to_label`).
pub(super) const LABEL_GPUS: &str = "ai.berth.gpus";
/// The host port the agent serves a session's terminal on (see `terminal`), on its main
/// kernel; empty on every other container, so that none takes the value from an image
/// committed from a session.
pub(super) const LABEL_TERMINAL_PORT: &str = "ai.berth.terminal-port";
/// The network a container is on: the session's own by its name, or a spare bridge made
/// ahead ([`super::spares`]), whose name does not tell its session.
pub(super) const LABEL_NETWORK: &str = "ai.berth.network";

/// The name of kernel `kernel`'s container of a session.
pub(crate) fn container_name(session_id: Uuid, kernel: u32) -> String {
    format!("berth-{}-{kernel}", session_id.simple())
}

/// The name of a session's cluster network.
pub fn network_name(session_id: Uuid) -> String {
    format!("berth-{}", session_id.simple())
}

/// The name of the sandbox on spare network `network` ([`super::spares`]).
pub fn sandbox_name(network: &str) -> String {
    format!("{network}-sandbox")
}

/// The layout of `state`'s kernels for the agent `agent_id`.
pub fn layout(state: &SessionState, agent_id: &str) -> Layout {
    let size = state.request.cluster_size.max(1);
    let mine = if state.kernels.is_empty() {
        (0..size).collect()
    } else {
        (0..size)
            .filter(|k| {
                state
                    .kernels
                    .get(*k as usize)
                    .is_none_or(|p| p.agent_id == agent_id)
            })
            .collect()
    };
    let hosts = (0..size)
        .map(|k| {
            if k == 0 {
                "main1".to_string()
            } else {
                format!("sub{k}")
            }
        })
        .collect();
    let agent_of = |k: u32| state.kernels.get(k as usize).map(|p| p.agent_id.as_str());
    let local_rank = (0..size)
        .map(|k| (0..k).filter(|j| agent_of(*j) == agent_of(k)).count() as u32)
        .collect();
    let spans_agents = (1..size).any(|k| agent_of(k) != agent_of(0));
    Layout {
        mine,
        hosts,
        network: network_name(state.request.session_id),
        local_rank,
        spans_agents,
        sandbox: None,
    }
}

/// Whether `state`'s main kernel publishes ports (its image's apps, the preopen ports), which
/// only a container with a network endpoint of its own can.
pub fn publishes_ports(state: &SessionState) -> bool {
    !published_ports(state).is_empty()
}

/// The ports `state`'s main kernel publishes: its image's apps, the preopen ports, and SSH's
/// for an interactive session.
fn published_ports(state: &SessionState) -> Vec<u16> {
    let request = &state.request;
    let interactive = request.session_type.is_attended();
    domain::apps::published_ports(&request.apps, &request.preopen_ports, interactive)
}

/// The port berth names to a cluster's frameworks as the main kernel's (`MASTER_PORT`, and
/// every worker's in `TF_CONFIG`), as Backend.AI does.
pub const CLUSTER_PORT: u16 = 12345;

/// Where each of the session's folders lives on this host, and the bind that mounts it at
/// `/home/work/<name>` (read-only for a read-only share): under the mount of its volume (`volumes`, the shared volumes this host
/// mounts) when the request puts it on one, else under `data_dir`, each under
/// `folders/<owner>/<name>`, the owner being whoever shared it with the session's owner. A
/// folder on a volume this host does not mount is an error naming
/// it (the scheduler places such a session only where all are mounted).
pub fn folders(
    state: &SessionState,
    data_dir: &Path,
    volumes: &BTreeMap<String, PathBuf>,
) -> Result<Vec<(PathBuf, String)>, String> {
    let request = &state.request;
    request
        .mounts
        .iter()
        .map(|folder| {
            let root = match request.volumes.get(folder) {
                Some(volume) if volume != domain::volumes::HOST_LOCAL => {
                    volumes.get(volume).ok_or_else(|| {
                        format!("folder `{folder}` is on volume `{volume}`, which this host does not mount")
                    })?
                }
                _ => data_dir,
            };
            // A folder shared with the session's owner lives under its own owner's folders,
            // and a read-only share is bound read-only.
            let shared = request.shared_mounts.get(folder);
            let owner = shared.map_or(request.owner.user_id, |s| s.owner);
            let host = root
                .join("folders")
                .join(owner.simple().to_string())
                .join(folder);
            let read_only = if shared.is_some_and(|s| s.read_only) {
                ":ro"
            } else {
                ""
            };
            let bind = format!("{}:/home/work/{folder}{read_only}", host.display());
            Ok((host, bind))
        })
        .collect()
}

/// The environment every kernel of the session shares: the request's variables, the OpenMP
/// thread count (the session's, unless the request sets its own), the session's id and name,
/// and for a cluster its size and host names.
fn session_environment(state: &SessionState, layout: &Layout) -> Vec<String> {
    let request = &state.request;
    let mut env: Vec<String> = request
        .environment
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !request.environment.contains_key("OMP_NUM_THREADS") {
        env.push(format!("OMP_NUM_THREADS={}", request.omp_num_threads));
    }
    env.push(format!("BERTH_SESSION_ID={}", request.session_id));
    env.push(format!("BERTH_SESSION_NAME={}", state.name));
    if layout.cluster() {
        env.push(format!("BERTH_CLUSTER_SIZE={}", layout.hosts.len()));
        env.push(format!("BERTH_CLUSTER_HOSTS={}", layout.hosts.join(",")));
    }
    env
}

/// What kernel `k` of a cluster is told of its place in it: berth's own variables, Backend.AI's
/// (`BACKENDAI_CLUSTER_*`, whose index is one-based within a role) and those PyTorch's and
/// TensorFlow's launchers read (`WORLD_SIZE`, `WORLD_RANK`, `LOCAL_RANK`, `MASTER_ADDR`,
/// `MASTER_PORT`, `TF_CONFIG`).
fn cluster_environment(layout: &Layout, k: u32) -> Vec<String> {
    let size = layout.hosts.len();
    let host = &layout.hosts[k as usize];
    let role = if k == 0 { "main" } else { "sub" };
    // main1 is the first main; sub<k> the k-th sub.
    let role_index = if k == 0 { 1 } else { k };
    let workers: Vec<String> = layout
        .hosts
        .iter()
        .map(|h| format!("{h}:{CLUSTER_PORT}"))
        .collect();
    let tf_config = serde_json::json!({
        "cluster": {"worker": workers},
        "task": {"type": "worker", "index": k},
    });
    vec![
        format!("BERTH_CLUSTER_ROLE={role}"),
        format!("BERTH_CLUSTER_IDX={k}"),
        format!("BERTH_CLUSTER_HOST={host}"),
        format!("BACKENDAI_CLUSTER_SIZE={size}"),
        format!("BACKENDAI_CLUSTER_HOSTS={}", layout.hosts.join(",")),
        format!("BACKENDAI_CLUSTER_REPLICAS=main:1,sub:{}", size - 1),
        format!("BACKENDAI_CLUSTER_HOST={host}"),
        format!("BACKENDAI_CLUSTER_IDX={role_index}"),
        format!("BACKENDAI_CLUSTER_ROLE={role}"),
        format!("BACKENDAI_CLUSTER_LOCAL_RANK={k}"),
        format!("WORLD_SIZE={size}"),
        format!("WORLD_RANK={k}"),
        format!("LOCAL_RANK={}", layout.local_rank[k as usize]),
        format!("MASTER_ADDR={}", layout.hosts[0]),
        format!("MASTER_PORT={CLUSTER_PORT}"),
        format!("TF_CONFIG={tf_config}"),
    ]
}

/// The engine configuration of kernel `k` of `state`, run by `agent_id`, with `binds` for
/// its folders and `gpu` for its share of the host's GPUs.
pub fn kernel_config(
    state: &SessionState,
    agent_id: &str,
    layout: &Layout,
    k: u32,
    binds: &[String],
    gpu: &GpuShare,
    publish_address: &str,
) -> Config<String> {
    let request = &state.request;
    let main = k == 0;
    let host = &layout.hosts[k as usize];
    let mut env = session_environment(state, layout);
    env.extend(gpu.environment());
    if layout.cluster() {
        env.extend(cluster_environment(layout, k));
    }
    let mut labels = HashMap::from([
        (LABEL_SESSION.to_string(), request.session_id.to_string()),
        (LABEL_AGENT.to_string(), agent_id.to_owned()),
        (LABEL_KERNEL.to_string(), k.to_string()),
        (LABEL_NETWORK.to_string(), layout.network.clone()),
    ]);
    if !gpu.devices.is_empty() {
        labels.insert(LABEL_GPUS.to_string(), gpu.to_label());
    }
    // Only devices the engine can attach are asked of it: a mock device is in the labels and
    // the environment alone, so its container runs where no GPU is.
    let device_requests = (gpu.attach && !gpu.devices.is_empty()).then(|| {
        vec![DeviceRequest {
            driver: Some("nvidia".into()),
            device_ids: Some(gpu.device_ids()),
            capabilities: Some(vec![vec!["gpu".into()]]),
            ..Default::default()
        }]
    });
    // A kernel the engine attaches no device to sees none, even where the host's default
    // runtime is nvidia and the image says `NVIDIA_VISIBLE_DEVICES=all` (the container's
    // environment overrides the image's; the request's may not name it).
    if device_requests.is_none() {
        env.push("NVIDIA_VISIBLE_DEVICES=void".into());
    }
    // The image's app ports and the preopen ports are published on the main kernel, each on
    // a free port of the host at `publish_address` alone: berth's proxy is the only door.
    let published = published_ports(state);
    let ports = || published.iter().map(|p| format!("{p}/tcp"));
    let exposed: HashMap<String, HashMap<(), ()>> = ports().map(|p| (p, HashMap::new())).collect();
    let bindings: HashMap<String, Option<Vec<PortBinding>>> = ports()
        .map(|p| {
            let any_host_port = PortBinding {
                host_ip: Some(publish_address.to_owned()),
                host_port: Some(String::new()),
            };
            (p, Some(vec![any_host_port]))
        })
        .collect();
    // The main kernel runs the startup command (or idles until terminated); the others idle.
    let command = match (&request.startup_command, main) {
        (Some(command), true) => command.clone(),
        _ => IDLE.to_owned(),
    };
    // A kernel that joins a sandbox's namespace has no endpoint, ports or host name of its
    // own to give (the engine refuses them); the sandbox's are its.
    let joined = layout.sandbox.as_ref().map(|s| format!("container:{s}"));
    let networking_config = joined.is_none().then(|| NetworkingConfig {
        endpoints_config: HashMap::from([(
            layout.network.clone(),
            EndpointSettings {
                aliases: layout.cluster().then(|| vec![host.clone()]),
                ..Default::default()
            },
        )]),
    });
    let publishes = main && joined.is_none();
    let resources = &request.resources;
    let fence = request.fence();
    // Every container has an IPC namespace and /dev/shm of its own. A fraction that reaches
    // the host's MPS daemon gets its pipe directory and the daemon's shared memory (the
    // host's /dev/shm, which MPS clients share with their server, as NVIDIA's Kubernetes
    // device plugin mounts it): the trade-off docs/operations.md tells.
    let mut binds = binds.to_vec();
    if let Some(dir) = &gpu.mps_pipe_dir {
        binds.push(format!("{0}:{0}", dir.display()));
        binds.push("/dev/shm:/dev/shm".into());
    }
    let log_config = HostConfigLogConfig {
        typ: Some("json-file".into()),
        config: Some(HashMap::from([
            ("max-size".to_string(), fence.log_bytes.to_string()),
            ("max-file".to_string(), LOG_FILES.to_string()),
        ])),
    };
    Config {
        image: Some(request.image.clone()),
        cmd: Some(vec!["/bin/sh".into(), "-c".into(), command]),
        env: Some(env),
        labels: Some(labels),
        hostname: layout.cluster().then(|| host.clone()),
        exposed_ports: publishes.then_some(exposed),
        working_dir: Some("/home/work".into()),
        // Scratch space is a volume of its own: removed with the container, and never part of
        // an image the session is committed to.
        volumes: Some(HashMap::from([(SCRATCH.to_owned(), HashMap::new())])),
        networking_config,
        host_config: Some(HostConfig {
            nano_cpus: Some(resources.cpu_milli as i64 * 1_000_000),
            memory: Some(resources.memory_bytes as i64),
            // No swap beyond the memory asked for.
            memory_swap: Some(resources.memory_bytes as i64),
            shm_size: Some(request.shared_memory_bytes as i64),
            binds: Some(binds),
            ipc_mode: Some("private".into()),
            port_bindings: publishes.then_some(bindings),
            device_requests,
            network_mode: Some(joined.unwrap_or_else(|| layout.network.clone())),
            cap_drop: Some(DROPPED_CAPABILITIES.iter().map(|c| c.to_string()).collect()),
            security_opt: Some(vec!["no-new-privileges".into()]),
            pids_limit: Some(i64::from(fence.pids)),
            log_config: Some(log_config),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use domain::payloads::*;

    use super::*;
    use crate::gpu::Gpu;

    fn session(cluster_size: u32) -> SessionState {
        let request = SessionRequested {
            name: "job1".into(),
            session_type: SessionType::Batch,
            environment: BTreeMap::from([("LANG".into(), "C.UTF-8".into())]),
            resources: ResourceSlots {
                cpu_milli: 1500,
                memory_bytes: 256 << 20,
                gpu_milli: 0,
            },
            shared_memory_bytes: 64 << 20,
            cluster_size,
            preopen_ports: vec![8080],
            mounts: vec!["data".into()],
            startup_command: Some("echo hi".into()),
            omp_num_threads: 2,
            ..domain::fixtures::session_requested()
        };
        SessionState::requested(&request)
    }

    fn no_gpu() -> GpuShare {
        GpuShare::default()
    }

    fn env_of(config: &Config<String>) -> Vec<String> {
        config.env.clone().unwrap()
    }

    #[test]
    fn the_environment_carries_the_request_omp_default_and_the_session() {
        let state = session(1);
        let layout = layout(&state, "a1");
        let config = kernel_config(&state, "a1", &layout, 0, &[], &no_gpu(), "127.0.0.1");
        let env = env_of(&config);
        assert!(env.contains(&"LANG=C.UTF-8".into()));
        assert!(env.contains(&"OMP_NUM_THREADS=2".into()), "{env:?}");
        assert!(env.contains(&format!("BERTH_SESSION_ID={}", state.request.session_id)));
        assert!(env.contains(&"BERTH_SESSION_NAME=job1".into()));
        assert!(
            !env.iter().any(|v| v.starts_with("BERTH_CLUSTER")),
            "{env:?}"
        );

        let mut own = session(1);
        own.request
            .environment
            .insert("OMP_NUM_THREADS".into(), "7".into());
        let env = env_of(&kernel_config(
            &own,
            "a1",
            &layout,
            0,
            &[],
            &no_gpu(),
            "127.0.0.1",
        ));
        let omp: Vec<&String> = env.iter().filter(|v| v.starts_with("OMP_")).collect();
        assert_eq!(omp, ["OMP_NUM_THREADS=7"], "the request's own value wins");
    }

    #[test]
    fn limits_are_the_requested_resources_with_no_swap() {
        let state = session(1);
        let layout = layout(&state, "a1");
        let host = kernel_config(&state, "a1", &layout, 0, &[], &no_gpu(), "127.0.0.1")
            .host_config
            .unwrap();
        assert_eq!(host.nano_cpus, Some(1_500_000_000));
        assert_eq!(host.memory, Some(256 << 20));
        assert_eq!(host.memory_swap, host.memory);
        assert_eq!(host.shm_size, Some(64 << 20));
        assert_eq!(host.device_requests, None);
    }

    #[test]
    fn a_folder_shared_with_the_owner_is_bound_from_its_owners_folders_read_only_as_shared() {
        let mut state = session(1);
        let alice = Uuid::now_v7();
        state.request.mounts = vec!["data".into(), "set".into()];
        state.request.shared_mounts = BTreeMap::from([(
            "set".to_string(),
            SharedMount {
                owner: alice,
                read_only: true,
            },
        )]);
        let binds = folders(&state, Path::new("/var/berth"), &BTreeMap::new()).unwrap();
        assert_eq!(
            binds[1].1,
            format!(
                "/var/berth/folders/{}/set:/home/work/set:ro",
                alice.simple()
            )
        );
        assert!(
            binds[0].1.ends_with("/data:/home/work/data"),
            "{}",
            binds[0].1
        );
    }

    #[test]
    fn a_folder_on_a_shared_volume_is_bound_from_where_this_host_mounts_it() {
        let mut state = session(1);
        state.request.mounts = vec!["data".into(), "mine".into()];
        state.request.volumes = BTreeMap::from([("data".into(), "shared".into())]);
        let owner = state.request.owner.user_id.simple();
        let mounted = BTreeMap::from([("shared".to_string(), PathBuf::from("/mnt/nfs"))]);
        let found = folders(&state, Path::new("/data"), &mounted).unwrap();
        assert_eq!(
            found
                .iter()
                .map(|(host, _)| host.clone())
                .collect::<Vec<_>>(),
            [
                PathBuf::from(format!("/mnt/nfs/folders/{owner}/data")),
                PathBuf::from(format!("/data/folders/{owner}/mine")),
            ]
        );
        let missing = folders(&state, Path::new("/data"), &BTreeMap::new()).unwrap_err();
        assert!(missing.contains("volume `shared`"), "{missing}");
    }

    #[test]
    fn folders_are_bound_under_the_owners_directory() {
        let state = session(1);
        let found = folders(&state, Path::new("/data"), &BTreeMap::new()).unwrap();
        let owner = state.request.owner.user_id.simple();
        assert_eq!(
            found,
            [(
                PathBuf::from(format!("/data/folders/{owner}/data")),
                format!("/data/folders/{owner}/data:/home/work/data")
            )]
        );
        let binds: Vec<String> = found.into_iter().map(|(_, b)| b).collect();
        let layout = layout(&state, "a1");
        let config = kernel_config(&state, "a1", &layout, 0, &binds, &no_gpu(), "127.0.0.1");
        assert_eq!(config.host_config.unwrap().binds, Some(binds));
        assert_eq!(config.working_dir.as_deref(), Some("/home/work"));
        assert!(
            config.volumes.unwrap().contains_key("/home/work"),
            "scratch is a volume, outside any committed image"
        );
    }

    #[test]
    fn app_and_preopen_ports_are_published_on_the_main_kernel_only_on_the_agents_address() {
        let mut state = session(2);
        state.request.apps = domain::apps::parse_service_ports("jupyter:http:8888").unwrap();
        let layout = layout(&state, "a1");
        let main = kernel_config(&state, "a1", &layout, 0, &[], &no_gpu(), "10.0.0.5");
        let exposed = main.exposed_ports.unwrap();
        assert!(exposed.contains_key("8080/tcp"));
        assert!(exposed.contains_key("8888/tcp"), "the image's app");
        let bindings = main.host_config.unwrap().port_bindings.unwrap();
        for port in ["8080/tcp", "8888/tcp"] {
            let binding = &bindings[port].as_ref().unwrap()[0];
            assert_eq!(binding.host_port.as_deref(), Some(""), "the engine picks");
            assert_eq!(
                binding.host_ip.as_deref(),
                Some("10.0.0.5"),
                "never every interface"
            );
        }
        let sub = kernel_config(&state, "a1", &layout, 1, &[], &no_gpu(), "127.0.0.1");
        assert_eq!(sub.exposed_ports, None);
        assert_eq!(sub.host_config.unwrap().port_bindings, None);
    }

    #[test]
    fn labels_name_the_session_agent_kernel_and_network() {
        let state = session(1);
        let layout = layout(&state, "a1");
        let labels = kernel_config(&state, "a1", &layout, 0, &[], &no_gpu(), "127.0.0.1")
            .labels
            .unwrap();
        assert_eq!(labels[LABEL_SESSION], state.request.session_id.to_string());
        assert_eq!(labels[LABEL_AGENT], "a1");
        assert_eq!(labels[LABEL_KERNEL], "0");
        assert_eq!(labels[LABEL_NETWORK], layout.network);
        assert!(!labels.contains_key(LABEL_GPUS));
    }

    #[test]
    fn a_cluster_shares_a_network_where_each_kernel_has_a_host_name() {
        let state = session(3);
        let layout = layout(&state, "a1");
        assert_eq!(layout.mine, [0, 1, 2]);
        assert_eq!(layout.hosts, ["main1", "sub1", "sub2"]);
        let net = network_name(state.request.session_id);
        assert_eq!(layout.network, net);
        assert!(layout.cluster());

        let main = kernel_config(&state, "a1", &layout, 0, &[], &no_gpu(), "127.0.0.1");
        let sub = kernel_config(&state, "a1", &layout, 2, &[], &no_gpu(), "127.0.0.1");
        let env = env_of(&sub);
        for wanted in [
            "BERTH_CLUSTER_SIZE=3",
            "BERTH_CLUSTER_HOSTS=main1,sub1,sub2",
            "BERTH_CLUSTER_ROLE=sub",
            "BERTH_CLUSTER_IDX=2",
            "BERTH_CLUSTER_HOST=sub2",
        ] {
            assert!(env.contains(&wanted.to_string()), "{wanted} in {env:?}");
        }
        assert!(env_of(&main).contains(&"BERTH_CLUSTER_ROLE=main".into()));
        assert_eq!(sub.hostname.as_deref(), Some("sub2"));
        assert_eq!(
            sub.cmd.unwrap()[2],
            IDLE,
            "only the main kernel runs the command"
        );
        assert_eq!(main.cmd.unwrap()[2], "echo hi");
        let endpoint = &sub.networking_config.unwrap().endpoints_config[&net];
        assert_eq!(endpoint.aliases, Some(vec!["sub2".to_string()]));
        assert_eq!(sub.host_config.unwrap().network_mode, Some(net));
    }

    /// A cluster of one kernel per agent named, on those agents in order.
    fn spread_over(agents: &[&str]) -> SessionState {
        let mut state = session(agents.len() as u32);
        state.kernels = agents
            .iter()
            .map(|agent| KernelPlacement {
                agent_id: (*agent).into(),
                resources: state.request.resources,
            })
            .collect();
        state
    }

    #[test]
    fn a_spread_cluster_lays_out_only_this_agents_kernels() {
        let state = spread_over(&["a1", "a2", "a1"]);
        assert_eq!(layout(&state, "a1").mine, [0, 2]);
        assert_eq!(layout(&state, "a2").mine, [1]);
        assert!(layout(&state, "a1").spans_agents);
        assert!(!layout(&session(3), "a1").spans_agents, "all on one agent");
    }

    #[test]
    fn each_kernel_of_a_cluster_is_told_its_place_as_backend_ai_and_the_launchers_name_it() {
        let state = spread_over(&["a1", "a2", "a1"]);
        let layout = layout(&state, "a1");
        let env = |k| {
            env_of(&kernel_config(
                &state,
                "a1",
                &layout,
                k,
                &[],
                &no_gpu(),
                "127.0.0.1",
            ))
        };
        let main = env(0);
        for wanted in [
            "BACKENDAI_CLUSTER_SIZE=3",
            "BACKENDAI_CLUSTER_HOSTS=main1,sub1,sub2",
            "BACKENDAI_CLUSTER_REPLICAS=main:1,sub:2",
            "BACKENDAI_CLUSTER_HOST=main1",
            "BACKENDAI_CLUSTER_ROLE=main",
            "BACKENDAI_CLUSTER_IDX=1",
            "BACKENDAI_CLUSTER_LOCAL_RANK=0",
            "WORLD_SIZE=3",
            "WORLD_RANK=0",
            "LOCAL_RANK=0",
            "MASTER_ADDR=main1",
            "MASTER_PORT=12345",
        ] {
            assert!(main.contains(&wanted.to_string()), "{wanted} in {main:?}");
        }
        // The third kernel: the second sub, and the second kernel on its agent.
        let sub2 = env(2);
        for wanted in [
            "BACKENDAI_CLUSTER_ROLE=sub",
            "BACKENDAI_CLUSTER_IDX=2",
            "BACKENDAI_CLUSTER_LOCAL_RANK=2",
            "WORLD_RANK=2",
            "LOCAL_RANK=1",
        ] {
            assert!(sub2.contains(&wanted.to_string()), "{wanted} in {sub2:?}");
        }
        let tf: serde_json::Value = serde_json::from_str(
            sub2.iter()
                .find_map(|v| v.strip_prefix("TF_CONFIG="))
                .expect("TF_CONFIG"),
        )
        .unwrap();
        assert_eq!(
            tf,
            serde_json::json!({"cluster": {"worker": ["main1:12345", "sub1:12345", "sub2:12345"]},
                               "task": {"type": "worker", "index": 2}})
        );
    }

    #[test]
    fn a_gpu_share_becomes_a_device_request_a_label_and_its_mps_limits() {
        let mut state = session(1);
        state.request.resources.gpu_milli = 500;
        let gpus = [Gpu {
            index: 0,
            uuid: "GPU-0".into(),
            name: "Test GPU".into(),
            memory_bytes: 16 << 30,
        }];
        let share = crate::gpu::assign(500, &gpus, &HashMap::new(), 1000, true);
        let layout = layout(&state, "a1");
        let config = kernel_config(&state, "a1", &layout, 0, &[], &share, "127.0.0.1");
        let host = config.host_config.unwrap();
        let request = &host.device_requests.unwrap()[0];
        assert_eq!(request.driver.as_deref(), Some("nvidia"));
        assert_eq!(request.device_ids, Some(vec!["GPU-0".to_string()]));
        assert_eq!(config.labels.unwrap()[LABEL_GPUS], "GPU-0=500");
        let env = config.env.unwrap();
        for wanted in [
            "CUDA_VISIBLE_DEVICES=0",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M",
        ] {
            assert!(env.iter().any(|e| e == wanted), "{wanted} in {env:?}");
        }
        assert_eq!(
            host.ipc_mode.as_deref(),
            Some("private"),
            "no MPS daemon named: nothing shared"
        );
        assert!(
            !env.iter().any(|e| e.starts_with("NVIDIA_VISIBLE_DEVICES")),
            "the runtime names the devices it attaches"
        );
        // With the host's MPS daemon: its pipe directory and shared memory, to reach it, and
        // never the host's IPC namespace.
        let daemon = share.through_mps(Some(Path::new("/tmp/nvidia-mps")));
        let config = kernel_config(&state, "a1", &layout, 0, &[], &daemon, "127.0.0.1");
        let host = config.host_config.unwrap();
        assert_eq!(host.ipc_mode.as_deref(), Some("private"));
        assert_eq!(
            host.binds,
            Some(vec![
                "/tmp/nvidia-mps:/tmp/nvidia-mps".into(),
                "/dev/shm:/dev/shm".into()
            ])
        );
        assert!(config
            .env
            .unwrap()
            .contains(&"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps".to_string()));
    }

    #[test]
    fn mock_devices_are_labelled_and_told_but_never_asked_of_the_engine() {
        let mut state = session(1);
        state.request.resources.gpu_milli = 1000;
        let mock = crate::gpu::MockGpus {
            count: 2,
            memory_bytes: 16 << 30,
            model: "Mock".into(),
            usage_file: None,
        };
        let found = crate::gpu::Accelerators::discover(&mock);
        let held = HashMap::from([("mock-gpu-0".to_string(), 1000)]);
        let share = crate::gpu::assign(1000, found.gpus(), &held, 1000, false);
        let layout = layout(&state, "a1");
        let config = kernel_config(&state, "a1", &layout, 0, &[], &share, "127.0.0.1");
        assert_eq!(config.host_config.unwrap().device_requests, None);
        assert_eq!(config.labels.unwrap()[LABEL_GPUS], "mock-gpu-1=1000");
        let env = config.env.unwrap();
        assert!(
            env.iter().any(|e| e == "BERTH_GPU_DEVICES=mock-gpu-1"),
            "{env:?}"
        );
        assert!(env.iter().any(|e| e == "CUDA_VISIBLE_DEVICES=0"), "{env:?}");
        assert!(!env.iter().any(|e| e.starts_with("CUDA_MPS")), "{env:?}");
        assert!(
            env.iter().any(|e| e == "NVIDIA_VISIBLE_DEVICES=void"),
            "a mock device is no real one: {env:?}"
        );
    }

    #[test]
    fn a_kernel_without_a_device_sees_none_whatever_the_hosts_runtime() {
        let state = session(1);
        let layout = layout(&state, "a1");
        let env = env_of(&kernel_config(
            &state,
            "a1",
            &layout,
            0,
            &[],
            &no_gpu(),
            "127.0.0.1",
        ));
        assert!(env.contains(&"NVIDIA_VISIBLE_DEVICES=void".to_string()));
    }

    #[test]
    fn every_container_is_fenced_by_capabilities_privileges_processes_and_log_size() {
        let mut state = session(1);
        state.request.pids_limit = Some(128);
        state.request.log_limit_bytes = Some(64 << 10);
        let layout = layout(&state, "a1");
        let config = kernel_config(&state, "a1", &layout, 0, &[], &no_gpu(), "127.0.0.1");
        let host = config.host_config.unwrap();
        let dropped = host.cap_drop.unwrap();
        for cap in ["NET_RAW", "MKNOD", "SETFCAP", "SETPCAP"] {
            assert!(dropped.contains(&cap.to_string()), "{cap} in {dropped:?}");
        }
        assert!(!dropped.contains(&"SETUID".to_string()), "sshd needs it");
        assert_eq!(host.security_opt, Some(vec!["no-new-privileges".into()]));
        assert_eq!(host.pids_limit, Some(128));
        assert_eq!(host.ipc_mode.as_deref(), Some("private"));
        let log = host.log_config.unwrap();
        assert_eq!(log.typ.as_deref(), Some("json-file"));
        let opts = log.config.unwrap();
        assert_eq!(opts["max-size"], (64 << 10).to_string(), "the cap a file");
        assert_eq!(opts["max-file"], "2");

        // A request recorded before the policy's bounds: the defaults.
        let mut old = session(1);
        old.request.pids_limit = None;
        old.request.log_limit_bytes = None;
        let host = kernel_config(&old, "a1", &layout, 0, &[], &no_gpu(), "127.0.0.1")
            .host_config
            .unwrap();
        assert_eq!(
            host.pids_limit,
            Some(domain::payloads::ContainerFence::DEFAULT_PIDS as i64)
        );
    }

    #[test]
    fn a_single_kernel_has_a_network_of_its_own_and_the_engines_host_name() {
        let state = session(1);
        let layout = layout(&state, "a1");
        assert!(!layout.cluster());
        let net = network_name(state.request.session_id);
        assert_eq!(layout.network, net);
        let config = kernel_config(&state, "a1", &layout, 0, &[], &no_gpu(), "127.0.0.1");
        assert_eq!(config.hostname, None);
        let endpoint = &config.networking_config.unwrap().endpoints_config[&net];
        assert_eq!(endpoint.aliases, None);
        assert_eq!(config.host_config.unwrap().network_mode, Some(net));
    }

    #[test]
    fn a_single_kernel_on_a_sandbox_joins_its_namespace_with_no_endpoint_or_ports_of_its_own() {
        let mut state = session(1);
        assert!(publishes_ports(&state), "its preopen port");
        state.request.preopen_ports.clear();
        assert!(!publishes_ports(&state));
        let mut layout = layout(&state, "a1");
        layout.network = "berth-spare".into();
        layout.sandbox = Some("0f3a5c7e9b1d".into());
        let config = kernel_config(&state, "a1", &layout, 0, &[], &no_gpu(), "127.0.0.1");
        assert_eq!(config.hostname, None);
        assert!(config.networking_config.is_none());
        assert_eq!(config.exposed_ports, None);
        assert_eq!(config.labels.unwrap()[LABEL_NETWORK], "berth-spare");
        let host = config.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("container:0f3a5c7e9b1d"));
        assert_eq!(host.port_bindings, None);

        // One whose image has an app publishes its port: it needs an endpoint of its own.
        state.request.apps = domain::apps::parse_service_ports("jupyter:http:8888").unwrap();
        state.request.session_type = SessionType::Interactive;
        assert!(publishes_ports(&state));
    }
}
