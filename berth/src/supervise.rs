//! Keeps each part of the control plane running through outages of what it stands on
//! (PostgreSQL, NATS). A part that fails is started again after a capped, jittered backoff,
//! and goes on from its checkpoint (the relay's and projections' checkpoints, the durable
//! consumers' acknowledgements). Each outage is logged once when a part first fails and once
//! when it has run again for [`RECOVERED_AFTER`], not at every retry. Only a mistake that
//! waiting cannot mend ([`is_permanent`]: a wrong password, a database or table that is not
//! there, a corrupt event) stops the part, and with it the process.

use std::future::Future;
use std::time::Duration;

use events::fault;
use events::StoreError;
use tokio_util::sync::CancellationToken;

/// How long a restarted part runs without failing before its outage is logged as over.
pub const RECOVERED_AFTER: Duration = Duration::from_secs(5);

/// Backoff steps a restart waits at most (`bus::link::backoff`: 1.6 s, with up to a quarter
/// of jitter): a part is back within about 2 s of its dependency.
const RESTART_STEPS: u32 = 5;

/// Runs `part` (a fresh future from `start` each time) until `stop`, starting it again after
/// each failure that may pass. Returns `Ok` once stopped, or the permanent error.
pub async fn keep_running<F, Fut>(
    part: &'static str,
    stop: CancellationToken,
    mut start: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut failures = 0u32;
    let mut outage = fault::Outage::default();
    loop {
        let running = start();
        tokio::pin!(running);
        let ended = loop {
            tokio::select! {
                ended = &mut running => break ended,
                _ = tokio::time::sleep(RECOVERED_AFTER), if outage.is_on() => {
                    outage.passed(part);
                    failures = 0;
                }
            }
        };
        if stop.is_cancelled() {
            return Ok(());
        }
        let error = match ended {
            Ok(()) => anyhow::anyhow!("it stopped on its own"),
            Err(e) if is_permanent(&e) => {
                tracing::error!(
                    part,
                    error = format!("{e:#}"),
                    "stopped by a fault that waiting will not mend"
                );
                return Err(e.context(format!("berth's {part}")));
            }
            Err(e) => e,
        };
        failures += 1;
        outage.failed(part, &format_args!("{error:#}"));
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(bus::link::backoff(failures.min(RESTART_STEPS))) => {}
        }
    }
}

/// Whether `error` is a mistake rather than an outage: PostgreSQL refused the login or the
/// database, or a statement (class 42: a table, column or privilege that is not there), or
/// the log holds what cannot be decoded or its clock is behind. Everything else (a
/// connection refused, cut or timed out, NATS unreachable, a JetStream request timed out) may
/// pass, so the part is started again.
pub fn is_permanent(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        if let Some(e) = cause.downcast_ref::<tokio_postgres::Error>() {
            return fault::postgres_refused(e)
                || e.code().is_some_and(|c| c.code().starts_with("42"));
        }
        if let Some(e) = cause.downcast_ref::<StoreError>() {
            return matches!(
                e,
                StoreError::Corrupt { .. } | StoreError::BadUrl(_) | StoreError::ClockBehind { .. }
            );
        }
        false
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn a_part_that_fails_is_started_again_until_it_runs() {
        let starts = Arc::new(AtomicU32::new(0));
        let stop = CancellationToken::new();
        let (s, counted) = (stop.clone(), starts.clone());
        let kept = tokio::spawn(keep_running("test", stop.clone(), move || {
            let (s, counted) = (s.clone(), counted.clone());
            async move {
                if counted.fetch_add(1, Ordering::SeqCst) < 3 {
                    anyhow::bail!("the bus is away");
                }
                s.cancelled().await;
                Ok(())
            }
        }));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(starts.load(Ordering::SeqCst), 4);
        stop.cancel();
        kept.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_mistake_stops_the_part_with_its_error() {
        let stop = CancellationToken::new();
        let error = keep_running("test", stop, || async {
            Err(anyhow::Error::from(StoreError::BadUrl("nope".into())))
        })
        .await
        .unwrap_err();
        assert!(format!("{error:#}").contains("nope"), "{error:#}");
    }
}
