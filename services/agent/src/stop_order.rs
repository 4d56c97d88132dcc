//! How a session task is told to end. The control plane stops a session on an agent for
//! two reasons: the session is terminating (everything of it ends), or it gave back a
//! placement (it ended, or went back to the queue), and only what runs of that placement
//! ends. The session may have been placed on this agent again since, and an agent that
//! starts again can take the old placement's stop after it has started the new one: that
//! stop must not end the new placement's task.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// One session task's order to end, shared between the agent's command loop (which gives
/// it) and the task (which waits for it). Cloning shares it.
#[derive(Clone, Debug)]
pub(crate) struct StopOrder {
    /// Cancelled when everything of the session is to end here, and when the task ends.
    whole: CancellationToken,
    /// The latest placement given back whose stop came (counted from 0).
    released: Arc<watch::Sender<Option<u32>>>,
}

impl Default for StopOrder {
    fn default() -> StopOrder {
        StopOrder {
            whole: CancellationToken::new(),
            released: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl StopOrder {
    /// Carries out a stop command: everything (`placement` none), or placement
    /// `placement` and earlier ones.
    pub(crate) fn give(&self, placement: Option<u32>) {
        match placement {
            None => self.whole.cancel(),
            Some(p) => {
                self.released
                    .send_modify(|latest| *latest = Some(latest.map_or(p, |l| l.max(p))));
            }
        }
    }

    /// Ends the task whatever placement it runs (the agent ends every session, or the task
    /// ended by itself).
    pub(crate) fn end(&self) {
        self.whole.cancel();
    }

    /// The task ended, or everything of its session is to end.
    pub(crate) fn is_ended(&self) -> bool {
        self.whole.is_cancelled()
    }

    /// Resolves once a task running placement `placement` is to end.
    pub(crate) async fn given(&self, placement: u32) {
        let mut released = self.released.subscribe();
        tokio::select! {
            _ = self.whole.cancelled() => {}
            // The sender lives as long as this order: the wait ends only by its condition.
            _ = released.wait_for(|latest| latest.is_some_and(|l| l >= placement)) => {}
        }
    }

    /// Cancels the order when dropped: a task holding the guard is forgotten once it ends.
    pub(crate) fn ended_on_drop(&self) -> tokio_util::sync::DropGuard {
        self.whole.clone().drop_guard()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn ends(order: &StopOrder, placement: u32) -> bool {
        tokio::time::timeout(Duration::from_millis(50), order.given(placement))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn an_earlier_placements_stop_leaves_a_later_placement_running() {
        let order = StopOrder::default();
        order.give(Some(0));
        assert!(
            !ends(&order, 1).await,
            "placement 1 outlives placement 0's stop"
        );
        assert!(ends(&order, 0).await);
        order.give(Some(1));
        assert!(ends(&order, 1).await);
        assert!(!order.is_ended());
    }

    #[tokio::test]
    async fn a_stop_of_the_whole_session_ends_any_placement() {
        let order = StopOrder::default();
        assert!(!ends(&order, 3).await);
        order.give(None);
        assert!(ends(&order, 3).await);
        assert!(order.is_ended());
    }

    #[tokio::test]
    async fn a_stop_given_before_the_task_waits_is_kept() {
        let order = StopOrder::default();
        let task = order.clone();
        order.give(Some(2));
        assert!(ends(&task, 2).await);
        assert!(!ends(&task, 3).await);
    }
}
