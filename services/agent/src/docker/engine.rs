//! The engine away. A Docker socket that refuses or cuts connections (dockerd restarting,
//! its socket paused) is an outage the agent waits out, never a session's end: the calls a
//! session's life depends on (inspect, create, start, wait, logs, stop, remove) are asked
//! again with capped, jittered backoff until the engine answers, and containers keep running
//! meanwhile. The outage is logged once when it starts and once when it ends, for the whole
//! agent.

use std::future::Future;
use std::sync::{Arc, Mutex};

use bollard::errors::Error;
use bus::patience::Outage;
use tokio_util::sync::CancellationToken;

/// Whether `e` says the engine could not be reached (no socket, a connection refused or cut,
/// no answer in time), rather than that it refused what was asked.
pub(crate) fn unreachable(e: &Error) -> bool {
    matches!(
        e,
        Error::IOError { .. }
            | Error::HyperLegacyError { .. }
            | Error::HyperResponseError { .. }
            | Error::HttpClientError { .. }
            | Error::RequestTimeoutError
            | Error::SocketNotFoundError(_)
    )
}

/// Whether the engine is out of reach, shared by every task of the agent, so the outage is
/// logged once for them all.
#[derive(Clone, Default)]
pub(crate) struct EngineWatch(Arc<Mutex<Outage>>);

impl EngineWatch {
    fn failed(&self, e: &Error) {
        let mut outage = self.0.lock().unwrap_or_else(|e| e.into_inner());
        outage.failed("the Docker engine (containers keep running)", e);
    }

    fn answered(&self) {
        let mut outage = self.0.lock().unwrap_or_else(|e| e.into_inner());
        outage.passed("the Docker engine (containers keep running)");
    }
}

/// Runs `call` until the engine answers it (with a result or a refusal), waiting out its
/// absence, which `watch` tells; gives up only on `stop` (the agent's), with the last error.
/// The rooms call it through `Ctx::patiently`.
pub(super) async fn patiently<T, F, Fut>(
    watch: &EngineWatch,
    stop: &CancellationToken,
    mut call: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut failures = 0u32;
    loop {
        match call().await {
            Err(e) if unreachable(&e) => {
                watch.failed(&e);
                failures += 1;
                tokio::select! {
                    _ = stop.cancelled() => return Err(e),
                    _ = tokio::time::sleep(bus::link::backoff(failures)) => {}
                }
            }
            answered => {
                watch.answered();
                return answered;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_engine_out_of_reach_is_waited_for() {
        assert!(unreachable(&Error::RequestTimeoutError));
        assert!(unreachable(&Error::SocketNotFoundError(
            "/run/docker.sock".into()
        )));
        let refused = Error::DockerResponseServerError {
            status_code: 404,
            message: "No such image".into(),
        };
        assert!(!unreachable(&refused));
    }
}
