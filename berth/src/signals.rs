//! How every berth process is asked to stop: SIGTERM (systemd, `docker stop`, Kubernetes) and
//! SIGINT (Ctrl-C) mean the same, a graceful stop within a bound. The control plane stops
//! its parts ([`crate::app::App::stop_within`]); an agent departs (`berth agent`).

use tokio::signal::unix::{signal, Signal, SignalKind};

/// SIGTERM and SIGINT, listened for from the moment this is made (before, they end the
/// process at once, as by default): a process makes it first, before it starts.
pub struct StopSignals {
    term: Signal,
    int: Signal,
}

impl StopSignals {
    pub fn listen() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGTERM or SIGINT; the signal's name.
    pub async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
