//! Caches kept right by the events themselves: session-detail documents ([`DetailCache`]) and
//! the owners of API keys and Backend.AI access keys looked up lately ([`KeyCache`]).
//!
//! **Keys.** A key's owner is kept for [`KEY_CACHE_TTL`] at most, and only while the gateway
//! follows the account events on NATS (`user-*` and `console-*` streams, as the relay
//! publishes them): every such event (a key revoked, a user disabled or given another role, a
//! keypair revoked, a password set) drops what is kept for its user, and so does the word the
//! gateway that made the change publishes at once (`bus::Subjects::keys_forget`), so a
//! revocation holds on every gateway within milliseconds, not after the time-to-live. The
//! time-to-live stays as the backstop for a message lost; while NATS is away nothing is kept
//! and what was kept is dropped, since events may be missed meanwhile.
//!
//! **Session details.**
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

use chrono::{DateTime, Utc};
use events::catalogue::Event;
use events::credentials::key_is_live;
use events::ledger::KeyOwner;
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

/// How long a looked-up key's owner is trusted at most, should the event that changed it be
/// lost.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(10);

/// The owners of API keys (by digest) and Backend.AI access keys (by
/// `BackendAiKeys::cache_key`) looked up lately; see the module's words on keys.
#[derive(Clone, Default)]
pub(crate) struct KeyCache(Arc<KeyEntries>);

#[derive(Default)]
pub(crate) struct KeyEntries {
    /// Whether the account events are followed; until then nothing is kept.
    live: AtomicBool,
    entries: RwLock<HashMap<String, KeptKey>>,
}

/// A key's owner, when it was looked up, and when the key expires (never, with none).
type KeptKey = (KeyOwner, Instant, Option<DateTime<Utc>>);

impl KeyCache {
    /// The owner of the key kept as `key`, when it was looked up less than [`KEY_CACHE_TTL`]
    /// ago and the account events are followed (`connected`: NATS is connected now; when it
    /// is not, everything kept is dropped, since events may be missed meanwhile).
    pub(crate) fn fresh(&self, key: &str, connected: bool) -> Option<KeyOwner> {
        if !connected {
            self.clear();
            return None;
        }
        if !self.0.live.load(Ordering::Acquire) {
            return None;
        }
        let entries = self.0.entries.read().unwrap_or_else(|e| e.into_inner());
        match entries.get(key) {
            Some((owner, at, expires))
                if at.elapsed() < KEY_CACHE_TTL && key_is_live(*expires, Utc::now()) =>
            {
                Some(owner.clone())
            }
            _ => None,
        }
    }

    /// Keeps `owner` as the owner of the key kept as `key`, looked up now, until `expires`
    /// at the latest (while the account events are followed).
    pub(crate) fn keep(&self, key: String, owner: KeyOwner, expires: Option<DateTime<Utc>>) {
        if !self.0.live.load(Ordering::Acquire) {
            return;
        }
        let mut entries = self.0.entries.write().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(key, (owner, Instant::now(), expires));
    }

    /// Forgets every key of `user` (one revoked, or the user changed).
    pub(crate) fn forget_user(&self, user: Uuid) {
        self.0
            .entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, (owner, _, _)| owner.user_id != user);
    }

    fn clear(&self) {
        self.0
            .entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Follows the account events on `subjects` (the relay's subjects of the `user` and
    /// `console` streams) and the gateways' word on `forget` (a user's id, published by the
    /// gateway that made the change, at once) until `stop`, forgetting a user's keys at each;
    /// keeps keys only meanwhile. A subscription that ends is made again, everything kept
    /// dropped.
    pub(crate) async fn follow(
        self,
        nats: async_nats::Client,
        subjects: [String; 2],
        forget: String,
        stop: CancellationToken,
    ) {
        loop {
            let subscribed = async {
                let users = nats.subscribe(subjects[0].clone()).await?;
                let consoles = nats.subscribe(subjects[1].clone()).await?;
                let forgets = nats.subscribe(forget.clone()).await?;
                Ok::<_, async_nats::SubscribeError>(futures::stream::select(
                    futures::stream::select(users, consoles),
                    forgets,
                ))
            };
            match subscribed.await {
                Ok(mut messages) => {
                    self.0.live.store(true, Ordering::Release);
                    loop {
                        let message = tokio::select! {
                            _ = stop.cancelled() => None,
                            m = messages.next() => m,
                        };
                        let Some(message) = message else { break };
                        let said = std::str::from_utf8(&message.payload)
                            .ok()
                            .and_then(|text| Uuid::parse_str(text).ok());
                        if let Some(user) = said.or_else(|| account_event_user(&message.payload)) {
                            self.forget_user(user);
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the key cache cannot follow accounts"),
            }
            self.0.live.store(false, Ordering::Release);
            self.clear();
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}

/// The user an account event (a relayed event of a `user-*` or `console-*` stream) is about.
fn account_event_user(payload: &[u8]) -> Option<Uuid> {
    let event = serde_json::from_slice::<events::RecordedEvent>(payload).ok()?;
    match &event.event {
        Event::ApiKeyRevoked(e) => Some(e.user_id),
        Event::UserDisabled(e) => Some(e.user_id),
        Event::UserEnabled(e) => Some(e.user_id),
        Event::UserRoleChanged(e) => Some(e.user_id),
        Event::BackendAiKeypairRevoked(e) => Some(e.user_id),
        Event::UserPasswordSet(e) => Some(e.user_id),
        Event::ConsoleSignedOutEverywhere(e) => Some(e.user_id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(user_id: Uuid) -> KeyOwner {
        KeyOwner {
            user_id,
            email: "a@b.c".into(),
            role: events::payloads::Role::User,
            resource_policy: "default".into(),
        }
    }

    #[test]
    fn keys_are_kept_only_while_followed_and_connected_and_forgotten_by_user() {
        let cache = KeyCache::default();
        let (alice, bob) = (Uuid::now_v7(), Uuid::now_v7());
        cache.keep("k1".into(), owner(alice), None);
        assert!(cache.fresh("k1", true).is_none(), "not followed: not kept");
        cache.0.live.store(true, Ordering::Release);
        cache.keep("k1".into(), owner(alice), None);
        cache.keep("k2".into(), owner(alice), None);
        cache.keep("k3".into(), owner(bob), None);
        let past = Utc::now() - chrono::TimeDelta::seconds(1);
        cache.keep("expired".into(), owner(bob), Some(past));
        assert!(
            cache.fresh("expired", true).is_none(),
            "expired: not served"
        );
        assert_eq!(cache.fresh("k1", true).unwrap().user_id, alice);
        cache.forget_user(alice);
        assert!(cache.fresh("k1", true).is_none());
        assert!(cache.fresh("k2", true).is_none());
        assert_eq!(cache.fresh("k3", true).unwrap().user_id, bob);
        assert!(cache.fresh("k3", false).is_none(), "NATS away: not trusted");
        assert!(cache.fresh("k3", true).is_none(), "and dropped");
    }

    #[test]
    fn the_account_events_that_end_a_key_name_its_user() {
        let user = Uuid::now_v7();
        let relayed = |event: Event| {
            serde_json::to_vec(&events::RecordedEvent {
                event_id: Uuid::now_v7(),
                stream_id: format!("user-{}", user.simple()),
                stream_version: 1,
                position: events::LogPosition { tx: 1, seq: 1 },
                recorded_at: chrono::Utc::now(),
                schema_version: 1,
                metadata: events::Metadata::default(),
                event,
            })
            .unwrap()
        };
        let revoked = relayed(Event::ApiKeyRevoked(events::payloads::ApiKeyRevoked {
            user_id: user,
            key_prefix: "berth_000000".into(),
            key_sha256: "ab".repeat(32),
        }));
        assert_eq!(account_event_user(&revoked), Some(user));
        let disabled = relayed(Event::UserDisabled(events::payloads::UserDisabled {
            user_id: user,
        }));
        assert_eq!(account_event_user(&disabled), Some(user));
        assert_eq!(account_event_user(b"not an event"), None);
    }

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
