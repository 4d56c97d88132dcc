//! Readiness: what the gateway stands on, checked every second. `GET /readyz` reports each
//! dependency (PostgreSQL answering, NATS connected) and how far each reader of the log
//! (the relay, the projections) trails it, so an orchestrator or a person sees what is
//! wrong; `/healthz` stays a liveness probe. While PostgreSQL is down, writes are answered
//! 503 `database_unavailable` within half a second ([`refuse_writes_while_down`]) instead
//! of waiting on a pool that cannot connect.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::state::AppState;

/// How often the dependencies are checked.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long a write that finds PostgreSQL down waits for a connection before it is refused.
const RECHECK_WITHIN: Duration = Duration::from_millis(500);
/// How long a check of PostgreSQL may take before it counts as down.
const CHECK_WITHIN: Duration = Duration::from_secs(2);
/// A reader further behind the log than this makes the gateway not ready: what it serves
/// (the sessions view) or what others hear (the relay) is that stale.
pub const MOST_LAG_SECS: f64 = 60.0;
/// Readers' lag is counted up to this many events (a count, not a scan of the whole log).
const LAG_COUNTED_UP_TO: i64 = 10_000;
/// The sessions and agents gauges are counted every this many checks (10 s): a count over
/// the sessions view, cheap at that pace.
const COUNT_EVERY_CHECKS: u64 = 10;
/// An agent unheard this long counts as `silent` in the agents gauge (two heartbeats).
const SILENT_AFTER_SECS: f64 = 20.0;

/// The last check of everything, shared by the checker and the handlers.
#[derive(Clone, Default)]
pub struct Readiness(Arc<RwLock<Report>>);

/// What `/readyz` answers.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, ToSchema)]
pub struct Report {
    /// PostgreSQL and NATS are up and no reader trails the log by more than a minute.
    pub ready: bool,
    pub postgres: Dependency,
    pub nats: Dependency,
    /// Each reader of the log (its checkpoint's name: `relay`, the projections).
    pub readers: Vec<ReaderLag>,
    /// When this was checked (none before the first check).
    pub checked_at: Option<DateTime<Utc>>,
}

/// One dependency's state.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct Dependency {
    pub up: bool,
    /// Why it is down, as its client said.
    pub error: Option<String>,
    /// Since when it has been down.
    pub down_since: Option<DateTime<Utc>>,
}

impl Default for Dependency {
    fn default() -> Self {
        Dependency {
            up: true,
            error: None,
            down_since: None,
        }
    }
}

/// How far one reader of the log trails it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct ReaderLag {
    pub name: String,
    /// Events written and not yet read by it (counted up to 10,000).
    pub events_behind: i64,
    /// How long the oldest of those has waited, in seconds (0 when none).
    pub seconds_behind: f64,
}

impl Dependency {
    /// This dependency after a check that found `error` (none: up); a change is logged,
    /// with what it means for the API (`meaning`).
    fn noted(
        &self,
        now: DateTime<Utc>,
        error: Option<String>,
        what: &str,
        meaning: &str,
    ) -> Dependency {
        match (self.up, error) {
            (_, None) => {
                if !self.up {
                    tracing::info!(dependency = what, "up again");
                }
                Dependency::default()
            }
            (true, Some(error)) => {
                tracing::warn!(dependency = what, %error, "down; {meaning}");
                Dependency {
                    up: false,
                    error: Some(error),
                    down_since: Some(now),
                }
            }
            (false, Some(error)) => Dependency {
                up: false,
                error: Some(error),
                down_since: self.down_since,
            },
        }
    }
}

impl Readiness {
    /// The last report.
    pub fn report(&self) -> Report {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the last check found PostgreSQL down.
    pub fn postgres_down(&self) -> bool {
        !self.0.read().unwrap_or_else(|e| e.into_inner()).postgres.up
    }

    /// Whether PostgreSQL answers again, asked now rather than at the next check (a write
    /// that finds it down asks, so the first write after its return goes through); noted
    /// when it does.
    pub async fn postgres_back(&self, pool: &Pool) -> bool {
        let answered = matches!(
            tokio::time::timeout(RECHECK_WITHIN, pool.get()).await,
            Ok(Ok(_))
        );
        if answered {
            let mut report = self.0.write().unwrap_or_else(|e| e.into_inner());
            report.postgres = report.postgres.noted(Utc::now(), None, "PostgreSQL", "");
        }
        answered
    }

    /// Checks every second until `stop`; a change of a dependency's state is logged once.
    pub async fn watch(
        self,
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
            {
                let mut report = self.0.write().unwrap_or_else(|e| e.into_inner());
                let now = Utc::now();
                let pg = "writes answer 503 until it is back";
                report.postgres = report.postgres.noted(now, postgres, "PostgreSQL", pg);
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
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(CHECK_EVERY) => {}
            }
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
    #[error(transparent)]
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
    responses((status = 200, description = "ready", body = Report),
              (status = 503, description = "a dependency is down or a reader trails the log by more than a minute", body = Report)))]
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
/// served from memory still is).
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
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependency_keeps_when_it_went_down_until_it_is_back() {
        let up = Dependency::default();
        let t0 = Utc::now();
        let down = up.noted(t0, Some("refused".into()), "x", "y");
        assert!(!down.up);
        assert_eq!(down.down_since, Some(t0));
        let later = t0 + chrono::Duration::seconds(3);
        let still = down.noted(later, Some("again".into()), "x", "y");
        assert_eq!(still.down_since, Some(t0));
        assert_eq!(still.error.as_deref(), Some("again"));
        let back = still.noted(t0, None, "x", "y");
        assert!(back.up && back.down_since.is_none() && back.error.is_none());
    }
}
