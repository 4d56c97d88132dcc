//! Waiting out what is away, for the control plane and the agent alike: an outage logged
//! once when it starts and once when it ends ([`Outage`]), and a dependency waited for at
//! start ([`until_up`]), retrying with [`crate::link::backoff`].

use std::fmt::Display;
use std::future::Future;

use crate::link::backoff;

/// An outage as a loop that retries by itself sees it: logged once when its first failure
/// comes and once when it works again, never at every retry.
#[derive(Debug, Default)]
pub struct Outage {
    since: Option<tokio::time::Instant>,
}

impl Outage {
    /// Notes a failure of `part`; the first of an outage is logged as a warning.
    pub fn failed(&mut self, part: &str, error: &dyn std::fmt::Display) {
        if self.since.is_none() {
            self.since = Some(tokio::time::Instant::now());
            tracing::warn!(part, error = %error, "failing; retrying with backoff until it works");
        } else {
            tracing::debug!(part, error = %error, "failed again");
        }
    }

    /// Notes that `part` works; the end of an outage is logged with how long it lasted.
    pub fn passed(&mut self, part: &str) {
        if let Some(since) = self.since.take() {
            tracing::info!(
                part,
                after_secs = since.elapsed().as_secs_f64(),
                "working again"
            );
        }
    }

    /// Whether the last thing noted was a failure.
    pub fn is_on(&self) -> bool {
        self.since.is_some()
    }
}

/// Runs `attempt` until it succeeds or fails with an error `passes` does not call passing
/// (a refusal waiting will not mend, returned as it is). While it fails it waits with
/// backoff, saying once that it waits for `what`, and once that `what` is up.
pub async fn until_up<T, E, F, Fut>(
    what: &str,
    mut attempt: F,
    passes: impl Fn(&E) -> bool,
) -> Result<T, E>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut failures = 0u32;
    loop {
        match attempt().await {
            Ok(up) => {
                if failures > 0 {
                    tracing::info!("{what} is up");
                }
                return Ok(up);
            }
            Err(e) if passes(&e) => {
                if failures == 0 {
                    tracing::warn!(error = %e, "waiting for {what}");
                }
                failures += 1;
                tokio::time::sleep(backoff(failures)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_dependency_is_waited_for_until_up_and_a_refusal_is_returned() {
        let mut tries = 0;
        let up = until_up(
            "the test",
            || {
                tries += 1;
                let now = tries;
                async move {
                    if now < 4 {
                        Err("away")
                    } else {
                        Ok(now)
                    }
                }
            },
            |e: &&str| *e == "away",
        )
        .await;
        assert_eq!(up, Ok(4));
        let refused: Result<(), &str> = until_up(
            "the test",
            || async { Err("refused") },
            |e: &&str| *e == "away",
        )
        .await;
        assert_eq!(refused, Err("refused"));
    }
}
