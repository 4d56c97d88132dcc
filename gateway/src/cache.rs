//! A cache of session-detail documents, kept right by the events themselves.
//!
//! The detail read is the hottest request. Each cached document carries the session's stream
//! version; every session event that arrives on NATS evicts its session and raises that
//! session's version floor, and a document read from the projection below the floor (the
//! projection has not applied the event yet) is served but not cached. A cached document is
//! thus at most as late as the NATS delivery of the event that changed it (milliseconds; see
//! `berth bench relay`); the time-to-live bounds the case of a lost message. Without NATS
//! there is no cache.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Longest time a document is served from memory, whatever the events say (by default).
pub const DEFAULT_TTL: Duration = Duration::from_secs(5);
/// Entries kept before the cache starts over.
const CAPACITY: usize = 200_000;

#[derive(Clone)]
pub struct Cached {
    pub owner: Uuid,
    pub body: bytes::Bytes,
    version: i64,
    at: Instant,
}

pub struct DetailCache {
    /// Longest time a document is served from memory, whatever the events say.
    ttl: Duration,
    /// Whether the invalidating subscription is live; until then nothing is cached.
    live: AtomicBool,
    entries: RwLock<HashMap<Uuid, Cached>>,
    floors: RwLock<HashMap<Uuid, i64>>,
}

impl Default for DetailCache {
    fn default() -> Self {
        DetailCache::new(DEFAULT_TTL)
    }
}

impl DetailCache {
    pub fn new(ttl: Duration) -> DetailCache {
        DetailCache {
            ttl,
            live: AtomicBool::new(false),
            entries: RwLock::default(),
            floors: RwLock::default(),
        }
    }

    pub fn get(&self, id: Uuid) -> Option<Cached> {
        if !self.live.load(Ordering::Acquire) {
            return None;
        }
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries
            .get(&id)
            .filter(|c| c.at.elapsed() < self.ttl)
            .cloned()
    }

    /// Keeps a document read from the projection at `version`, unless an event newer than it
    /// has been seen.
    pub fn put(&self, id: Uuid, owner: Uuid, version: i64, body: bytes::Bytes) {
        if !self.live.load(Ordering::Acquire) {
            return;
        }
        let floor = self
            .floors
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .copied();
        if floor.is_some_and(|f| version < f) {
            return;
        }
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(
            id,
            Cached {
                owner,
                body,
                version,
                at: Instant::now(),
            },
        );
    }

    fn saw(&self, id: Uuid, version: i64) {
        {
            let mut floors = self.floors.write().unwrap_or_else(|e| e.into_inner());
            if floors.len() >= CAPACITY {
                floors.clear();
                // Without the floors, cached entries could outlive an event: start over.
                self.entries
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .clear();
            }
            let floor = floors.entry(id).or_insert(version);
            *floor = (*floor).max(version);
        }
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        if entries.get(&id).is_some_and(|c| c.version < version) {
            entries.remove(&id);
        }
    }

    /// Follows the session events on NATS until the subscription ends or `stop`; caches only
    /// meanwhile.
    pub async fn follow(
        self: Arc<Self>,
        nats: async_nats::Client,
        subject: String,
        stop: CancellationToken,
    ) {
        let mut subscriber = match nats.subscribe(subject).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "detail cache off: cannot subscribe");
                return;
            }
        };
        self.live.store(true, Ordering::Release);
        while let Some(message) = tokio::select! {
            _ = stop.cancelled() => None,
            message = subscriber.next() => message,
        } {
            let Ok(event) = serde_json::from_slice::<events::RecordedEvent>(&message.payload)
            else {
                continue;
            };
            let Some(id) = event
                .stream_id
                .strip_prefix("session-")
                .and_then(|s| Uuid::parse_str(s).ok())
            else {
                continue;
            };
            self.saw(id, event.stream_version as i64);
        }
        self.live.store(false, Ordering::Release);
        self.entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> DetailCache {
        let c = DetailCache::default();
        c.live.store(true, Ordering::Release);
        c
    }

    #[test]
    fn an_event_evicts_and_a_stale_read_is_not_kept() {
        let c = live();
        let (id, owner) = (Uuid::now_v7(), Uuid::now_v7());
        c.put(id, owner, 3, bytes::Bytes::from("v3"));
        assert_eq!(c.get(id).unwrap().body, "v3");
        c.saw(id, 4);
        assert!(c.get(id).is_none(), "evicted by a newer event");
        c.put(id, owner, 3, bytes::Bytes::from("v3 again"));
        assert!(
            c.get(id).is_none(),
            "the projection had not caught up: not kept"
        );
        c.put(id, owner, 4, bytes::Bytes::from("v4"));
        assert_eq!(c.get(id).unwrap().body, "v4");
        c.saw(id, 4);
        assert!(c.get(id).is_some(), "a repeat of a seen event keeps it");
    }

    #[test]
    fn nothing_is_cached_without_the_subscription() {
        let c = DetailCache::default();
        c.put(Uuid::nil(), Uuid::nil(), 1, bytes::Bytes::from("x"));
        assert!(c.get(Uuid::nil()).is_none());
    }
}
