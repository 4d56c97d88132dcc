//! The scheduler's I/O: one pass loads each resource group's snapshot from the ledger,
//! lets [`crate::core::plan`] decide, and records the decisions, all in one transaction.
//!
//! Passes of all scheduler processes are serialised by a transaction advisory lock, so a
//! second scheduler waits rather than deciding on the same free resources; and the ledger's
//! conditional reserve refuses any placement an agent cannot hold, so even a scheduler that
//! ignored the lock could not over-commit (its whole pass would roll back).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use deadpool_postgres::{Pool, Transaction};
use events::catalogue::stream_id;
use events::ledger::{self, LedgerError};
use events::payloads::*;
use events::store::ExpectedVersion;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::core::{self, AgentView, GroupRules, OwnerLoad, PendingSession, Snapshot};

/// Key of the advisory lock that serialises scheduling passes.
const SCHEDULER_LOCK: i64 = 0x6265_7274_685f_7363;

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl From<tokio_postgres::Error> for SchedulerError {
    fn from(e: tokio_postgres::Error) -> Self {
        SchedulerError::Ledger(e.into())
    }
}

impl From<deadpool_postgres::PoolError> for SchedulerError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        SchedulerError::Ledger(e.into())
    }
}

#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Longest time between passes when nothing wakes the scheduler.
    pub interval: Duration,
    /// Most queued sessions of one group decided in one pass.
    pub batch: i64,
    /// Decisions recorded concurrently (pipelined on the pass's connection).
    pub pipeline: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            interval: Duration::from_secs(1),
            batch: 5_000,
            pipeline: 64,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    pub decided: usize,
    pub placed: usize,
    pub recorded: usize,
    pub cancelled: usize,
}

/// A scheduler: remembers, per group, the free resources seen by its last pass (to tell
/// whether a wait for resources deserves another counted attempt).
pub struct Scheduler {
    pool: Pool,
    config: SchedulerConfig,
    last_free: HashMap<String, ResourceSlots>,
}

fn slots(row: &tokio_postgres::Row, first: usize) -> ResourceSlots {
    let get = |i: usize| row.get::<_, i64>(first + i).max(0) as u64;
    ResourceSlots {
        cpu_milli: get(0),
        memory_bytes: get(1),
        gpu_milli: get(2),
    }
}

fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).ok()
}

impl Scheduler {
    pub fn new(pool: Pool, config: SchedulerConfig) -> Scheduler {
        Scheduler {
            pool,
            config,
            last_free: HashMap::new(),
        }
    }

    /// One pass over every resource group.
    pub async fn pass(&mut self) -> Result<Pass, SchedulerError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEDULER_LOCK])
            .await?;
        let groups = tx
            .query(
                "SELECT name, queue_policy, agent_selection, max_attempts, skip_after,
                        pending_timeout_secs FROM ledger.resource_groups ORDER BY name",
                &[],
            )
            .await?;
        let mut total = Pass::default();
        let mut free_after = HashMap::new();
        for g in groups {
            let rules = GroupRules {
                name: g.get(0),
                queue_policy: parse(g.get(1)).unwrap_or(QueuePolicy::Fifo),
                agent_selection: parse(g.get(2)).unwrap_or(AgentSelection::Concentrated),
                max_attempts: g.get::<_, i32>(3).max(1) as u32,
                skip_after: g.get::<_, i32>(4).max(0) as u32,
                pending_timeout_secs: g.get::<_, i64>(5).max(0) as u64,
            };
            let name = rules.name.clone();
            let Some(mut snapshot) = self.snapshot(&tx, rules).await? else {
                continue;
            };
            let decisions = core::plan(&mut snapshot);
            let free = snapshot
                .agents
                .iter()
                .fold(ResourceSlots::default(), |s, a| s.saturating_add(a.free()));
            free_after.insert(name, free);
            total.decided += decisions.len();
            let recorded: Vec<_> = decisions.into_iter().filter(|d| d.record).collect();
            total.recorded += recorded.len();
            total.placed += recorded.iter().filter(|d| d.placement.is_some()).count();
            total.cancelled += recorded
                .iter()
                .filter(|d| d.cancel_reason.is_some())
                .count();
            let tx = &tx;
            futures::stream::iter(recorded)
                .map(|decision| async move {
                    let metadata = events::trace::metadata("scheduler", None);
                    ledger::record(
                        tx,
                        &stream_id("session", decision.session_id),
                        ExpectedVersion::Exact(decision.version),
                        &decision.events(),
                        &metadata,
                    )
                    .await
                })
                .buffer_unordered(self.config.pipeline)
                .try_collect::<Vec<_>>()
                .await?;
        }
        tx.commit().await?;
        self.last_free.extend(free_after);
        Ok(total)
    }

    /// Loads one group's snapshot; `None` when nothing waits in its queue.
    async fn snapshot(
        &self,
        tx: &Transaction<'_>,
        group: GroupRules,
    ) -> Result<Option<Snapshot>, SchedulerError> {
        let queue_rows = tx
            .query(
                "SELECT session_id, version, owner, cpu_milli, memory_bytes, gpu_milli,
                        cluster_mode, cluster_size, wanted_agent, starts_at, created_at,
                        attempts, last_result, last_error_code
                 FROM ledger.sessions WHERE status = 'PENDING' AND resource_group = $1
                 ORDER BY queue_seq LIMIT $2",
                &[&group.name, &self.config.batch],
            )
            .await?;
        if queue_rows.is_empty() {
            return Ok(None);
        }
        let queue: Vec<PendingSession> = queue_rows
            .iter()
            .map(|r| PendingSession {
                session_id: r.get(0),
                version: r.get::<_, i64>(1) as u64,
                owner: r.get(2),
                per_kernel: slots(r, 3),
                cluster_mode: parse(r.get(6)).unwrap_or(ClusterMode::SingleNode),
                cluster_size: r.get::<_, i32>(7).max(1) as u32,
                wanted_agent: r.get(8),
                starts_at: r.get(9),
                created_at: r.get(10),
                attempts: r.get::<_, i32>(11).max(0) as u32,
                last_result: r.get::<_, Option<&str>>(12).and_then(parse),
                last_error_code: r.get(13),
            })
            .collect();
        let agents = tx
            .query(
                "SELECT agent_id, cpu_milli, memory_bytes, gpu_milli, used_cpu_milli,
                        used_memory_bytes, used_gpu_milli
                 FROM ledger.agents WHERE resource_group = $1 AND lost IS NULL ORDER BY agent_id",
                &[&group.name],
            )
            .await?
            .iter()
            .map(|r| AgentView {
                agent_id: r.get(0),
                capacity: slots(r, 1),
                used: slots(r, 4),
            })
            .collect::<Vec<_>>();
        let mut owner_ids: Vec<Uuid> = queue.iter().map(|s| s.owner).collect();
        owner_ids.sort_unstable();
        owner_ids.dedup();
        let owners = tx
            .query(
                "SELECT u.user_id, p.name, p.max_concurrent_sessions, p.max_cpu_milli,
                        p.max_memory_bytes, p.max_gpu_milli,
                        count(s.session_id)::int,
                        coalesce(sum(s.cpu_milli * s.cluster_size), 0)::bigint,
                        coalesce(sum(s.memory_bytes * s.cluster_size), 0)::bigint,
                        coalesce(sum(s.gpu_milli * s.cluster_size), 0)::bigint
                 FROM ledger.users u JOIN ledger.policies p ON p.name = u.resource_policy
                 LEFT JOIN ledger.sessions s ON s.owner = u.user_id AND s.holds
                 WHERE u.user_id = ANY($1)
                 GROUP BY u.user_id, p.name",
                &[&owner_ids],
            )
            .await?
            .iter()
            .map(|r| {
                let load = OwnerLoad {
                    policy: r.get(1),
                    max_sessions: r.get::<_, i32>(2).max(0) as u32,
                    max_total: slots(r, 3),
                    sessions: r.get::<_, i32>(6).max(0) as u32,
                    used: slots(r, 7),
                };
                (r.get::<_, Uuid>(0), load)
            })
            .collect();
        let free = agents
            .iter()
            .fold(ResourceSlots::default(), |s, a: &AgentView| {
                s.saturating_add(a.free())
            });
        let capacity_grew = match self.last_free.get(&group.name) {
            None => true,
            Some(before) => !free.fits_in(*before),
        };
        Ok(Some(Snapshot {
            group,
            agents,
            queue,
            owners,
            now: Utc::now(),
            capacity_grew,
        }))
    }

    /// Runs passes until `stop`: after every wake-up, and at least every `interval`.
    pub async fn run(mut self, wake: Arc<Notify>, stop: CancellationToken) {
        while !stop.is_cancelled() {
            match self.pass().await {
                Ok(pass) if pass.placed + pass.cancelled > 0 => {
                    tracing::debug!(?pass, "scheduling pass");
                    // The queue moved; look again at once. Failures are retried only at the
                    // next wake-up or interval, so attempts are spread over time.
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "scheduling pass failed; trying again"),
            }
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = wake.notified() => {}
                _ = tokio::time::sleep(self.config.interval) => {}
            }
        }
    }
}
