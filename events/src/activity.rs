//! A hint, within one process, that the log has just grown, so the readers of the log (the
//! relay, the projection runners) read at once instead of polling PostgreSQL every few
//! milliseconds while nothing happens. An append says so ([`appended`]), and says so again
//! once its transaction committed where that transaction is ours to commit ([`commit`]): the
//! first hint finds the events not yet visible, the second wakes a reader the moment they
//! are, instead of at its next poll. A reader waits for a hint or its poll
//! ([`Activity::rest`]), polling fast only while the log is active and slowly once it has
//! been quiet. Writes of other processes are not hinted: a reader finds
//! them by its slow poll, at most [`QUIET_POLL`] later. The hint is only a wake-up; what a
//! reader reads is always the log itself, behind the horizon.

use std::sync::LazyLock;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// How long after the last sign of activity (an event read, a hint) a reader keeps polling
/// at its fast pace: an append is hinted before its transaction commits, and the event
/// appears behind the horizon a little later.
pub const ACTIVE_FOR: Duration = Duration::from_millis(200);

/// How often a reader polls once the log has been quiet.
pub const QUIET_POLL: Duration = Duration::from_millis(250);

static APPENDS: LazyLock<watch::Sender<u64>> = LazyLock::new(|| watch::channel(0).0);

/// Says that this process appended to the log.
pub fn appended() {
    APPENDS.send_modify(|n| *n = n.wrapping_add(1));
}

/// Commits `tx`, which appended to the log, and says so ([`appended`]): a reader woken by
/// the append's own hint found nothing yet, and reads again now rather than at its poll.
pub async fn commit(tx: deadpool_postgres::Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    tx.commit().await?;
    appended();
    Ok(())
}

/// A reader's view of the log's activity.
pub struct Activity {
    appends: watch::Receiver<u64>,
    last: Instant,
}

impl Default for Activity {
    fn default() -> Self {
        Activity::new()
    }
}

impl Activity {
    pub fn new() -> Activity {
        Activity {
            appends: APPENDS.subscribe(),
            last: Instant::now(),
        }
    }

    /// The reader found something: it stays at its fast pace.
    pub fn saw_events(&mut self) {
        self.last = Instant::now();
    }

    /// Waits before the next read after one that found nothing: `fast_poll` while the log
    /// was active within [`ACTIVE_FOR`], otherwise until an append is hinted or
    /// [`QUIET_POLL`] has passed.
    pub async fn rest(&mut self, fast_poll: Duration) {
        let active = self.last.elapsed() < ACTIVE_FOR;
        let wait = if active {
            fast_poll
        } else {
            QUIET_POLL.max(fast_poll)
        };
        tokio::select! {
            changed = self.appends.changed() => {
                if changed.is_ok() {
                    self.last = Instant::now();
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_quiet_reader_rests_long_and_a_hint_wakes_it_at_once() {
        let mut activity = Activity::new();
        tokio::time::advance(ACTIVE_FOR * 2).await;
        let started = Instant::now();
        activity.rest(Duration::from_millis(2)).await;
        assert_eq!(started.elapsed(), QUIET_POLL, "quiet: the slow poll");

        let hinting = tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            appended();
        });
        let started = Instant::now();
        activity.rest(Duration::from_millis(2)).await;
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(10),
            "woken by the hint"
        );
        hinting.await.unwrap();
        // Active now: the fast poll.
        let started = Instant::now();
        activity.rest(Duration::from_millis(2)).await;
        assert_eq!(started.elapsed(), Duration::from_millis(2));
    }
}
