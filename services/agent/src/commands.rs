//! The agent's commands, taken one at a time from the durable consumer the control plane
//! made for it. A command is acknowledged when the next one is asked for, that is once the
//! agent has acted on it (started or stopped the session's task); one the agent did not get
//! to is delivered again. A lost subscription (NATS restarted) is made again.

use std::time::Duration;

use async_nats::jetstream::consumer::pull;
use async_nats::jetstream::Message;
use bus::patience::Outage;
use bus::protocol::Command;
use bus::Link;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::AgentError;

pub(crate) struct Commands {
    link: Link,
    messages: Option<pull::Stream>,
    unacked: Option<Message>,
    /// The subscription lost and not made again yet, logged once.
    outage: Outage,
}

/// The part an outage of the commands is logged as.
const PART: &str = "the agent's commands";

impl Commands {
    pub(crate) fn new(link: Link) -> Commands {
        Commands {
            link,
            messages: None,
            unacked: None,
            outage: Outage::default(),
        }
    }

    /// The next command; `None` once `stop` is cancelled.
    pub(crate) async fn next(&mut self, stop: &CancellationToken) -> Option<Command> {
        if let Some(done) = self.unacked.take() {
            if let Err(e) = done.ack().await {
                tracing::debug!(error = %e, "a command was not acknowledged; it comes again");
            }
        }
        loop {
            if stop.is_cancelled() {
                return None;
            }
            let Some(messages) = self.messages.as_mut() else {
                match self.subscribe().await {
                    Ok(m) => {
                        self.outage.passed(PART);
                        self.messages = Some(m);
                    }
                    Err(e) => {
                        self.outage
                            .failed(PART, &format_args!("cannot take commands: {e}"));
                        tokio::select! {
                            _ = stop.cancelled() => return None,
                            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        }
                    }
                }
                continue;
            };
            let next = tokio::select! {
                _ = stop.cancelled() => return None,
                next = messages.next() => next,
            };
            match next {
                Some(Ok(message)) => match serde_json::from_slice::<Command>(&message.payload) {
                    Ok(command) => {
                        let name = match &command {
                            Command::Assign { .. } => "assign",
                            Command::Stop { .. } => "stop",
                            Command::Commit { .. } => "commit",
                            Command::RemoveImage { .. } => "remove_image",
                            Command::StartApp { .. } => "start_app",
                        };
                        metrics::counter!(crate::COMMANDS, "command" => name).increment(1);
                        self.unacked = Some(message);
                        return Some(command);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "an unreadable command was dropped");
                        let _ = message.ack().await;
                    }
                },
                Some(Err(e)) if e.kind() != pull::MessagesErrorKind::ConsumerDeleted => {
                    // Missed heartbeats and the like: the stream recovers by itself.
                    tracing::debug!(error = %e, "command stream");
                }
                Some(Err(_)) | None => {
                    self.outage
                        .failed(PART, &"the command subscription ended; making it again");
                    self.messages = None;
                }
            }
        }
    }

    async fn subscribe(&self) -> Result<pull::Stream, AgentError> {
        let consumer = self.link.commands().await?;
        Ok(consumer.messages().await.map_err(bus::BusError::from)?)
    }
}
