//! A session's history past its placement: a row (`SchedulingAttempted`) for every phase an
//! agent takes it through (prepare, pull, create, start, restart, terminate) and for the
//! clean-up of what it held, made from the moves a command on the session records. Pure:
//! `events::lifecycle::command` appends the rows with the moves, in the same append, so a
//! phase's row is there exactly when its move is, whoever made the move (an agent's report
//! through the recorder, a user's termination, the idle-reaper).
//!
//! The scheduler (phase `schedule`) and the reconciler (`reconcile`) write their own rows;
//! a command whose events already hold a row gets none added.
//!
//! A row is written when its phase ends, with the move that ended it (`status_before` to
//! `status_after`), except `prepare`, written when the agent takes the session:
//!
//! | move | phase | result |
//! | --- | --- | --- |
//! | SCHEDULED to PREPARING | `prepare` | SUCCESS |
//! | PREPARING to PREPARED | `pull` | SKIPPED: the image was on the agent |
//! | PULLING to PREPARED | `pull` | SUCCESS, the last progress its agent reported |
//! | CREATING to RUNNING | `create` and `start` | SUCCESS, each kernel's container and ports |
//! | RUNNING to RESTARTING | `restart` | NEED_RETRY |
//! | RESTARTING to RUNNING | `start` | SUCCESS |
//! | to TERMINATED or CANCELLED | `terminate` | SUCCESS |
//! | to ERROR | the phase it was in | FAILURE, with the reason and a code ([`error_code`]) |
//! | resources released | `cleanup` | SUCCESS, what each kernel gave back |
//!
//! A row carries the session's counted placement attempts as they stand, so the rows of its
//! phases never change what its scheduling counts.

use chrono::{DateTime, Utc};

use crate::aggregate::SessionState;
use crate::catalogue::Event;
use crate::payloads::{
    KernelStarted, ResourceSlots, SchedulingAttempted, SchedulingResult, SchedulingStep,
    SessionResourcesReleased, SessionStatus, SessionStatusChanged,
};

use SchedulingResult::*;
use SessionStatus::*;

/// The phases past placement, as the history names them.
pub const PREPARE: &str = "prepare";
pub const PULL: &str = "pull";
pub const CREATE: &str = "create";
pub const START: &str = "start";
pub const RESTART: &str = "restart";
pub const TERMINATE: &str = "terminate";
pub const CLEANUP: &str = "cleanup";

/// The phase a session in `status` is going through, where its agent (or its end) moves it
/// on from.
pub fn phase_of(status: SessionStatus) -> &'static str {
    match status {
        Pending | Scheduled | Preparing => PREPARE,
        Pulling => PULL,
        Prepared | Creating => CREATE,
        Restarting => RESTART,
        Running | Terminating | Terminated | Error | Cancelled => TERMINATE,
    }
}

/// The error code of a session that failed in `status`: the image's pull
/// (`IMAGE_PULL_FAILED`), its preparation, its containers' creation and start, its run, or
/// its termination.
pub fn error_code(status: SessionStatus) -> &'static str {
    match status {
        Pending | Scheduled | Preparing => "PREPARE_FAILED",
        Pulling => "IMAGE_PULL_FAILED",
        Prepared | Creating => "CREATE_FAILED",
        Restarting => "RESTART_FAILED",
        Running => "SESSION_FAILED",
        Terminating | Terminated | Error | Cancelled => "TERMINATE_FAILED",
    }
}

/// `events` as a command on `before` recorded them, with each phase row right after the
/// event that ended its phase; `now` is when the command decided (where a sub-step ends).
/// Unchanged when they hold a history row already (the reconciler's).
pub fn with_phases(before: &SessionState, events: Vec<Event>, now: DateTime<Utc>) -> Vec<Event> {
    if events
        .iter()
        .any(|e| matches!(e, Event::SchedulingAttempted(_)))
    {
        return events;
    }
    let mut state = before.clone();
    // Kernels this command reports started: the `create` and `start` rows name them.
    let mut started: Vec<KernelStarted> = Vec::new();
    let mut out = Vec::with_capacity(events.len() * 2);
    for event in events {
        let rows = match &event {
            Event::KernelStarted(k) => {
                started.push(k.clone());
                Vec::new()
            }
            Event::SessionStatusChanged(moved) => moved_rows(&state, moved, &started, now),
            Event::SessionResourcesReleased(released) => {
                vec![cleanup_row(&state, released, now)]
            }
            _ => Vec::new(),
        };
        state = state.recorded(&event, now);
        out.push(event);
        out.extend(rows.into_iter().map(Event::SchedulingAttempted));
    }
    out
}

/// A row of `state`'s session in phase `phase`, for the move `from` to `to`.
struct Row<'a> {
    state: &'a SessionState,
    phase: &'static str,
    from: SessionStatus,
    to: SessionStatus,
}

impl Row<'_> {
    fn done(
        self,
        result: SchedulingResult,
        message: String,
        error_code: Option<&str>,
        steps: Vec<SchedulingStep>,
    ) -> SchedulingAttempted {
        SchedulingAttempted {
            read: None,
            session_id: self.state.request.session_id,
            phase: self.phase.to_owned(),
            result,
            status_before: self.from,
            status_after: self.to,
            attempts: self.state.scheduling_attempts,
            message,
            error_code: error_code.map(str::to_owned),
            steps,
        }
    }
}

fn step(
    name: impl Into<String>,
    result: SchedulingResult,
    message: String,
    error_code: Option<&str>,
    started_at: DateTime<Utc>,
    ended_at: DateTime<Utc>,
) -> SchedulingStep {
    SchedulingStep {
        step: name.into(),
        result,
        message,
        error_code: error_code.map(str::to_owned),
        // The log's clock and the recorder's may differ a little: a step never ends before
        // it starts.
        started_at: started_at.min(ended_at),
        ended_at,
    }
}

/// The rows the move `moved` of the session in `state` ends; `started`, the kernels the same
/// command reported started.
fn moved_rows(
    state: &SessionState,
    moved: &SessionStatusChanged,
    started: &[KernelStarted],
    now: DateTime<Utc>,
) -> Vec<SchedulingAttempted> {
    let (from, to) = (moved.from, moved.to);
    let since = state.status_since.unwrap_or(now);
    let agent = state.agent_id.as_deref().unwrap_or("?");
    let image = &state.request.image;
    let reason = moved.reason.clone().unwrap_or_default();
    let row = |phase| Row {
        state,
        phase,
        from,
        to,
    };
    match (from, to) {
        (Scheduled, Preparing) => vec![row(PREPARE).done(
            Success,
            format!("agent `{agent}` took the session and prepares it"),
            None,
            vec![step(
                "assign",
                Success,
                format!("placed on agent `{agent}`, which took it"),
                None,
                since,
                now,
            )],
        )],
        (Preparing, Prepared) => vec![row(PULL).done(
            Skipped,
            format!("`{image}` is on agent `{agent}` already: nothing to pull"),
            None,
            vec![step(
                "inspect image",
                Success,
                format!("`{image}` found on agent `{agent}`"),
                None,
                since,
                now,
            )],
        )],
        (Pulling, Prepared) => {
            let pulled = pulled(state);
            vec![row(PULL).done(
                Success,
                format!("agent `{agent}` pulled `{image}`{pulled}"),
                None,
                vec![step(
                    format!("pull {image}"),
                    Success,
                    format!("pulled{pulled}"),
                    None,
                    since,
                    now,
                )],
            )]
        }
        (Creating, Running) => {
            let size = state.request.cluster_size.max(1);
            let at = moved.occurred_at.unwrap_or(now);
            let created = started
                .iter()
                .map(|k| {
                    let host = k
                        .hostname
                        .as_deref()
                        .map(|h| format!(", host name `{h}`"))
                        .unwrap_or_default();
                    step(
                        format!("kernel {}", k.kernel),
                        Success,
                        format!(
                            "container {} on agent `{}`{host}",
                            short(&k.container_id),
                            k.agent_id
                        ),
                        None,
                        since,
                        k.started_at.unwrap_or(at),
                    )
                })
                .collect();
            let ran = started
                .iter()
                .map(|k| {
                    step(
                        format!("kernel {}", k.kernel),
                        Success,
                        format!("started{}", ports(k)),
                        None,
                        k.started_at.unwrap_or(at),
                        at,
                    )
                })
                .collect();
            vec![
                row(CREATE).done(
                    Success,
                    format!("{size} kernel container(s) created"),
                    None,
                    created,
                ),
                row(START).done(
                    Success,
                    format!("{size} kernel(s) started: the session runs"),
                    None,
                    ran,
                ),
            ]
        }
        (Running, Restarting) => vec![row(RESTART).done(
            NeedRetry,
            reason.clone(),
            None,
            vec![step("exit", NeedRetry, reason, None, since, now)],
        )],
        (Restarting, Running) => vec![row(START).done(
            Success,
            "started again: the session runs".into(),
            None,
            Vec::new(),
        )],
        (_, Terminated | Cancelled) => {
            // The exit code, unless the reason says it already.
            let exit = moved
                .exit_code
                .filter(|_| !reason.contains("exit code"))
                .map(|code| format!(" (exit code {code})"))
                .unwrap_or_default();
            let code = moved
                .exit_code
                .map(|code| format!(", exit code {code}"))
                .unwrap_or_default();
            let ended = moved.occurred_at.unwrap_or(now);
            vec![row(TERMINATE).done(
                Success,
                format!("{reason}{exit}"),
                None,
                vec![step(
                    "stop",
                    Success,
                    format!("{} after {}{code}", to.as_str(), from.as_str()),
                    None,
                    since.min(ended),
                    ended,
                )],
            )]
        }
        (_, Error) => {
            let code = error_code(from);
            let mut message = reason;
            if from == Pulling {
                message.push_str(&pulled(state));
            }
            let name = if from == Pulling {
                format!("pull {image}")
            } else {
                phase_of(from).to_owned()
            };
            vec![row(phase_of(from)).done(
                Failure,
                message.clone(),
                Some(code),
                vec![step(name, Failure, message, Some(code), since, now)],
            )]
        }
        _ => Vec::new(),
    }
}

/// The last progress of the session's pull, in words (empty when none was reported).
fn pulled(state: &SessionState) -> String {
    match &state.pull {
        Some(p) => format!(
            ": {} of {} MiB, {} of {} layers",
            p.current_bytes >> 20,
            p.total_bytes >> 20,
            p.layers_done,
            p.layers
        ),
        None => String::new(),
    }
}

/// A container id as the engine shows it in lists.
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// A started kernel's published ports, in words (empty when none).
fn ports(k: &KernelStarted) -> String {
    if k.ports.is_empty() {
        return String::new();
    }
    let ports: Vec<String> = k
        .ports
        .iter()
        .map(|p| format!("{}->{}", p.container, p.host))
        .collect();
    format!("; ports {}", ports.join(", "))
}

fn slots(s: ResourceSlots) -> String {
    format!(
        "cpu {} cores, memory {} MiB, gpu {}",
        s.cpu_milli as f64 / 1000.0,
        s.memory_bytes >> 20,
        s.gpu_milli as f64 / 1000.0
    )
}

/// The clean-up row of `released`, the session being in `state` (after the move that made
/// it leave its agent).
fn cleanup_row(
    state: &SessionState,
    released: &SessionResourcesReleased,
    now: DateTime<Utc>,
) -> SchedulingAttempted {
    let steps = released
        .placements()
        .iter()
        .enumerate()
        .map(|(kernel, k)| {
            step(
                format!("kernel {kernel}"),
                Success,
                format!("gave back {} on agent `{}`", slots(k.resources), k.agent_id),
                None,
                now,
                now,
            )
        })
        .collect();
    Row {
        state,
        phase: CLEANUP,
        from: state.status,
        to: state.status,
    }
    .done(
        Success,
        format!("released {}", slots(released.resources)),
        None,
        steps,
    )
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::lifecycle::TransitionError;
    use crate::payloads::*;

    fn at(second: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 26, 8, 0, second).unwrap()
    }

    /// A batch session of `image` placed on agent `a1` after `attempts` attempts, SCHEDULED
    /// since second 0.
    fn placed(image: &str, attempts: u32) -> SessionState {
        let request = SessionRequested {
            image: image.into(),
            resources: ResourceSlots {
                cpu_milli: 1000,
                memory_bytes: 256 << 20,
                gpu_milli: 0,
            },
            session_type: SessionType::Batch,
            ..crate::fixtures::session_requested()
        };
        let mut state = SessionState::requested(&request);
        state.scheduling_attempts = attempts;
        state = state.evolve(&Event::SessionScheduled(SessionScheduled {
            session_id: request.session_id,
            agent_id: "a1".into(),
            resources: request.resources,
            kernels: vec![KernelPlacement {
                agent_id: "a1".into(),
                resources: request.resources,
            }],
        }));
        state.status = Scheduled;
        state.status_since = Some(at(0));
        state
    }

    /// A session's commands, recorded as `events::lifecycle::command` records them: each
    /// with its phase rows, at its own second.
    struct Journey {
        state: SessionState,
        second: u32,
        rows: Vec<SchedulingAttempted>,
        recorded: Vec<Event>,
    }

    impl Journey {
        fn of(state: SessionState) -> Journey {
            Journey {
                state,
                second: 0,
                rows: Vec::new(),
                recorded: Vec::new(),
            }
        }

        fn run(
            &mut self,
            decide: impl FnOnce(&SessionState) -> Result<Vec<Event>, TransitionError>,
        ) -> &mut Self {
            self.second += 1;
            let events = with_phases(&self.state, decide(&self.state).unwrap(), at(self.second));
            for e in &events {
                self.state = self.state.clone().recorded(e, at(self.second));
                if let Event::SchedulingAttempted(row) = e {
                    self.rows.push(row.clone());
                }
            }
            self.recorded.extend(events);
            self
        }

        fn phases(&self) -> Vec<(&str, SchedulingResult, SessionStatus, SessionStatus)> {
            self.rows
                .iter()
                .map(|r| (r.phase.as_str(), r.result, r.status_before, r.status_after))
                .collect()
        }

        fn row(&self, phase: &str) -> &SchedulingAttempted {
            self.rows
                .iter()
                .find(|r| r.phase == phase)
                .unwrap_or_else(|| panic!("no {phase} row in {:?}", self.phases()))
        }
    }

    fn started(state: &SessionState, ports: Vec<PublishedPort>) -> Vec<KernelStarted> {
        vec![KernelStarted {
            session_id: state.request.session_id,
            kernel: 0,
            agent_id: "a1".into(),
            container_id: "0123456789abcdef0123".into(),
            ports,
            hostname: None,
            address: None,
            started_at: Some(at(4)),
        }]
    }

    #[test]
    fn a_session_whose_image_was_there_shows_every_phase_in_order() {
        let mut j = Journey::of(placed("berth/python:latest", 2));
        // The Docker agent's one report of the moves when the image is present.
        j.run(|s| s.transition_through(&[Preparing, Prepared, Creating]));
        j.run(|s| {
            s.start_kernels(&started(
                s,
                vec![PublishedPort {
                    container: 8080,
                    host: 32768,
                }],
            ))
        });
        j.run(|s| {
            s.transition(
                Terminated,
                Some("the startup command succeeded (exit code 0)".into()),
                Some(0),
            )
        });
        assert_eq!(
            j.phases(),
            [
                (PREPARE, Success, Scheduled, Preparing),
                (PULL, Skipped, Preparing, Prepared),
                (CREATE, Success, Creating, Running),
                (START, Success, Creating, Running),
                (TERMINATE, Success, Running, Terminated),
                (CLEANUP, Success, Terminated, Terminated),
            ]
        );
        // Each row right after the move that ended its phase, in one append with it.
        let kinds: Vec<&str> = j.recorded.iter().map(Event::event_type).collect();
        assert_eq!(
            &kinds[..6],
            [
                "SessionStatusChanged",
                "SchedulingAttempted",
                "SessionStatusChanged",
                "SchedulingAttempted",
                "SessionStatusChanged",
                "KernelStarted",
            ]
        );
        // The rows never change what the session's scheduling counted.
        assert!(j.rows.iter().all(|r| r.attempts == 2));
        assert_eq!(j.state.scheduling_attempts, 2);
        assert!(j
            .row(PULL)
            .message
            .contains("`berth/python:latest` is on agent `a1`"));
        let created = &j.row(CREATE).steps;
        assert_eq!(created.len(), 1);
        assert_eq!(created[0].step, "kernel 0");
        assert_eq!(created[0].message, "container 0123456789ab on agent `a1`");
        let start = &j.row(START).steps[0];
        assert_eq!(start.message, "started; ports 8080->32768");
        assert_eq!(start.started_at, at(4));
        let end = j.row(TERMINATE);
        assert_eq!(end.message, "the startup command succeeded (exit code 0)");
        assert_eq!(end.steps[0].ended_at, at(3));
        let cleanup = j.row(CLEANUP);
        assert_eq!(
            cleanup.message,
            "released cpu 1 cores, memory 256 MiB, gpu 0"
        );
        assert_eq!(
            cleanup.steps[0].message,
            "gave back cpu 1 cores, memory 256 MiB, gpu 0 on agent `a1`"
        );
    }

    #[test]
    fn a_pull_shows_the_progress_its_agent_reported_and_how_long_it_took() {
        let mut j = Journey::of(placed("berth/big:1", 1));
        j.run(|s| s.transition(Preparing, None, None));
        j.run(|s| s.transition(Pulling, None, None));
        j.run(|s| s.pull_progressed("berth/big:1".into(), 30 << 20, 60 << 20, 1, 3));
        j.run(|s| s.pull_progressed("berth/big:1".into(), 60 << 20, 60 << 20, 3, 3));
        j.run(|s| s.transition(Prepared, None, None));
        j.run(|s| s.transition(Creating, None, None));
        assert_eq!(
            j.phases(),
            [
                (PREPARE, Success, Scheduled, Preparing),
                (PULL, Success, Pulling, Prepared)
            ]
        );
        let pull = j.row(PULL);
        assert_eq!(
            pull.message,
            "agent `a1` pulled `berth/big:1`: 60 of 60 MiB, 3 of 3 layers"
        );
        // From the move to PULLING (second 2) to the move on (second 5).
        assert_eq!(
            (pull.steps[0].started_at, pull.steps[0].ended_at),
            (at(2), at(5))
        );
        assert_eq!(pull.steps[0].step, "pull berth/big:1");
    }

    #[test]
    fn a_pull_that_fails_is_a_failed_pull_row_with_the_engines_words() {
        let mut j = Journey::of(placed("berth/no-such-image:1", 1));
        j.run(|s| s.transition(Preparing, None, None));
        j.run(|s| s.transition(Pulling, None, None));
        let engine =
            "pulling `berth/no-such-image:1` failed: Docker responded with status code 500: \
                      Get \"https://registry-1.docker.io/v2/\": dial tcp: no such host";
        j.run(|s| s.transition(Error, Some(engine.into()), None));
        assert_eq!(
            j.phases(),
            [
                (PREPARE, Success, Scheduled, Preparing),
                (PULL, Failure, Pulling, Error),
                (CLEANUP, Success, Error, Error),
            ]
        );
        let pull = j.row(PULL);
        assert_eq!(pull.message, engine);
        assert_eq!(pull.error_code.as_deref(), Some("IMAGE_PULL_FAILED"));
        assert_eq!(pull.steps[0].result, Failure);
        assert_eq!(
            pull.steps[0].error_code.as_deref(),
            Some("IMAGE_PULL_FAILED")
        );
    }

    #[test]
    fn a_failure_is_the_failure_of_the_phase_it_happened_in() {
        for (path, code, phase) in [
            (&[][..], "PREPARE_FAILED", PREPARE),
            (&[Preparing, Prepared][..], "CREATE_FAILED", CREATE),
            (
                &[Preparing, Prepared, Creating][..],
                "CREATE_FAILED",
                CREATE,
            ),
        ] {
            let mut j = Journey::of(placed("x", 1));
            j.run(|s| s.transition_through(path));
            j.run(|s| s.transition(Error, Some("the engine said no".into()), None));
            let failed = j.rows.iter().find(|r| r.result == Failure).unwrap();
            assert_eq!(failed.phase, phase, "{path:?}");
            assert_eq!(failed.error_code.as_deref(), Some(code), "{path:?}");
            assert_eq!(failed.message, "the engine said no");
        }
    }

    #[test]
    fn a_termination_asked_for_is_one_terminate_row_when_the_session_ends() {
        let mut j = Journey::of(placed("x", 1));
        j.run(|s| s.transition_through(&[Preparing, Prepared, Creating]));
        j.run(|s| s.start_kernels(&started(s, vec![])));
        j.run(|s| s.terminate(false, "terminated by its owner".into()));
        j.run(|s| s.transition(Terminated, Some("stopped on request".into()), Some(137)));
        let ends: Vec<_> = j.phases().into_iter().skip(4).collect();
        assert_eq!(
            ends,
            [
                (TERMINATE, Success, Terminating, Terminated),
                (CLEANUP, Success, Terminated, Terminated),
            ]
        );
        assert_eq!(
            j.row(TERMINATE).message,
            "terminated by its owner (stopped on request) (exit code 137)"
        );
        assert_eq!(
            j.row(TERMINATE).steps[0].message,
            "TERMINATED after TERMINATING, exit code 137"
        );

        // Forced while it pulls: the pull never ends, the termination does.
        let mut j = Journey::of(placed("x", 1));
        j.run(|s| s.transition_through(&[Preparing, Pulling]));
        j.run(|s| s.terminate(true, "forced by an admin".into()));
        assert_eq!(
            j.phases(),
            [
                (PREPARE, Success, Scheduled, Preparing),
                (TERMINATE, Success, Pulling, Terminated),
                (CLEANUP, Success, Terminated, Terminated),
            ]
        );
    }

    #[test]
    fn a_queued_session_cancelled_has_a_terminate_row_and_nothing_to_clean_up() {
        let mut state = placed("x", 0);
        state.status = Pending;
        state.reserved = None;
        let mut j = Journey::of(state);
        j.run(|s| s.terminate(false, "cancelled by its owner".into()));
        assert_eq!(j.phases(), [(TERMINATE, Success, Pending, Cancelled)]);
    }

    #[test]
    fn an_inference_session_restarting_shows_the_restart_and_the_start_again() {
        let mut state = placed("x", 1);
        state.request.session_type = SessionType::Inference;
        let mut j = Journey::of(state);
        j.run(|s| s.transition_through(&[Preparing, Prepared, Creating]));
        j.run(|s| s.start_kernels(&started(s, vec![])));
        j.run(|s| {
            s.transition(
                Restarting,
                Some("exited with code 1; restarting".into()),
                Some(1),
            )
        });
        j.run(|s| s.transition(Running, None, None));
        let later: Vec<_> = j.phases().into_iter().skip(4).collect();
        assert_eq!(
            later,
            [
                (RESTART, NeedRetry, Running, Restarting),
                (START, Success, Restarting, Running),
            ]
        );
    }

    #[test]
    fn the_fold_knows_since_when_a_session_is_in_its_status_and_its_last_pull() {
        let state = placed("berth/big:1", 1);
        let id = state.request.session_id;
        let recorded = |version: u64, second: u32, event: Event| crate::RecordedEvent {
            event_id: uuid::Uuid::now_v7(),
            stream_id: format!("session-{id}"),
            stream_version: version,
            position: crate::LogPosition {
                tx: version + 1,
                seq: version as i64,
            },
            recorded_at: at(second),
            schema_version: 1,
            metadata: Default::default(),
            event,
        };
        let mut log = vec![recorded(
            0,
            0,
            Event::SessionRequested(Box::new(state.request.clone())),
        )];
        let moves = state.transition_through(&[Preparing, Pulling]).unwrap();
        log.extend(
            moves
                .into_iter()
                .enumerate()
                .map(|(i, e)| recorded(1 + i as u64, 3 + i as u32, e)),
        );
        let progress = Event::SessionPullProgressed(SessionPullProgressed {
            session_id: id,
            image: "berth/big:1".into(),
            current_bytes: 1 << 20,
            total_bytes: 2 << 20,
            layers_done: 1,
            layers: 2,
        });
        log.push(recorded(3, 9, progress.clone()));
        let crate::aggregate::StreamState::Session(folded) = crate::aggregate::fold(&log) else {
            panic!("a session's stream folds into a session");
        };
        // In PULLING since its move (second 4), not since the progress (second 9).
        assert_eq!(folded.status_since, Some(at(4)));
        let Event::SessionPullProgressed(last) = progress else {
            unreachable!()
        };
        assert_eq!(folded.pull, Some(last));
    }

    #[test]
    fn a_command_that_writes_its_own_row_gets_none_added() {
        let state = placed("x", 1);
        let own = Event::SchedulingAttempted(SchedulingAttempted {
            read: None,
            session_id: state.request.session_id,
            phase: "reconcile".into(),
            result: NeedRetry,
            status_before: Scheduled,
            status_after: Pending,
            attempts: 1,
            message: "its agent went away".into(),
            error_code: Some("AGENT_GONE".into()),
            steps: Vec::new(),
        });
        let mut events = vec![own];
        events.extend(
            state
                .transition(Pending, Some("its agent went away".into()), None)
                .unwrap(),
        );
        let recorded = with_phases(&state, events.clone(), at(1));
        assert_eq!(recorded, events);
        // Events that move nothing get no row either.
        let renamed = vec![Event::SessionRenamed(SessionRenamed {
            session_id: state.request.session_id,
            old_name: "a".into(),
            new_name: "b".into(),
        })];
        assert_eq!(with_phases(&state, renamed.clone(), at(1)), renamed);
    }
}
