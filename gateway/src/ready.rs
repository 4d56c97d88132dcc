//! Readiness: what the gateway stands on, checked every second. `GET /readyz` reports each
//! dependency (PostgreSQL answering, NATS connected) and how far each reader of the log
//! (the relay, the projections) trails it, so an orchestrator or a person sees what is
//! wrong; `/healthz` stays a liveness probe. While PostgreSQL is down, writes are answered
//! 503 `database_unavailable` within half a second ([`refuse_writes_while_down`]) instead
//! of waiting on a pool that cannot connect; a request that meets the outage between two
//! checks marks it down at once.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use deadpool_postgres::Pool;
use tokio_util::sync::CancellationToken;

use crate::error::{ApiError, DatabaseUnavailable};
use crate::handles::{Readiness, POSTGRES_DOWN};
use crate::model::ReaderLag;
use crate::state::AppState;

/// How often the dependencies are checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long a check of PostgreSQL may take before it counts as down.
const CHECK_WITHIN: Duration = Duration::from_secs(2);
/// A reader further behind the log than this makes the gateway not ready: what it serves
/// (the sessions view) or what others hear (the relay) is that stale.
pub const MOST_LAG_SECS: f64 = 60.0;
/// Readers' lag is counted up to this many events (a count, not a scan of the whole log).
const LAG_COUNTED_UP_TO: u32 = 10_000;
/// The sessions and agents gauges are counted every this many checks (10 s): a count over
/// the sessions view, cheap at that pace.
const COUNT_EVERY_CHECKS: u64 = 10;
/// An agent unheard this long counts as `silent` in the agents gauge (two heartbeats).
const SILENT_AFTER_SECS: f64 = 20.0;

/// Checks `readiness` every second until `stop`; a change of a dependency's state is logged
/// once.
pub async fn watch(
    readiness: Readiness,
    pool: Pool,
    nats: Option<async_nats::Client>,
    stop: CancellationToken,
) {
    let mut gauges = Gauges::default();
    for check in 0u64.. {
        if check % COUNT_EVERY_CHECKS == 0 {
            if let Ok(Err(e)) = tokio::time::timeout(CHECK_WITHIN, gauges.count(&pool)).await {
                tracing::debug!(error = %e, "sessions and agents not counted");
            }
        }
        let (postgres, readers) = match tokio::time::timeout(CHECK_WITHIN, lags(&pool)).await {
            Ok(Ok(readers)) => {
                for reader in &readers {
                    let name = reader.name.clone();
                    ::metrics::gauge!(crate::metrics::READER_LAG_EVENTS, "reader" => name.clone())
                        .set(reader.events_behind as f64);
                    ::metrics::gauge!(crate::metrics::READER_LAG_SECONDS, "reader" => name)
                        .set(reader.seconds_behind);
                }
                (None, readers)
            }
            Ok(Err(e)) => (Some(e.to_string()), Vec::new()),
            Err(_) => (Some("no answer within 2 s".to_owned()), Vec::new()),
        };
        let nats_error = match &nats {
            Some(client)
                if client.connection_state() != async_nats::connection::State::Connected =>
            {
                Some(format!("{}", client.connection_state()))
            }
            Some(_) => None,
            None => Some("no connection configured".to_owned()),
        };
        readiness.update(|report| {
            let now = Utc::now();
            report.postgres = report
                .postgres
                .noted(now, postgres, "PostgreSQL", POSTGRES_DOWN);
            report.nats = report.nats.noted(
                now,
                nats_error,
                "NATS",
                "the event stream and the agents wait for it",
            );
            if report.postgres.up {
                report.readers = readers;
            }
            report.ready = report.postgres.up
                && report.nats.up
                && report
                    .readers
                    .iter()
                    .all(|r| r.seconds_behind <= MOST_LAG_SECS);
            report.checked_at = Some(now);
        });
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}

/// The sessions and agents gauges, with the labels set before: one no longer counted is set
/// to zero rather than left at its last value.
#[derive(Default)]
struct Gauges {
    sessions: std::collections::BTreeSet<(String, String)>,
    agents: std::collections::BTreeSet<String>,
}

impl Gauges {
    /// Counts the sessions view's sessions by status and type and the agents by state.
    async fn count(&mut self, pool: &Pool) -> Result<(), LagsError> {
        let client = pool.get().await?;
        let sessions = crate::db::ready::session_counts(&client).await?;
        let agents = crate::db::ready::agent_counts(&client, SILENT_AFTER_SECS).await?;
        let mut seen = std::collections::BTreeSet::new();
        for (status, session_type, count) in sessions {
            let labels = (status, session_type);
            ::metrics::gauge!(crate::metrics::SESSIONS, "status" => labels.0.clone(), "type" => labels.1.clone())
                .set(count as f64);
            seen.insert(labels);
        }
        for (status, session_type) in self.sessions.difference(&seen) {
            ::metrics::gauge!(crate::metrics::SESSIONS, "status" => status.clone(), "type" => session_type.clone())
                .set(0.0);
        }
        self.sessions = seen;
        let mut seen = std::collections::BTreeSet::new();
        for (state, count) in agents {
            ::metrics::gauge!(crate::metrics::AGENTS, "state" => state.clone()).set(count as f64);
            seen.insert(state);
        }
        for state in self.agents.difference(&seen) {
            ::metrics::gauge!(crate::metrics::AGENTS, "state" => state.clone()).set(0.0);
        }
        self.agents = seen;
        Ok(())
    }
}

/// Why the readers' lags could not be read: the error PostgreSQL's client gave, as it is
/// (the report shows it as the database's error).
#[derive(Debug, thiserror::Error)]
enum LagsError {
    #[error(transparent)]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database: {}", events::fault::described(.0))]
    Database(#[from] tokio_postgres::Error),
}

/// Each checkpointed reader's lag behind the log.
async fn lags(pool: &Pool) -> Result<Vec<ReaderLag>, LagsError> {
    let client = pool.get().await?;
    let lags = crate::db::ready::reader_lags(&client, LAG_COUNTED_UP_TO).await?;
    Ok(lags
        .into_iter()
        .map(|(name, events_behind, seconds_behind)| ReaderLag {
            name,
            events_behind,
            seconds_behind,
        })
        .collect())
}

/// Say whether this gateway can serve: PostgreSQL, NATS and the log's readers.
#[utoipa::path(get, path = "/readyz", tag = "meta",
    responses((status = 200, description = "ready", body = crate::model::Report),
              (status = 503, description = "a dependency is down or a reader trails the log by more than a minute", body = crate::model::Report)))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    let report = state.readiness.report();
    let status = if report.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(report)).into_response()
}

/// Answers a write 503 `database_unavailable` while the last check found PostgreSQL down
/// and it does not answer now either (at most half a second); reads go on (what can be
/// served from memory still is). A request of any kind answered `database_unavailable` by its
/// handler notes PostgreSQL down, as a check would have.
pub async fn refuse_writes_while_down(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let reads = [Method::GET, Method::HEAD, Method::OPTIONS];
    if !reads.contains(request.method())
        && state.readiness.postgres_down()
        && !state.readiness.postgres_back(&state.pool).await
    {
        return ApiError::database_unavailable().into_response();
    }
    let response = next.run(request).await;
    if response.extensions().get::<DatabaseUnavailable>().is_some() {
        state
            .readiness
            .postgres_failed("a request found it unavailable");
    }
    response
}
