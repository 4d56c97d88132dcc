//! One start for an agent host, as the control plane has `berth::app::start`: `berth agent`,
//! the end-to-end tests and the benchmarks all build an agent through [`start`]. It settles
//! what the agent offers (given, or read from the host: capacity, local images, GPUs), links
//! it to the control plane over NATS (with its credential, its outbox on disk) and runs it on
//! the Docker runtime or the simulated one, until its stop; the [`AgentHost`] it returns stops
//! it or waits for its end.
//!
//! The configuration is the agent's own ([`HostConfig`]): the binary maps its settings and
//! arguments into it, so the agent does not depend on how berth is configured.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use bus::LinkError;
use domain::payloads::ResourceSlots;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::docker::{self, HostImages, RuntimeConfig};
use crate::{AgentError, AgentSpec, Leave, Leaving};

/// How an agent host is started.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The agent's id: 1 to 64 letters, digits, `-` and `_` (a subject token).
    pub agent_id: String,
    pub resource_group: String,
    /// What it offers; each part not given is read from the host.
    pub offer: Offered,
    /// How it reaches NATS.
    pub nats: Nats,
    /// The subjects and streams it meets the control plane on.
    pub subjects: bus::Subjects,
    /// Where its reports wait until the control plane has them ([`outbox_in`] places it
    /// under the host's data directory).
    pub outbox: PathBuf,
    pub runtime: Runtime,
}

/// What a host offers; a part left `None` is read from the host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offered {
    /// Default: the engine's CPU count (8 cores on a simulated host).
    pub cpu_milli: Option<u64>,
    /// Default: the engine's memory (16 GiB on a simulated host).
    pub memory_bytes: Option<u64>,
    /// Default: the GPUs the runtime's accelerators find (NVML, or the mock devices
    /// declared); a Docker host refuses to start offering more than they find. A simulated
    /// host offers what it is given, none by default.
    pub gpu_milli: Option<u64>,
    /// Default: the images on the host (`berth/shell` and `berth/python` on a simulated one).
    pub images: Option<HostImages>,
}

impl Offered {
    /// Exactly `capacity` and `images`: nothing is read from the host.
    pub fn fixed(capacity: ResourceSlots, images: HostImages) -> Offered {
        Offered {
            cpu_milli: Some(capacity.cpu_milli),
            memory_bytes: Some(capacity.memory_bytes),
            gpu_milli: Some(capacity.gpu_milli),
            images: Some(images),
        }
    }
}

/// How an agent reaches NATS.
#[derive(Debug, Clone)]
pub enum Nats {
    /// Connects to `url` as the agent, with its credential (the nkey seed it got at
    /// admission) when it has one, or else as the user the URL names; over TLS as `tls`
    /// (and a `tls://` URL) says.
    Connect {
        url: String,
        seed: Option<String>,
        tls: bus::link::NatsTls,
    },
    /// Over a connection already open (tests and benchmarks share theirs).
    Client(async_nats::Client),
}

/// What runs the sessions placed on the agent.
// One value per agent, made once: the size of a variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Runtime {
    /// Containers, through the engine; the agent offers its ports at
    /// `config.publish_address`.
    Docker {
        engine: Docker,
        config: RuntimeConfig,
    },
    /// No containers (`simulate`): a batch session ends after `batch_runs_for`.
    Simulated { batch_runs_for: Duration },
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("`{0}`: an agent's id is 1 to 64 letters, digits, `-` and `_`")]
    InvalidId(String),
    #[error("read the credential {}", path.display())]
    Credential {
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error(transparent)]
    Engine(#[from] bollard::errors::Error),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("the agent's task: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A shared volume the agent says it mounts is not there, or not writable: it refuses to
    /// start rather than offer folders it cannot keep.
    #[error("volume `{name}` at {}: {why}", path.display())]
    VolumeUnusable {
        name: String,
        path: PathBuf,
        why: String,
    },
    #[error(
        "offers {} GPUs, but this host's discovery found {}: {found}",
        *offered_milli as f64 / 1000.0,
        *found_milli as f64 / 1000.0
    )]
    GpusNotFound {
        offered_milli: u64,
        found_milli: u64,
        /// What discovery found, in words.
        found: String,
    },
}

/// The capacity a simulated host offers by default.
const SIMULATED_CAPACITY: ResourceSlots = ResourceSlots {
    cpu_milli: 8_000,
    memory_bytes: 16 << 30,
    gpu_milli: 0,
};

/// The images a simulated host offers by default.
fn simulated_images() -> HostImages {
    HostImages {
        names: vec!["berth/shell:latest".into(), "berth/python:latest".into()],
        ..Default::default()
    }
}

/// Refuses an id that is not a subject token (1 to 64 letters, digits, `-` and `_`).
pub fn check_id(agent_id: &str) -> Result<(), HostError> {
    if bus::subjects::is_valid_agent_id(agent_id) {
        Ok(())
    } else {
        Err(HostError::InvalidId(agent_id.to_owned()))
    }
}

/// Refuses an offer of more GPUs (`offered_milli`) than discovery `found`: a session placed
/// on GPUs that are not there would run without them. Pure; `None` offers what was found.
/// Each shared volume the agent says it mounts is a directory it can write in (a file made
/// and removed there): one that is missing or read-only refuses the agent's start, naming
/// it. (A mount that did not come up may leave an empty directory, which passes: operators
/// order the agent after its mounts, `RequiresMountsFor=` in systemd.)
pub fn check_volumes(volumes: &BTreeMap<String, PathBuf>) -> Result<(), HostError> {
    for (name, path) in volumes {
        let unusable = |why: String| HostError::VolumeUnusable {
            name: name.clone(),
            path: path.clone(),
            why,
        };
        if domain::volumes::volume_name(name).is_err() || name == domain::volumes::HOST_LOCAL {
            return Err(unusable(format!(
                "not a volume's name: {}",
                domain::volumes::BadVolumeName
            )));
        }
        if !path.is_dir() {
            return Err(unusable("not a directory here (is it mounted?)".into()));
        }
        let probe = path.join(format!(".berth-probe-{}", Uuid::new_v4().simple()));
        std::fs::write(&probe, b"berth").map_err(|e| unusable(format!("not writable: {e}")))?;
        let _ = std::fs::remove_file(&probe);
    }
    Ok(())
}

pub fn check_gpu_offer(
    offered_milli: Option<u64>,
    found: &crate::gpu::Discovery,
) -> Result<(), HostError> {
    match offered_milli {
        Some(offered) if offered > found.gpu_milli() => Err(HostError::GpusNotFound {
            offered_milli: offered,
            found_milli: found.gpu_milli(),
            found: found.describe(),
        }),
        _ => Ok(()),
    }
}

/// Where an agent's outbox lives under its host's data directory.
pub fn outbox_in(data_dir: &Path, agent_id: &str) -> PathBuf {
    data_dir.join("outbox").join(agent_id)
}

/// The credential (nkey seed) in the file at `path`, as `berth admin agent admit` wrote it.
pub fn read_credential(path: &Path) -> Result<String, HostError> {
    let seed = std::fs::read_to_string(path).map_err(|error| HostError::Credential {
        path: path.to_owned(),
        error,
    })?;
    Ok(seed.trim().to_owned())
}

/// Starts the agent host `config` describes: it registers, then runs the sessions placed on
/// it until `stop`.
pub async fn start(config: HostConfig, stop: CancellationToken) -> Result<AgentHost, HostError> {
    let HostConfig {
        agent_id,
        resource_group,
        offer,
        nats,
        subjects,
        outbox,
        runtime,
    } = config;
    check_id(&agent_id)?;
    let engine = match &runtime {
        Runtime::Docker { engine, .. } => Some(engine),
        Runtime::Simulated { .. } => None,
    };
    let host = match engine {
        Some(docker) if offer.cpu_milli.is_none() || offer.memory_bytes.is_none() => {
            docker::host_capacity(docker).await?
        }
        Some(_) => ResourceSlots::default(),
        None => SIMULATED_CAPACITY,
    };
    // A Docker host offers only the GPUs its accelerators find: sessions placed on GPUs that
    // are not there would run without them, and say nothing.
    let gpus = match &runtime {
        Runtime::Docker { config, .. } => {
            let found = config.gpus.source.discover();
            match &found {
                crate::gpu::Discovery::None(why) => tracing::info!(%why, "no GPUs on this host"),
                crate::gpu::Discovery::Found(_) => {
                    tracing::info!(gpus = %found.describe(), "GPUs on this host")
                }
            }
            check_gpu_offer(offer.gpu_milli, &found)?;
            check_volumes(&config.volumes)?;
            found
        }
        Runtime::Simulated { .. } => {
            crate::gpu::Discovery::None("a simulated host runs no containers".into())
        }
    };
    let images = match (offer.images, engine) {
        (Some(images), _) => images,
        (None, Some(docker)) => docker::local_images(docker).await?,
        (None, None) => simulated_images(),
    };
    let spec = AgentSpec {
        agent_id,
        resource_group,
        capacity: ResourceSlots {
            cpu_milli: offer.cpu_milli.unwrap_or(host.cpu_milli),
            memory_bytes: offer.memory_bytes.unwrap_or(host.memory_bytes),
            gpu_milli: offer.gpu_milli.unwrap_or(gpus.gpu_milli()),
        },
        images: images.names,
        unlabelled_images: images.unlabelled,
        image_apps: images.apps,
        // Only a Docker agent publishes ports.
        address: match &runtime {
            Runtime::Docker { config, .. } => Some(config.publish_address.clone()),
            Runtime::Simulated { .. } => None,
        },
        network_scope: match engine {
            Some(docker) => Some(docker::network_scope(docker).await?),
            None => None,
        },
        volumes: match &runtime {
            Runtime::Docker { config, .. } => config.volumes.keys().cloned().collect(),
            Runtime::Simulated { .. } => Vec::new(),
        },
    };
    let (client, refusal) = match nats {
        Nats::Connect { url, seed, tls } => {
            let (client, refusal) =
                bus::link::connect_watched(&url, &spec.agent_id, seed, &tls).await?;
            (client, Some(refusal))
        }
        Nats::Client(client) => (client, None),
    };
    let link = bus::Link::new(client, &spec.agent_id, subjects, &outbox)?;
    let agent_id = spec.agent_id.clone();
    let leaving = Leaving::new(&stop);
    let run: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>> = match runtime {
        Runtime::Docker { engine, config } => Box::pin(docker::run(
            link,
            engine,
            spec,
            config,
            gpus,
            stop.clone(),
            leaving.clone(),
        )),
        Runtime::Simulated { batch_runs_for } => Box::pin(crate::simulate(
            link,
            spec,
            batch_runs_for,
            stop.clone(),
            leaving.clone(),
        )),
    };
    let task = tokio::spawn(refused_ends(run, refusal, stop.clone()));
    Ok(AgentHost {
        agent_id,
        stop,
        leaving,
        task,
    })
}

/// Runs the agent until it ends, or until NATS has refused its credential for
/// [`bus::link::REFUSED_AT_MOST`] without a break (never admitted, or revoked): then it ends
/// with that refusal, as a killed process would (its containers stay), rather than try for
/// ever.
async fn refused_ends(
    run: impl std::future::Future<Output = Result<(), AgentError>>,
    refusal: Option<bus::link::Refusal>,
    stop: CancellationToken,
) -> Result<(), AgentError> {
    let Some(refusal) = refusal else {
        return run.await;
    };
    tokio::select! {
        ended = run => ended,
        _ = refusal.lasting(bus::link::REFUSED_AT_MOST) => {
            stop.cancel();
            let refused_for = refusal.refused_for().unwrap_or_default().as_secs();
            tracing::error!(refused_for, "NATS refuses this agent's credential");
            Err(AgentError::CredentialRefused { refused_for })
        }
    }
}

/// How a departure ended ([`AgentHost::leave`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// Every step was done within the bound.
    InTime,
    /// The bound passed first: the agent was stopped where it stood (what its outbox holds
    /// is sent on its return).
    Cut,
}

/// A started agent host. Dropping it leaves the agent running until its stop.
pub struct AgentHost {
    agent_id: String,
    stop: CancellationToken,
    leaving: Leaving,
    task: JoinHandle<Result<(), AgentError>>,
}

impl std::fmt::Debug for AgentHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHost")
            .field("agent_id", &self.agent_id)
            .finish_non_exhaustive()
    }
}

/// How long an agent stopped past its departure's bound gets to end before it is aborted
/// (every step gives up on its stop, so this is a formality).
const AFTER_THE_BOUND: Duration = Duration::from_secs(2);

impl AgentHost {
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    /// Waits for the agent's end: after its stop, or when it failed.
    pub async fn finished(self) -> Result<(), HostError> {
        Ok(self.task.await??)
    }

    /// Waits for the agent's end without giving the handle up; once it has answered, the
    /// handle is spent (call nothing more on it).
    pub async fn ended(&mut self) -> Result<(), HostError> {
        Ok((&mut self.task).await??)
    }

    /// Stops the agent (its stop token, shared with whoever gave it) and waits for its end.
    pub async fn stop(self) -> Result<(), HostError> {
        self.stop.cancel();
        self.finished().await
    }

    /// The agent leaves as `how` says (see [`Leave`]): it says it departs, takes no more
    /// commands, ends its sessions first when asked, sends its outbox and ends, all within
    /// `within`; past it, it is stopped where it stood ([`Left::Cut`]). Its containers keep
    /// running either way (unless it ended them), to be adopted when it returns.
    pub async fn leave(mut self, how: Leave, within: Duration) -> Result<Left, HostError> {
        self.leaving.ask(how);
        if let Ok(ended) = tokio::time::timeout(within, &mut self.task).await {
            ended??;
            return Ok(Left::InTime);
        }
        self.stop.cancel();
        match tokio::time::timeout(AFTER_THE_BOUND, &mut self.task).await {
            Ok(ended) => ended??,
            Err(_) => self.task.abort(),
        }
        Ok(Left::Cut)
    }

    /// Ends the agent at once, as a killed process ends: its sessions' containers stay.
    /// `None` when it was running until then; otherwise how it had ended before.
    pub async fn kill(self) -> Option<Result<(), HostError>> {
        self.task.abort();
        match self.task.await {
            Err(e) if e.is_cancelled() => None,
            Err(e) => Some(Err(e.into())),
            Ok(ended) => Some(ended.map_err(HostError::from)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{Accelerators, MockGpus};

    #[test]
    fn an_offer_above_what_discovery_found_is_refused_naming_both() {
        let one = MockGpus {
            count: 1,
            memory_bytes: 16 << 30,
            model: "Mock A100".into(),
            usage_file: None,
        }
        .discover();
        assert!(check_gpu_offer(None, &one).is_ok(), "what was found");
        assert!(check_gpu_offer(Some(1000), &one).is_ok());
        assert!(
            check_gpu_offer(Some(500), &one).is_ok(),
            "less than was found"
        );
        let refused = check_gpu_offer(Some(1500), &one).unwrap_err().to_string();
        assert_eq!(
            refused,
            "offers 1.5 GPUs, but this host's discovery found 1: Mock A100 (16384 MiB)"
        );
        let none = crate::gpu::Discovery::None("NVML is not available".into());
        assert!(check_gpu_offer(Some(0), &none).is_ok());
        let refused = check_gpu_offer(Some(1000), &none).unwrap_err().to_string();
        assert!(
            refused.ends_with("found 0: no GPU (NVML is not available)"),
            "{refused}"
        );
    }
}
