//! Keeps the authorization of a NATS server on this host in step with the agents admitted and
//! the durable subscriptions read over NATS, so an admitted agent (a subscription's reader)
//! gets in with its credential, confined to its own subjects (its own consumer of the
//! events), and a revoked agent (a deleted subscription) is shut out, with nobody editing the
//! server's configuration by hand.
//!
//! The server (`infra/services.sh` starts one so) reads its users from
//! `<dir>/authorization.conf`, made of one fragment per installation in `<dir>/users.d/`:
//! `control.conf`, the control plane's user, written by the script; `<root>.conf`, the admitted
//! agents and subscription readers of the installation whose subjects start at `<root>`,
//! written here. Several
//! installations (the tests, each with a database and a subject root of its own) share one
//! server that way. A change rewrites this installation's fragment, joins the fragments again
//! under a lock, and asks the server (its pid in `<dir>/nats.pid`) to reload.
//!
//! The control plane's recorder follows admissions and revocations on the bus ([`follow`]): the
//! process that decides who may register is the one that tells the server. A server elsewhere
//! is the operator's to configure, from `berth admin nats-authorization`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use events::relay::Topology;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The events after which an installation's users on the server are not the same.
const CHANGING_EVENTS: &[&str] = &[
    "AgentAdmitted",
    "AgentRevoked",
    "SubscriptionCreated",
    "SubscriptionDeleted",
];

/// How often the control plane applies the admissions again when no event says they changed:
/// the safety net for an event published while it was not subscribed.
const APPLY_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// The file a server that reloads its authorization on its own leaves in the directory.
const RELOADS_ITSELF: &str = "reloads-itself";

/// What [`apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The server already knew these agents.
    Unchanged,
    /// The fragment changed and the server was asked to reload.
    Reloaded,
}

/// Writes the fragment of the agents admitted and the subscriptions read over NATS in `pool`
/// (the installation rooted at `subjects.root`, its events in `events_stream`) under `dir`,
/// and when it changed, joins every fragment into the server's authorization and asks the
/// server to reload it.
pub async fn apply(
    pool: &deadpool_postgres::Pool,
    subjects: &bus::Subjects,
    events_stream: &str,
    dir: &Path,
) -> anyhow::Result<Applied> {
    let keys = recorder::admission::admitted_keys(pool).await?;
    let readers: Vec<bus::permissions::ReaderKey> = events::subscriptions::nats_readers(pool)
        .await?
        .into_iter()
        .filter_map(|s| {
            Some(bus::permissions::ReaderKey {
                consumer: domain::subscriptions::consumer_name(s.created.owner, &s.created.name),
                public_key: s.created.nats_key?,
            })
        })
        .collect();
    let mut users = bus::permissions::agent_users(subjects, &keys);
    users.extend(bus::permissions::reader_users(events_stream, &readers));
    let fragment = bus::permissions::users_fragment(&users);
    let (dir, root) = (dir.to_path_buf(), subjects.root.clone());
    tokio::task::spawn_blocking(move || write_and_reload(&dir, &root, &fragment)).await?
}

fn write_and_reload(dir: &Path, root: &str, fragment: &str) -> anyhow::Result<Applied> {
    let users = dir.join("users.d");
    std::fs::create_dir_all(&users).with_context(|| format!("{}", users.display()))?;
    // One writer at a time joins the fragments, so two installations' changes both land.
    let lock = std::fs::File::create(dir.join("authorization.lock"))?;
    lock.lock().context("lock the NATS authorization")?;
    let own = users.join(format!("{root}.conf"));
    let composed = dir.join("authorization.conf");
    // An installation with no agent and no fragment yet has nothing to tell the server.
    let known = std::fs::read_to_string(&own).unwrap_or_default() == fragment
        && std::fs::read_to_string(&composed).is_ok_and(|block| block.contains(fragment));
    if known {
        return Ok(Applied::Unchanged);
    }
    write_atomically(&own, fragment)?;
    let mut names: Vec<PathBuf> = std::fs::read_dir(&users)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "conf"))
        .collect();
    names.sort();
    let fragments = names
        .iter()
        .map(|path| std::fs::read_to_string(path).with_context(|| format!("{}", path.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let block = bus::permissions::compose(fragments.iter().map(String::as_str));
    write_atomically(&composed, &block)?;
    if let Err(e) = reload(dir) {
        // Not known to the server yet: the next application writes and reloads again.
        let _ = std::fs::remove_file(&own);
        return Err(e);
    }
    Ok(Applied::Reloaded)
}

/// Writes `text` to `path` whole or not at all: the server may reload at any moment.
fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    bus::link::write_whole(path, text.as_bytes()).with_context(|| format!("{}", path.display()))
}

/// Asks the server whose pid is in `<dir>/nats.pid` to read its configuration again
/// (SIGHUP, as `nats-server --signal reload` does). A server in a process namespace of its own
/// (the compose stack's, in its container) cannot be signalled from here: it watches the
/// authorization itself and says so with a `<dir>/reloads-itself` file instead of its pid.
fn reload(dir: &Path) -> anyhow::Result<()> {
    if dir.join(RELOADS_ITSELF).exists() {
        return Ok(());
    }
    let file = dir.join("nats.pid");
    let pid: i32 = std::fs::read_to_string(&file)
        .with_context(|| format!("the NATS server's pid in {}", file.display()))?
        .trim()
        .parse()
        .with_context(|| format!("the NATS server's pid in {}", file.display()))?;
    let pid = rustix::process::Pid::from_raw(pid)
        .with_context(|| format!("{} holds no pid", file.display()))?;
    rustix::process::kill_process(pid, rustix::process::Signal::HUP)
        .with_context(|| format!("signal the NATS server (pid {pid:?}) to reload"))?;
    Ok(())
}

/// Applies the admissions at once, then again after every admission or revocation published
/// on `topology` (a burst of them applied once), and at least every minute, until `stop`. A
/// failed application is logged and tried again at the next occasion.
pub async fn follow(
    nats: async_nats::Client,
    pool: deadpool_postgres::Pool,
    subjects: bus::Subjects,
    topology: Topology,
    dir: PathBuf,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let changed = Arc::new(Notify::new());
    let watch = |category: &str| {
        events::hints::poke_on(
            nats.clone(),
            topology.category_subject(category),
            |message| {
                events::hints::event_type(message).is_some_and(|t| CHANGING_EVENTS.contains(&t))
            },
            changed.clone(),
            stop.clone(),
        )
    };
    let watching =
        futures::future::try_join(watch("agent"), watch(domain::subscriptions::CATEGORY));
    let applying = async {
        let mut failing = false;
        loop {
            match apply(&pool, &subjects, &topology.stream, &dir).await {
                Ok(applied) => {
                    if failing || applied == Applied::Reloaded {
                        tracing::info!(dir = %dir.display(), ?applied, "NATS authorization in step with the admitted agents");
                    }
                    failing = false;
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(dir = %dir.display(), error = %format!("{e:#}"), "cannot bring the NATS authorization in step; trying again");
                    }
                    failing = true;
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return Ok::<(), anyhow::Error>(()),
                _ = changed.notified() => {}
                _ = tokio::time::sleep(if failing { Duration::from_secs(1) } else { APPLY_AT_LEAST_EVERY }) => {}
            }
        }
    };
    tokio::try_join!(async { Ok(watching.await?) }, applying)?;
    Ok(())
}
