//! The event stream: `GET /v1/events` as server-sent events. A user gets the events of their
//! own sessions; a superadmin gets every event. Each event's `id` is its log position.
//!
//! A reader that names a position (the `Last-Event-ID` a reconnecting client sends, or
//! `?after=`) or a time (`?since=`) is first caught up from the log, then handed over to the
//! live stream: the gateway's one follower of the relay's stream (`crate::live`), to which the
//! reader subscribed before the log is read (its broadcast keeps what arrives meanwhile, and a
//! reader that falls behind it reads what it missed from the log again), whose events up to
//! the last position read are dropped. The relay publishes in log order
//! what has passed the log's horizon, and the catch-up reads only that, so the reader sees
//! every event it wants exactly once, in log order, with no gap at the hand-over. Filters
//! (types, categories, a stream, a session; an owner and a group for superadmins) apply to
//! both, and the positions of a filtered stream resume it as well as any.
//!
//! A live event is sent as the relay published it (the recorded event's serialised form, which
//! is what the stream sends), its place, type and stream read without its payload; the
//! catch-up reads and serialises its next batch on a task of its own while the last one is
//! sent.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::header;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use domain::event_filter::EventFilter;
use events::{LogPosition, RecordedEvent};
use futures::StreamExt;
use serde::Deserialize;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use utoipa::IntoParams;
use uuid::Uuid;

use crate::api::query;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The session whose stream `event` is in, if any.
pub(crate) fn session_of(event: &RecordedEvent) -> Option<Uuid> {
    session_of_stream(&event.stream_id)
}

/// The session whose stream `stream_id` is, if any.
fn session_of_stream(stream_id: &str) -> Option<Uuid> {
    Uuid::parse_str(stream_id.strip_prefix("session-")?).ok()
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
        let everything = events::authorization::lists_everyone(caller.role);
        let mut filter = EventFilter::default()
            .with_types(self.event_type.as_deref().unwrap_or(""))
            .with_categories(self.category.as_deref().unwrap_or(""));
        filter.streams.extend(self.stream.clone());
        filter.streams.extend(
            self.session
                .map(|id| events::catalogue::stream_id("session", id)),
        );
        if everything {
            filter.resource_group = self.resource_group.clone();
            if let Some(email) = &self.owner {
                let owner = crate::db::sessions::user_id_by_email(&state.pool, email)
                    .await?
                    .ok_or_else(|| {
                        ApiError::not_found(format!("no user is `{email}`")).field("owner")
                    })?;
                filter.owner = Some(owner);
            }
        } else {
            for (field, named) in [
                ("owner", self.owner.as_ref().filter(|o| **o != caller.email)),
                ("resource_group", self.resource_group.as_ref()),
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
) -> Result<Response, ApiError> {
    let params: EventsParams = query::parse(raw.as_deref())?;
    let (filter, _) = params.filter_for(&state, &caller).await?;
    let follow = params.follow.unwrap_or(true);
    let resume = resume_point(&state.pool, &headers, params.after, params.since)
        .await?
        .or((!follow).then_some(LogPosition::START));
    serve(&state, filter, resume, follow).await
}

/// The events `filter` wants as server-sent events: from the log after `resume` (`None`:
/// from now on), then, when `follow`, live.
pub(crate) async fn serve(
    state: &AppState,
    filter: EventFilter,
    resume: Option<LogPosition>,
    follow: bool,
) -> Result<Response, ApiError> {
    // Once the server has the subscription, the log is read and the response starts: an event
    // published after it comes live, one before it is in the log. A stream that ends with the
    // log's read needs no bus.
    let live = match follow {
        true => {
            let nats = state.bus("the event stream cannot be followed")?;
            let live = state
                .live
                .subscribe(nats, &state.topology, &state.stopping)
                .await
                .map_err(ApiError::internal)?;
            Some(live)
        }
        false => None,
    };
    let reader = Reader {
        pool: state.pool.clone(),
        filter,
        after: resume.unwrap_or(LogPosition::START),
        catching_up: resume.is_some(),
        fetching: None,
        live,
        sessions: HashMap::new(),
    };
    let chunks = futures::stream::unfold(reader, |mut reader| async move {
        let chunk = reader.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), reader))
    });
    // Ended when the gateway stops: its clients resume on another, or on this one again.
    let chunks = chunks.take_until(state.stopping.clone().cancelled_owned());
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(chunks),
    )
        .into_response())
}

/// The live events a reader follows.
type Live = tokio::sync::broadcast::Receiver<std::sync::Arc<crate::live::LiveEvent>>;

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

/// A catch-up's batch, as the stream sends it: the events' text, how many, and the last one's
/// place.
struct Batch {
    text: String,
    events: usize,
    last: Option<LogPosition>,
}

/// Appends one event to a chunk of the stream: its type, its place as the `id` a client
/// resumes from, and its recorded form as one line of data (serialised JSON holds no line
/// break).
fn push_event(text: &mut String, event_type: &str, position: LogPosition, data: &str) {
    use std::fmt::Write as _;
    let _ = write!(text, "event: {event_type}\nid: {position}\n");
    for line in data.split('\n') {
        let _ = writeln!(text, "data: {line}");
    }
    text.push('\n');
}

/// What an idle stream sends now and then, so that it is not taken for a dead one.
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// How long a followed stream stays silent before it sends [`KEEP_ALIVE`].
const KEEP_ALIVE_AFTER: Duration = Duration::from_secs(15);

/// Most live events one chunk of the stream holds (those already come, taken at once).
const MOST_LIVE_PER_CHUNK: usize = 1_000;

/// One reader of the stream: the log from `after` while catching up, then the live events.
struct Reader {
    pool: Pool,
    filter: EventFilter,
    /// The last position read, from the log or live: a live event at or before it was read.
    after: LogPosition,
    catching_up: bool,
    /// The next batch of the catch-up, read (and written as sent) while the last one is sent.
    fetching: Option<tokio::task::JoinHandle<Option<Batch>>>,
    /// The live events, which follow the catch-up; `None`: the stream ends there.
    live: Option<Live>,
    /// Each session's owner and group, once looked up (`None`: the ledger has no such
    /// session).
    sessions: HashMap<Uuid, Option<(Uuid, String)>>,
}

impl Reader {
    /// The next chunk of the stream: the events the reader wants that are here now (a batch
    /// of the catch-up, or the live events come), or a keep-alive; `None` ends the stream (the
    /// client resumes).
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if self.catching_up {
                let fetching = match self.fetching.take() {
                    Some(fetching) => fetching,
                    None => self.fetch(self.after),
                };
                let batch = fetching.await.ok().flatten()?;
                let Some(last) = batch.last else {
                    // The log's read ends at its horizon; the live stream goes on from there.
                    self.catching_up = false;
                    continue;
                };
                // A short batch: the next read, from where this one ended, is the last.
                if batch.events as i64 == CATCH_UP_BATCH {
                    self.fetching = Some(self.fetch(last));
                }
                self.after = last;
                return Some(Bytes::from(batch.text));
            }
            let live = self.live.as_mut()?;
            let first = match tokio::time::timeout(KEEP_ALIVE_AFTER, live.recv()).await {
                Ok(received) => received,
                Err(_) => return Some(Bytes::from_static(KEEP_ALIVE)),
            };
            let mut text = String::new();
            let mut received = Some(first);
            let mut taken = 0;
            while let Some(next) = received.take() {
                let event = match next {
                    Ok(event) => event,
                    // What it dropped is in the log: caught up from there again (after
                    // what this chunk holds).
                    Err(RecvError::Lagged(_)) => {
                        self.catching_up = true;
                        break;
                    }
                    Err(RecvError::Closed) if text.is_empty() => return None,
                    Err(RecvError::Closed) => break,
                };
                if event.position > self.after {
                    self.after = event.position;
                    if self
                        .filter
                        .passes_envelope(&event.event_type, &event.stream_id)
                        && self.session_passes(&event.stream_id).await
                    {
                        push_event(&mut text, &event.event_type, event.position, &event.data);
                    }
                }
                taken += 1;
                if taken < MOST_LIVE_PER_CHUNK {
                    let live = self.live.as_mut()?;
                    received = match live.try_recv() {
                        Err(TryRecvError::Empty) => None,
                        Err(TryRecvError::Lagged(n)) => Some(Err(RecvError::Lagged(n))),
                        Err(TryRecvError::Closed) => Some(Err(RecvError::Closed)),
                        Ok(event) => Some(Ok(event)),
                    };
                }
            }
            if !text.is_empty() {
                return Some(Bytes::from(text));
            }
        }
    }

    /// Reads, on a task of its own, the batch of the catch-up after `after`, written as sent;
    /// `None` when the log cannot be read (the stream ends; the client resumes).
    fn fetch(&self, after: LogPosition) -> tokio::task::JoinHandle<Option<Batch>> {
        let (pool, filter) = (self.pool.clone(), self.filter.clone());
        tokio::spawn(async move {
            let client = pool.get().await.ok()?;
            let batch = events::store::read_filtered_with(&client, after, CATCH_UP_BATCH, &filter)
                .await
                .ok()?;
            let mut text = String::with_capacity(batch.len() * 512);
            for event in &batch {
                let data = serde_json::to_string(event).unwrap_or_default();
                push_event(&mut text, event.event_type(), event.position, &data);
            }
            Some(Batch {
                text,
                events: batch.len(),
                last: batch.last().map(|event| event.position),
            })
        })
    }

    /// Whether the event's session passes the owner and group wanted (looked up once).
    async fn session_passes(&mut self, stream_id: &str) -> bool {
        if !self.filter.needs_session() {
            return true;
        }
        let Some(session) = session_of_stream(stream_id) else {
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
