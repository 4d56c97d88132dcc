//! The event stream: `GET /v1/events` as server-sent events. A user gets the events of their
//! own sessions; a superadmin gets every event. Each event's `id` is its log position.
//!
//! A reader that names a position (the `Last-Event-ID` a reconnecting client sends, or
//! `?after=`) or a time (`?since=`) is first caught up from the log, then handed over to the
//! live stream: an ordered JetStream consumer of the relay's stream, made before the log is
//! read (it keeps what arrives meanwhile on the server), whose events up to the last position
//! read are dropped. The relay publishes in log order
//! what has passed the log's horizon, and the catch-up reads only that, so the reader sees
//! every event it wants exactly once, in log order, with no gap at the hand-over. Filters
//! (types, categories, a stream, a session; an owner and a group for superadmins) apply to
//! both, and the positions of a filtered stream resume it as well as any.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use domain::event_filter::EventFilter;
use events::{LogPosition, RecordedEvent};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::api::query;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The session whose stream `event` is in, if any.
pub(crate) fn session_of(event: &RecordedEvent) -> Option<Uuid> {
    let id = event.stream_id.strip_prefix("session-")?;
    Uuid::parse_str(id).ok()
}

/// `GET /v1/events`'s parameters.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsParams {
    /// Resume after this log position (an event's `id`, `TX:SEQ`); a `Last-Event-ID` header
    /// wins over it.
    #[param(nullable = false, pattern = r"^[0-9]{1,19}:[0-9]{1,19}$")]
    pub(crate) after: Option<String>,
    /// Start with the first event recorded at or after this time (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime, nullable = false)]
    pub(crate) since: Option<DateTime<Utc>>,
    /// Event types, comma-separated; a name ending in `*` is a prefix (`Session*`).
    #[serde(rename = "type")]
    #[param(rename = "type", nullable = false, pattern = r"^[A-Za-z*,]{1,1000}$")]
    pub(crate) event_type: Option<String>,
    /// Stream categories, comma-separated (`session`, `agent`, ...).
    #[param(nullable = false, pattern = r"^[a-z0-9_,]{1,1000}$")]
    pub(crate) category: Option<String>,
    /// One stream, by its id (`agent-a1`).
    #[param(nullable = false, pattern = r"^[a-z0-9_]+-[A-Za-z0-9_-]+$")]
    pub(crate) stream: Option<String>,
    /// One session's events.
    #[param(nullable = false)]
    pub(crate) session: Option<Uuid>,
    /// Superadmins: only the events of this user's sessions (their email).
    #[param(nullable = false, min_length = 1, pattern = r"^[^\u0000]+$")]
    pub(crate) owner: Option<String>,
    /// Superadmins: only the events of sessions in this resource group.
    #[param(nullable = false, pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub(crate) resource_group: Option<String>,
    /// `false`: end the stream once the log is read to its end (from the start, unless a
    /// position or time is named) instead of following it (the default).
    #[param(nullable = false)]
    pub(crate) follow: Option<bool>,
}

impl EventsParams {
    /// The filter these parameters ask for, within what `caller` may see (their own sessions'
    /// events, unless a superadmin), checked; and whether the caller sees every event.
    pub(crate) async fn filter_for(
        &self,
        state: &AppState,
        caller: &events::ledger::KeyOwner,
    ) -> Result<(EventFilter, bool), ApiError> {
        self.check()?;
        let params = self;
        let everything = events::authorization::lists_everyone(caller.role);
        let mut filter = EventFilter::default()
            .with_types(params.event_type.as_deref().unwrap_or(""))
            .with_categories(params.category.as_deref().unwrap_or(""));
        filter.streams.extend(params.stream.clone());
        filter.streams.extend(
            params
                .session
                .map(|id| events::catalogue::stream_id("session", id)),
        );
        if everything {
            filter.resource_group = params.resource_group.clone();
            if let Some(email) = &params.owner {
                let owner = crate::db::sessions::user_id_by_email(&state.pool, email)
                    .await?
                    .ok_or_else(|| {
                        ApiError::not_found(format!("no user is `{email}`")).field("owner")
                    })?;
                filter.owner = Some(owner);
            }
        } else {
            for (field, named) in [
                (
                    "owner",
                    params.owner.as_ref().filter(|o| **o != caller.email),
                ),
                ("resource_group", params.resource_group.as_ref()),
            ] {
                if named.is_some() {
                    return Err(ApiError::new(
                        StatusCode::FORBIDDEN,
                        "forbidden",
                        "only superadmins follow other users' or a group's events",
                    )
                    .field(field));
                }
            }
            // A user's visibility: the events of their own sessions.
            filter.owner = Some(caller.user_id);
        }
        Ok((filter, everything))
    }

    /// Each parameter's pattern, as the document states it: a value outside it is refused
    /// (422 naming it) rather than read as a filter nothing matches.
    fn check(&self) -> Result<(), ApiError> {
        let within = |value: &Option<String>, most: usize, allowed: fn(u8) -> bool| {
            value
                .as_deref()
                .is_none_or(|v| (1..=most).contains(&v.len()) && v.bytes().all(allowed))
        };
        let checks = [
            (
                "after",
                self.after.as_deref().is_none_or(|a| {
                    a.split_once(':').is_some_and(|(tx, seq)| {
                        [tx, seq].iter().all(|n| {
                            (1..=19).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit())
                        })
                    })
                }),
                "a log position, `TX:SEQ`",
            ),
            (
                "type",
                within(&self.event_type, 1000, |b| {
                    b.is_ascii_alphabetic() || b == b'*' || b == b','
                }),
                "event types (letters, `*` ending a prefix), comma-separated",
            ),
            (
                "category",
                within(&self.category, 1000, |b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b','
                }),
                "stream categories (lowercase letters, digits, `_`), comma-separated",
            ),
            (
                "stream",
                self.stream
                    .as_deref()
                    .is_none_or(|s| events::store::category_of(s).is_ok()),
                "a stream id, `category-id`",
            ),
        ];
        if let Some((field, _, what)) = checks.into_iter().find(|(_, ok, _)| !ok) {
            return Err(ApiError::invalid(field, format!("is not {what}")));
        }
        if let Some(group) = &self.resource_group {
            crate::api::admin::checked_name("resource_group", group)?;
        }
        Ok(())
    }
}

/// `GET /v1/events`'s header: where a reconnecting client resumes. It documents the header;
/// [`resume_point`] reads it from the request's headers.
#[derive(Debug, Deserialize, IntoParams)]
#[allow(dead_code)]
#[into_params(parameter_in = Header)]
pub struct ResumeHeader {
    /// Resume after this log position (`TX:SEQ`): what a reconnecting client sends, the `id`
    /// of the last event it read; empty, as a client sends before it has read any, is none.
    #[serde(rename = "Last-Event-ID")]
    #[param(
        rename = "Last-Event-ID",
        nullable = false,
        pattern = r"^([0-9]{1,19}:[0-9]{1,19})?$"
    )]
    last_event_id: Option<String>,
}

/// Sessions whose owner and group one reader remembers at most.
const MOST_SESSIONS_REMEMBERED: usize = 10_000;

/// Events read from the log a batch at a time while catching up.
const CATCH_UP_BATCH: i64 = 500;

/// Server-sent events: my sessions' events (every event, for superadmins), filtered as the
/// parameters say, from where the reader resumes or from now on. Each event's data is the
/// recorded event as JSON, its `id` its log position.
#[utoipa::path(get, path = "/v1/events", tag = "events", params(EventsParams, ResumeHeader),
    responses((status = 200, description = "`text/event-stream` of recorded events",
        content_type = "text/event-stream", body = crate::model::StreamedEvent),
              (status = 403, description = "`owner` or `resource_group` named by someone not a superadmin", body = crate::error::ErrorBody),
              (status = 404, description = "`owner` names no user, or the position is past the log's end (`Last-Event-ID` or `after`)", body = crate::error::ErrorBody),
              (status = 422, description = "a parameter is not understood (the field says which)", body = crate::error::ErrorBody),
              (status = 503, description = "NATS is unavailable (`bus_unavailable`); try again after `Retry-After` seconds", body = crate::error::ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    Caller(caller): Caller,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let params: EventsParams = query::parse(raw.as_deref())?;
    let (filter, everything) = params.filter_for(&state, &caller).await?;
    let follow = params.follow.unwrap_or(true);
    let resume = resume_point(&state.pool, &headers, params.after, params.since)
        .await?
        .or((!follow).then_some(LogPosition::START));
    serve(&state, filter, everything, resume, follow).await
}

/// The events `filter` wants as server-sent events: from the log after `resume` (`None`:
/// from now on), then, when `follow`, live; `everything`: the reader may see every event.
pub(crate) async fn serve(
    state: &AppState,
    filter: EventFilter,
    everything: bool,
    resume: Option<LogPosition>,
    follow: bool,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    // Once the server has the subscription, the log is read and the response starts: an event
    // published after it comes live, one before it is in the log. A stream that ends with the
    // log's read needs no bus.
    let live = match follow {
        true => {
            let nats = state.bus("the event stream cannot be followed")?.clone();
            let subject = match filter.categories.as_slice() {
                [one] => state.topology.category_subject(one),
                _ if !everything => state
                    .topology
                    .category_subject(domain::event_filter::SESSION),
                _ => state.topology.all_subjects(),
            };
            Some(follow_live(nats, &state.topology.stream, subject).await?)
        }
        false => None,
    };
    let reader = Reader {
        pool: state.pool.clone(),
        filter,
        after: resume.unwrap_or(LogPosition::START),
        catching_up: resume.is_some(),
        read: VecDeque::new(),
        live,
        sessions: HashMap::new(),
    };
    let stream = futures::stream::unfold(reader, |mut reader| async move {
        let event = reader.next().await?;
        let data = serde_json::to_string(&event).unwrap_or_default();
        let sse = SseEvent::default()
            .event(event.event_type())
            .id(event.position.to_string())
            .data(data);
        Some((Ok(sse), reader))
    });
    // Ended when the gateway stops: its clients resume on another, or on this one again.
    let stream = stream.take_until(state.stopping.clone().cancelled_owned());
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// The events published on `subject` from now on, through an ordered JetStream consumer of the
/// relay's stream: the server keeps what the reader has not taken yet (a reader catching up
/// from the log, or one slower than the log, loses nothing), and the consumer makes itself
/// again at the next message should it miss one.
async fn follow_live(
    nats: async_nats::Client,
    stream: &str,
    subject: String,
) -> Result<Live, ApiError> {
    use async_nats::jetstream::consumer;
    let js = async_nats::jetstream::new(nats);
    let stream = js.get_stream(stream).await.map_err(ApiError::internal)?;
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject,
            deliver_policy: consumer::DeliverPolicy::New,
            ..Default::default()
        })
        .await
        .map_err(ApiError::internal)?;
    consumer.messages().await.map_err(ApiError::internal)
}

/// The live events a reader follows.
type Live = async_nats::jetstream::consumer::pull::Ordered;

/// Where the reader resumes: after the `Last-Event-ID` header's position, else `after`'s,
/// else before the first event recorded at `since`; `None`: from now on. A position past the
/// log's end is refused (404): it was never served here. The log is kept whole, so no position
/// is too old to serve.
async fn resume_point(
    pool: &Pool,
    headers: &HeaderMap,
    after: Option<String>,
    since: Option<DateTime<Utc>>,
) -> Result<Option<LogPosition>, ApiError> {
    // An empty one is what a client sends before it has read any event: none.
    let header = headers
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("").trim().to_owned())
        .filter(|v| !v.is_empty());
    let (field, named) = match (header, after) {
        (Some(header), _) => ("Last-Event-ID", Some(header)),
        (None, after) => ("after", after),
    };
    let Some(since) = since.filter(|_| named.is_none()) else {
        return match named {
            Some(named) => resume_after(pool, field, &named).await.map(Some),
            // A stream from now on reads nothing of the log.
            None => Ok(None),
        };
    };
    let client = pool.get().await?;
    match events::store::position_before(&client, since).await? {
        Some(before) => Ok(Some(before)),
        // Nothing recorded since: from the log's end.
        None => Ok(Some(
            events::store::last_committed(&client)
                .await?
                .unwrap_or(LogPosition::START),
        )),
    }
}

/// The position `named` (by `field`), refused when it is no position or past the log's end.
pub(crate) async fn resume_after(
    pool: &Pool,
    field: &str,
    named: &str,
) -> Result<LogPosition, ApiError> {
    let position: LogPosition = named
        .trim()
        .parse()
        .map_err(|e| ApiError::invalid(field, format!("`{named}` is not a log position: {e}")))?;
    let client = pool.get().await?;
    let last = events::store::last_committed(&client)
        .await?
        .unwrap_or(LogPosition::START);
    if position > last {
        return Err(ApiError::not_found(format!(
            "the log has no position {position}: its last is {last}"
        ))
        .field(field));
    }
    Ok(position)
}

/// One reader of the stream: the log from `after` while catching up, then the live events.
struct Reader {
    pool: Pool,
    filter: EventFilter,
    /// The last position read, from the log or live: a live event at or before it was read.
    after: LogPosition,
    catching_up: bool,
    read: VecDeque<RecordedEvent>,
    /// The live events, which follow the catch-up; `None`: the stream ends there.
    live: Option<Live>,
    /// Each session's owner and group, once looked up (`None`: the ledger has no such
    /// session).
    sessions: HashMap<Uuid, Option<(Uuid, String)>>,
}

impl Reader {
    /// The next event the reader wants; `None` ends the stream (the client resumes).
    async fn next(&mut self) -> Option<RecordedEvent> {
        loop {
            if let Some(event) = self.read.pop_front() {
                self.after = event.position;
                return Some(event);
            }
            if self.catching_up {
                let client = self.pool.get().await.ok()?;
                let batch = events::store::read_filtered_with(
                    &client,
                    self.after,
                    CATCH_UP_BATCH,
                    &self.filter,
                )
                .await
                .ok()?;
                // The log's read ends at its horizon; the live stream goes on from there.
                self.catching_up = !batch.is_empty();
                self.read.extend(batch);
                continue;
            }
            let message = self.live.as_mut()?.next().await?.ok()?;
            let Ok(event) = serde_json::from_slice::<RecordedEvent>(&message.payload) else {
                continue;
            };
            if event.position <= self.after {
                continue;
            }
            self.after = event.position;
            if self.filter.passes(&event) && self.session_passes(&event).await {
                return Some(event);
            }
        }
    }

    /// Whether the event's session passes the owner and group wanted (looked up once).
    async fn session_passes(&mut self, event: &RecordedEvent) -> bool {
        if !self.filter.needs_session() {
            return true;
        }
        let Some(session) = session_of(event) else {
            return false;
        };
        let known = match self.sessions.get(&session) {
            Some(known) => known.clone(),
            None => {
                let Ok(found) = crate::db::sessions::ledger_session(&self.pool, session).await
                else {
                    return false;
                };
                let found = found.map(|s| (s.owner, s.resource_group));
                // Bounded, whatever a long stream goes through: forgotten whole when full.
                if self.sessions.len() >= MOST_SESSIONS_REMEMBERED {
                    self.sessions.clear();
                }
                self.sessions.insert(session, found.clone());
                found
            }
        };
        known.is_some_and(|(owner, group)| self.filter.passes_session(owner, &group))
    }
}
