//! The session's life: which status may follow which, and the events a command on a session
//! turns into (state + command -> events). Pure: `events::lifecycle::command` records them.
//! Every service that moves a session goes through here, so a forbidden move is refused the
//! same way everywhere and what a session holds is given back exactly once.

use crate::aggregate::SessionState;
use crate::catalogue::Event;
use crate::idleness::{reap_reason, IdleReading};
use crate::payloads::{
    AppStartEnd, AppStartEnded, AppStartOutcome, AppStartRequested, CommitOutcome, CommitStep,
    KernelStarted, SessionCommitEnded, SessionCommitProgressed, SessionCommitRequested,
    SessionIdleExempted, SessionIdleReaped, SessionPriority, SessionPriorityChanged,
    SessionPullProgressed, SessionRenamed, SessionResourcesReleased, SessionStatus,
    SessionStatusChanged, SessionTerminationRequested, SessionType,
};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use SessionStatus::*;

/// Why a command on a session was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("a session cannot go from {from:?} to {to:?}")]
    Forbidden {
        from: SessionStatus,
        to: SessionStatus,
    },
    #[error("a move to {0:?} needs a reason a person can read")]
    ReasonRequired(SessionStatus),
    #[error("the session has already ended ({0:?})")]
    Ended(SessionStatus),
    #[error("the session is being committed to an image; wait for the commit, or force-terminate it (the commit then fails)")]
    Committing,
    #[error("{0}")]
    NotCommittable(String),
    #[error("commit {0} is not in progress")]
    NoSuchCommit(Uuid),
    #[error("apps start only while the session is RUNNING; this one is {0}")]
    NotRunning(&'static str),
    #[error(
        "a priority changes only while the session waits in the queue (PENDING); this one is {0:?}"
    )]
    NotQueued(SessionStatus),
    #[error("priority {0} is out of bounds: {min}..={max}", min = SessionPriority::MIN, max = SessionPriority::MAX)]
    PriorityOutOfBounds(i32),
}

/// Statuses a session never leaves (the set is [`SessionStatus::TERMINAL`]).
pub fn is_terminal(status: SessionStatus) -> bool {
    status.is_terminal()
}

/// Statuses in which a session holds resources on an agent
/// ([`SessionStatus::HOLDING_RESOURCES`]).
pub fn holds_resources(status: SessionStatus) -> bool {
    status.holds_resources()
}

/// Statuses whose arrival must say why.
pub fn needs_reason(status: SessionStatus) -> bool {
    matches!(status, Pending | Cancelled | Error | Terminated)
}

/// Whether a session of `session_type` may move from `from` to `to`.
///
/// The happy path is PENDING, SCHEDULED, PREPARING, (PULLING,) PREPARED, CREATING, RUNNING,
/// TERMINATING, TERMINATED. Before it runs, a session may go back to PENDING (the reconciler
/// retries a placement that stalled, or one whose agent went away). Any live status may end
/// in ERROR; a session not yet placed is CANCELLED, a placed one is TERMINATED (directly when
/// forced). Only inference sessions restart, and only they go back to PENDING once they ran:
/// the seeds promise them automatic recovery, so one whose agent was lost is placed again.
/// A batch session ends by itself when its command exits.
pub fn can_move(session_type: SessionType, from: SessionStatus, to: SessionStatus) -> bool {
    if is_terminal(from) || from == to {
        return false;
    }
    if to == Error {
        return true;
    }
    match (from, to) {
        (Pending, Scheduled | Cancelled) => true,
        (Scheduled, Preparing) => true,
        (Preparing, Pulling | Prepared) => true,
        (Pulling, Prepared) => true,
        (Prepared, Creating) => true,
        (Creating, Running) => true,
        (Scheduled | Preparing | Pulling | Prepared | Creating, Pending) => true,
        (Running | Restarting, Pending) => session_type == SessionType::Inference,
        (Running, Restarting) => session_type == SessionType::Inference,
        (Restarting, Running) => session_type == SessionType::Inference,
        (Running, Terminated) => true,
        (Restarting, Terminated) => true,
        (_, Terminating) => holds_resources(from) && from != Terminating,
        (Terminating, Terminated) => true,
        // Force-termination of anything placed.
        (_, Terminated) => holds_resources(from),
        _ => false,
    }
}

impl SessionState {
    /// The events that move this session through `statuses` in order, each move checked on
    /// the state the moves before it left: all of them, or the first refusal. No move may
    /// need a reason.
    pub fn transition_through(
        &self,
        statuses: &[SessionStatus],
    ) -> Result<Vec<Event>, TransitionError> {
        let mut now = self.clone();
        let mut events = Vec::new();
        for &to in statuses {
            let moved = now.transition(to, None, None)?;
            for e in &moved {
                now = now.evolve(e);
            }
            events.extend(moved);
        }
        Ok(events)
    }

    /// The events of kernels reported started: a `KernelStarted` for each one not recorded
    /// yet, and the move to RUNNING when that completes the set while the session is
    /// CREATING. Multi-node readiness is decided here, not by an agent watching the log.
    /// Kernels start only while the session is CREATING or later and has not ended.
    pub fn start_kernels(&self, started: &[KernelStarted]) -> Result<Vec<Event>, TransitionError> {
        if is_terminal(self.status) {
            return Err(TransitionError::Ended(self.status));
        }
        if !matches!(self.status, Creating | Running | Restarting | Terminating) {
            return Err(TransitionError::Forbidden {
                from: self.status,
                to: Running,
            });
        }
        let mut events = Vec::new();
        let mut now_started = self.kernels_started.clone();
        for kernel in started {
            if let Err(at) = now_started.binary_search(&kernel.kernel) {
                now_started.insert(at, kernel.kernel);
                events.push(Event::KernelStarted(kernel.clone()));
            }
        }
        let size = self.request.cluster_size.max(1);
        let all = (0..size).all(|k| now_started.binary_search(&k).is_ok());
        if all && self.status == Creating && !events.is_empty() {
            // It runs from when the last of its containers reported now started.
            let at = started.iter().filter_map(|k| k.started_at).max();
            events.extend(self.transition_at(Running, None, None, at)?);
        }
        Ok(events)
    }

    /// The events that move this session to `to`, giving back what it holds when it leaves
    /// its agent (back to the queue or to an end).
    pub fn transition(
        &self,
        to: SessionStatus,
        reason: Option<String>,
        exit_code: Option<i32>,
    ) -> Result<Vec<Event>, TransitionError> {
        self.transition_at(to, reason, exit_code, None)
    }

    /// [`Self::transition`], for a move that happened at `occurred_at` by the clock of the
    /// agent's host (a container's end an agent reports), not as it is recorded.
    pub fn transition_at(
        &self,
        to: SessionStatus,
        reason: Option<String>,
        exit_code: Option<i32>,
        occurred_at: Option<DateTime<Utc>>,
    ) -> Result<Vec<Event>, TransitionError> {
        if is_terminal(self.status) {
            return Err(TransitionError::Ended(self.status));
        }
        if !can_move(self.request.session_type, self.status, to) {
            return Err(TransitionError::Forbidden {
                from: self.status,
                to,
            });
        }
        let mut reason = reason.filter(|r| !r.trim().is_empty());
        // A session asked to stop ends for the reason it was asked (who terminated it, or
        // which idle checker reaped it); how its container stopped follows.
        if self.status == Terminating && is_terminal(to) {
            if let Some(why) = self.status_reason.as_deref() {
                reason = Some(match reason {
                    Some(how) if how != why => format!("{why} ({how})"),
                    _ => why.to_owned(),
                });
            }
        }
        if needs_reason(to) && reason.is_none() {
            return Err(TransitionError::ReasonRequired(to));
        }
        let session_id = self.request.session_id;
        let mut events = Vec::new();
        // A session that ends, or leaves RUNNING, while committing takes its commit with it.
        if to != Running {
            if let Some(commit) = &self.commit {
                let why = reason.as_deref().unwrap_or(to.as_str());
                events.push(self.commit_failed(commit, format!("the session left RUNNING: {why}")));
            }
        }
        events.push(Event::SessionStatusChanged(SessionStatusChanged {
            session_id,
            from: self.status,
            to,
            reason,
            exit_code,
            occurred_at,
        }));
        if !holds_resources(to) {
            if let Some(release) = self.release() {
                events.push(release);
            }
        }
        Ok(events)
    }

    /// The release of what the session holds, when it holds anything.
    fn release(&self) -> Option<Event> {
        let resources = self.reserved?;
        Some(Event::SessionResourcesReleased(SessionResourcesReleased {
            session_id: self.request.session_id,
            agent_id: self.agent_id.clone().unwrap_or_default(),
            resources,
            kernels: self.kernels.clone(),
        }))
    }

    /// What terminating the session means in its status: a queued session is cancelled, a
    /// placed one is asked to stop (TERMINATING; its agent finishes it), and a forced one
    /// ends at once.
    pub fn terminate(&self, forced: bool, reason: String) -> Result<Vec<Event>, TransitionError> {
        if is_terminal(self.status) {
            return Err(TransitionError::Ended(self.status));
        }
        if self.commit.is_some() && !forced {
            return Err(TransitionError::Committing);
        }
        let session_id = self.request.session_id;
        let requested = Event::SessionTerminationRequested(SessionTerminationRequested {
            session_id,
            forced,
            reason: reason.clone(),
        });
        let mut events = vec![requested];
        let to = match (self.status, forced) {
            (Pending, _) => Cancelled,
            (_, true) => Terminated,
            (Terminating, false) => return Ok(events),
            (_, false) => Terminating,
        };
        events.extend(self.transition(to, Some(reason), None)?);
        Ok(events)
    }

    /// The idle-reaper's verdict carried out: why (the reading) and the termination, as a
    /// user's would be. Nothing when the session was exempted or is already being
    /// terminated; refused once it has ended.
    pub fn reap(&self, reading: IdleReading) -> Result<Vec<Event>, TransitionError> {
        if is_terminal(self.status) {
            return Err(TransitionError::Ended(self.status));
        }
        // A session being committed is left alone: still idle after the commit, it is reaped.
        if self.idle_exempt || self.termination_requested || self.commit.is_some() {
            return Ok(Vec::new());
        }
        let reason = reap_reason(&reading);
        let mut events = vec![Event::SessionIdleReaped(SessionIdleReaped {
            session_id: self.request.session_id,
            reading,
        })];
        events.extend(self.terminate(false, reason)?);
        Ok(events)
    }

    /// Asks for the session's main container to be committed to `image`: only a RUNNING
    /// interactive session, one commit at a time.
    pub fn request_commit(
        &self,
        commit_id: Uuid,
        name: String,
        image: String,
    ) -> Result<Vec<Event>, TransitionError> {
        if is_terminal(self.status) {
            return Err(TransitionError::Ended(self.status));
        }
        if self.commit.is_some() {
            return Err(TransitionError::Committing);
        }
        if self.request.session_type != SessionType::Interactive {
            return Err(TransitionError::NotCommittable(
                "only an interactive session can be committed to an image".into(),
            ));
        }
        if self.status != Running || self.termination_requested {
            return Err(TransitionError::NotCommittable(format!(
                "only a RUNNING session can be committed; this one is {}",
                self.status.as_str()
            )));
        }
        Ok(vec![Event::SessionCommitRequested(
            SessionCommitRequested {
                session_id: self.request.session_id,
                commit_id,
                owner: self.request.owner.user_id,
                name,
                image,
                agent_id: self.agent_id.clone(),
            },
        )])
    }

    /// Fails commit `commit_id` for `reason` (its agent never reported its end); nothing
    /// once that commit is over.
    pub fn fail_commit(
        &self,
        commit_id: Uuid,
        reason: String,
    ) -> Result<Vec<Event>, TransitionError> {
        match self.commit.as_ref().filter(|c| c.commit_id == commit_id) {
            Some(commit) => Ok(vec![self.commit_failed(commit, reason)]),
            None => Ok(Vec::new()),
        }
    }

    /// A step of commit `commit_id`; nothing once that commit is over (a late report).
    pub fn commit_progressed(
        &self,
        commit_id: Uuid,
        step: CommitStep,
        detail: String,
    ) -> Result<Vec<Event>, TransitionError> {
        if self
            .commit
            .as_ref()
            .is_none_or(|c| c.commit_id != commit_id)
        {
            return Ok(Vec::new());
        }
        Ok(vec![Event::SessionCommitProgressed(
            SessionCommitProgressed {
                session_id: self.request.session_id,
                commit_id,
                step,
                detail,
            },
        )])
    }

    /// Commit `commit_id` ended, done on `agent_id` or failed. Refused when that commit is
    /// not in progress (it failed when the session ended): the agent then removes what it
    /// made.
    pub fn end_commit(
        &self,
        commit_id: Uuid,
        agent_id: &str,
        outcome: CommitOutcome,
    ) -> Result<Vec<Event>, TransitionError> {
        let Some(commit) = self.commit.as_ref().filter(|c| c.commit_id == commit_id) else {
            return Err(TransitionError::NoSuchCommit(commit_id));
        };
        Ok(vec![Event::SessionCommitEnded(SessionCommitEnded {
            session_id: self.request.session_id,
            commit_id,
            owner: commit.owner,
            image: commit.image.clone(),
            agent_id: Some(agent_id.to_owned()),
            outcome,
        })])
    }

    fn commit_failed(&self, commit: &SessionCommitRequested, reason: String) -> Event {
        Event::SessionCommitEnded(SessionCommitEnded {
            session_id: self.request.session_id,
            commit_id: commit.commit_id,
            owner: commit.owner,
            image: commit.image.clone(),
            agent_id: self.agent_id.clone(),
            outcome: CommitOutcome::Failed { reason },
        })
    }

    /// Asks for `app`, serving on container `port`, to be started in the main kernel: only
    /// while the session runs and nobody asked it to stop.
    pub fn request_app_start(
        &self,
        start_id: Uuid,
        app: String,
        port: u16,
        by: Uuid,
    ) -> Result<Vec<Event>, TransitionError> {
        if is_terminal(self.status) {
            return Err(TransitionError::Ended(self.status));
        }
        if self.status != Running || self.termination_requested {
            let status = if self.termination_requested {
                "stopping"
            } else {
                self.status.as_str()
            };
            return Err(TransitionError::NotRunning(status));
        }
        Ok(vec![Event::AppStartRequested(AppStartRequested {
            session_id: self.request.session_id,
            start_id,
            app,
            port,
            by,
        })])
    }

    /// How start `start_id` of `app` ended, as the main agent reports it; nothing once the
    /// session no longer runs (a late report).
    pub fn end_app_start(
        &self,
        start_id: Uuid,
        app: String,
        outcome: AppStartOutcome,
    ) -> Result<Vec<Event>, TransitionError> {
        if self.status != Running {
            return Ok(Vec::new());
        }
        Ok(vec![Event::AppStartEnded(AppStartEnded {
            session_id: self.request.session_id,
            start_id,
            app,
            // The app's secret stays out of the log (the recorder keeps it apart).
            outcome: AppStartEnd::from(&outcome),
        })])
    }

    /// How far the pull of the session's image has come, as its agent reports it; nothing
    /// unless the session is PULLING (a late report).
    pub fn pull_progressed(
        &self,
        image: String,
        current_bytes: u64,
        total_bytes: u64,
        layers_done: u32,
        layers: u32,
    ) -> Result<Vec<Event>, TransitionError> {
        if self.status != Pulling {
            return Ok(Vec::new());
        }
        Ok(vec![Event::SessionPullProgressed(SessionPullProgressed {
            session_id: self.request.session_id,
            image,
            current_bytes,
            total_bytes,
            layers_done,
            layers,
        })])
    }

    /// Exempts the session from the idle checks (once; again is nothing).
    pub fn exempt_from_idleness(
        &self,
        by: Uuid,
        reason: String,
    ) -> Result<Vec<Event>, TransitionError> {
        if is_terminal(self.status) {
            return Err(TransitionError::Ended(self.status));
        }
        if self.idle_exempt {
            return Ok(Vec::new());
        }
        Ok(vec![Event::SessionIdleExempted(SessionIdleExempted {
            session_id: self.request.session_id,
            by,
            reason,
        })])
    }

    /// A new priority for a session waiting in the queue (an admin's change; within
    /// [`SessionPriority`]'s bounds, whatever the owner's policy allows them to ask for).
    /// The same priority again is nothing.
    pub fn change_priority(&self, to: i32) -> Result<Vec<Event>, TransitionError> {
        if !(SessionPriority::MIN..=SessionPriority::MAX).contains(&to) {
            return Err(TransitionError::PriorityOutOfBounds(to));
        }
        if self.status != SessionStatus::Pending {
            return Err(TransitionError::NotQueued(self.status));
        }
        if self.request.priority == to {
            return Ok(Vec::new());
        }
        Ok(vec![Event::SessionPriorityChanged(
            SessionPriorityChanged {
                session_id: self.request.session_id,
                from: self.request.priority,
                to,
            },
        )])
    }

    /// A new name (the caller has checked the name's rules).
    pub fn rename(&self, new_name: String) -> Result<Event, TransitionError> {
        if is_terminal(self.status) {
            return Err(TransitionError::Ended(self.status));
        }
        Ok(Event::SessionRenamed(SessionRenamed {
            session_id: self.request.session_id,
            old_name: self.name.clone(),
            new_name,
        }))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::payloads::*;

    const ALL: [SessionStatus; 12] = SessionStatus::ALL;

    /// A request of `session_type` with small resources: the other modules' tests start
    /// from it too.
    pub(crate) fn request(session_type: SessionType) -> SessionRequested {
        SessionRequested {
            session_type,
            ..crate::fixtures::session_requested()
        }
    }

    fn placed(session_type: SessionType) -> SessionState {
        let r = request(session_type);
        let scheduled = Event::SessionScheduled(SessionScheduled {
            session_id: r.session_id,
            agent_id: "a1".into(),
            resources: r.resources,
            kernels: vec![KernelPlacement {
                agent_id: "a1".into(),
                resources: r.resources,
            }],
        });
        let moved = Event::SessionStatusChanged(SessionStatusChanged {
            session_id: r.session_id,
            from: Pending,
            to: Scheduled,
            reason: None,
            exit_code: None,
            occurred_at: None,
        });
        apply(SessionState::requested(&r), &[scheduled, moved])
    }

    /// A session of `session_type` placed and RUNNING.
    fn running_session(session_type: SessionType) -> SessionState {
        let moved = Event::SessionStatusChanged(SessionStatusChanged {
            session_id: uuid::Uuid::nil(),
            from: Scheduled,
            to: Running,
            reason: None,
            exit_code: None,
            occurred_at: None,
        });
        apply(placed(session_type), &[moved])
    }

    fn apply(mut state: SessionState, events: &[Event]) -> SessionState {
        for e in events {
            state = state.evolve(e);
        }
        state
    }

    fn kernel(session: &SessionState, k: u32, agent: &str) -> KernelStarted {
        KernelStarted {
            session_id: session.request.session_id,
            kernel: k,
            agent_id: agent.into(),
            container_id: format!("c{k}"),
            ports: vec![],
            hostname: None,
            address: None,
            started_at: None,
        }
    }

    fn creating(size: u32) -> SessionState {
        let mut state = placed(SessionType::Batch);
        state.request.cluster_size = size;
        for (from, to) in [
            (Scheduled, Preparing),
            (Preparing, Prepared),
            (Prepared, Creating),
        ] {
            state = apply(state.clone(), &state.transition(to, None, None).unwrap());
            assert_eq!(state.status, to, "from {from:?}");
        }
        state
    }

    #[test]
    fn a_pulls_progress_is_recorded_only_while_the_session_pulls() {
        let mut state = placed(SessionType::Batch);
        let progress = |state: &SessionState| {
            state
                .pull_progressed("busybox".into(), 10, 100, 1, 3)
                .unwrap()
        };
        assert!(progress(&state).is_empty(), "not pulling yet");
        for to in [Preparing, Pulling] {
            state = apply(state.clone(), &state.transition(to, None, None).unwrap());
        }
        let recorded = progress(&state);
        assert_eq!(
            recorded,
            [Event::SessionPullProgressed(SessionPullProgressed {
                session_id: state.request.session_id,
                image: "busybox".into(),
                current_bytes: 10,
                total_bytes: 100,
                layers_done: 1,
                layers: 3,
            })]
        );
        let state = apply(state, &recorded);
        assert_eq!(state.status, Pulling, "progress moves nothing");
        let state = apply(
            state.clone(),
            &state.transition(Prepared, None, None).unwrap(),
        );
        assert!(progress(&state).is_empty(), "a late report records nothing");
    }

    #[test]
    fn a_cluster_runs_once_its_last_kernel_started_and_repeats_record_nothing() {
        let state = creating(3);
        let first = state.start_kernels(&[kernel(&state, 0, "a1")]).unwrap();
        assert_eq!(first.len(), 1, "kernel 0 recorded, not running yet");
        let state = apply(state, &first);
        assert_eq!(state.kernels_started, vec![0]);
        // A report sent again records nothing.
        assert!(state
            .start_kernels(&[kernel(&state, 0, "a1")])
            .unwrap()
            .is_empty());
        let last = state
            .start_kernels(&[kernel(&state, 2, "a2"), kernel(&state, 1, "a2")])
            .unwrap();
        let state = apply(state, &last);
        assert_eq!(state.status, Running);
        assert_eq!(state.kernels_started, vec![0, 1, 2]);
        assert!(matches!(last.last(), Some(Event::SessionStatusChanged(c)) if c.to == Running));
    }

    #[test]
    fn a_session_runs_and_ends_at_its_containers_times_where_they_are_reported() {
        let at = |s: i64| DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap();
        let state = creating(2);
        let (mut k0, mut k1) = (kernel(&state, 0, "a1"), kernel(&state, 1, "a2"));
        k0.started_at = Some(at(1));
        k1.started_at = Some(at(3));
        let events = state.start_kernels(&[k0, k1]).unwrap();
        let running = |events: &[Event]| match events.last() {
            Some(Event::SessionStatusChanged(c)) if c.to == Running => c.occurred_at,
            other => panic!("expected the move to RUNNING, got {other:?}"),
        };
        // It runs once its last container started.
        assert_eq!(running(&events), Some(at(3)));
        let state = apply(state, &events);
        let ended = state
            .transition_at(Terminated, Some("exit 0".into()), Some(0), Some(at(5)))
            .unwrap();
        assert!(
            matches!(&ended[0], Event::SessionStatusChanged(c) if c.occurred_at == Some(at(5)))
        );
        // Kernels reported without a time (older agents): the move's time is its record's.
        let state = creating(1);
        let events = state.start_kernels(&[kernel(&state, 0, "a1")]).unwrap();
        assert_eq!(running(&events), None);
    }

    #[test]
    fn moves_through_several_statuses_are_all_or_none() {
        let state = placed(SessionType::Batch);
        let events = state
            .transition_through(&[Preparing, Prepared, Creating])
            .unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(apply(state.clone(), &events).status, Creating);
        // PREPARED may follow PREPARING; RUNNING may not follow PREPARED: nothing.
        assert_eq!(
            state.transition_through(&[Preparing, Prepared, Running]),
            Err(TransitionError::Forbidden {
                from: Prepared,
                to: Running
            })
        );
        assert!(state.transition_through(&[]).unwrap().is_empty());
    }

    #[test]
    fn a_single_kernel_runs_at_once_and_kernels_start_only_while_creating_or_later() {
        let state = creating(1);
        let events = state.start_kernels(&[kernel(&state, 0, "a1")]).unwrap();
        assert_eq!(apply(state, &events).status, Running);
        let early = placed(SessionType::Batch);
        assert!(early.start_kernels(&[kernel(&early, 0, "a1")]).is_err());
        let ended = apply(
            early.clone(),
            &early.transition(Error, Some("x".into()), None).unwrap(),
        );
        assert_eq!(
            ended.start_kernels(&[kernel(&ended, 0, "a1")]),
            Err(TransitionError::Ended(Error))
        );
    }

    #[test]
    fn the_happy_path_is_allowed_step_by_step() {
        let path = [
            Pending,
            Scheduled,
            Preparing,
            Pulling,
            Prepared,
            Creating,
            Running,
            Terminating,
            Terminated,
        ];
        for pair in path.windows(2) {
            assert!(
                can_move(SessionType::Interactive, pair[0], pair[1]),
                "{pair:?}"
            );
        }
        assert!(can_move(SessionType::Batch, Preparing, Prepared), "no pull");
    }

    #[test]
    fn the_full_table_of_moves() {
        use SessionType::*;
        // Written out by hand from the seeds' life cycle, not computed: every move an
        // interactive or batch session may make, from each status.
        let table: [(SessionStatus, &[SessionStatus]); 12] = [
            (Pending, &[Scheduled, Cancelled, Error]),
            (
                Scheduled,
                &[Preparing, Pending, Terminating, Terminated, Error],
            ),
            (
                Preparing,
                &[Pulling, Prepared, Pending, Terminating, Terminated, Error],
            ),
            (
                Pulling,
                &[Prepared, Pending, Terminating, Terminated, Error],
            ),
            (
                Prepared,
                &[Creating, Pending, Terminating, Terminated, Error],
            ),
            (
                Creating,
                &[Running, Pending, Terminating, Terminated, Error],
            ),
            (Running, &[Terminating, Terminated, Error]),
            (Restarting, &[Terminating, Terminated, Error]),
            (Terminating, &[Terminated, Error]),
            (Terminated, &[]),
            (Error, &[]),
            (Cancelled, &[]),
        ];
        // Inference sessions may also restart and come back, and go back to the queue once
        // they ran (their agent was lost: they are placed again).
        let inference_only = [
            (Running, Restarting),
            (Restarting, Running),
            (Running, Pending),
            (Restarting, Pending),
        ];
        for (from, allowed) in table {
            for to in ALL {
                let expected = allowed.contains(&to);
                for t in [Interactive, Batch, System] {
                    assert_eq!(can_move(t, from, to), expected, "{t:?}: {from:?} -> {to:?}");
                }
                let inference = expected || inference_only.contains(&(from, to));
                assert_eq!(
                    can_move(Inference, from, to),
                    inference,
                    "Inference: {from:?} -> {to:?}"
                );
            }
        }
    }

    #[test]
    fn ends_and_requeues_need_a_reason() {
        let s = placed(SessionType::Interactive);
        assert_eq!(
            s.transition(Error, None, None),
            Err(TransitionError::ReasonRequired(Error))
        );
        assert_eq!(
            s.transition(Pending, Some("  ".into()), None),
            Err(TransitionError::ReasonRequired(Pending))
        );
        assert!(s.transition(Preparing, None, None).is_ok());
    }

    #[test]
    fn what_a_session_holds_is_released_exactly_once() {
        let s = placed(SessionType::Batch);
        let events = s
            .transition(Error, Some("agent lost".into()), None)
            .unwrap();
        assert!(matches!(events[1], Event::SessionResourcesReleased(_)));
        let ended = apply(s.clone(), &events);
        assert_eq!(ended.reserved, None);
        assert_eq!(
            ended.transition(Terminated, Some("x".into()), None),
            Err(TransitionError::Ended(Error))
        );

        // Back to the queue releases; a second placement reserves again, its end releases.
        let events = s.transition(Pending, Some("stalled".into()), None).unwrap();
        assert_eq!(events.len(), 2);
        let queued = apply(s.clone(), &events);
        let again = queued
            .transition(Cancelled, Some("by user".into()), None)
            .unwrap();
        assert_eq!(again.len(), 1, "nothing held, nothing released");

        // Moving between placed statuses releases nothing.
        let events = s.transition(Preparing, None, None).unwrap();
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn a_session_back_in_the_queue_is_placed_nowhere_and_gave_back_what_it_held() {
        for (kind, from) in [
            (SessionType::Batch, Scheduled),
            (SessionType::Interactive, Pulling),
            (SessionType::Inference, Running),
        ] {
            let mut s = placed(kind);
            if from != Scheduled {
                let session_id = s.request.session_id;
                s = apply(
                    s,
                    &[Event::SessionStatusChanged(SessionStatusChanged {
                        session_id,
                        from: Scheduled,
                        to: from,
                        reason: None,
                        exit_code: None,
                        occurred_at: None,
                    })],
                );
            }
            let events = s
                .transition(Pending, Some("agent `a1` lost".into()), None)
                .unwrap();
            assert!(
                matches!(&events[1], Event::SessionResourcesReleased(r) if r.agent_id == "a1"),
                "{kind:?}: the release names the agent it left"
            );
            let queued = apply(s, &events);
            assert_eq!((queued.status, queued.reserved), (Pending, None));
            assert!(
                !queued.placed_on("a1"),
                "{kind:?}: the old agent holds nothing"
            );
            assert!(queued.kernels.is_empty() && queued.kernels_started.is_empty());
        }
        // A session that ran goes back only if it is an inference session.
        let batch = running_session(SessionType::Batch);
        assert_eq!(
            batch.transition(Pending, Some("agent lost".into()), None),
            Err(TransitionError::Forbidden {
                from: Running,
                to: Pending
            })
        );
    }

    #[test]
    fn terminate_cancels_queued_asks_placed_and_forces_at_once() {
        let queued = SessionState::requested(&request(SessionType::Interactive));
        let events = queued.terminate(false, "by user".into()).unwrap();
        let last = apply(queued, &events);
        assert_eq!(last.status, Cancelled);
        assert_eq!(last.status_reason.as_deref(), Some("by user"));

        let running = running_session(SessionType::Interactive);
        let events = running.terminate(false, "by user".into()).unwrap();
        let stopping = apply(running.clone(), &events);
        assert_eq!(stopping.status, Terminating);
        assert!(stopping.reserved.is_some(), "held until the agent is done");
        assert_eq!(stopping.terminate(false, "again".into()).unwrap().len(), 1);

        let events = stopping.terminate(true, "forced".into()).unwrap();
        let gone = apply(stopping, &events);
        assert_eq!(gone.status, Terminated);
        assert_eq!(gone.reserved, None);
        assert!(gone.terminate(true, "x".into()).is_err());
    }

    #[test]
    fn a_reaped_session_says_why_and_stops_once_unless_exempted() {
        let running = running_session(SessionType::Interactive);
        let reading = IdleReading {
            checker: crate::idleness::IdleChecker::Lifetime,
            measures: Vec::new(),
            remaining_secs: Some(0.0),
            fires: true,
            explanation: "created 3.0 s ago; the most a session lives is 3 s".into(),
        };
        let events = running.reap(reading.clone()).unwrap();
        assert!(matches!(events[0], Event::SessionIdleReaped(_)));
        let stopping = apply(running.clone(), &events);
        assert_eq!(stopping.status, Terminating);
        let reason = stopping.status_reason.clone().unwrap();
        assert!(reason.contains("lifetime checker"), "{reason}");
        let stopped = stopping
            .transition(Terminated, Some("stopped on request".into()), Some(0))
            .unwrap();
        let ended = apply(stopping.clone(), &stopped);
        assert_eq!(
            ended.status_reason,
            Some(format!("{reason} (stopped on request)")),
            "the end keeps why it was asked to stop"
        );
        assert!(
            stopping.reap(reading.clone()).unwrap().is_empty(),
            "reaped once"
        );

        let exempted = apply(
            running.clone(),
            &running
                .exempt_from_idleness(Uuid::nil(), "a long run".into())
                .unwrap(),
        );
        assert!(exempted.idle_exempt);
        assert!(exempted.reap(reading.clone()).unwrap().is_empty());
        assert!(exempted
            .exempt_from_idleness(Uuid::nil(), "again".into())
            .unwrap()
            .is_empty());
        let ended = apply(
            stopping.clone(),
            &stopping.terminate(true, "forced".into()).unwrap(),
        );
        assert_eq!(ended.reap(reading), Err(TransitionError::Ended(Terminated)));
    }

    #[test]
    fn a_commit_holds_off_a_terminate_and_fails_when_forced() {
        let running = running_session(SessionType::Interactive);
        let commit_id = Uuid::now_v7();
        let events = running
            .request_commit(commit_id, "env1".into(), "berth-custom/u0:env1".into())
            .unwrap();
        let committing = apply(running.clone(), &events);
        assert_eq!(
            committing.request_commit(Uuid::now_v7(), "env2".into(), "x".into()),
            Err(TransitionError::Committing),
            "one at a time"
        );
        assert_eq!(
            committing.terminate(false, "by user".into()),
            Err(TransitionError::Committing)
        );
        let forced = committing.terminate(true, "forced".into()).unwrap();
        let Event::SessionCommitEnded(ended) = &forced[1] else {
            panic!("the commit fails first: {forced:?}")
        };
        assert!(matches!(ended.outcome, CommitOutcome::Failed { .. }));
        let gone = apply(committing.clone(), &forced);
        assert_eq!((gone.status, gone.commit.clone()), (Terminated, None));
        assert_eq!(
            gone.end_commit(
                commit_id,
                "a1",
                CommitOutcome::Failed { reason: "x".into() }
            ),
            Err(TransitionError::NoSuchCommit(commit_id)),
            "a late end is refused"
        );
        // Done, the session may be terminated again.
        let done = committing
            .end_commit(
                commit_id,
                "a1",
                CommitOutcome::Done {
                    image_id: "sha256:1".into(),
                    size_bytes: 1,
                    pushed: false,
                },
            )
            .unwrap();
        let overdue = committing
            .fail_commit(commit_id, "no end within 1800 s".into())
            .unwrap();
        assert!(matches!(&overdue[0], Event::SessionCommitEnded(e)
            if matches!(e.outcome, CommitOutcome::Failed { .. })));
        let after = apply(committing, &done);
        assert!(after.commit.is_none());
        assert!(after
            .fail_commit(commit_id, "late".into())
            .unwrap()
            .is_empty());
        assert!(after.terminate(false, "by user".into()).is_ok());
        // Only RUNNING interactive sessions are committed.
        let queued = SessionState::requested(&request(SessionType::Interactive));
        assert!(matches!(
            queued.request_commit(commit_id, "env1".into(), "x".into()),
            Err(TransitionError::NotCommittable(_))
        ));
        let batch = running_session(SessionType::Batch);
        assert!(matches!(
            batch.request_commit(commit_id, "env1".into(), "x".into()),
            Err(TransitionError::NotCommittable(_))
        ));
    }

    #[test]
    fn an_app_starts_only_while_running_and_a_late_end_records_nothing() {
        let s = running_session(SessionType::Interactive);
        let (start, by) = (Uuid::now_v7(), Uuid::now_v7());
        let asked = s
            .request_app_start(start, "jupyter".into(), 8888, by)
            .unwrap();
        assert!(matches!(&asked[0], Event::AppStartRequested(e) if e.port == 8888));
        let started = AppStartOutcome::Started { token: None };
        assert_eq!(
            s.end_app_start(start, "jupyter".into(), started.clone())
                .unwrap()
                .len(),
            1
        );
        let stop = s.terminate(false, "done".into()).unwrap();
        let stopping = apply(s, &stop);
        assert_eq!(
            stopping.request_app_start(start, "jupyter".into(), 8888, by),
            Err(TransitionError::NotRunning("stopping"))
        );
        assert!(stopping
            .end_app_start(start, "jupyter".into(), started)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn renames_only_while_alive() {
        let s = SessionState::requested(&request(SessionType::Interactive));
        assert!(s.rename("other1".into()).is_ok());
        let events = s.terminate(false, "by user".into()).unwrap();
        let ended = apply(s, &events);
        assert_eq!(
            ended.rename("x1234".into()),
            Err(TransitionError::Ended(Cancelled))
        );
    }

    #[test]
    fn a_queued_sessions_priority_changes_within_bounds_and_only_while_pending() {
        let session = SessionState::requested(&request(SessionType::Batch));
        let events = session.change_priority(80).unwrap();
        assert!(matches!(&events[..], [Event::SessionPriorityChanged(c)]
            if (c.from, c.to) == (SessionPriority::DEFAULT, 80)));
        let changed = events.iter().fold(session.clone(), |s, e| s.evolve(e));
        assert_eq!(changed.request.priority, 80);
        assert!(
            changed.change_priority(80).unwrap().is_empty(),
            "the same again: nothing"
        );
        assert!(matches!(
            session.change_priority(101),
            Err(TransitionError::PriorityOutOfBounds(101))
        ));
        assert!(matches!(
            session.change_priority(-1),
            Err(TransitionError::PriorityOutOfBounds(-1))
        ));
        let mut running = session.clone();
        running.status = SessionStatus::Running;
        assert!(matches!(
            running.change_priority(50),
            Err(TransitionError::NotQueued(SessionStatus::Running))
        ));
    }

    #[test]
    fn a_session_is_placed_on_the_agents_holding_its_kernels() {
        let request = SessionRequested {
            cluster_mode: ClusterMode::MultiNode,
            cluster_size: 2,
            ..request(SessionType::Interactive)
        };
        let pending = SessionState::requested(&request);
        assert!(!pending.placed_on("a1") && !pending.main_on("a1"));
        assert!(!pending.kernel_on(0, "a1"));
        let kernel = |agent: &str| KernelPlacement {
            agent_id: agent.into(),
            resources: request.resources,
        };
        let placed = pending.evolve(&Event::SessionScheduled(SessionScheduled {
            session_id: request.session_id,
            agent_id: "a1".into(),
            resources: request.resources,
            kernels: vec![kernel("a1"), kernel("a2")],
        }));
        assert!(placed.main_on("a1") && !placed.main_on("a2"));
        assert!(placed.placed_on("a1") && placed.placed_on("a2"));
        assert!(!placed.placed_on("a3"));
        assert!(placed.kernel_on(0, "a1") && placed.kernel_on(1, "a2"));
        assert!(!placed.kernel_on(1, "a1") && !placed.kernel_on(2, "a2"));
    }
}
