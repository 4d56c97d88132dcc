//! The scheduler's I/O: one pass loads each resource group's snapshot from the ledger,
//! lets [`crate::core::plan`] decide, and records the decisions: in the pass's own
//! transaction, or, for a pass of thousands, in a few transactions side by side, cut along
//! the agents they reserve on ([`crate::parts`]), so that PostgreSQL writes them on more than
//! one core.
//!
//! Passes of all scheduler processes are serialised by a transaction advisory lock, held by
//! the pass's own transaction until its parts have committed, so a second scheduler waits
//! rather than deciding on the same free resources; and the ledger's conditional reserve
//! refuses any placement an agent cannot hold, so even a scheduler that ignored the lock
//! could not over-commit (the transaction holding that placement would roll back).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::{Pool, Transaction};
use events::catalogue::{stream_id, Event};
use events::ledger::{self, LedgerError, Recording};
use events::payloads::*;
use events::store::ExpectedVersion;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::core::{self, AgentView, GroupRules, Snapshot};
use crate::db;

/// How soon a pass that failed (PostgreSQL away) is tried again: an outage's end is
/// noticed within this, not at the safety net's interval.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

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

/// How long the scheduler waits at most between passes by default: the safety net for a
/// wake-up lost.
pub const INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Longest time between passes when nothing wakes the scheduler.
    pub interval: Duration,
    /// Most queued sessions of one group decided in one pass.
    pub batch: i64,
    /// Most decisions recorded by one statement of each kind (`ledger::record_many`).
    pub record_batch: usize,
    /// Most transactions a pass of more than `record_batch` decisions is recorded in side by
    /// side, each on a connection of its own from the pool (1: all in the pass's own).
    pub record_parts: usize,
    /// Whether passes take turns with every other scheduler's (the advisory lock). Always on
    /// in service; off, a pass that decided on resources another pass took meanwhile is
    /// refused whole by the ledger's conditional reserve, which a test shows.
    pub exclusive: bool,
    /// How long an agent may go unheard before nothing is placed on it (two heartbeats,
    /// `events::aggregate::SILENT_AFTER`, unless the caller says otherwise).
    pub silent_after: Duration,
}

impl SchedulerConfig {
    /// The service's settings, passing at least every `interval`: the caller's to give
    /// (`berth`'s is `Timings::scheduler_interval`), so the knob has one default.
    pub fn new(interval: Duration) -> SchedulerConfig {
        SchedulerConfig {
            interval,
            batch: 5_000,
            record_batch: 250,
            // PostgreSQL writes a transaction's statements on one core: two parts keep two
            // busy (docs/performance.md, "A pass recorded side by side").
            record_parts: 2,
            exclusive: true,
            silent_after: events::aggregate::SILENT_AFTER,
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
    /// Watched shapes found to fit, their owners told.
    pub fits_told: usize,
    /// When time alone next changes a decision (a reserved start, a pending timeout), if ever.
    pub next_deadline: Option<DateTime<Utc>>,
}

pub const PASS_SECONDS: &str = "berth_scheduler_pass_seconds";
pub const PASS_FAILURES: &str = "berth_scheduler_pass_failures_total";
pub const DECISIONS: &str = "berth_scheduler_decisions_total";

/// Describes the scheduler's metrics to the installed recorder.
pub fn describe_metrics() {
    metrics::describe_histogram!(
        PASS_SECONDS,
        metrics::Unit::Seconds,
        "Time one scheduler pass took (every resource group's queue decided and recorded, or failed)"
    );
    metrics::describe_counter!(
        PASS_FAILURES,
        "Scheduler passes that failed (PostgreSQL away, a decision refused by the ledger) and were rolled back (a large pass: the part that failed; its other parts stand)"
    );
    metrics::describe_counter!(
        DECISIONS,
        "Decisions of committed scheduler passes by outcome: `placed`, `cancelled` (gave up, \
         expired) or `waiting` (left PENDING)"
    );
}

impl Pass {
    /// Counts this committed pass's decisions by outcome.
    fn count_decisions(&self) {
        let waiting = self.decided.saturating_sub(self.placed + self.cancelled);
        for (outcome, count) in [
            ("placed", self.placed),
            ("cancelled", self.cancelled),
            ("waiting", waiting),
        ] {
            if count > 0 {
                metrics::counter!(DECISIONS, "outcome" => outcome).increment(count as u64);
            }
        }
    }
}

/// A scheduler: remembers, per group, the free resources seen by its last pass (to tell
/// whether a wait for resources deserves another counted attempt).
pub struct Scheduler {
    pool: Pool,
    config: SchedulerConfig,
    last_free: HashMap<String, ResourceSlots>,
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
    #[tracing::instrument(name = "scheduler_pass", skip_all)]
    pub async fn pass(&mut self) -> Result<Pass, SchedulerError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        if self.config.exclusive {
            db::lock_pass(&tx).await?;
        }
        let groups = db::groups(&tx).await?;
        let mut total = Pass::default();
        let mut free_after = HashMap::new();
        for rules in groups {
            let name = rules.name.clone();
            let Some((mut snapshot, traceparents, seen)) = self.snapshot(&tx, rules).await? else {
                continue;
            };
            let deadline = core::next_deadline(&snapshot);
            total.next_deadline = total.next_deadline.into_iter().chain(deadline).min();
            let decisions = core::plan(&mut snapshot);
            let mut estimates = first_wait_estimates(&tx, &snapshot, &decisions).await?;
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
            let mut recordings: Vec<Recording> = recorded
                .into_iter()
                .map(|decision| {
                    // Each decision joins its session's journey (the trace it was created in).
                    let span = tracing::info_span!("schedule", session = %decision.session_id);
                    let traceparent = traceparents.get(&decision.session_id);
                    events::trace::follow(&span, traceparent.map(String::as_str));
                    let mut events = decision.events();
                    if let Some(estimate) = estimates.remove(&decision.session_id) {
                        events.push(estimate);
                    }
                    Recording {
                        stream_id: stream_id("session", decision.session_id),
                        expected: ExpectedVersion::Exact(decision.version),
                        events,
                        metadata: span.in_scope(|| events::trace::metadata("scheduler", None)),
                    }
                })
                .collect();
            // What the pass saw of the log, once a group's pass: a what-if replay orders the
            // releases it did not see after it.
            let first_row =
                recordings
                    .iter_mut()
                    .flat_map(|r| &mut r.events)
                    .find_map(|e| match e {
                        Event::SchedulingAttempted(a) => Some(a),
                        _ => None,
                    });
            if let Some(row) = first_row {
                row.read = seen;
            }
            self.record(&tx, recordings).await?;
        }
        total.fits_told = self.fire_fit_watches(&tx).await?;
        events::activity::commit(tx).await?;
        self.last_free.extend(free_after);
        Ok(total)
    }

    /// Records a group's decisions. Up to `record_batch` of them go into the pass's own
    /// transaction. More are cut along their agents into up to `record_parts` parts, each
    /// recorded in a transaction of its own on a connection of its own, all at once; the
    /// decisions that would join two parts follow in the pass's own transaction once the
    /// parts have committed. Each part is all or nothing: one refused (a session that moved
    /// on meanwhile, an agent found full) rolls back alone, and its sessions are decided again
    /// by the next pass; the others' decisions stand, each sound on its own.
    async fn record(
        &self,
        tx: &Transaction<'_>,
        recordings: Vec<Recording>,
    ) -> Result<(), SchedulerError> {
        let batch = self.config.record_batch.max(1);
        if recordings.len() <= batch || self.config.record_parts <= 1 {
            return record_slices(tx, &recordings, batch).await;
        }
        let split = crate::parts::split_by_agent(recordings, self.config.record_parts);
        let parts = futures::future::join_all(
            split
                .parts
                .iter()
                .map(|part| record_part(&self.pool, part, batch)),
        )
        .await;
        parts.into_iter().collect::<Result<(), _>>()?;
        record_slices(tx, &split.across, batch).await
    }

    /// Tells the owner of each watched shape that would be placed at once now that it fits
    /// (`FitWatchFired`, once: the watch's stream moves on only from its request). How many.
    async fn fire_fit_watches(&self, tx: &Transaction<'_>) -> Result<usize, SchedulerError> {
        let watches = db::open_fit_watches(tx, MOST_WATCHES_A_PASS).await?;
        if watches.is_empty() {
            return Ok(0);
        }
        let groups = db::groups(tx).await?;
        let mut fired = 0;
        for rules in groups {
            let here: Vec<&FitWatchRequested> = watches
                .iter()
                .filter(|w| w.resource_group == rules.name)
                .collect();
            if here.is_empty() {
                continue;
            }
            let owners: Vec<Uuid> = here.iter().map(|w| w.owner).collect();
            let snapshot = advice_snapshot(tx, rules, self.config.silent_after, &owners).await?;
            for watch in here {
                let asked = crate::advice::Asked::New {
                    owner: watch.owner,
                    shape: watch.shape,
                    priority: 0,
                    project: None,
                };
                // Only this pass's placements count: nothing is released in the simulation.
                let now = crate::advice::estimate(&snapshot, &[], &asked, Duration::ZERO);
                if now.wait_secs != Some(0) {
                    continue;
                }
                let told = Event::FitWatchFired(FitWatchFired {
                    watch_id: watch.watch_id,
                    owner: watch.owner,
                    resource_group: watch.resource_group.clone(),
                    label: watch.label.clone(),
                });
                ledger::record(
                    tx,
                    &stream_id("fitwatch", watch.watch_id),
                    ExpectedVersion::Exact(0),
                    &[told],
                    &events::trace::metadata("scheduler", None),
                )
                .await?;
                fired += 1;
            }
        }
        Ok(fired)
    }

    /// Loads one group's snapshot; `None` when nothing waits in its queue.
    async fn snapshot(
        &self,
        tx: &Transaction<'_>,
        group: GroupRules,
    ) -> Result<Option<(Snapshot, HashMap<Uuid, String>, Option<LogView>)>, SchedulerError> {
        let now = Utc::now();
        let db::Queue {
            sessions: queue,
            traceparents,
        } = db::queue_bounded(
            tx,
            &group.name,
            group.queue_policy,
            group.starve_after_secs,
            self.config.batch,
        )
        .await?;
        if queue.is_empty() {
            return Ok(None);
        }
        let after = self.config.silent_after;
        let (mut snapshot, seen) = group_snapshot(tx, group, queue, after, &[], now).await?;
        // What the live agents have free, as `plan` leaves the snapshot's agents.
        let free = snapshot
            .agents
            .iter()
            .filter(|a| !a.is_silent(after))
            .fold(ResourceSlots::default(), |s, a: &AgentView| {
                s.saturating_add(a.free())
            });
        snapshot.capacity_grew = match self.last_free.get(&snapshot.group.name) {
            None => true,
            Some(before) => !free.fits_in(*before),
        };
        Ok(Some((snapshot, traceparents, seen)))
    }

    /// Runs passes until `stop`: after every wake-up ([`crate::wake`] turns the events that
    /// can change a decision into one), when time alone changes a decision (the pass's next
    /// deadline), and at least every `interval`, the safety net for a wake-up lost.
    pub async fn run(mut self, wake: Arc<Notify>, stop: CancellationToken) {
        let mut outage = events::fault::Outage::default();
        while !stop.is_cancelled() {
            let mut sleep = self.config.interval;
            let began = tokio::time::Instant::now();
            let passed = self.pass().await;
            metrics::histogram!(PASS_SECONDS).record(began.elapsed().as_secs_f64());
            match passed {
                Ok(pass) => {
                    outage.passed("scheduler");
                    pass.count_decisions();
                    if pass.placed + pass.cancelled > 0 {
                        tracing::debug!(?pass, "scheduling pass");
                        // The queue moved; look again at once. Failures are retried only at
                        // the next wake-up or interval, so attempts are spread over time.
                        continue;
                    }
                    if let Some(deadline) = pass.next_deadline {
                        let until = (deadline - Utc::now()).to_std().unwrap_or_default();
                        sleep = sleep.min(until);
                    }
                }
                Err(e) => {
                    metrics::counter!(PASS_FAILURES).increment(1);
                    outage.failed("scheduler", &e);
                    // An outage is retried soon, not at the safety net's interval.
                    sleep = sleep.min(RETRY_AFTER_FAILURE);
                }
            }
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }
}

/// The most watched shapes one pass looks at.
const MOST_WATCHES_A_PASS: i64 = 100;

/// How far back the group's typical hold is learnt from.
const TYPICAL_HOLD_LOOKBACK: chrono::TimeDelta = chrono::TimeDelta::days(7);

/// What [`crate::advice`] frees in `group`, seen at `now`: what its sessions hold, and how
/// long a session typically held its agents there lately (else the default hold).
pub(crate) async fn holdings_and_typical(
    tx: &Transaction<'_>,
    group: &str,
    now: DateTime<Utc>,
) -> Result<(Vec<crate::advice::Holding>, Duration), SchedulerError> {
    let holdings = db::holdings(tx, group).await?;
    let typical = db::typical_hold(tx, group, now - TYPICAL_HOLD_LOOKBACK)
        .await?
        .unwrap_or(crate::advice::DEFAULT_TYPICAL_HOLD);
    Ok((holdings, typical))
}

/// `rules`' group as [`crate::advice`] runs it forward: its snapshot around the first
/// [`MOST_ESTIMATED_QUEUE`](crate::advice::MOST_ESTIMATED_QUEUE) of its queue, with the loads
/// of `also` (who ask, or watch a shape).
pub(crate) async fn advice_snapshot(
    tx: &Transaction<'_>,
    rules: GroupRules,
    silent_after: Duration,
    also: &[Uuid],
) -> Result<Snapshot, SchedulerError> {
    let now = Utc::now();
    let queue = db::queue_bounded(
        tx,
        &rules.name,
        rules.queue_policy,
        rules.starve_after_secs,
        crate::advice::MOST_ESTIMATED_QUEUE as i64,
    )
    .await?
    .sessions;
    let (snapshot, _) = group_snapshot(tx, rules, queue, silent_after, also, now).await?;
    Ok(snapshot)
}

/// The estimates of when the sessions that wait for the first time in this pass start
/// ([`crate::advice`]), as `SessionStartEstimated` events to record with their decisions: one
/// simulation of the queue as this pass leaves it, what it placed holding from now. None when
/// nobody waits for the first time, or the queue is too long to simulate in a pass.
async fn first_wait_estimates(
    tx: &Transaction<'_>,
    snapshot: &Snapshot,
    decisions: &[core::Decision],
) -> Result<HashMap<Uuid, Event>, SchedulerError> {
    let first_time: HashSet<Uuid> = snapshot
        .queue
        .iter()
        .filter(|s| s.last_result.is_none())
        .map(|s| s.session_id)
        .collect();
    let targets: Vec<Uuid> = decisions
        .iter()
        .filter(|d| d.record && d.placement.is_none() && d.cancel_reason.is_none())
        .map(|d| d.session_id)
        .filter(|id| first_time.contains(id))
        .collect();
    if targets.is_empty() || snapshot.queue.len() > crate::advice::MOST_ESTIMATED_QUEUE {
        return Ok(HashMap::new());
    }
    let now = snapshot.now;
    let (mut holdings, typical) = holdings_and_typical(tx, &snapshot.group.name, now).await?;
    let mut left = snapshot.clone();
    let mut decided = HashSet::new();
    for d in decisions {
        if let Some(kernels) = &d.placement {
            let owner = left
                .queue
                .iter()
                .find(|s| s.session_id == d.session_id)
                .map(|s| s.owner)
                .unwrap_or_default();
            holdings.push(crate::advice::Holding {
                session_id: d.session_id,
                owner,
                kernels: kernels
                    .iter()
                    .map(|k| (k.agent_id.clone(), k.resources))
                    .collect(),
                since: now,
                ends_by: None,
            });
        }
        if d.placement.is_some() || d.cancel_reason.is_some() {
            decided.insert(d.session_id);
        }
    }
    left.queue.retain(|s| !decided.contains(&s.session_id));
    let found = crate::advice::simulate(left, &holdings, &targets, typical);
    Ok(found
        .into_iter()
        .map(|(session_id, estimate)| {
            let event = Event::SessionStartEstimated(SessionStartEstimated {
                session_id,
                estimate,
                typical_hold_secs: typical.as_secs(),
            });
            (session_id, event)
        })
        .collect())
}

/// Records `recordings` in `tx`, a slice of `batch` at a time so that no statement grows
/// without bound; the slices' statements pipelined on the connection, so that the next
/// slice's events are built and sent while PostgreSQL writes one. The first to fail aborts
/// the transaction (the others fail as its echo).
async fn record_slices(
    tx: &Transaction<'_>,
    recordings: &[Recording],
    batch: usize,
) -> Result<(), SchedulerError> {
    let written = futures::future::join_all(
        recordings
            .chunks(batch)
            .map(|slice| ledger::record_many(tx, slice)),
    )
    .await;
    match LedgerError::cause(written.into_iter().filter_map(Result::err)) {
        Some(cause) => Err(cause.into()),
        None => Ok(()),
    }
}

/// Records one part of a pass in a transaction of its own, on a connection of its own.
async fn record_part(
    pool: &Pool,
    recordings: &[Recording],
    batch: usize,
) -> Result<(), SchedulerError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    record_slices(&tx, recordings, batch).await?;
    events::activity::commit(tx).await?;
    Ok(())
}

/// `group`'s snapshot around `queue`: its agents, the loads of the queue's owners (and of
/// `also`, who ask for advice or watch a shape), and what its policy orders by (DRF the owners' holdings
/// now, fair share decayed use). `capacity_grew` is left false for the caller to decide.
///
/// Its `now` is the moment before the queue was read, not after the reads, so a what-if
/// replay, which applies the log's events at their recorded times, sees at a pass's `now`
/// what the pass saw: taken after the reads (tens of milliseconds under load), the replay
/// placed with resources released meanwhile, one pass earlier than the live one. With the
/// snapshot, what its read of the agents saw of the log, for the release still committing
/// when it read ([`db::agents`]).
pub(crate) async fn group_snapshot(
    tx: &Transaction<'_>,
    group: GroupRules,
    queue: Vec<core::PendingSession>,
    silent_after: Duration,
    also: &[Uuid],
    now: DateTime<Utc>,
) -> Result<(Snapshot, Option<LogView>), SchedulerError> {
    let (agents, seen) = db::agents(tx, &group.name, silent_after).await?;
    let mut owner_ids: Vec<Uuid> = queue
        .iter()
        .map(|s| s.owner)
        .chain(also.iter().copied())
        .collect();
    owner_ids.sort_unstable();
    owner_ids.dedup();
    let owners = db::owner_loads(tx, &owner_ids).await?;
    let held = match group.queue_policy {
        QueuePolicy::Drf => db::held_in_group(tx, &group.name).await?,
        _ => HashMap::new(),
    };
    let usage = match group.queue_policy {
        QueuePolicy::FairShare => {
            let settings = group.fair_share;
            let since = now - chrono::Duration::seconds(settings.lookback_secs as i64);
            let intervals = db::usage_intervals(tx, &group.name, since).await?;
            crate::fair_share::usage(&intervals, now, &settings)
        }
        _ => Default::default(),
    };
    let snapshot = Snapshot {
        group,
        agents,
        silent_after,
        queue,
        owners,
        held,
        usage,
        now,
        capacity_grew: false,
    };
    Ok((snapshot, seen))
}
