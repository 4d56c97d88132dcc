//! Which events of the log a reader wants: by type (a name, or a prefix ending in `*`), by
//! stream category (`session`, `agent`, ...), by stream, and, for the sessions' streams, by
//! the session's owner and resource group. Pure: the readers (the gateway's event stream,
//! the log's filtered read) ask it, and look up a session's owner and group themselves.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::RecordedEvent;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct EventFilter {
    /// Event types wanted (none: every type), with [`EventFilter::type_prefixes`].
    pub types: Vec<String>,
    /// Prefixes of event types wanted (`Session` of `Session*`).
    pub type_prefixes: Vec<String>,
    /// Stream categories wanted (none: every category).
    pub categories: Vec<String>,
    /// Stream ids wanted (none: every stream).
    pub streams: Vec<String>,
    /// Only the events of this user's sessions.
    pub owner: Option<Uuid>,
    /// Only the events of sessions in this resource group.
    pub resource_group: Option<String>,
}

impl EventFilter {
    /// Adds the types of a comma-separated list: `SessionRequested,Agent*`.
    pub fn with_types(mut self, list: &str) -> EventFilter {
        for name in items(list) {
            match name.strip_suffix('*') {
                Some(prefix) => self.type_prefixes.push(prefix.to_owned()),
                None => self.types.push(name.to_owned()),
            }
        }
        self
    }

    /// Adds the stream categories of a comma-separated list: `session,agent`.
    pub fn with_categories(mut self, list: &str) -> EventFilter {
        self.categories.extend(items(list).map(str::to_owned));
        self
    }

    /// Whether `event` passes what can be told from the event alone.
    pub fn passes(&self, event: &RecordedEvent) -> bool {
        self.passes_envelope(event.event_type(), &event.stream_id)
    }

    /// Whether an event of `event_type` in stream `stream_id` passes what can be told from
    /// those alone (its category is the stream id's part before the first `-`).
    pub fn passes_envelope(&self, event_type: &str, stream_id: &str) -> bool {
        let category = stream_id.split('-').next().unwrap_or(stream_id);
        let type_ok = (self.types.is_empty() && self.type_prefixes.is_empty())
            || self.types.iter().any(|t| t == event_type)
            || self.type_prefixes.iter().any(|p| event_type.starts_with(p));
        let category_ok =
            self.categories.is_empty() || self.categories.iter().any(|c| c == category);
        let stream_ok = self.streams.is_empty() || self.streams.iter().any(|s| s == stream_id);
        let session_ok = !self.needs_session() || category == SESSION;
        type_ok && category_ok && stream_ok && session_ok
    }

    /// Whether the session's owner and group must be looked up to decide.
    pub fn needs_session(&self) -> bool {
        self.owner.is_some() || self.resource_group.is_some()
    }

    /// Whether a session owned by `owner` in `group` passes the owner and group wanted.
    pub fn passes_session(&self, owner: Uuid, group: &str) -> bool {
        self.owner.is_none_or(|o| o == owner)
            && self.resource_group.as_deref().is_none_or(|g| g == group)
    }
}

/// The items of a comma-separated list, trimmed, the empty ones left out.
fn items(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|n| !n.is_empty())
}

/// The category of the sessions' streams.
pub const SESSION: &str = "session";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::Event;
    use crate::payloads::AgentReturned;
    use crate::{LogPosition, Metadata};

    fn recorded(stream_id: &str) -> RecordedEvent {
        RecordedEvent {
            event_id: Uuid::nil(),
            stream_id: stream_id.into(),
            stream_version: 0,
            position: LogPosition::START,
            event: Event::AgentReturned(AgentReturned {
                agent_id: "a1".into(),
            }),
            metadata: Metadata::default(),
            recorded_at: chrono::DateTime::UNIX_EPOCH,
            schema_version: 1,
        }
    }

    #[test]
    fn types_match_by_name_or_prefix_and_categories_and_streams_by_id() {
        let event = recorded("agent-a1");
        assert!(EventFilter::default().passes(&event));
        let by_type = EventFilter::default().with_types("SessionRequested, AgentReturned");
        assert!(by_type.passes(&event));
        assert!(EventFilter::default().with_types("Agent*").passes(&event));
        assert!(!EventFilter::default().with_types("Session*").passes(&event));
        let by_category = EventFilter::default().with_categories("session");
        assert!(!by_category.passes(&event));
        assert!(by_category.with_categories(" agent,").passes(&event));
        let by_stream = EventFilter {
            streams: vec!["agent-a2".into()],
            ..Default::default()
        };
        assert!(!by_stream.passes(&event));
    }

    #[test]
    fn an_owner_or_group_wanted_passes_only_sessions_events_of_theirs() {
        let (alice, bob) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let filter = EventFilter {
            owner: Some(alice),
            resource_group: Some("gpu".into()),
            ..Default::default()
        };
        assert!(!filter.passes(&recorded("agent-a1")));
        assert!(filter.passes(&recorded("session-0123")));
        assert!(filter.passes_session(alice, "gpu"));
        assert!(!filter.passes_session(bob, "gpu"));
        assert!(!filter.passes_session(alice, "default"));
    }
}
