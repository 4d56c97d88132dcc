//! Published events as hints: a core subscription that pokes a [`Notify`] for the event types
//! a part cares about, so the part looks again (at the ledger, at the admitted agents) at
//! once instead of at its next timer. A hint lost while NATS is away is covered by that
//! timer, and a burst coalesces into the one stored permit.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Pokes `notify` for every event published on `subject` that `wanted` accepts (most look
/// only at its [`event_type`]), until `stop`. The subscription outlives NATS restarts (the
/// client subscribes again when it reconnects); should it end all the same, it is made again
/// and `notify` poked once, for whatever was published meanwhile.
pub async fn poke_on(
    client: async_nats::Client,
    subject: String,
    mut wanted: impl FnMut(&async_nats::Message) -> bool,
    notify: Arc<Notify>,
    stop: CancellationToken,
) -> Result<(), async_nats::SubscribeError> {
    let mut events = client.subscribe(subject.clone()).await?;
    loop {
        let message = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            message = events.next() => message,
        };
        let Some(message) = message else {
            tracing::warn!(%subject, "an event subscription ended; subscribing again");
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            if let Ok(again) = client.subscribe(subject.clone()).await {
                events = again;
                notify.notify_one();
            }
            continue;
        };
        if wanted(&message) {
            notify.notify_one();
        }
    }
}

/// The type of the event a relayed message carries, from its header.
pub fn event_type(message: &async_nats::Message) -> Option<&str> {
    message
        .headers
        .as_ref()
        .and_then(|h| h.get(crate::trace::headers::EVENT_TYPE))
        .map(|v| v.as_str())
}
