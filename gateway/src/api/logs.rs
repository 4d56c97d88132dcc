//! A session's output: each kernel's kept output (its most recent bytes, or a byte range
//! of it), or followed live as server-sent events until every kernel's output is complete.

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
    /// The byte of each kernel's output to start at (absent: the most recent bytes its log
    /// cap keeps); output older than a kernel's `kept_from` is gone.
    #[param(nullable = false, minimum = 0, maximum = 4503599627370496.0)]
    offset: Option<u64>,
    /// The most bytes of each kernel's output to answer (absent, or above the cap: the cap).
    #[param(nullable = false, minimum = 1, maximum = 67108864)]
    length: Option<u64>,
}

/// The output of each kernel's container: kept every second while it runs, the most recent
/// bytes its session's log cap keeps (or `offset` and `length`: that byte range of it, as
/// `offset` and `total_bytes` in the answer say where it lies). With `follow=true`, a server-sent event stream of new output (`event: log`, data
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
    let range = db::logs::ByteRange {
        offset: p.offset,
        length: p.length,
    };
    let kernels = db::logs::logs(&state.pool, id, range).await?;
    let logs = Logs {
        session_id: id,
        status,
        kernels,
    };
    Ok(Json(logs).into_response())
}

/// Where a follower is: up to which byte of each kernel's output it has sent.
struct Tail {
    pool: Pool,
    sent: HashMap<i32, i64>,
    pending: VecDeque<Event>,
    done: bool,
}

impl Tail {
    /// Queues what `logs` holds beyond what was sent (what went past the cap unsent is
    /// skipped).
    fn queue_new(&mut self, logs: &[KernelLog]) {
        for log in logs {
            let sent = self.sent.get(&log.kernel).copied().unwrap_or(0);
            let end = log.offset + log.content.len() as i64;
            let from = (sent - log.offset).clamp(0, log.content.len() as i64) as usize;
            if end > sent && log.content.is_char_boundary(from) {
                let text = &log.content[from..];
                self.pending.push_back(
                    Event::default()
                        .event("log")
                        .data(json!({"kernel": log.kernel, "text": text}).to_string()),
                );
                self.sent.insert(log.kernel, end);
            }
        }
    }

    /// The range each read asks for: from the least any kernel has been sent (each kernel's
    /// answer is cut to its own below), at most the cap.
    fn range(&self) -> db::logs::ByteRange {
        db::logs::ByteRange {
            offset: Some(self.sent.values().copied().min().unwrap_or(0).max(0) as u64),
            length: None,
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
            let logs = db::logs::logs(&tail.pool, id, tail.range())
                .await
                .unwrap_or_default();
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
