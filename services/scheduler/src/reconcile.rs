//! Nothing stays stuck: every intermediate status has a deadline, and an agent that stops
//! heartbeating is marked lost. An overdue placement goes back to the queue (a bounded
//! number of times) or ends in ERROR with the reason; an overdue stop ends TERMINATED;
//! sessions on a lost agent end in ERROR. Every path goes through the session's lifecycle
//! rules, so what the session held is released exactly once.

use std::time::Duration;

use deadpool_postgres::Pool;
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

/// Moves `session_id` to `to` with `reason`, recording a history row of `phase`; a session
/// that moved on meanwhile is left alone.
async fn settle(
    pool: &Pool,
    session_id: Uuid,
    expect: Option<SessionStatus>,
    to: SessionStatus,
    result: SchedulingResult,
    reason: &str,
) -> Result<bool, ReconcileError> {
    let after = lifecycle::command(pool, session_id, &metadata(), |state| {
        if expect.is_some_and(|s| s != state.status) || lifecycle::is_terminal(state.status) {
            return Ok(Vec::new());
        }
        let mut events = vec![Event::SchedulingAttempted(SchedulingAttempted {
            session_id,
            phase: "reconcile".into(),
            result,
            status_before: state.status,
            status_after: to,
            attempts: state.scheduling_attempts,
            message: reason.to_owned(),
            error_code: Some(format!("DEADLINE_{:?}", state.status).to_uppercase()),
            steps: Vec::new(),
        })];
        events.extend(state.transition(to, Some(reason.to_owned()), None)?);
        Ok(events)
    })
    .await?;
    Ok(after.status == to)
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

/// One round: marks silent agents lost (ending their sessions) when `mark_lost`, and moves
/// overdue sessions on.
pub async fn reconcile_once(
    pool: &Pool,
    deadlines: &Deadlines,
    mark_lost: bool,
) -> Result<Reconciled, ReconcileError> {
    let mut done = Reconciled::default();
    let client = pool.get().await?;
    let silent = if mark_lost {
        db::silent_agents(&client, deadlines.heartbeat).await?
    } else {
        Vec::new()
    };
    for (agent_id, silence) in silent {
        let reason = format!("agent `{agent_id}` lost: no heartbeat for {silence} s");
        let lost = Event::AgentLost(AgentLost {
            agent_id: agent_id.clone(),
            reason: reason.clone(),
        });
        ledger::record_now(
            pool,
            &format!("agent-{agent_id}"),
            ExpectedVersion::Any,
            &[lost],
            &metadata(),
        )
        .await?;
        done.agents_lost += 1;
        tracing::warn!(%agent_id, silence, "agent lost");
        let on_it = db::sessions_on_agent(&client, &agent_id).await?;
        for session_id in on_it {
            let moved = settle(
                pool,
                session_id,
                None,
                SessionStatus::Error,
                SchedulingResult::Failure,
                &reason,
            )
            .await?;
            done.sessions_moved += moved as usize;
        }
    }
    let limits: Vec<(SessionStatus, Duration)> = IN_FLIGHT
        .iter()
        .map(|s| (*s, deadlines.of(*s).unwrap_or_default()))
        .collect();
    for late in db::overdue(&client, &limits).await? {
        let (to, result, reason) = overdue_move(late.status, late.waited, late.requeues, deadlines);
        let moved = settle(
            pool,
            late.session_id,
            Some(late.status),
            to,
            result,
            &reason,
        )
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
