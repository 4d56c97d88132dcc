//! The relay's events as this gateway's event-stream readers follow them live: one ordered
//! JetStream consumer of the relay's stream per gateway, each event's place, type and stream
//! read once (not its payload), and every reader handed the same event through a broadcast
//! channel, so a hundred readers cost the bus and the server one consumer, not a hundred.
//!
//! The channel holds [`LIVE_CAPACITY`] events; a reader that falls further behind is told it
//! lagged, and reads what it missed from the log (everything relayed is in it), as it caught
//! up when it began. The consumer is made before the first reader reads the log, and follows
//! until the gateway stops or the bus ends it; its readers' streams then end, and their clients
//! resume (the next reader makes a consumer again).

use std::borrow::Cow;
use std::sync::Arc;

use async_nats::jetstream::consumer;
use events::relay::Topology;
use events::LogPosition;
use futures::StreamExt;
use serde::Deserialize;
use tokio::sync::{broadcast, Mutex};
use tokio_util::sync::CancellationToken;

/// Events the broadcast keeps for readers that have not taken them yet.
pub const LIVE_CAPACITY: usize = 8_192;

/// A live event: where it is, and its recorded form as the relay published it (which is what
/// the event stream sends).
#[derive(Debug)]
pub struct LiveEvent {
    pub position: LogPosition,
    pub event_type: String,
    pub stream_id: String,
    pub data: Arc<str>,
}

/// What the relay's message says of the event's place, read without its payload.
#[derive(Deserialize)]
struct Envelope<'a> {
    position: &'a str,
    #[serde(borrow)]
    stream_id: Cow<'a, str>,
    #[serde(borrow)]
    event_type: Cow<'a, str>,
}

impl LiveEvent {
    /// The event a relay message carries; `None` for a message that is not one.
    fn of(payload: &[u8]) -> Option<LiveEvent> {
        let data = std::str::from_utf8(payload).ok()?;
        let envelope: Envelope = serde_json::from_str(data).ok()?;
        Some(LiveEvent {
            position: envelope.position.parse().ok()?,
            event_type: envelope.event_type.into_owned(),
            stream_id: envelope.stream_id.into_owned(),
            data: Arc::from(data),
        })
    }
}

/// The gateway's one follower of the relay's stream, made when a reader first needs it.
#[derive(Debug, Clone, Default)]
pub struct LiveHub {
    /// The broadcast of the follower running now; its task holds the only strong sender, so
    /// readers see the channel close when it ends.
    sender: Arc<Mutex<Option<broadcast::WeakSender<Arc<LiveEvent>>>>>,
}

/// The bus could not be followed.
#[derive(Debug, thiserror::Error)]
#[error("follow the relay's stream: {0}")]
pub struct LiveError(String);

impl LiveHub {
    /// A receiver of every event the relay publishes from now on (from when the follower was
    /// made, for one already running), starting the follower of `topology`'s stream on `nats`
    /// first when none runs; it ends when `stop` is cancelled.
    pub async fn subscribe(
        &self,
        nats: &async_nats::Client,
        topology: &Topology,
        stop: &CancellationToken,
    ) -> Result<broadcast::Receiver<Arc<LiveEvent>>, LiveError> {
        let mut running = self.sender.lock().await;
        if let Some(sender) = running.as_ref().and_then(broadcast::WeakSender::upgrade) {
            return Ok(sender.subscribe());
        }
        let js = async_nats::jetstream::new(nats.clone());
        let stream = js
            .get_stream(&topology.stream)
            .await
            .map_err(|e| LiveError(e.to_string()))?;
        let follower = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: topology.all_subjects(),
                deliver_policy: consumer::DeliverPolicy::New,
                ..Default::default()
            })
            .await
            .map_err(|e| LiveError(e.to_string()))?;
        let mut messages = follower
            .messages()
            .await
            .map_err(|e| LiveError(e.to_string()))?;
        let (sender, receiver) = broadcast::channel(LIVE_CAPACITY);
        *running = Some(sender.downgrade());
        let stop = stop.clone();
        tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    _ = stop.cancelled() => return,
                    message = messages.next() => message,
                };
                let Some(Ok(message)) = message else {
                    tracing::info!(
                        "the event stream's follower of the relay ended; readers resume"
                    );
                    return;
                };
                if let Some(event) = LiveEvent::of(&message.payload) {
                    // None listening now is no reason to stop: the next reader comes soon.
                    let _ = sender.send(Arc::new(event));
                }
            }
        });
        Ok(receiver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relay_message_is_read_for_its_place_and_passed_on_whole() {
        let data = r#"{"event_id":"0190","stream_id":"session-abc","stream_version":3,"position":"42:7","recorded_at":"2026-11-29T00:00:00Z","event_type":"SessionRenamed","schema_version":1,"metadata":{},"payload":{"name":"x"}}"#;
        let event = LiveEvent::of(data.as_bytes()).expect("an event");
        assert_eq!(event.position, LogPosition { tx: 42, seq: 7 });
        assert_eq!(
            (event.event_type.as_str(), event.stream_id.as_str()),
            ("SessionRenamed", "session-abc")
        );
        assert_eq!(&*event.data, data);
        assert!(LiveEvent::of(b"not json").is_none());
        assert!(LiveEvent::of(br#"{"position":"x","stream_id":"a-b","event_type":"T"}"#).is_none());
    }
}
