//! Liveness is not history. The recorder notes when it hears from each agent (a heartbeat, a
//! registration) in memory and writes the latest times to `recorder.agent_liveness` every
//! second, in one statement, outside the log. Only changes are events: the reconciler records
//! `AgentLost`, and the recorder records `AgentReturned` when a lost agent is heard from
//! again. Each recorder also keeps its watch (`recorder.liveness_watch`): since when it has
//! listened without a break. A NATS outage restarts the watch, so silence that only the bus caused
//! never marks agents lost (the reconciler waits for a watch longer than its timeout); so
//! does a PostgreSQL outage that kept what was heard from being written.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use events::catalogue::Event;
use events::ledger;
use events::payloads::AgentReturned;
use events::store::ExpectedVersion;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::record::agent_stream;

/// When each agent was last heard from, not yet written.
#[derive(Clone, Default)]
pub struct Liveness {
    heard: Arc<Mutex<HashMap<String, DateTime<Utc>>>>,
}

impl Liveness {
    /// Notes that `agent` was heard from now.
    pub fn heard_from(&self, agent: &str) {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        heard.insert(agent.to_owned(), Utc::now());
    }

    fn take(&self) -> HashMap<String, DateTime<Utc>> {
        std::mem::take(&mut *self.heard.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// How often what was heard is written.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Writes what `liveness` heard, and this recorder's watch, every second until `stop`;
/// records `AgentReturned` for a lost agent heard from again.
pub async fn keep(
    pool: Pool,
    nats: async_nats::Client,
    liveness: Liveness,
    stop: CancellationToken,
) {
    let watcher = uuid::Uuid::new_v4().to_string();
    let mut listening_since: Option<DateTime<Utc>> = None;
    let mut outage = events::fault::Outage::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(FLUSH_EVERY) => {}
        }
        // A break in the connection restarts the watch.
        let connected = nats.connection_state() == async_nats::connection::State::Connected;
        if !connected {
            listening_since = None;
        } else if listening_since.is_none() {
            listening_since = Some(Utc::now());
        }
        let heard = liveness.take();
        match flush(&pool, &watcher, listening_since, &heard).await {
            Ok(()) => outage.passed("liveness"),
            Err(e) => {
                outage.failed("liveness", &e);
                // What was heard could not be written, so the watch breaks as it does for a
                // bus outage: the reconciler waits a whole timeout before trusting silence.
                listening_since = None;
                let mut pending = liveness.heard.lock().unwrap_or_else(|e| e.into_inner());
                for (agent, at) in heard {
                    let latest = pending.entry(agent).or_insert(at);
                    *latest = (*latest).max(at);
                }
            }
        }
    }
}

async fn flush(
    pool: &Pool,
    watcher: &str,
    listening_since: Option<DateTime<Utc>>,
    heard: &HashMap<String, DateTime<Utc>>,
) -> Result<(), ledger::LedgerError> {
    db::keep_watch(pool, watcher, listening_since).await?;
    if heard.is_empty() {
        return Ok(());
    }
    let (agents, times): (Vec<String>, Vec<DateTime<Utc>>) =
        heard.iter().map(|(a, t)| (a.clone(), *t)).unzip();
    let returned = db::keep_seen(pool, &agents, &times).await?;
    for agent_id in returned {
        let event = Event::AgentReturned(AgentReturned {
            agent_id: agent_id.clone(),
        });
        let metadata = events::trace::metadata("recorder", None);
        ledger::record_now(
            pool,
            &agent_stream(&agent_id),
            ExpectedVersion::Any,
            &[event],
            &metadata,
        )
        .await?;
        tracing::info!(agent = %agent_id, "a lost agent is heard from again");
    }
    Ok(())
}
