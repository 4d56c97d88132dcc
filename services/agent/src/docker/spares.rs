//! Fenced bridges made ahead: a single kernel's session takes one that is ready instead of
//! waiting for the engine to make its own, the slowest call of its start (docs/performance.md,
//! "the fence's network made ahead"). A spare is the bridge a single kernel gets anyway
//! (traffic between containers off, a subnet of the fence's pool, a `berth<10 hex>` interface
//! the firewall matches), labelled a spare of this agent; it serves one session and is
//! removed with it, never handed to a second.
//!
//! Taking one never waits: the list is looked at under a plain lock, and an empty one sends
//! the session to make its own network as before. The spares are made by one task the agent
//! owns ([`keep_ready`]), woken after a start is through, so that their making does not
//! compete with the start they served; a failure (the engine out of reach) leaves fewer
//! spares, never a stuck start. The task ends with the agent: aborted with it, or at its
//! stop let finish the spare it is making, so that the ready ones it removes are all there are.
//! Which session has which spare is kept here and on its containers' label
//! ([`super::spec::LABEL_NETWORK`]), so an agent that starts again knows; spares no
//! container is on are removed at that start ([`super::adopt`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::ctx::Ctx;
use super::spec::{network_name, LABEL_AGENT};

/// The label that marks a network as one of the agent's spares (its value is the agent's id).
pub const LABEL_SPARE: &str = "ai.berth.spare";

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
    ready: Vec<String>,
    making: usize,
    held: HashMap<Uuid, String>,
}

impl Spares {
    /// The network session `session` runs on when it is a spare: the one it holds already (a
    /// second try of its start), else a ready one, now held by it. `None`: none is ready.
    pub(super) fn take(&self, session: Uuid) -> Option<String> {
        let mut inner = self.inner.lock().expect("the spares' lock");
        if let Some(name) = inner.held.get(&session) {
            return Some(name.clone());
        }
        let name = inner.ready.pop()?;
        inner.held.insert(session, name.clone());
        Some(name)
    }

    /// Records that `session` runs on spare `name` (an adopted session's, from its label).
    pub(super) fn hold(&self, session: Uuid, name: String) {
        let mut inner = self.inner.lock().expect("the spares' lock");
        inner.held.insert(session, name);
    }

    /// The spare `session` held, no longer held: its network to remove.
    pub(super) fn release(&self, session: Uuid) -> Option<String> {
        let mut inner = self.inner.lock().expect("the spares' lock");
        inner.held.remove(&session)
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
    fn made(&self, name: Option<String>) {
        let mut inner = self.inner.lock().expect("the spares' lock");
        inner.making -= 1;
        inner.ready.extend(name);
    }

    /// The spares ready, taken out of the list (to be removed as the agent stops).
    pub(super) fn drain_ready(&self) -> Vec<String> {
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
            Ok(name) => ctx.spares.made(Some(name)),
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

/// One spare made, its name; or why not (then nothing of it is left, as far as the engine
/// answers).
async fn make_one(ctx: &Ctx) -> Result<String, String> {
    let id = Uuid::new_v4();
    let name = network_name(id);
    let labels = HashMap::from([
        (LABEL_AGENT.to_string(), ctx.agent_id.clone()),
        (LABEL_SPARE.to_string(), ctx.agent_id.clone()),
    ]);
    let making = super::kernels::make_bridge(ctx, &name, id, 1, false, labels);
    match tokio::time::timeout(MAKING_BOUND, making).await {
        Ok(Ok(())) => Ok(name),
        failed => {
            // Made after all (an answer lost, or late): not left behind.
            let _ = ctx.docker.remove_network(&name).await;
            Err(match failed {
                Ok(Err(e)) => e,
                _ => format!("no answer in {MAKING_BOUND:?}"),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        spares.made(Some("berth-a".into()));
        spares.made(Some("berth-b".into()));
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
        assert_eq!(spares.release(first), Some(taken));
        assert_eq!(spares.release(first), None);
    }

    #[test]
    fn a_spare_given_up_is_no_longer_counted_as_being_made() {
        let spares = Spares::default();
        assert_eq!(spares.to_make(2), 2);
        spares.made(None);
        spares.made(None);
        assert_eq!(spares.to_make(2), 2);
        spares.made(Some("berth-c".into()));
        spares.made(None);
        assert_eq!(spares.to_make(2), 1);
        assert_eq!(spares.drain_ready(), vec!["berth-c".to_string()]);
    }
}
