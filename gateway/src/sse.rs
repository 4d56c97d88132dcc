//! The event stream: `GET /v1/events` as server-sent events. A user gets the events of their
//! own sessions; a superadmin gets every event. Events come from NATS (as the relay published
//! them, in order), so the gateway never reads the log for this.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use events::RecordedEvent;
use futures::{Stream, StreamExt};
use tokio::sync::Mutex;
use uuid::Uuid;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The session whose stream `event` is in, if any.
pub(crate) fn session_of(event: &RecordedEvent) -> Option<Uuid> {
    let id = event.stream_id.strip_prefix("session-")?;
    Uuid::parse_str(id).ok()
}

/// Server-sent events: my sessions' events (every event, for superadmins). Each event's data
/// is the recorded event as JSON.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    responses((status = 200, description = "`text/event-stream` of recorded events",
        content_type = "text/event-stream", body = crate::model::StreamedEvent),
              (status = 503, description = "NATS is unavailable (`bus_unavailable`); try again after `Retry-After` seconds", body = crate::error::ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let nats = state.bus("the event stream cannot be followed")?.clone();
    let everything = events::authorization::lists_everyone(caller.role);
    let subject = if everything {
        state.topology.all_subjects()
    } else {
        state.topology.category_subject("session")
    };
    let subscriber = nats.subscribe(subject).await.map_err(ApiError::internal)?;
    // Once the server has the subscription, the response starts: a client that has the
    // response's headers misses no event published after it.
    nats.flush().await.map_err(ApiError::internal)?;
    let owners: Arc<Mutex<HashMap<Uuid, bool>>> = Arc::default();
    let user = caller.user_id;
    let pool = state.pool.clone();
    let stream = subscriber.filter_map(move |message| {
        let owners = owners.clone();
        let pool = pool.clone();
        async move {
            let event: RecordedEvent = serde_json::from_slice(&message.payload).ok()?;
            if !everything {
                let session = session_of(&event)?;
                let cached = owners.lock().await.get(&session).copied();
                let mine = match cached {
                    Some(mine) => mine,
                    None => {
                        let owner = crate::db::sessions::ledger_owner(&pool, session)
                            .await
                            .ok()?;
                        let mine = owner == Some(user);
                        owners.lock().await.insert(session, mine);
                        mine
                    }
                };
                if !mine {
                    return None;
                }
            }
            let data = serde_json::to_string(&event).ok()?;
            Some(Ok(SseEvent::default()
                .event(event.event_type())
                .id(event.position.to_string())
                .data(data)))
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
