//! A session's output: each kernel's kept output whole, or followed live as server-sent
//! events until every kernel's output is complete.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;

use axum::extract::{Path, RawQuery, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use deadpool_postgres::Pool;
use serde_json::json;
use uuid::Uuid;

use serde::Deserialize;
use utoipa::IntoParams;

use super::{check_in_ledger, parse_id, query, SessionId};
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::StreamedEvent;
use crate::model::{KernelLog, Logs};
use crate::state::AppState;
use events::authorization::Action;

/// How often a followed session's kept output is read again.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// `GET /v1/sessions/{id}/logs`'s parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogsParams {
    /// `true`: a `text/event-stream` of new output until every kernel's output is complete.
    #[param(nullable = false)]
    follow: Option<bool>,
}

/// The output of each kernel's container: kept every second while it runs, whole once it ends.
/// With `follow=true`, a server-sent event stream of new output (`event: log`, data
/// `{"kernel", "text"}`) until every kernel's output is complete.
#[utoipa::path(get, path = "/v1/sessions/{id}/logs", tag = "sessions",
    params(SessionId, LogsParams),
    responses((status = 200, description = "each kernel's kept output; with `follow=true`, \
        `text/event-stream` of `log` events (`{\"kernel\", \"text\"}`), then `end`",
        content((Logs = "application/json"), (StreamedEvent = "text/event-stream")))))]
pub async fn session_logs(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SessionId { id }): Path<SessionId>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let p: LogsParams = query::parse(query.as_deref())?;
    let follow = p.follow.unwrap_or(false);
    let status = check_in_ledger(&state, &caller, Action::See, id).await?;
    if follow {
        return Ok(follow_logs(state.pool.clone(), id).into_response());
    }
    let kernels = db::logs::logs(&state.pool, id).await?;
    let logs = Logs {
        session_id: id,
        status,
        kernels,
    };
    Ok(Json(logs).into_response())
}

/// Where a follower is: how much of each kernel's output it has sent.
struct Tail {
    pool: Pool,
    sent: HashMap<i32, usize>,
    pending: VecDeque<Event>,
    done: bool,
}

impl Tail {
    /// Queues what `logs` holds beyond what was sent.
    fn queue_new(&mut self, logs: &[KernelLog]) {
        for log in logs {
            let from = self
                .sent
                .get(&log.kernel)
                .copied()
                .unwrap_or(0)
                .min(log.content.len());
            if log.content.len() > from && log.content.is_char_boundary(from) {
                let text = &log.content[from..];
                self.pending.push_back(
                    Event::default()
                        .event("log")
                        .data(json!({"kernel": log.kernel, "text": text}).to_string()),
                );
                self.sent.insert(log.kernel, log.content.len());
            }
        }
    }
}

/// New output of a session's kernels, as kept by its agent, until all of it is complete.
fn follow_logs(
    pool: Pool,
    id: Uuid,
) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let start = Tail {
        pool,
        sent: HashMap::new(),
        pending: VecDeque::new(),
        done: false,
    };
    let stream = futures::stream::unfold(start, move |mut tail| async move {
        loop {
            if let Some(event) = tail.pending.pop_front() {
                return Some((Ok(event), tail));
            }
            if tail.done {
                return None;
            }
            // A failed read is tried again at the next poll; the stream stays open.
            let ended = db::sessions::has_ended(&tail.pool, id)
                .await
                .unwrap_or(false);
            let logs = db::logs::logs(&tail.pool, id).await.unwrap_or_default();
            tail.queue_new(&logs);
            // Once the session has ended, what is kept is all there will be.
            let all_complete = ended || (!logs.is_empty() && logs.iter().all(|l| l.complete));
            if all_complete {
                tail.done = true;
                tail.pending
                    .push_back(Event::default().event("end").data("{}"));
                continue;
            }
            if tail.pending.is_empty() {
                tokio::time::sleep(FOLLOW_POLL).await;
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
