//! Fenced bridges made ahead: a single kernel's session takes one that is ready instead of
//! waiting for the engine to make its own, the slowest call of its start (docs/performance.md,
//! "the fence's network made ahead"). A spare is the bridge a single kernel gets anyway
//! (traffic between containers off, a subnet of the fence's pool, a `berth<10 hex>` interface
//! the firewall matches), labelled a spare of this agent; it serves one session and is
//! removed with it, never handed to a second.
//!
//! Where the agent lends its runtime, a spare also holds a sandbox: a container of nothing
//! but the runtime's `sleep` (an image with an empty root file system, which the agent
//! imports the first time it needs it), started on the bridge, whose network namespace a
//! kernel that publishes no ports joins instead of having the engine wire one up at its
//! start: the engine's start of a container on a user-defined bridge costs about 1.5 times
//! its start of one that joins a namespace made ahead, and about 1.3 times its start on the
//! default bridge (docs/performance.md, "a network namespace made ahead"). The sandbox is
//! fenced as a kernel is and more (every capability dropped, a user of nobody, a read-only
//! root, a few processes); it goes before its bridge.
//!
//! Taking one never waits: the list is looked at under a plain lock, and an empty one sends
//! the session to make its own network as before. The spares are made by one task the agent
//! owns ([`keep_ready`]), woken after a start is through, so that their making does not
//! compete with the start they served; a failure (the engine out of reach) leaves fewer
//! spares, never a stuck start. The task ends with the agent: aborted with it, or at its
//! stop let finish the spare it is making, so that the ready ones it removes are all there are.
//! Which session has which spare is kept here and on its containers' label
//! ([`super::spec::LABEL_NETWORK`]), so an agent that starts again knows; spares no live
//! session holds are removed at that start ([`super::adopt`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::container::{Config, CreateContainerOptions};
use bollard::image::CreateImageOptions;
use bollard::models::HostConfig;
use futures::TryStreamExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::ctx::{remove_spare, Ctx};
use super::spec::{network_name, sandbox_name, LABEL_AGENT, RUNTIME_MOUNT};

/// The label that marks a network, and its sandbox, as one of the agent's spares (its value
/// is the agent's id).
pub const LABEL_SPARE: &str = "ai.berth.spare";

/// The image a sandbox runs: a root file system of nothing (the runtime, mounted, holds the
/// one program it runs). Never offered as a session's image ([`super::local_images`]).
pub const SANDBOX_IMAGE: &str = "berth/sandbox:1";

/// A spare ready: its bridge, and the id of the sandbox on it whose network namespace a kernel
/// may join (its host name is the id's first twelve digits, as the engine names a container).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Spare {
    pub(super) network: String,
    pub(super) sandbox: Option<String>,
}

/// How long the making of one spare may take before it is given up (the engine answering
/// slowly or not at all): the spare is then simply not there.
const MAKING_BOUND: Duration = Duration::from_secs(30);

/// The spares ready, how many are being made, and which session holds which; and the call
/// that wakes [`keep_ready`] to make those missing.
#[derive(Clone, Default)]
pub(super) struct Spares {
    inner: Arc<Mutex<Inner>>,
    wanted: Arc<Notify>,
}

#[derive(Default)]
struct Inner {
    ready: Vec<Spare>,
    making: usize,
    held: HashMap<Uuid, Spare>,
}

impl Spares {
    /// The spare session `session` runs on: the one it holds already (a second try of its
    /// start), else a ready one, now held by it. `None`: none is ready.
    pub(super) fn take(&self, session: Uuid) -> Option<Spare> {
        let mut inner = self.inner.lock().expect("the spares' lock");
        if let Some(spare) = inner.held.get(&session) {
            return Some(spare.clone());
        }
        let spare = inner.ready.pop()?;
        inner.held.insert(session, spare.clone());
        Some(spare)
    }

    /// Records that `session` runs on spare `network` (an adopted session's, from its label;
    /// whether it has a sandbox does not matter once the session runs).
    pub(super) fn hold(&self, session: Uuid, network: String) {
        let mut inner = self.inner.lock().expect("the spares' lock");
        let spare = Spare {
            network,
            sandbox: None,
        };
        inner.held.insert(session, spare);
    }

    /// Whether a session holds spare `network` (whose sandbox its kernel may have joined).
    pub(super) fn is_held(&self, network: &str) -> bool {
        let inner = self.inner.lock().expect("the spares' lock");
        inner.held.values().any(|s| s.network == network)
    }

    /// The spare `session` held, no longer held: its network (and sandbox) to remove.
    pub(super) fn release(&self, session: Uuid) -> Option<String> {
        let mut inner = self.inner.lock().expect("the spares' lock");
        inner.held.remove(&session).map(|s| s.network)
    }

    /// Wakes [`keep_ready`] to make the spares missing (one taken, or kept from being made by
    /// an engine out of reach); a call while it makes some wakes it again once they are made.
    pub(super) fn make_missing(&self) {
        self.wanted.notify_one();
    }

    /// How many spares to start making so that `wanted` are ready or being made, counted as
    /// being made from now on.
    fn to_make(&self, wanted: usize) -> usize {
        let mut inner = self.inner.lock().expect("the spares' lock");
        let missing = wanted.saturating_sub(inner.ready.len() + inner.making);
        inner.making += missing;
        missing
    }

    /// One spare made (`Some`, now ready) or given up (`None`).
    fn made(&self, spare: Option<Spare>) {
        let mut inner = self.inner.lock().expect("the spares' lock");
        inner.making -= 1;
        inner.ready.extend(spare);
    }

    /// The spares ready, taken out of the list (to be removed as the agent stops).
    pub(super) fn drain_ready(&self) -> Vec<Spare> {
        let mut inner = self.inner.lock().expect("the spares' lock");
        std::mem::take(&mut inner.ready)
    }
}

/// Keeps the fence's number of spares ready: makes those missing now, and again each time
/// [`Spares::make_missing`] is called, until `stop`. A spare being made when `stop` comes is
/// made to the end (bounded), never cut off mid-call, which could leave a network the engine
/// made after all and nobody knows of.
pub(super) async fn keep_ready(ctx: Ctx, stop: CancellationToken) {
    loop {
        make_missing(&ctx, &stop).await;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ctx.spares.wanted.notified() => {}
        }
    }
}

/// Makes spares, one after the other, until the fence's number is ready or being made, or
/// `stop`; gives up on the first that fails (made again after the next start that takes one).
async fn make_missing(ctx: &Ctx, stop: &CancellationToken) {
    let count = ctx.spares.to_make(ctx.config.fence.spares);
    for i in 0..count {
        let made = if stop.is_cancelled() {
            Err("the agent stops".to_string())
        } else {
            make_one(ctx).await
        };
        match made {
            Ok(spare) => ctx.spares.made(Some(spare)),
            Err(e) => {
                tracing::debug!(error = %e, "a spare network was not made");
                // This one and the rest were counted as being made: no longer.
                for _ in i..count {
                    ctx.spares.made(None);
                }
                return;
            }
        }
    }
}

/// One spare made; or why not (then nothing of it is left, as far as the engine answers).
async fn make_one(ctx: &Ctx) -> Result<Spare, String> {
    let id = Uuid::new_v4();
    let network = network_name(id);
    let making = async {
        let labels = spare_labels(ctx);
        super::kernels::make_bridge(ctx, &network, id, 1, false, labels).await?;
        let sandbox = match &ctx.config.runtime {
            Some(runtime) => Some(make_sandbox(ctx, &network, runtime).await?),
            None => None,
        };
        Ok::<_, String>(sandbox)
    };
    match tokio::time::timeout(MAKING_BOUND, making).await {
        Ok(Ok(sandbox)) => Ok(Spare { network, sandbox }),
        failed => {
            // Made after all (an answer lost, or late): not left behind.
            remove_spare(ctx, &network).await;
            Err(match failed {
                Ok(Err(e)) => e,
                _ => format!("no answer in {MAKING_BOUND:?}"),
            })
        }
    }
}

/// What marks a spare's bridge and sandbox as this agent's.
fn spare_labels(ctx: &Ctx) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_AGENT.to_string(), ctx.agent_id.clone()),
        (LABEL_SPARE.to_string(), ctx.agent_id.clone()),
    ])
}

/// Creates and starts the sandbox of spare `network`, from `runtime` mounted, its image
/// imported first where the engine lacks it; its id.
async fn make_sandbox(
    ctx: &Ctx,
    network: &str,
    runtime: &std::path::Path,
) -> Result<String, String> {
    let name = sandbox_name(network);
    let config = sandbox_config(network, runtime, spare_labels(ctx));
    let options = || {
        Some(CreateContainerOptions {
            name: name.clone(),
            platform: None,
        })
    };
    let created = ctx.docker.create_container(options(), config.clone()).await;
    let created = match created {
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => {
            import_sandbox_image(&ctx.docker).await?;
            ctx.docker.create_container(options(), config).await
        }
        created => created,
    };
    let id = created
        .map_err(|e| format!("creating the sandbox failed: {e}"))?
        .id;
    ctx.docker
        .start_container::<String>(&name, None)
        .await
        .map_err(|e| format!("starting the sandbox failed: {e}"))?;
    Ok(id)
}

/// The sandbox of spare `network`: the runtime's `sleep`, run by the runtime's loader, as
/// nobody, with nothing it could use.
fn sandbox_config(
    network: &str,
    runtime: &std::path::Path,
    labels: HashMap<String, String>,
) -> Config<String> {
    let lib = format!("{RUNTIME_MOUNT}/lib");
    Config {
        image: Some(SANDBOX_IMAGE.to_string()),
        entrypoint: Some(vec![format!("{lib}/loader")]),
        cmd: Some(vec![
            "--library-path".into(),
            lib.clone(),
            format!("{lib}/sleep"),
            "infinity".into(),
        ]),
        user: Some("65534:65534".into()),
        labels: Some(labels),
        host_config: Some(HostConfig {
            network_mode: Some(network.to_owned()),
            binds: Some(vec![format!("{}:{RUNTIME_MOUNT}:ro", runtime.display())]),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            readonly_rootfs: Some(true),
            pids_limit: Some(4),
            memory: Some(16 << 20),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Imports [`SANDBOX_IMAGE`]: an archive of no files (two empty blocks end a tar archive).
async fn import_sandbox_image(docker: &bollard::Docker) -> Result<(), String> {
    let (repo, tag) = SANDBOX_IMAGE.split_once(':').expect("a tag");
    let options = CreateImageOptions {
        from_src: "-",
        repo,
        tag,
        ..Default::default()
    };
    let empty = bytes::Bytes::from_static(&[0; 1024]);
    docker
        .create_image(Some(options), Some(empty), None)
        .try_collect::<Vec<_>>()
        .await
        .map(|_| ())
        .map_err(|e| format!("importing the sandbox's image failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spare(network: &str) -> Option<Spare> {
        Some(Spare {
            network: network.into(),
            sandbox: Some("0f3a5c7e9b1d0f3a5c7e9b1d".into()),
        })
    }

    #[test]
    fn a_session_takes_a_ready_spare_once_and_keeps_it_until_released() {
        let spares = Spares::default();
        let (first, second) = (Uuid::new_v4(), Uuid::new_v4());
        assert_eq!(
            spares.take(first),
            None,
            "none ready: the session makes its own"
        );
        assert_eq!(spares.to_make(2), 2);
        assert_eq!(spares.to_make(2), 0, "two are being made already");
        spares.made(spare("berth-a"));
        spares.made(spare("berth-b"));
        let taken = spares.take(first).unwrap();
        assert_eq!(
            spares.take(first),
            Some(taken.clone()),
            "a second try, the same"
        );
        let other = spares.take(second).unwrap();
        assert_ne!(taken, other, "never one spare for two sessions");
        assert_eq!(spares.take(Uuid::new_v4()), None);
        assert_eq!(spares.to_make(2), 2, "both taken: two to make");
        assert!(spares.is_held(&taken.network));
        assert_eq!(spares.release(first), Some(taken.network.clone()));
        assert_eq!(spares.release(first), None);
        assert!(
            !spares.is_held(&taken.network),
            "released, it is anyone's to remove"
        );
        assert!(spares.is_held(&other.network));
    }

    #[test]
    fn a_spare_given_up_is_no_longer_counted_as_being_made() {
        let spares = Spares::default();
        assert_eq!(spares.to_make(2), 2);
        spares.made(None);
        spares.made(None);
        assert_eq!(spares.to_make(2), 2);
        spares.made(spare("berth-c"));
        spares.made(None);
        assert_eq!(spares.to_make(2), 1);
        assert_eq!(spares.drain_ready(), vec![spare("berth-c").unwrap()]);
    }

    #[test]
    fn a_sandbox_runs_the_runtimes_sleep_as_nobody_with_nothing_it_could_use_on_its_bridge() {
        let labels = HashMap::from([(LABEL_SPARE.to_string(), "a1".to_string())]);
        let config = sandbox_config("berth-0f", std::path::Path::new("/srv/rt"), labels);
        assert_eq!(config.image.as_deref(), Some(SANDBOX_IMAGE));
        assert_eq!(
            config.entrypoint,
            Some(vec!["/opt/berth/lib/loader".to_string()])
        );
        assert_eq!(
            config.cmd.unwrap(),
            [
                "--library-path",
                "/opt/berth/lib",
                "/opt/berth/lib/sleep",
                "infinity"
            ]
        );
        assert_eq!(config.user.as_deref(), Some("65534:65534"));
        assert_eq!(config.labels.unwrap()[LABEL_SPARE], "a1");
        let host = config.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("berth-0f"));
        assert_eq!(host.binds.unwrap(), ["/srv/rt:/opt/berth:ro"]);
        assert_eq!(host.cap_drop.unwrap(), ["ALL"]);
        assert_eq!(host.security_opt.unwrap(), ["no-new-privileges"]);
        assert_eq!(host.readonly_rootfs, Some(true));
        assert!(host.pids_limit.is_some() && host.memory.is_some());
        assert!(
            host.port_bindings.is_none(),
            "nothing published: the kernel's ports need none"
        );
    }
}
