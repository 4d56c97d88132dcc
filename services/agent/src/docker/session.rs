//! One session's task: prepares, pulls, creates and starts its kernels, serves an
//! interactive session's terminal (`terminal`), waits for the main container to stop (by
//! itself, on request, past a batch timeout), keeps its output, and records how it ended
//! ([`outcome`], pure), restarting an inference session that died.

use std::time::Duration;

use bollard::container::{StopContainerOptions, WaitContainerOptions};
use bollard::image::{CreateImageOptions, TagImageOptions};
use domain::aggregate::SessionState;
use domain::payloads::{SessionStatus, SessionType};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use super::ctx::{cleanup, load, moved, moved_at, moved_through, remove, run_of, status_now, Ctx};
use super::engine;
use super::folders;
use super::keep::{gpus_held_by, sample_usage, save_final_logs, save_logs, LogCursor};
use super::kernels::{create_kernels, report_adopted};
use super::pull::{self, PullTally};
use super::registry::{pull_source, repository_and_tag, stored_login};
use super::spec::container_name;
use super::terminal;
use crate::stop_order::StopOrder;
use crate::AgentError;

/// Prepares, creates and starts the session's container (its terminal on `terminal_port`);
/// returns its name, or `None` when the session ended on the way (the reason is recorded).
async fn start(
    ctx: &Ctx,
    state: &SessionState,
    terminal_port: Option<u16>,
) -> Result<Option<String>, AgentError> {
    let request = &state.request;
    let id = request.session_id;
    let present = ctx
        .patiently(|| ctx.docker.inspect_image(&request.image))
        .await
        .is_ok();
    // A session caught PULLING by an earlier run of this agent resumes here.
    let resumed = state.status == SessionStatus::Pulling;
    // With the image here nothing is waited for between the moves: one report of them, sent
    // while the containers are created (`create_kernels` starts them once it is recorded).
    let go_ahead = if present {
        let mut through = vec![SessionStatus::Prepared, SessionStatus::Creating];
        if !resumed {
            through.insert(0, SessionStatus::Preparing);
        }
        futures::future::Either::Left(moved_through(ctx, id, through))
    } else {
        if !resumed
            && (!moved(ctx, id, SessionStatus::Preparing, None, None).await
                || !moved(ctx, id, SessionStatus::Pulling, None, None).await)
        {
            return Ok(None);
        }
        // A customized image comes from the stack's registry, under the name it was asked by.
        let source = pull_source(&request.image, ctx.config.registry.as_ref());
        let credentials = match ctx
            .config
            .registry
            .as_ref()
            .filter(|_| source.with_credential)
        {
            Some(stack) => stack.credentials(),
            // Any other registry's: the one an admin stored for it, if any.
            None => stored_login(ctx, id, &source.reference).await,
        };
        let options = CreateImageOptions::<String> {
            from_image: source.reference.clone(),
            ..Default::default()
        };
        let mut failure = None;
        // The pull's progress, summed over its layers, reported apart from it.
        let mut tally = PullTally::default();
        let (figures, progress) = tokio::sync::watch::channel(tally.figures());
        let reporter = pull::report(ctx, id, request.image.clone(), progress);
        loop {
            let mut pull =
                ctx.docker
                    .create_image(Some(options.clone()), None, credentials.clone());
            let mut cut = false;
            while let Some(step) = pull.next().await {
                match step {
                    // The engine went away mid-pull: wait for it, then pull on.
                    Err(e) if engine::unreachable(&e) && !ctx.stop.is_cancelled() => {
                        cut = true;
                        break;
                    }
                    Err(e) => {
                        failure = Some(e.to_string());
                        break;
                    }
                    Ok(info) => {
                        let detail = info.progress_detail.as_ref();
                        if tally.note(
                            info.id.as_deref(),
                            info.status.as_deref(),
                            detail.and_then(|d| d.current),
                            detail.and_then(|d| d.total),
                        ) {
                            figures.send_replace(tally.figures());
                        }
                    }
                }
            }
            if !cut {
                break;
            }
            ctx.wait_for_engine().await;
        }
        // The last figures may still go out; the session moves on regardless.
        drop(figures);
        drop(reporter);
        if let (None, Some(name)) = (&failure, &source.tag_as) {
            let (repo, tag) = repository_and_tag(name);
            let options = TagImageOptions {
                repo: repo.to_owned(),
                tag: tag.to_owned(),
            };
            if let Err(e) = ctx.docker.tag_image(&source.reference, Some(options)).await {
                failure = Some(format!("naming it `{name}` failed: {e}"));
            }
        }
        if let Some(reason) = failure {
            moved(
                ctx,
                id,
                SessionStatus::Error,
                Some(format!("pulling `{}` failed: {reason}", source.reference)),
                None,
            )
            .await;
            return Ok(None);
        }
        if !moved(ctx, id, SessionStatus::Prepared, None, None).await
            || !moved(ctx, id, SessionStatus::Creating, None, None).await
        {
            return Ok(None);
        }
        futures::future::Either::Right(std::future::ready(true))
    };
    // Recording the kernels started moves the session to RUNNING once every kernel of it
    // has started (a multi-node cluster waits for its other agents; the reconciler's
    // deadline for CREATING ends a cluster that never completes).
    match create_kernels(ctx, state, terminal_port, go_ahead).await {
        Ok(None) => return Ok(None),
        Ok(Some((_, status))) if status.is_terminal() => {
            cleanup(ctx, id, &[], request.cluster_size.max(1)).await;
            return Ok(None);
        }
        Ok(Some(_)) => {}
        Err(reason) => {
            moved(ctx, id, SessionStatus::Error, Some(reason), None).await;
            return Ok(None);
        }
    }
    Ok(Some(container_name(id, 0)))
}

/// Waits for the container to exit; its exit code. A wait the engine's absence cut is made
/// again once it answers: the container ran on meanwhile, and may have exited.
async fn exit_code(ctx: &Ctx, container: &str) -> i64 {
    loop {
        let mut wait = ctx
            .docker
            .wait_container(container, None::<WaitContainerOptions<String>>);
        match wait.next().await {
            Some(Ok(r)) => return r.status_code,
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                return code
            }
            Some(Err(e)) if engine::unreachable(&e) && !ctx.stop.is_cancelled() => {
                ctx.wait_for_engine().await;
            }
            _ => return -1,
        }
    }
}

/// Why a container stopped running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// Its process exited by itself.
    Exited,
    /// The agent stopped it: the session was to end.
    Stopped,
    /// The agent stopped it: a batch session ran past its timeout.
    TimedOut,
    /// The agent stopped it: the agent is drained, its host decommissioned.
    Drained,
}

/// What a session becomes once its main container stopped running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The session has ended already (or is gone): nothing to record.
    Nothing,
    /// The session ends TERMINATED, for this reason.
    Terminate(String),
    /// An inference session died: it goes to RESTARTING, for this reason, and its container
    /// starts again.
    Restart(String),
}

/// What a session of `session_type` becomes when its container stopped (`ended`) with exit
/// `code`, the session being `now` (`None`: gone) and `timeout` its batch timeout. Pure.
pub(super) fn outcome(
    ended: Ended,
    now: Option<SessionStatus>,
    session_type: SessionType,
    code: i64,
    timeout: Option<Duration>,
) -> Outcome {
    match (ended, now) {
        (_, None) => Outcome::Nothing,
        (_, Some(s)) if s.is_terminal() => Outcome::Nothing,
        (Ended::Stopped, _) | (_, Some(SessionStatus::Terminating)) => {
            Outcome::Terminate("stopped on request".into())
        }
        (Ended::Drained, _) => Outcome::Terminate(
            "stopped: its agent was drained (the host is being decommissioned)".into(),
        ),
        (Ended::TimedOut, _) => {
            let secs = timeout.unwrap_or_default().as_secs();
            Outcome::Terminate(format!(
                "batch timeout: still running after {secs} s, stopped"
            ))
        }
        (Ended::Exited, _) => match session_type {
            SessionType::Inference => Outcome::Restart(format!(
                "the container exited unexpectedly with code {code}; restarting"
            )),
            SessionType::Batch if code == 0 => {
                Outcome::Terminate("the startup command succeeded (exit code 0)".into())
            }
            SessionType::Batch => {
                Outcome::Terminate(format!("the startup command failed with exit code {code}"))
            }
            _ => Outcome::Terminate(format!("the container exited with code {code}")),
        },
    }
}

/// Runs session `id`, placed on this agent, from SCHEDULED (or from PULLING, where an earlier
/// run of the agent was caught) to its end.
pub(super) async fn run_session(
    ctx: Ctx,
    session_id: Uuid,
    stop: StopOrder,
) -> Result<(), AgentError> {
    follow_session(ctx, session_id, None, stop).await
}

/// Resumes session `id` whose main container `container` an earlier run of this agent
/// started.
pub(super) async fn adopt_session(
    ctx: Ctx,
    session_id: Uuid,
    container: String,
    stop: StopOrder,
) -> Result<(), AgentError> {
    follow_session(ctx, session_id, Some(container), stop).await
}

/// Owns one session's container from start (or adoption) to removal, in a span that joins
/// the session's journey: every status it records carries the trace of the session's
/// creation.
async fn follow_session(
    ctx: Ctx,
    session_id: Uuid,
    adopted: Option<String>,
    stop: StopOrder,
) -> Result<(), AgentError> {
    let Some((state, traceparent)) = load(&ctx, session_id).await? else {
        return Ok(());
    };
    // An assignment delivered again, for a session that has moved on since: nothing to do.
    // (One caught PULLING by an earlier run is resumed.)
    if adopted.is_none()
        && !matches!(
            state.status,
            SessionStatus::Scheduled | SessionStatus::Pulling
        )
    {
        return Ok(());
    }
    let span = tracing::info_span!("session", session = %session_id, agent = %ctx.agent_id);
    bus::trace::follow(&span, traceparent.as_deref());
    own_session(ctx, state, adopted, stop)
        .instrument(span)
        .await
}

async fn own_session(
    ctx: Ctx,
    state: SessionState,
    adopted: Option<String>,
    stop: StopOrder,
) -> Result<(), AgentError> {
    let session_id = state.request.session_id;
    // An interactive session's terminal is the agent's: its port is taken before the
    // container is made, so that the container's label names it.
    let interactive = state.request.session_type.is_attended();
    let mut terminal_listener = None;
    if interactive && adopted.is_none() {
        match terminal::listen(&ctx, 0).await {
            Ok(listener) => terminal_listener = Some(listener),
            Err(e) => tracing::warn!(%session_id, error = %e,
                "no port for the terminal; the session has none"),
        }
    }
    let terminal_port = terminal_listener
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.port());
    let container = match adopted {
        // Created and started by an earlier run that did not get to report them.
        Some(c) if state.status == SessionStatus::Creating => {
            if !report_adopted(&ctx, &state).await {
                tracing::info!(%session_id, "the adopted kernels were not recorded");
            }
            c
        }
        Some(c) => c,
        // An agent that leaves waits for the start to be done (or the session to end).
        None => match async {
            let _starting = ctx.starting.read().await;
            start(&ctx, &state, terminal_port).await
        }
        .await
        {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(()),
            Err(e) => {
                // Whatever went wrong, the session does not stay in an intermediate status.
                moved(
                    &ctx,
                    session_id,
                    SessionStatus::Error,
                    Some(format!("starting failed: {e}")),
                    None,
                )
                .await;
                remove(&ctx, &container_name(session_id, 0)).await;
                return Err(e);
            }
        },
    };
    // Served until the session's task ends.
    let _terminal = if interactive {
        terminal::serve(&ctx, &state, &container, terminal_listener).await
    } else {
        None
    };
    let timeout = state
        .request
        .batch_timeout_secs
        .filter(|_| state.request.session_type == SessionType::Batch)
        .map(Duration::from_secs);
    let started = tokio::time::Instant::now();
    // A stop of an earlier placement (the session was placed here again since) is not ours.
    let placement = state.releases;
    // The output so far is kept every second while the container runs.
    let keeping = CancellationToken::new();
    let log_cursor = std::sync::Arc::new(tokio::sync::Mutex::new(LogCursor::keeping(
        state.request.fence().log_bytes,
    )));
    {
        let (ctx, container, keeping) = (ctx.clone(), container.clone(), keeping.clone());
        let cursor = log_cursor.clone();
        tokio::spawn(async move {
            // A first sample at once: a short batch session is gone before the first tick.
            let gpus = gpus_held_by(&ctx, &container).await;
            let mut previous = sample_usage(&ctx, session_id, &container, &gpus, None).await;
            let mut sampled = tokio::time::Instant::now();
            while !keeping.is_cancelled() {
                tokio::select! {
                    _ = keeping.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        save_logs(&ctx, session_id, 0, &container, &cursor).await;
                        if sampled.elapsed() >= ctx.config.usage_every {
                            sampled = tokio::time::Instant::now();
                            previous = sample_usage(&ctx, session_id, &container, &gpus, previous).await;
                        }
                    }
                }
            }
        });
    }
    let _keeper_guard = keeping.clone().drop_guard();
    loop {
        let deadline = timeout.map(|t| started + t);
        let (code, why) = tokio::select! {
            code = exit_code(&ctx, &container) => (code, Ended::Exited),
            _ = stop.given(placement) => {
                // Docker 20.10 can deadlock a container's state when `logs` races `stop`:
                // the keeper is stopped before the container is.
                keeping.cancel();
                let grace = ctx.config.stop_grace_secs;
                let _ = ctx.patiently(|| ctx.docker.stop_container(&container, Some(StopContainerOptions { t: grace }))).await;
                let why = if ctx.draining() { Ended::Drained } else { Ended::Stopped };
                (exit_code(&ctx, &container).await, why)
            }
            _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                keeping.cancel();
                let _ = ctx.patiently(|| ctx.docker.stop_container(&container, Some(StopContainerOptions { t: 2 }))).await;
                (exit_code(&ctx, &container).await, Ended::TimedOut)
            }
        };
        save_final_logs(&ctx, session_id, 0, &container, &log_cursor).await;
        // Its end by the engine's clock, not by when it is reported: an adopted container
        // may have exited long before this run of the agent saw it.
        let ended_at = run_of(&ctx, &container)
            .await
            .and_then(|run| run.finished_at);
        let now = status_now(&ctx, session_id).await?;
        let code32 = i32::try_from(code).ok();
        let session_type = state.request.session_type;
        match outcome(why, now, session_type, code, timeout) {
            Outcome::Nothing => {}
            Outcome::Terminate(reason) => {
                moved_at(
                    &ctx,
                    session_id,
                    SessionStatus::Terminated,
                    Some(reason),
                    code32,
                    ended_at,
                )
                .await;
            }
            Outcome::Restart(reason) => {
                if !moved_at(
                    &ctx,
                    session_id,
                    SessionStatus::Restarting,
                    Some(reason),
                    code32,
                    ended_at,
                )
                .await
                {
                    // It moved on meanwhile (asked to stop): finish as asked.
                    let now = status_now(&ctx, session_id).await?;
                    if now == Some(SessionStatus::Terminating) {
                        let reason = Some("stopped on request".to_string());
                        moved_at(
                            &ctx,
                            session_id,
                            SessionStatus::Terminated,
                            reason,
                            code32,
                            ended_at,
                        )
                        .await;
                    }
                } else if ctx
                    .docker
                    .start_container::<String>(&container, None)
                    .await
                    .is_ok()
                    && moved(&ctx, session_id, SessionStatus::Running, None, None).await
                {
                    continue;
                } else if status_now(&ctx, session_id).await? == Some(SessionStatus::Terminating) {
                    let reason = Some("stopped on request".to_string());
                    moved_at(
                        &ctx,
                        session_id,
                        SessionStatus::Terminated,
                        reason,
                        code32,
                        ended_at,
                    )
                    .await;
                } else {
                    let reason = Some(format!("restart after exit code {code} failed"));
                    moved_at(
                        &ctx,
                        session_id,
                        SessionStatus::Error,
                        reason,
                        code32,
                        ended_at,
                    )
                    .await;
                }
            }
        }
        let size = state.request.cluster_size.max(1);
        for k in 1..size {
            let name = container_name(session_id, k);
            let _ = ctx
                .docker
                .stop_container(&name, Some(StopContainerOptions { t: 1 }))
                .await;
            let cursor = LogCursor::keeping(state.request.fence().log_bytes);
            save_final_logs(&ctx, session_id, k, &name, &cursor.into()).await;
        }
        remove(&ctx, &container).await;
        cleanup(&ctx, session_id, &[], size).await;
        folders::report(&ctx, &state);
        return Ok(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionStatus::*;
    use SessionType::*;

    fn ends(o: Outcome) -> String {
        match o {
            Outcome::Terminate(reason) => reason,
            other => panic!("expected the session to end, got {other:?}"),
        }
    }

    #[test]
    fn a_session_already_ended_or_gone_records_nothing() {
        for now in [None, Some(Terminated), Some(Error), Some(Cancelled)] {
            assert_eq!(
                outcome(Ended::Exited, now, Batch, 0, None),
                Outcome::Nothing
            );
            assert_eq!(
                outcome(Ended::Stopped, now, Inference, 1, None),
                Outcome::Nothing
            );
        }
    }

    #[test]
    fn a_stop_or_a_termination_request_ends_it_as_requested() {
        let reason = ends(outcome(
            Ended::Stopped,
            Some(Running),
            Interactive,
            137,
            None,
        ));
        assert_eq!(reason, "stopped on request");
        // Exited while being terminated: the request, not the exit, is why it ended.
        let reason = ends(outcome(
            Ended::Exited,
            Some(Terminating),
            Inference,
            1,
            None,
        ));
        assert_eq!(reason, "stopped on request");
        let drained = ends(outcome(Ended::Drained, Some(Running), Inference, 137, None));
        assert!(drained.contains("drained"), "{drained}");
    }

    #[test]
    fn a_batch_session_ends_by_its_exit_code_or_its_timeout() {
        let ok = ends(outcome(Ended::Exited, Some(Running), Batch, 0, None));
        assert_eq!(ok, "the startup command succeeded (exit code 0)");
        let failed = ends(outcome(Ended::Exited, Some(Running), Batch, 3, None));
        assert_eq!(failed, "the startup command failed with exit code 3");
        let late = outcome(
            Ended::TimedOut,
            Some(Running),
            Batch,
            143,
            Some(Duration::from_secs(30)),
        );
        assert_eq!(
            ends(late),
            "batch timeout: still running after 30 s, stopped"
        );
    }

    #[test]
    fn an_inference_session_that_exits_restarts_and_others_end() {
        assert_eq!(
            outcome(Ended::Exited, Some(Running), Inference, 1, None),
            Outcome::Restart("the container exited unexpectedly with code 1; restarting".into())
        );
        let reason = ends(outcome(Ended::Exited, Some(Running), Interactive, 0, None));
        assert_eq!(reason, "the container exited with code 0");
    }
}
