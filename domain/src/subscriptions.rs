//! Durable subscriptions to the log: a user's named reading of the events they may see,
//! filtered, whose consumer acknowledges how far it has read so that a restarted one goes on
//! from there. Each lives in a stream of its own, `subscription-<owner>-<name>`: a name is its
//! owner's once at a time, made again only after it was deleted, and the stream's last event
//! says whether it is live. Pure: the gateway records the events and keeps the
//! acknowledgements; this says which names are allowed, where they live and what is live.

use uuid::Uuid;

use crate::catalogue::Event;
use crate::payloads::SubscriptionCreated;
use crate::RecordedEvent;

/// The most characters of a subscription's name.
pub const MOST_NAME_CHARS: usize = 64;

/// Whether `name` can name a subscription: 1 to 64 lowercase letters, digits, `-` and `_`,
/// starting with a letter or a digit, so it is a token of a stream id and of a NATS
/// consumer's name alike.
pub fn is_valid_name(name: &str) -> bool {
    (1..=MOST_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
}

/// The category of the subscriptions' streams.
pub const CATEGORY: &str = "subscription";

/// The stream of `owner`'s subscription `name`.
pub fn stream_of(owner: Uuid, name: &str) -> String {
    format!("{}-{}", stream_prefix(owner), name)
}

/// What the streams of `owner`'s subscriptions begin with.
pub fn stream_prefix(owner: Uuid) -> String {
    format!("{CATEGORY}-{}", owner.simple())
}

/// The JetStream consumer (and the NATS inbox token) of a subscription read over NATS: its
/// owner and name, which no other live subscription shares.
pub fn consumer_name(owner: Uuid, name: &str) -> String {
    format!("sub-{}-{name}", owner.simple())
}

/// A live subscription as its stream says: its creation, and where that was recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    pub created: SubscriptionCreated,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// The creation's place in the log: a subscription not `from_start` reads after it.
    pub created_position: crate::LogPosition,
    /// The stream's last version, against which a deletion is recorded.
    pub version: u64,
}

/// The subscription a stream's events leave live, if any (the last creation, unless a
/// deletion followed it), with the stream's last version (`None`: no stream yet).
pub fn fold(stream: &[RecordedEvent]) -> (Option<Subscription>, Option<u64>) {
    let mut live = None;
    let mut version = None;
    for event in stream {
        version = Some(event.stream_version);
        match &event.event {
            Event::SubscriptionCreated(created) => {
                live = Some(Subscription {
                    created: created.clone(),
                    created_at: event.recorded_at,
                    created_position: event.position,
                    version: 0,
                });
            }
            Event::SubscriptionDeleted(_) => live = None,
            _ => {}
        }
    }
    let live = live.map(|s| Subscription {
        version: version.unwrap_or_default(),
        ..s
    });
    (live, version)
}

/// The live subscriptions among events of several subscription streams, in log order, by
/// name.
pub fn live_among(events: &[RecordedEvent]) -> Vec<Subscription> {
    let mut streams: std::collections::BTreeMap<&str, Vec<RecordedEvent>> = Default::default();
    for event in events {
        streams
            .entry(event.stream_id.as_str())
            .or_default()
            .push(event.clone());
    }
    let mut live: Vec<Subscription> = streams
        .values()
        .filter_map(|stream| fold(stream).0)
        .collect();
    live.sort_by(|a, b| a.created.name.cmp(&b.created.name));
    live
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_filter::EventFilter;
    use crate::payloads::SubscriptionDeleted;
    use crate::{LogPosition, Metadata};

    fn recorded(stream: &str, version: u64, event: Event) -> RecordedEvent {
        RecordedEvent {
            event_id: Uuid::now_v7(),
            stream_id: stream.into(),
            stream_version: version,
            position: LogPosition {
                tx: 10 + version,
                seq: version as i64,
            },
            recorded_at: chrono::Utc::now(),
            schema_version: 1,
            metadata: Metadata::default(),
            event,
        }
    }

    fn created(owner: Uuid, name: &str) -> Event {
        Event::SubscriptionCreated(SubscriptionCreated {
            subscription_id: Uuid::now_v7(),
            owner,
            name: name.into(),
            filter: EventFilter::default(),
            from_start: false,
            nats_key: None,
        })
    }

    #[test]
    fn names_are_tokens_of_a_stream_id_and_a_consumer_name() {
        for good in ["billing", "a", "audit-2", "x_y", &"a".repeat(64)] {
            assert!(is_valid_name(good), "{good}");
        }
        for bad in [
            "",
            "-a",
            "_a",
            "Billing",
            "a.b",
            "a b",
            "a*",
            "a>",
            &"a".repeat(65),
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
        let owner = Uuid::nil();
        assert_eq!(
            stream_of(owner, "billing"),
            "subscription-00000000000000000000000000000000-billing"
        );
        assert!(stream_of(owner, "billing").starts_with(&stream_prefix(owner)));
    }

    #[test]
    fn the_last_creation_is_live_unless_a_deletion_followed_it() {
        let owner = Uuid::now_v7();
        let stream = stream_of(owner, "billing");
        let first = recorded(&stream, 0, created(owner, "billing"));
        let (live, version) = fold(std::slice::from_ref(&first));
        let live = live.expect("live once made");
        assert_eq!((live.version, version), (0, Some(0)));
        assert_eq!(live.created_position, first.position);

        let Event::SubscriptionCreated(made) = &first.event else {
            unreachable!()
        };
        let deleted = recorded(
            &stream,
            1,
            Event::SubscriptionDeleted(SubscriptionDeleted {
                subscription_id: made.subscription_id,
                name: "billing".into(),
            }),
        );
        let (gone, version) = fold(&[first.clone(), deleted.clone()]);
        assert!(gone.is_none());
        assert_eq!(version, Some(1));
        assert_eq!(fold(&[]).1, None);

        let again = recorded(&stream, 2, created(owner, "billing"));
        let (live, _) = fold(&[first, deleted, again.clone()]);
        assert_eq!(
            live.expect("made again").created,
            match again.event {
                Event::SubscriptionCreated(c) => c,
                _ => unreachable!(),
            }
        );

        let other = recorded(&stream_of(owner, "audit"), 0, created(owner, "audit"));
        let names: Vec<String> =
            live_among(&[other, recorded(&stream, 0, created(owner, "billing"))])
                .into_iter()
                .map(|s| s.created.name)
                .collect();
        assert_eq!(names, ["audit", "billing"]);
    }
}
