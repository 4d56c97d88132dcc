//! Nothing stays stuck: every intermediate status has a deadline, and an agent that stops
//! heartbeating is marked lost. An overdue placement goes back to the queue (a bounded
//! number of times) or ends in ERROR with the reason; an overdue stop ends TERMINATED.
//!
//! Nothing a user asked for is lost with a host ([`after_agent_gone`]). A session whose
//! agent is gone before its container ran goes back to the queue and is placed elsewhere:
//! every round sweeps the sessions not started on any agent marked gone in the ledger
//! (`lost` set: lost, departed on purpose, or revoked), whoever marked it, so a departure
//! recorded by the agent's own path is handled here too. What was running on an agent that
//! departed keeps running (its containers are adopted when it returns); on an agent the
//! reconciler marks lost it ends in ERROR with the reason, except inference sessions, which
//! recover by themselves: they go back to the queue and run again elsewhere. An agent that
//! departed and stays silent past a bound ([`overdue_departures`]) is not coming back: it is
//! marked lost as a silent one is, and what ran there goes as on any agent lost.
//!
//! Every path goes through the session's lifecycle rules, so what the session held is
//! released exactly once; a session back in the queue is placed on no agent, so the old
//! agent's late reports on it are refused, and when it returns it removes its containers.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use events::aggregate::SessionState;
use events::catalogue::Event;
use events::ledger::{self, LedgerError};
use events::lifecycle::{self, CommandError};
use events::payloads::*;
use events::store::ExpectedVersion;
use uuid::Uuid;

use crate::db;

/// How long a session may stay in each intermediate status, and how long an agent may be
/// silent.
#[derive(Debug, Clone)]
pub struct Deadlines {
    pub scheduled: Duration,
    pub preparing: Duration,
    pub pulling: Duration,
    pub prepared: Duration,
    pub creating: Duration,
    pub restarting: Duration,
    pub terminating: Duration,
    pub heartbeat: Duration,
    /// How long an agent that departed may stay silent before it is taken for lost.
    pub departed: Duration,
    /// Times a stalled placement goes back to the queue before it ends in ERROR.
    pub max_requeues: u32,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            scheduled: Duration::from_secs(60),
            preparing: Duration::from_secs(900),
            pulling: Duration::from_secs(900),
            prepared: Duration::from_secs(60),
            creating: Duration::from_secs(600),
            restarting: Duration::from_secs(300),
            terminating: Duration::from_secs(60),
            heartbeat: Duration::from_secs(30),
            departed: Duration::from_secs(600),
            max_requeues: 3,
        }
    }
}

impl Deadlines {
    pub fn of(&self, status: SessionStatus) -> Option<Duration> {
        use SessionStatus::*;
        match status {
            Scheduled => Some(self.scheduled),
            Preparing => Some(self.preparing),
            Pulling => Some(self.pulling),
            Prepared => Some(self.prepared),
            Creating => Some(self.creating),
            Restarting => Some(self.restarting),
            Terminating => Some(self.terminating),
            _ => None,
        }
    }
}

/// What an overdue session becomes, and the history row that says why. Pure.
pub fn overdue_move(
    status: SessionStatus,
    waited: Duration,
    requeues: u32,
    deadlines: &Deadlines,
) -> (SessionStatus, SchedulingResult, String) {
    use SessionStatus::*;
    let secs = waited.as_secs();
    let limit = deadlines.of(status).unwrap_or_default().as_secs();
    let stalled = format!("no progress in {status:?} for {secs} s (the deadline is {limit} s)");
    match status {
        Scheduled | Preparing | Prepared | Creating if requeues < deadlines.max_requeues => (
            Pending,
            SchedulingResult::Expired,
            format!(
                "{stalled}; back to the queue (retry {} of {})",
                requeues + 1,
                deadlines.max_requeues
            ),
        ),
        Scheduled | Preparing | Prepared | Creating => (
            Error,
            SchedulingResult::GiveUp,
            format!("{stalled}; gave up after {requeues} retries"),
        ),
        Terminating => (
            Terminated,
            SchedulingResult::Expired,
            format!("{stalled}; the agent did not confirm the stop, so it is taken as stopped"),
        ),
        _ => (Error, SchedulingResult::Expired, stalled),
    }
}

/// What one reconciliation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciled {
    pub agents_lost: usize,
    pub sessions_moved: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Command(#[from] CommandError),
}

impl From<tokio_postgres::Error> for ReconcileError {
    fn from(e: tokio_postgres::Error) -> Self {
        ReconcileError::Ledger(e.into())
    }
}

impl From<deadpool_postgres::PoolError> for ReconcileError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        ReconcileError::Ledger(e.into())
    }
}

fn metadata() -> events::Metadata {
    events::trace::metadata("reconciler", None)
}

/// A move the reconciler makes, and the history row that says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub to: SessionStatus,
    pub result: SchedulingResult,
    pub error_code: String,
    pub reason: String,
}

/// Moves `session_id` as `decide` says on its current state, recording a history row of
/// phase `reconcile`; nothing when `decide` says nothing (the session moved on meanwhile)
/// or the session has ended. Whether it moved.
async fn settle(
    pool: &Pool,
    session_id: Uuid,
    decide: impl Fn(&SessionState) -> Option<Move>,
) -> Result<bool, ReconcileError> {
    let mut target = None;
    let after = lifecycle::command(pool, session_id, &metadata(), |state| {
        target = None;
        if lifecycle::is_terminal(state.status) {
            return Ok(Vec::new());
        }
        let Some(m) = decide(state) else {
            return Ok(Vec::new());
        };
        let mut events = vec![Event::SchedulingAttempted(SchedulingAttempted {
            read: None,
            session_id,
            phase: "reconcile".into(),
            result: m.result,
            status_before: state.status,
            status_after: m.to,
            attempts: state.scheduling_attempts,
            message: m.reason.clone(),
            error_code: Some(m.error_code),
            steps: Vec::new(),
        })];
        events.extend(state.transition(m.to, Some(m.reason), None)?);
        target = Some(m.to);
        Ok(events)
    })
    .await?;
    Ok(target == Some(after.status))
}

/// How an agent came to hold its sessions no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// Marked gone in the ledger (`lost` set) by whoever: it departed on purpose, was
    /// revoked, or was lost in an earlier round. Only what never ran there is moved: what
    /// runs on an agent that departed keeps running, to be adopted when it returns.
    Away,
    /// Marked lost by this round for its silence: what ran there is gone with it.
    Lost,
}

/// What becomes of a session of `session_type` in `status` with a kernel on an agent that
/// is `gone` (`why`: the reason, in words), and the history row that says so; `None`: it is
/// left as it is. Pure.
///
/// - Its container never ran (SCHEDULED to CREATING): back to the queue, to be placed on
///   another agent.
/// - It ran, on an agent lost: an inference session goes back to the queue too (the seeds
///   promise it automatic recovery); any other ends in ERROR, and one being stopped is taken
///   as stopped (TERMINATED).
pub fn after_agent_gone(
    gone: Gone,
    why: &str,
    status: SessionStatus,
    session_type: SessionType,
) -> Option<Move> {
    use SessionStatus::*;
    let code = match gone {
        Gone::Away => "AGENT_GONE",
        Gone::Lost => "AGENT_LOST",
    };
    let (to, result, reason) = match (gone, status) {
        (_, s) if s.not_started() => (
            Pending,
            SchedulingResult::NeedRetry,
            format!("{why}; its container never ran (it was {s}): back to the queue, to be placed on another agent"),
        ),
        (Gone::Away, _) => return None,
        (Gone::Lost, Running | Restarting) if session_type == SessionType::Inference => (
            Pending,
            SchedulingResult::NeedRetry,
            format!("{why}; an inference session recovers by itself (it was {status}): back to the queue, to run again on another agent"),
        ),
        (Gone::Lost, Running | Restarting) => (Error, SchedulingResult::Failure, why.to_owned()),
        (Gone::Lost, Terminating) => (
            Terminated,
            SchedulingResult::Expired,
            format!("{why}; it was being stopped, so it is taken as stopped"),
        ),
        (Gone::Lost, _) => return None,
    };
    Some(Move {
        to,
        result,
        error_code: code.to_owned(),
        reason,
    })
}

/// Whether the reconciler may mark silent agents lost, its last failed round (PostgreSQL
/// away) having been at `last_failure`. Not until it has worked for a whole heartbeat
/// timeout since: what it would read of the agents' silence may be its own outage's, and
/// marking every agent lost at once would end every session. Pure.
pub fn may_mark_lost(
    last_failure: Option<tokio::time::Instant>,
    now: tokio::time::Instant,
    timeout: Duration,
) -> bool {
    last_failure.is_none_or(|failed| now.saturating_duration_since(failed) >= timeout)
}

/// Which of the `departed` agents are taken for lost, with the reason: those silent for
/// longer than `bound` since they were last heard (a departed agent that does not return
/// within it is not coming back; its running sessions would otherwise stay RUNNING for
/// ever). One whose silence cannot be told (no recorder listening long enough) is not.
/// Pure.
pub fn overdue_departures(departed: &[db::Departed], bound: Duration) -> Vec<(String, String)> {
    departed
        .iter()
        .filter_map(|d| {
            let silence = d.unheard_for.filter(|s| *s > bound)?;
            let words = d.lost.strip_prefix(DEPARTED).unwrap_or(&d.lost);
            let reason = format!(
                "agent `{}` lost: it departed ({words}) and has not returned; no heartbeat for {} s (the bound is {} s)",
                d.agent_id,
                silence.as_secs(),
                bound.as_secs()
            );
            Some((d.agent_id.clone(), reason))
        })
        .collect()
}

/// Marks `agent_id` lost for `reason` and moves its sessions on as [`Gone::Lost`] says;
/// how many moved.
async fn lose_agent(
    pool: &Pool,
    client: &impl deadpool_postgres::GenericClient,
    agent_id: &str,
    reason: &str,
    last_heard: Option<DateTime<Utc>>,
) -> Result<usize, ReconcileError> {
    let lost = Event::AgentLost(AgentLost {
        agent_id: agent_id.to_owned(),
        reason: reason.to_owned(),
        last_heard,
    });
    ledger::record_now(
        pool,
        &format!("agent-{agent_id}"),
        ExpectedVersion::Any,
        &[lost],
        &metadata(),
    )
    .await?;
    tracing::warn!(%agent_id, reason, "agent lost");
    let mut moved_count = 0;
    for session_id in db::sessions_on_agent(client, agent_id).await? {
        let moved = settle(pool, session_id, |state| {
            let session_type = state.request.session_type;
            state
                .placed_on(agent_id)
                .then(|| after_agent_gone(Gone::Lost, reason, state.status, session_type))
                .flatten()
        })
        .await?;
        moved_count += moved as usize;
    }
    Ok(moved_count)
}

/// One round: marks silent agents lost (moving their sessions on, [`after_agent_gone`]) when
/// `mark_lost`, places again what never ran on any agent gone, and moves overdue sessions
/// on.
pub async fn reconcile_once(
    pool: &Pool,
    deadlines: &Deadlines,
    mark_lost: bool,
) -> Result<Reconciled, ReconcileError> {
    let mut done = Reconciled::default();
    let client = pool.get().await?;
    let mut lost = Vec::new();
    if mark_lost {
        for silent in db::silent_agents(&client, deadlines.heartbeat).await? {
            let reason = format!(
                "agent `{}` lost: no heartbeat for {} s",
                silent.agent_id, silent.silent_secs
            );
            lost.push((silent.agent_id, reason, Some(silent.last_heard)));
        }
        let departed = db::departed_agents(&client, deadlines.departed).await?;
        let overdue = overdue_departures(&departed, deadlines.departed);
        lost.extend(overdue.into_iter().map(|(id, reason)| (id, reason, None)));
    }
    for (agent_id, reason, last_heard) in lost {
        done.sessions_moved += lose_agent(pool, &client, &agent_id, &reason, last_heard).await?;
        done.agents_lost += 1;
    }
    // What never ran on an agent gone, however it went (a departure is recorded by the
    // agent's own path, not here): placed again.
    for stranded in db::not_started_on_gone_agents(&client).await? {
        let why = format!("agent `{}` is gone ({})", stranded.agent_id, stranded.why);
        let moved = settle(pool, stranded.session_id, |state| {
            let session_type = state.request.session_type;
            state
                .placed_on(&stranded.agent_id)
                .then(|| after_agent_gone(Gone::Away, &why, state.status, session_type))
                .flatten()
        })
        .await?;
        done.sessions_moved += moved as usize;
    }
    let limits: Vec<(SessionStatus, Duration)> = IN_FLIGHT
        .iter()
        .map(|s| (*s, deadlines.of(*s).unwrap_or_default()))
        .collect();
    for late in db::overdue(&client, &limits).await? {
        let (to, result, reason) = overdue_move(late.status, late.waited, late.requeues, deadlines);
        let late_move = Move {
            to,
            result,
            error_code: format!("DEADLINE_{:?}", late.status).to_uppercase(),
            reason,
        };
        let moved = settle(pool, late.session_id, |state| {
            (state.status == late.status).then(|| late_move.clone())
        })
        .await?;
        done.sessions_moved += moved as usize;
    }
    Ok(done)
}

/// The statuses with a deadline.
const IN_FLIGHT: [SessionStatus; 7] = [
    SessionStatus::Scheduled,
    SessionStatus::Preparing,
    SessionStatus::Pulling,
    SessionStatus::Prepared,
    SessionStatus::Creating,
    SessionStatus::Restarting,
    SessionStatus::Terminating,
];

/// Reconciles every `every` until `stop`.
pub async fn run(
    pool: Pool,
    deadlines: Deadlines,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut outage = events::fault::Outage::default();
    let mut last_failure = None;
    while !stop.is_cancelled() {
        let now = tokio::time::Instant::now();
        let mark_lost = may_mark_lost(last_failure, now, deadlines.heartbeat);
        match reconcile_once(&pool, &deadlines, mark_lost).await {
            Ok(r) => {
                outage.passed("reconciler");
                if r != Reconciled::default() {
                    tracing::info!(?r, "reconciled");
                }
            }
            Err(e) => {
                outage.failed("reconciler", &e);
                last_failure = Some(now);
            }
        }
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionStatus::*;

    #[test]
    fn after_its_own_outage_the_reconciler_waits_a_whole_timeout_before_marking_agents_lost() {
        let timeout = Duration::from_secs(30);
        let now = tokio::time::Instant::now();
        assert!(may_mark_lost(None, now, timeout));
        let failed = now - Duration::from_secs(10);
        assert!(!may_mark_lost(Some(failed), now, timeout));
        assert!(may_mark_lost(
            Some(failed),
            now + Duration::from_secs(20),
            timeout
        ));
    }

    #[test]
    fn stalled_placements_are_retried_a_bounded_number_of_times_then_error() {
        let d = Deadlines::default();
        let (to, result, reason) = overdue_move(Scheduled, Duration::from_secs(61), 0, &d);
        assert_eq!((to, result), (Pending, SchedulingResult::Expired));
        assert!(reason.contains("retry 1 of 3"), "{reason}");
        assert!(reason.contains("61 s"), "{reason}");
        let (to, result, reason) = overdue_move(Creating, Duration::from_secs(601), 3, &d);
        assert_eq!((to, result), (Error, SchedulingResult::GiveUp));
        assert!(reason.contains("gave up after 3 retries"), "{reason}");
    }

    #[test]
    fn an_overdue_pull_or_restart_errors_and_an_overdue_stop_terminates() {
        let d = Deadlines::default();
        assert_eq!(
            overdue_move(Pulling, Duration::from_secs(901), 0, &d).0,
            Error
        );
        assert_eq!(
            overdue_move(Restarting, Duration::from_secs(301), 0, &d).0,
            Error
        );
        assert_eq!(
            overdue_move(Terminating, Duration::from_secs(61), 0, &d).0,
            Terminated
        );
    }

    #[test]
    fn what_never_ran_on_an_agent_gone_goes_back_to_the_queue_however_it_went() {
        for gone in [Gone::Away, Gone::Lost] {
            for status in SessionStatus::NOT_STARTED {
                for kind in [
                    SessionType::Batch,
                    SessionType::Interactive,
                    SessionType::Inference,
                ] {
                    let m = after_agent_gone(gone, "agent `a1` lost", status, kind).unwrap();
                    assert_eq!(
                        (m.to, m.result),
                        (Pending, SchedulingResult::NeedRetry),
                        "{gone:?} {status} {kind:?}"
                    );
                    assert!(m
                        .reason
                        .starts_with("agent `a1` lost; its container never ran"));
                    assert!(
                        m.reason.contains(&format!("(it was {status})")),
                        "{}",
                        m.reason
                    );
                    assert!(
                        events::lifecycle::can_move(kind, status, m.to),
                        "the lifecycle allows {status} -> {}",
                        m.to
                    );
                }
            }
        }
        assert_eq!(
            after_agent_gone(Gone::Lost, "x", Scheduled, SessionType::Batch)
                .unwrap()
                .error_code,
            "AGENT_LOST"
        );
        assert_eq!(
            after_agent_gone(Gone::Away, "x", Scheduled, SessionType::Batch)
                .unwrap()
                .error_code,
            "AGENT_GONE"
        );
    }

    #[test]
    fn what_ran_on_an_agent_lost_ends_except_inference_which_runs_again() {
        let why = "agent `a1` lost: no heartbeat for 31 s";
        for status in [Running, Restarting] {
            let m = after_agent_gone(Gone::Lost, why, status, SessionType::Batch).unwrap();
            assert_eq!((m.to, m.result), (Error, SchedulingResult::Failure));
            assert_eq!(m.reason, why, "the reason as it is");
            let m = after_agent_gone(Gone::Lost, why, status, SessionType::Inference).unwrap();
            assert_eq!(m.to, Pending, "{status}");
            assert!(
                m.reason.contains("inference session recovers"),
                "{}",
                m.reason
            );
            assert!(events::lifecycle::can_move(
                SessionType::Inference,
                status,
                Pending
            ));
        }
        let m = after_agent_gone(Gone::Lost, why, Terminating, SessionType::Inference).unwrap();
        assert_eq!(m.to, Terminated, "asked to stop: taken as stopped");
        for status in [Pending, Terminated, Error, Cancelled] {
            assert_eq!(
                after_agent_gone(Gone::Lost, why, status, SessionType::Batch),
                None
            );
        }
    }

    #[test]
    fn what_runs_on_an_agent_that_departed_keeps_running() {
        for status in [Running, Restarting, Terminating] {
            for kind in [SessionType::Batch, SessionType::Inference] {
                assert_eq!(
                    after_agent_gone(Gone::Away, "agent `a1` departed", status, kind),
                    None,
                    "{status} {kind:?}"
                );
            }
        }
    }

    fn departed(agent_id: &str, unheard_for: Option<u64>) -> db::Departed {
        db::Departed {
            agent_id: agent_id.into(),
            lost: format!("{DEPARTED}stopped by SIGTERM"),
            unheard_for: unheard_for.map(Duration::from_secs),
        }
    }

    #[test]
    fn a_departed_agent_silent_past_the_bound_is_taken_for_lost_and_no_other() {
        let bound = Duration::from_secs(600);
        let agents = [
            departed("a1-back-soon", Some(30)),
            departed("a2-at-the-bound", Some(600)),
            departed("a3-gone", Some(601)),
            departed("a4-untold", None),
        ];
        let lost = overdue_departures(&agents, bound);
        assert_eq!(lost.len(), 1, "{lost:?}");
        let (agent_id, reason) = &lost[0];
        assert_eq!(agent_id, "a3-gone");
        assert_eq!(
            reason,
            "agent `a3-gone` lost: it departed (stopped by SIGTERM) and has not returned; \
             no heartbeat for 601 s (the bound is 600 s)"
        );
        // What ran there then goes as on any agent lost: it ends, naming the loss.
        let m = after_agent_gone(Gone::Lost, reason, Running, SessionType::Batch).unwrap();
        assert_eq!((m.to, &m.reason), (Error, reason));
        assert_eq!(
            after_agent_gone(Gone::Lost, reason, Running, SessionType::Inference)
                .unwrap()
                .to,
            Pending
        );
        assert!(overdue_departures(&[], bound).is_empty());
    }

    #[test]
    fn every_intermediate_status_has_a_deadline_and_no_other_does() {
        let d = Deadlines::default();
        for s in [
            Scheduled,
            Preparing,
            Pulling,
            Prepared,
            Creating,
            Restarting,
            Terminating,
        ] {
            assert!(d.of(s).is_some(), "{s:?}");
        }
        for s in [Pending, Running, Terminated, Error, Cancelled] {
            assert!(d.of(s).is_none(), "{s:?}");
        }
    }
}
