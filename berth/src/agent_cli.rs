//! `berth agent`: runs an agent on a compute host. The command maps berth's settings
//! (`Config`) and its arguments into the agent's own configuration
//! ([`agent::host::HostConfig`]) and starts it through the agent's one start,
//! [`agent::host::start`], until SIGTERM or SIGINT. Then it departs
//! ([`agent::host::AgentHost::leave`]): the control plane places nothing more on it, its
//! outbox is sent, and it exits 0 within `BERTH_AGENT_LEAVE_SECS` (past it, with a warning),
//! its containers running on, to be adopted when it starts again. With `--drain` it ends its
//! sessions first, for a host being decommissioned.

use std::path::PathBuf;

use anyhow::Context as _;
use berth::config::Config;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct AgentArgs {
    #[arg(long, default_value = "local")]
    id: String,
    #[arg(long, default_value = "default")]
    group: String,
    /// Cores offered (default: the host's).
    #[arg(long)]
    cpu: Option<f64>,
    /// GiB offered (default: the host's).
    #[arg(long)]
    memory_gib: Option<f64>,
    /// GPUs offered (fractions allowed; default: those discovery finds, NVML's or the mock
    /// ones BERTH_MOCK_GPUS declares); more than discovery finds is refused at start.
    #[arg(long)]
    gpu: Option<f64>,
    /// Images offered (repeatable; default: the images on the host).
    #[arg(long = "image")]
    images: Vec<String>,
    /// Where folders and the outbox of unanswered reports live on this host (default:
    /// BERTH_AGENT_DATA, or .berth/agent-data).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Move sessions without containers (no Docker needed).
    #[arg(long)]
    simulate: bool,
    /// A file holding the agent's credential, as `berth admin agent admit` gave it
    /// (default: BERTH_AGENT_CREDENTIAL).
    #[arg(long)]
    credential: Option<PathBuf>,
    /// On SIGTERM or SIGINT, end this agent's sessions (each stopped and waited for) before
    /// departing, instead of leaving their containers running: for decommissioning a host.
    #[arg(long)]
    drain: bool,
    /// Serve this agent's metrics (Prometheus's text format) on `GET /metrics` at this address,
    /// e.g. 0.0.0.0:9481 (default: BERTH_METRICS_LISTEN; none when neither is given).
    #[arg(long)]
    metrics_listen: Option<String>,
}

/// Runs the agent `args` describe until SIGTERM or SIGINT (or until it fails), then departs.
pub async fn run(config: &Config, args: AgentArgs) -> anyhow::Result<()> {
    let mut signals = berth::signals::StopSignals::listen().context("listen for signals")?;
    let (drain, timings) = (args.drain, config.timings.clone());
    let stop = CancellationToken::new();
    let metrics_listen = args
        .metrics_listen
        .clone()
        .or_else(|| config.metrics_listen.clone());
    if let Some(listen) = metrics_listen.filter(|_| config.metrics) {
        if let Some(handle) = berth::metrics::install() {
            berth::metrics::listen(&listen, handle, stop.clone()).await?;
        }
    }
    let mut host = tokio::select! {
        host = start(config, args, stop.clone()) => host?,
        signal = signals.next() => {
            tracing::info!(signal, "stopped before the agent started");
            return Ok(());
        }
    };
    let signal = tokio::select! {
        done = host.ended() => return Ok(done?),
        signal = signals.next() => signal,
    };
    // Its sessions' ends, when drained, get their containers' stop grace on top.
    let within = if drain {
        timings.agent_leave + timings.agent_stop_grace
    } else {
        timings.agent_leave
    };
    tracing::info!(signal, drain, ?within, "leaving");
    let how = agent::Leave {
        reason: format!(
            "{} ({signal}){}",
            if drain { "drained" } else { "stopped" },
            if drain {
                ": its sessions were ended"
            } else {
                ": its containers keep running until it returns"
            }
        ),
        end_sessions: drain,
    };
    match host.leave(how, within).await? {
        agent::host::Left::InTime => tracing::info!("left"),
        agent::host::Left::Cut => tracing::warn!(
            ?within,
            "the departure did not finish within its bound; exiting anyway (what the outbox holds is sent on return)"
        ),
    }
    Ok(())
}

/// Starts the agent `args` describe, until `stop`.
async fn start(
    config: &Config,
    args: AgentArgs,
    stop: CancellationToken,
) -> anyhow::Result<agent::host::AgentHost> {
    use agent::host::{HostConfig, Nats, Offered, Runtime};
    agent::host::check_id(&args.id).map_err(|e| anyhow::anyhow!("--id {e}"))?;
    let data_dir = args
        .data_dir
        .unwrap_or_else(|| config.agent_data_dir.clone());
    std::fs::create_dir_all(&data_dir)?;
    // Folders are bound into containers by their absolute path.
    let data_dir = std::fs::canonicalize(&data_dir)?;
    let gpus = gpus(config);
    let offered_gpu_milli = args.gpu.map(|g| (g * 1000.0).round() as u64);
    if !args.simulate {
        // Refused before anything is reached (the agent's start checks it again).
        let found = gpus.source.discover();
        agent::host::check_gpu_offer(offered_gpu_milli, &found).map_err(gpu_refused)?;
    }
    let runtime = if args.simulate {
        Runtime::Simulated {
            batch_runs_for: config.timings.simulated_step,
        }
    } else {
        let engine = agent::docker::connect()
            .await
            .context("reach the Docker engine")?;
        let timings = &config.timings;
        Runtime::Docker {
            engine,
            config: agent::docker::RuntimeConfig {
                data_dir: data_dir.clone(),
                stop_grace_secs: timings.agent_stop_grace.as_secs() as i64,
                // Images given are offered as given; those of the host are read again.
                image_refresh: args
                    .images
                    .is_empty()
                    .then_some(timings.agent_image_refresh),
                usage_every: timings.agent_usage_every,
                registry: registry(config)?,
                volumes: config.volumes.clone(),
                publish_address: config.agent_address.clone(),
                gpus,
                fence: config.session_fence.clone(),
                runtime: runtime(config)?,
            },
        }
    };
    if bus::link::plain_off_host(&config.nats_url, &config.nats_tls) {
        tracing::warn!(
            "NATS is off this host without TLS: use a tls:// URL, and BERTH_NATS_CA (and BERTH_NATS_CERT, BERTH_NATS_KEY)"
        );
    }
    let seed = match args
        .credential
        .as_ref()
        .or(config.agent_credential.as_ref())
    {
        Some(path) => Some(agent::host::read_credential(path)?),
        None => None,
    };
    let host = HostConfig {
        outbox: agent::host::outbox_in(&data_dir, &args.id),
        agent_id: args.id,
        resource_group: args.group,
        offer: Offered {
            cpu_milli: args.cpu.map(|c| (c * 1000.0) as u64),
            memory_bytes: args.memory_gib.map(|m| (m * (1u64 << 30) as f64) as u64),
            gpu_milli: offered_gpu_milli,
            images: (!args.images.is_empty()).then(|| agent::docker::HostImages {
                names: args.images,
                ..Default::default()
            }),
        },
        nats: Nats::Connect {
            url: config.nats_url.clone(),
            seed,
            tls: config.nats_tls.clone(),
        },
        subjects: config.agent_bus.clone(),
        runtime,
    };
    match agent::host::start(host, stop).await {
        Err(e @ agent::host::HostError::GpusNotFound { .. }) => Err(gpu_refused(e)),
        started => Ok(started?),
    }
}

/// A refused GPU offer, named by the flag that made it.
fn gpu_refused(e: agent::host::HostError) -> anyhow::Error {
    anyhow::anyhow!("--gpu: {e} (BERTH_MOCK_GPUS declares simulated GPUs)")
}

/// The agent's GPUs: the mock ones its settings declare, or else NVML's; shared as the
/// admin set.
fn gpus(config: &Config) -> agent::gpu::GpuConfig {
    let mut gpus = match &config.mock_gpus {
        Some(mock) => agent::gpu::GpuConfig::mock(mock.clone()),
        None => agent::gpu::GpuConfig::nvml(),
    };
    gpus.shares_per_device = config.gpu_shares_per_device;
    gpus.mps_pipe_dir = config.gpu_mps_pipe_dir.clone();
    gpus
}

/// The registry customized images go to and come from, with its credential when one is set.
/// berth's runtime, when one is set: a directory holding `bin/tmux` (`infra/runtime.sh`).
fn runtime(config: &Config) -> anyhow::Result<Option<std::path::PathBuf>> {
    let Some(dir) = &config.agent_runtime else {
        return Ok(None);
    };
    if !dir.join("bin/tmux").is_file() {
        anyhow::bail!(
            "BERTH_AGENT_RUNTIME `{}` holds no bin/tmux: make it with infra/runtime.sh DIR",
            dir.display()
        );
    }
    Ok(Some(std::fs::canonicalize(dir)?))
}

fn registry(config: &Config) -> anyhow::Result<Option<agent::docker::registry::Registry>> {
    use agent::docker::registry::Registry;
    let Some(address) = &config.registry else {
        return Ok(None);
    };
    let Some(file) = &config.registry_credential else {
        return Ok(Some(Registry::open(address)));
    };
    let credential = std::fs::read_to_string(file)
        .with_context(|| format!("read the registry's credential ({})", file.display()))?;
    let registry = Registry::with_credential(address, &credential)
        .with_context(|| format!("the registry's credential in {}", file.display()))?;
    Ok(Some(registry))
}
