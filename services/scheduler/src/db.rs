//! The scheduler's and the reconciler's reads of the ledger, as typed functions: the only
//! place in this crate that writes SQL (the workspace's tidy test checks it). Decisions are
//! recorded through `events::ledger`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::GenericClient;
use events::ledger::LedgerError;
use events::payloads::*;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::core::{AgentView, GroupRules, OwnerLoad, PendingSession};
use crate::fair_share::{FairShareSettings, ResourceWeights, UsageInterval};

/// Key of the advisory lock that serialises scheduling passes.
const SCHEDULER_LOCK: i64 = 0x6265_7274_685f_7363;

fn slots(row: &Row, first: usize) -> ResourceSlots {
    let get = |i: usize| row.get::<_, i64>(first + i).max(0) as u64;
    ResourceSlots {
        cpu_milli: get(0),
        memory_bytes: get(1),
        gpu_milli: get(2),
    }
}

/// An enum stored as its serde name (`fifo`, `SUCCESS`).
fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(text.to_owned())).ok()
}

/// Waits for every other scheduler's pass to end; the lock is held until the transaction
/// `tx` ends.
pub async fn lock_pass(tx: &impl GenericClient) -> Result<(), LedgerError> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEDULER_LOCK])
        .await?;
    Ok(())
}

/// Every resource group's scheduling rules, by name.
pub async fn groups(tx: &impl GenericClient) -> Result<Vec<GroupRules>, LedgerError> {
    let rows = tx
        .query(
            "SELECT name, queue_policy, agent_selection, max_attempts, skip_after,
                    pending_timeout_secs, half_life_secs, lookback_secs, weight_cpu_per_core,
                    weight_memory_per_gib, weight_gpu_per_device, starve_after_secs
             FROM ledger.resource_groups ORDER BY name",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|g| GroupRules {
            name: g.get(0),
            queue_policy: parse(g.get(1)).unwrap_or(QueuePolicy::Fifo),
            agent_selection: parse(g.get(2)).unwrap_or(AgentSelection::Concentrated),
            max_attempts: g.get::<_, i32>(3).max(1) as u32,
            skip_after: g.get::<_, i32>(4).max(0) as u32,
            pending_timeout_secs: g.get::<_, i64>(5).max(0) as u64,
            fair_share: FairShareSettings {
                half_life_secs: g.get::<_, i64>(6).max(1) as u64,
                lookback_secs: g.get::<_, i64>(7).max(0) as u64,
                weights: ResourceWeights {
                    cpu_per_core: g.get(8),
                    memory_per_gib: g.get(9),
                    gpu_per_device: g.get(10),
                },
            },
            starve_after_secs: g.get::<_, i64>(11).max(0) as u64,
        })
        .collect())
}

/// Sessions waiting in a queue, in queue order, and the trace each one's journey belongs to.
pub struct Queue {
    pub sessions: Vec<PendingSession>,
    pub traceparents: HashMap<Uuid, String>,
}

/// The first `batch` sessions waiting in `group`'s queue under its `policy`
/// (`events::sql::queue_order`, which the gateway's view of the queue shares), oldest first:
/// [`crate::core::plan`] orders them by the policy and their priorities.
pub async fn queue(
    tx: &impl GenericClient,
    group: &str,
    policy: QueuePolicy,
    batch: i64,
) -> Result<Queue, LedgerError> {
    queue_bounded(tx, group, policy, 0, batch).await
}

/// [`queue`], where sessions waiting longer than `starve_after_secs` (when above 0) are
/// loaded before any other, so a starving session beyond the first `batch` by priority is
/// still seen (and goes first).
pub async fn queue_bounded(
    tx: &impl GenericClient,
    group: &str,
    policy: QueuePolicy,
    starve_after_secs: u64,
    batch: i64,
) -> Result<Queue, LedgerError> {
    let starve = starve_after_secs as f64;
    let mut rows = tx
        .query(
            &format!(
                "SELECT session_id, version, owner, cpu_milli, memory_bytes, gpu_milli,
                        cluster_mode, cluster_size, wanted_agent, starts_at, status_since,
                        attempts, last_result, last_error_code, traceparent, project,
                        priority, queue_seq, volumes, image
                 FROM ledger.sessions s WHERE status = 'PENDING' AND resource_group = $1
                 ORDER BY $4::float8 > 0
                            AND s.status_since < now() - make_interval(secs => $4::float8) DESC,
                          {} LIMIT $2",
                events::sql::queue_order("s", "$3::text")
            ),
            &[&group, &batch, &policy.as_str(), &starve],
        )
        .await?;
    rows.sort_by_key(|r| r.get::<_, i64>(17));
    let mut images: Vec<&str> = rows.iter().map(|r| r.get(19)).collect();
    images.sort_unstable();
    images.dedup();
    let holders = image_holders(tx, group, &images).await?;
    let traceparents = rows
        .iter()
        .filter_map(|r| Some((r.get(0), r.get::<_, Option<String>>(14)?)))
        .collect();
    let sessions = rows
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
            queued_at: r.get(10),
            attempts: r.get::<_, i32>(11).max(0) as u32,
            last_result: r.get::<_, Option<&str>>(12).and_then(parse),
            last_error_code: r.get(13),
            priority: r.get(16),
            project: r.get(15),
            volumes: r.get(18),
            image: r.get(19),
            image_on: holders
                .get(r.get::<_, &str>(19))
                .cloned()
                .unwrap_or_default(),
        })
        .collect();
    Ok(Queue {
        sessions,
        traceparents,
    })
}

/// For each of `images`, the group's live agents that hold it, by name: read once for the
/// whole queue (a lookup per queued session scanned every agent for each).
async fn image_holders(
    tx: &impl GenericClient,
    group: &str,
    images: &[&str],
) -> Result<HashMap<String, Arc<[String]>>, LedgerError> {
    let rows = tx
        .query(
            "SELECT image, array_agg(a.agent_id ORDER BY a.agent_id)
             FROM ledger.agents a, unnest(a.images) AS image
             WHERE a.resource_group = $1 AND a.lost IS NULL AND image = ANY($2)
             GROUP BY image",
            &[&group, &images],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get::<_, Vec<String>>(1).into()))
        .collect())
}

/// How long agent `a` (of `ledger.agents a`, with `recorder.agent_liveness l` joined) has
/// gone unheard, in seconds on the database's clock: its last heartbeat the recorder noted, or
/// since it registered. NULL unless some recorder has listened without a break for longer
/// than the parameter `listened_for` (seconds) names and is listening now: a bus outage must
/// not look like every agent falling silent.
fn unheard_for_seconds(listened_for: &str) -> String {
    format!(
        "CASE WHEN EXISTS (
               SELECT 1 FROM recorder.liveness_watch
               WHERE listening_since < now() - make_interval(secs => {listened_for})
                 AND checked_at > now() - interval '10 seconds')
             THEN extract(epoch FROM now() - greatest(a.last_heartbeat, l.seen_at))::float8
         END"
    )
}

/// The column [`unheard_for_seconds`] made, as a duration.
fn unheard_for(row: &tokio_postgres::Row, idx: usize) -> Option<Duration> {
    row.get::<_, Option<f64>>(idx)
        .map(|secs| Duration::from_secs_f64(secs.max(0.0)))
}

/// `group`'s agents not marked lost with what they hold, by id, and how long each has gone
/// unheard (by `recorder.agent_liveness`, or since it registered) on the database's
/// clock. The silence is told only while some recorder has listened without a break for
/// longer than `silent_after` and is listening now, as in [`silent_agents`]: a bus outage
/// must not look like every agent falling silent.
///
/// With them, what the read saw of the log (its statement's snapshot, read once: what it
/// reads of the agents' use is what those transactions wrote); `None` when the group has no
/// agent.
pub async fn agents(
    tx: &impl GenericClient,
    group: &str,
    silent_after: Duration,
) -> Result<(Vec<AgentView>, Option<LogView>), LedgerError> {
    let rows = tx
        .query(
            &format!(
                "SELECT a.agent_id, a.cpu_milli, a.memory_bytes, a.gpu_milli, a.used_cpu_milli,
                        a.used_memory_bytes, a.used_gpu_milli, {},
                        coalesce(a.network_scope, 'agent:' || a.agent_id), a.volumes,
                        (SELECT pg_current_snapshot()::text), (SELECT berth_xid_offset())
                 FROM ledger.agents a LEFT JOIN recorder.agent_liveness l USING (agent_id)
                 WHERE a.resource_group = $1 AND a.lost IS NULL ORDER BY a.agent_id",
                unheard_for_seconds("$2")
            ),
            &[&group, &silent_after.as_secs_f64()],
        )
        .await?;
    let seen = rows.first().and_then(|r| log_view(r.get(10), r.get(11)));
    let agents = rows
        .iter()
        .map(|r| AgentView {
            agent_id: r.get(0),
            capacity: slots(r, 1),
            used: slots(r, 4),
            unheard_for: unheard_for(r, 7),
            network_scope: r.get(8),
            volumes: r.get(9),
        })
        .collect();
    Ok((agents, seen))
}

/// PostgreSQL's snapshot text (`xmin:xmax:xip,xip,...`, transaction ids of the cluster) as
/// a [`LogView`] on the log's clock, the cluster's ids moved by `offset` (`berth_xid_offset()`,
/// migration 0014).
fn log_view(snapshot: &str, offset: i64) -> Option<LogView> {
    let mut parts = snapshot.split(':');
    let (_xmin, xmax, xip) = (parts.next()?, parts.next()?, parts.next().unwrap_or(""));
    let on_log_clock = |id: &str| id.parse::<i64>().ok().map(|id| (id + offset) as u64);
    Some(LogView {
        xmax: on_log_clock(xmax)?,
        in_progress: xip
            .split(',')
            .filter(|id| !id.is_empty())
            .map(on_log_clock)
            .collect::<Option<_>>()?,
    })
}

/// What each owner holds in `group` now (DRF's shares are of these).
pub async fn held_in_group(
    tx: &impl GenericClient,
    group: &str,
) -> Result<HashMap<Uuid, ResourceSlots>, LedgerError> {
    let rows = tx
        .query(
            "SELECT owner, sum(cpu_milli * cluster_size)::bigint,
                    sum(memory_bytes * cluster_size)::bigint, sum(gpu_milli * cluster_size)::bigint
             FROM ledger.sessions WHERE resource_group = $1 AND holds GROUP BY owner",
            &[&group],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), slots(r, 1))).collect())
}

/// What sessions held in `group` while they ran (`ledger.usage_intervals`), of those that
/// ran at some time after `since` (the fair-share look-back).
pub async fn usage_intervals(
    tx: &impl GenericClient,
    group: &str,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<UsageInterval>, LedgerError> {
    let rows = tx
        .query(
            "SELECT owner, project, cpu_milli, memory_bytes, gpu_milli, started_at, ended_at
             FROM ledger.usage_intervals
             WHERE resource_group = $1 AND (ended_at IS NULL OR ended_at > $2)",
            &[&group, &since],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| UsageInterval {
            owner: r.get(0),
            project: r.get(1),
            resources: slots(r, 2),
            started_at: r.get(5),
            ended_at: r.get(6),
        })
        .collect())
}

/// What each of `owners` may hold (their policy) and holds now.
pub async fn owner_loads(
    tx: &impl GenericClient,
    owners: &[Uuid],
) -> Result<HashMap<Uuid, OwnerLoad>, LedgerError> {
    let rows = tx
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
            &[&owners],
        )
        .await?;
    Ok(rows
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
        .collect())
}

/// Agents not lost that have not been heard from for longer than `timeout` (by
/// `recorder.agent_liveness`, or since they registered), with their silence in seconds. None
/// while no recorder has listened without a break for longer than `timeout` and is listening now: the
/// silence may then be the bus's, not the agents'.
pub async fn silent_agents(
    client: &impl GenericClient,
    timeout: Duration,
) -> Result<Vec<Silent>, LedgerError> {
    let rows = client
        .query(
            "WITH last AS (
               SELECT a.agent_id, greatest(a.last_heartbeat, l.seen_at) AS seen_at
               FROM ledger.agents a LEFT JOIN recorder.agent_liveness l USING (agent_id)
               WHERE a.lost IS NULL)
             SELECT agent_id, extract(epoch FROM now() - seen_at)::bigint, seen_at FROM last
             WHERE seen_at < now() - make_interval(secs => $1)
               AND EXISTS (SELECT 1 FROM recorder.liveness_watch
                           WHERE listening_since < now() - make_interval(secs => $1)
                             AND checked_at > now() - interval '10 seconds')",
            &[&timeout.as_secs_f64()],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Silent {
            agent_id: r.get(0),
            silent_secs: r.get(1),
            last_heard: r.get(2),
        })
        .collect())
}

/// An agent silent for longer than the heartbeat timeout ([`silent_agents`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Silent {
    pub agent_id: String,
    /// How long it has been silent, in whole seconds.
    pub silent_secs: i64,
    /// When it was last heard from.
    pub last_heard: chrono::DateTime<chrono::Utc>,
}

/// An agent that departed on purpose (its `lost` begins [`DEPARTED`](events::payloads::DEPARTED))
/// and has not registered again.
#[derive(Debug, Clone, PartialEq)]
pub struct Departed {
    pub agent_id: String,
    /// Its `lost`, as the ledger has it: `departed: ` and its own words.
    pub lost: String,
    /// How long it has gone unheard (by `recorder.agent_liveness`, or by its own last
    /// heartbeat) on the database's clock; `None` while no recorder has listened without a
    /// break for longer than `listened_for` and is listening now, as in [`silent_agents`].
    pub unheard_for: Option<Duration>,
}

/// The agents that departed and have not registered again, with how long each has gone
/// unheard (see [`Departed`]).
pub async fn departed_agents(
    client: &impl GenericClient,
    listened_for: Duration,
) -> Result<Vec<Departed>, LedgerError> {
    let rows = client
        .query(
            &format!(
                "SELECT a.agent_id, a.lost, {}
                 FROM ledger.agents a LEFT JOIN recorder.agent_liveness l USING (agent_id)
                 WHERE starts_with(a.lost, $1) ORDER BY a.agent_id",
                unheard_for_seconds("$2")
            ),
            &[&events::payloads::DEPARTED, &listened_for.as_secs_f64()],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Departed {
            agent_id: r.get(0),
            lost: r.get(1),
            unheard_for: unheard_for(r, 2),
        })
        .collect())
}

/// Sessions with a kernel on `agent_id`.
pub async fn sessions_on_agent(
    client: &impl GenericClient,
    agent_id: &str,
) -> Result<Vec<Uuid>, LedgerError> {
    let rows = client
        .query(
            "SELECT DISTINCT session_id FROM ledger.kernels WHERE agent_id = $1",
            &[&agent_id],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// A session whose container never ran, with a kernel on an agent marked gone.
#[derive(Debug, Clone, PartialEq)]
pub struct Stranded {
    pub session_id: Uuid,
    pub agent_id: String,
    /// Why the agent is gone, as the ledger has it (lost, departed, revoked).
    pub why: String,
}

/// Sessions not started yet (SCHEDULED to CREATING) with a kernel on an agent whose `lost`
/// is set, whoever set it.
pub async fn not_started_on_gone_agents(
    client: &impl GenericClient,
) -> Result<Vec<Stranded>, LedgerError> {
    let sql = format!(
        "SELECT DISTINCT k.session_id, k.agent_id, a.lost FROM ledger.kernels k
           JOIN ledger.agents a ON a.agent_id = k.agent_id
           JOIN ledger.sessions s ON s.session_id = k.session_id
         WHERE a.lost IS NOT NULL AND s.status IN ({})",
        events::sql::status_list(&SessionStatus::NOT_STARTED)
    );
    let rows = client.query(&sql, &[]).await?;
    Ok(rows
        .iter()
        .map(|r| Stranded {
            session_id: r.get(0),
            agent_id: r.get(1),
            why: r.get(2),
        })
        .collect())
}

/// A session that has stayed in one status past its deadline.
#[derive(Debug, Clone, PartialEq)]
pub struct Overdue {
    pub session_id: Uuid,
    pub status: SessionStatus,
    pub requeues: u32,
    pub waited: Duration,
}

/// Sessions in one of `deadlines`' statuses for longer than its limit.
pub async fn overdue(
    client: &impl GenericClient,
    deadlines: &[(SessionStatus, Duration)],
) -> Result<Vec<Overdue>, LedgerError> {
    let names: Vec<&str> = deadlines.iter().map(|(s, _)| s.as_str()).collect();
    let limits: Vec<f64> = deadlines.iter().map(|(_, d)| d.as_secs_f64()).collect();
    let rows = client
        .query(
            "SELECT s.session_id, s.status, s.requeues,
                    extract(epoch FROM now() - s.status_since)::float8
             FROM ledger.sessions s
             JOIN unnest($1::text[], $2::float8[]) AS d(status, secs) ON d.status = s.status
             WHERE s.status_since < now() - make_interval(secs => d.secs)",
            &[&names, &limits],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(Overdue {
                session_id: r.get(0),
                status: SessionStatus::parse(r.get(1))?,
                requeues: r.get::<_, i32>(2).max(0) as u32,
                waited: Duration::from_secs_f64(r.get::<_, f64>(3).max(0.0)),
            })
        })
        .collect())
}

/// What each session holding resources in `group` holds now, kernel by kernel, and since
/// when (its open usage interval, else its status' start): what [`crate::advice`] frees.
pub async fn holdings(
    tx: &impl GenericClient,
    group: &str,
) -> Result<Vec<crate::advice::Holding>, LedgerError> {
    let rows = tx
        .query(
            "SELECT s.session_id, s.owner, coalesce(u.started_at, s.status_since),
                    k.agent_id, k.cpu_milli, k.memory_bytes, k.gpu_milli
             FROM ledger.sessions s JOIN ledger.kernels k USING (session_id)
             LEFT JOIN ledger.usage_intervals u
                    ON u.session_id = s.session_id AND u.ended_at IS NULL
             WHERE s.resource_group = $1 AND s.holds
             ORDER BY s.session_id, k.idx",
            &[&group],
        )
        .await?;
    let mut found: Vec<crate::advice::Holding> = Vec::new();
    for r in &rows {
        let session_id: Uuid = r.get(0);
        let kernel = (r.get::<_, String>(3), slots(r, 4));
        match found.last_mut() {
            Some(h) if h.session_id == session_id => h.kernels.push(kernel),
            _ => found.push(crate::advice::Holding {
                session_id,
                owner: r.get(1),
                kernels: vec![kernel],
                since: r.get(2),
                ends_by: None,
            }),
        }
    }
    Ok(found)
}

/// How long a session held its agents in `group`, the median over those that gave them back
/// since `since`; `None` when none did.
pub async fn typical_hold(
    tx: &impl GenericClient,
    group: &str,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<Option<Duration>, LedgerError> {
    let row = tx
        .query_one(
            "SELECT percentile_cont(0.5) WITHIN GROUP
                      (ORDER BY extract(epoch FROM ended_at - started_at))
             FROM ledger.usage_intervals
             WHERE resource_group = $1 AND ended_at IS NOT NULL AND ended_at > $2",
            &[&group, &since],
        )
        .await?;
    Ok(row
        .get::<_, Option<f64>>(0)
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64))
}

/// The shapes users watch ("notify me when it fits"), oldest first, at most `most`.
pub async fn open_fit_watches(
    tx: &impl GenericClient,
    most: i64,
) -> Result<Vec<FitWatchRequested>, LedgerError> {
    let rows = tx
        .query(
            "SELECT watch_id, owner, resource_group, shape, label FROM ledger.fit_watches
             ORDER BY requested_at LIMIT $1",
            &[&most],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            Some(FitWatchRequested {
                watch_id: r.get(0),
                owner: r.get(1),
                resource_group: r.get(2),
                shape: serde_json::from_value(r.get(3)).ok()?,
                label: r.get(4),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshots_text_reads_as_a_view_on_the_logs_clock() {
        let view = log_view("740:745:740,743", 1000).unwrap();
        assert_eq!(
            view,
            LogView {
                xmax: 1745,
                in_progress: vec![1740, 1743]
            }
        );
        assert!(view.sees(1739) && view.sees(1741) && view.sees(1744));
        assert!(!view.sees(1740) && !view.sees(1743) && !view.sees(1745));
        assert_eq!(
            log_view("745:745:", 0).unwrap().in_progress,
            Vec::<u64>::new()
        );
        assert_eq!(log_view("not a snapshot", 0), None);
    }
}
