//! What agents report, recorded. Each function takes the agent's id from where NATS
//! guarantees it (the subject the agent could publish on), never from the payload, and
//! checks the report against the session's placement and lifecycle before anything is
//! appended. A report carries an id its agent chose; the events it causes carry that id as
//! their `causation_id`, so a report sent again (its answer was lost, or it waited in the
//! agent's outbox) is answered from the log instead of being recorded twice.

use bus::protocol::{Answer, Fact, LiveSession, Offer, Report, SessionView, StartedKernel};
use deadpool_postgres::Pool;
use events::aggregate::{AgentState, ForeignAddress, SessionState};
use events::catalogue::{stream_id, Event};
use events::ledger::{self, LedgerError};
use events::lifecycle::{self, CommandError, Known, TransitionError};
use events::payloads::*;
use events::store::ExpectedVersion;
use events::{EventStore, Metadata};
use tracing::Instrument;
use uuid::Uuid;

use crate::db;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error("session {session} is not placed on agent `{agent}`")]
    NotMine { session: Uuid, agent: String },
    #[error(transparent)]
    NotAdmitted(#[from] events::aggregate::RegistrationRefused),
    #[error(transparent)]
    ForeignAddress(#[from] ForeignAddress),
    #[error("{0}")]
    Invalid(String),
}

impl From<TransitionError> for RecordError {
    fn from(e: TransitionError) -> Self {
        RecordError::Command(CommandError::Refused(e))
    }
}

/// A command on a session refused in the recorder's own words (not the agent's session) is
/// that refusal; anything else is the command's error.
impl From<CommandError<RecordError>> for RecordError {
    fn from(e: CommandError<RecordError>) -> Self {
        match e {
            CommandError::Refused(refused) => refused,
            CommandError::NotFound(id) => RecordError::Command(CommandError::NotFound(id)),
            CommandError::Ledger(e) => RecordError::Command(CommandError::Ledger(e)),
        }
    }
}

/// The stream of agent `agent_id`'s events.
pub(crate) fn agent_stream(agent_id: &str) -> String {
    events::admission::agent_stream(agent_id)
}

fn metadata(agent_id: &str, causation: Option<Uuid>) -> Metadata {
    Metadata {
        causation_id: causation,
        ..events::trace::metadata(&format!("agent:{agent_id}"), None)
    }
}

/// Registers (or re-registers) agent `agent_id` with what it offers, if it was admitted to
/// that group with at least that capacity.
pub async fn register(pool: &Pool, agent_id: &str, offer: &Offer) -> Result<(), RecordError> {
    crate::admission::agent_state(pool, agent_id)
        .await?
        .may_register(&offer.resource_group, offer.capacity)?;
    AgentState::may_offer_address(offer.address.as_deref())?;
    let event = Event::AgentRegistered(AgentRegistered {
        agent_id: agent_id.to_owned(),
        resource_group: offer.resource_group.clone(),
        capacity: offer.capacity,
        images: offer.images.clone(),
        address: offer.address.clone(),
        image_apps: offer.image_apps.clone(),
        network_scope: offer.network_scope.clone(),
        volumes: offer.volumes.clone(),
        unlabelled_images: offer.unlabelled_images.clone(),
    });
    ledger::record_now(
        pool,
        &agent_stream(agent_id),
        ExpectedVersion::Any,
        &[event],
        &metadata(agent_id, None),
    )
    .await?;
    Ok(())
}

/// Records that agent `agent_id` departed, for `reason` (its own words): from now on the
/// scheduler passes it over, as a lost agent, until it registers again. Its sessions are left
/// as they are: their containers keep running and the agent adopts them when it returns.
/// Refused for an agent not admitted (or revoked).
pub async fn depart(pool: &Pool, agent_id: &str, reason: &str) -> Result<(), RecordError> {
    crate::admission::agent_state(pool, agent_id)
        .await?
        .may_depart()?;
    let event = Event::AgentDeparted(AgentDeparted {
        agent_id: agent_id.to_owned(),
        reason: reason.to_owned(),
    });
    ledger::record_now(
        pool,
        &agent_stream(agent_id),
        ExpectedVersion::Any,
        &[event],
        &metadata(agent_id, None),
    )
    .await?;
    tracing::info!(agent = %agent_id, %reason, "an agent departed");
    Ok(())
}

/// Moves a session placed on `agent_id` to `to` (with the reason, and the exit code of a
/// batch session). Refused when the session is not on this agent or the move is not
/// allowed.
pub async fn move_session(
    pool: &Pool,
    agent_id: &str,
    session_id: Uuid,
    to: SessionStatus,
    reason: Option<String>,
    exit_code: Option<i32>,
) -> Result<SessionState, RecordError> {
    let metadata = metadata(agent_id, None);
    let fact = Fact::Moved {
        to,
        reason,
        exit_code,
        at: None,
    };
    record_fact(
        pool,
        &Known::default(),
        agent_id,
        session_id,
        &fact,
        &metadata,
    )
    .await
}

/// Records kernels an agent started (`KernelStarted` each) and, once every kernel of the
/// session has started, its move to RUNNING. Refused for a kernel not placed on the agent.
pub async fn kernels_started(
    pool: &Pool,
    agent_id: &str,
    session_id: Uuid,
    kernels: &[StartedKernel],
    metadata: &Metadata,
) -> Result<SessionState, RecordError> {
    let fact = Fact::KernelsStarted {
        kernels: kernels.to_vec(),
    };
    record_fact(
        pool,
        &Known::default(),
        agent_id,
        session_id,
        &fact,
        metadata,
    )
    .await
}

/// Which agents may report a fact about a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reporter {
    /// Only the agent of its main kernel, which moves it through its statuses.
    Main,
    /// Any agent holding one of its kernels.
    AnyKernel,
}

impl Reporter {
    /// Who may report `fact`: kernels started, any agent holding them; everything else, only
    /// the main kernel's agent.
    fn of(fact: &Fact) -> Reporter {
        match fact {
            Fact::KernelsStarted { .. } => Reporter::AnyKernel,
            _ => Reporter::Main,
        }
    }

    fn may_report(self, state: &SessionState, agent_id: &str) -> bool {
        match self {
            Reporter::Main => state.main_on(agent_id),
            Reporter::AnyKernel => state.placed_on(agent_id),
        }
    }
}

/// Records `report` from `agent_id` once, and says what became of it. A database that
/// cannot be reached is an error (the recorder answers "unavailable" and the agent asks
/// again); everything else is an answer. `known`: the sessions this recorder last read or
/// recorded, whose next report is decided without reading their streams again
/// ([`lifecycle::command_once`]).
pub async fn report(
    pool: &Pool,
    known: &Known,
    agent_id: &str,
    report: &Report,
) -> Result<Answer, RecordError> {
    let span = tracing::info_span!("report", agent = %agent_id, session = %report.session_id, report = %report.report_id);
    events::trace::follow(&span, report.traceparent.as_deref());
    record_report(pool, known, agent_id, report)
        .instrument(span)
        .await
}

async fn record_report(
    pool: &Pool,
    known: &Known,
    agent_id: &str,
    report: &Report,
) -> Result<Answer, RecordError> {
    let session_id = report.session_id;
    // A report sent again is answered from the log, before anything of it is kept. Of a
    // session this recorder knows, a report it has not recorded is asked about by the
    // command itself, in the stream it reads only when its guess was stale
    // (`command_once`); an app's secret is kept before the command, so its report is
    // always asked about first (an older report sent again must not replace a newer secret).
    let keeps_a_secret = matches!(report.fact, Fact::AppStartEnded { .. });
    if keeps_a_secret || !known.knows(session_id) || known.recorded(session_id, report.report_id) {
        if let Some(status) = db::recorded_status(pool, session_id, report.report_id).await? {
            return Ok(Answer::Recorded { status });
        }
    }
    let metadata = metadata(agent_id, Some(report.report_id));
    let result = record_fact(pool, known, agent_id, session_id, &report.fact, &metadata).await;
    match result {
        Ok(state) => Ok(Answer::Recorded {
            status: state.status,
        }),
        Err(RecordError::NotMine { session, agent }) => Ok(Answer::Denied {
            reason: format!("session {session} is not placed on agent `{agent}`"),
        }),
        Err(RecordError::ForeignAddress(foreign)) => {
            tracing::warn!(agent = %agent_id, %session_id, error = %foreign, "a kernel's address refused");
            Ok(Answer::Denied {
                reason: foreign.to_string(),
            })
        }
        Err(RecordError::Command(CommandError::NotFound(id))) => Ok(Answer::Denied {
            reason: format!("no session has the id {id}"),
        }),
        Err(RecordError::Command(CommandError::Refused(why))) => {
            // The same report, racing its own retry, may have been recorded meanwhile.
            match db::recorded_status(pool, session_id, report.report_id).await? {
                Some(status) => Ok(Answer::Recorded { status }),
                None => Ok(Answer::Refused {
                    reason: why.to_string(),
                }),
            }
        }
        Err(e) => Err(e),
    }
}

/// Records `fact` about a session from `agent_id`: a move, or several, and a commit's steps
/// only from the agent of its main kernel; kernels started from any agent holding them.
async fn record_fact(
    pool: &Pool,
    known: &Known,
    agent_id: &str,
    session_id: Uuid,
    fact: &Fact,
    metadata: &Metadata,
) -> Result<SessionState, RecordError> {
    if let Fact::AppStartEnded {
        app,
        outcome: AppStartOutcome::Started { token: Some(token) },
        ..
    } = fact
    {
        keep_app_token(pool, known, agent_id, session_id, app, token).await?;
    }
    let who = Reporter::of(fact);
    if let Fact::KernelsStarted { kernels } = fact {
        // The proxy dials the address a kernel is published at: only the agent's own. A
        // kernel published at none (on the agent's host alone) needs no read of the agent.
        let published: Vec<&str> = kernels
            .iter()
            .filter_map(|k| k.address.as_deref())
            .collect();
        if !published.is_empty() {
            let agent = crate::admission::agent_state(pool, agent_id).await?;
            for address in published {
                agent.may_publish_on(Some(address))?;
            }
        }
    }
    let state = lifecycle::command_once(pool, known, session_id, metadata, |state| {
        if !who.may_report(state, agent_id) {
            return Err(not_mine(session_id, agent_id));
        }
        decide(state, agent_id, session_id, fact)
    })
    .await?;
    Ok(state)
}

/// Keeps the secret app `app` of the session was started with apart from the log (the event
/// says only that one was kept), for the app proxy to hand it; only from an agent the session
/// is placed on. Kept before the event is recorded, so that the proxy finds it as soon as the
/// event says the app started; a start that then records nothing leaves a secret of that same
/// session's app, which nothing else reads.
async fn keep_app_token(
    pool: &Pool,
    known: &Known,
    agent_id: &str,
    session_id: Uuid,
    app: &str,
    token: &str,
) -> Result<(), RecordError> {
    if session_for(pool, known, agent_id, session_id)
        .await?
        .is_none()
    {
        return Err(not_mine(session_id, agent_id));
    }
    db::keep_app_token(pool, session_id, app, token).await?;
    Ok(())
}

fn not_mine(session: Uuid, agent_id: &str) -> RecordError {
    RecordError::NotMine {
        session,
        agent: agent_id.to_owned(),
    }
}

/// The events `fact` from `agent_id` makes of the session's `state`. Pure.
fn decide(
    state: &SessionState,
    agent_id: &str,
    session_id: Uuid,
    fact: &Fact,
) -> Result<Vec<Event>, RecordError> {
    let events = match fact {
        Fact::KernelsStarted { kernels } => {
            if !kernels.iter().all(|k| state.kernel_on(k.kernel, agent_id)) {
                return Err(not_mine(session_id, agent_id));
            }
            let started: Vec<KernelStarted> = kernels
                .iter()
                .map(|k| KernelStarted {
                    session_id,
                    kernel: k.kernel,
                    agent_id: agent_id.to_owned(),
                    container_id: k.container_id.clone(),
                    ports: k.ports.clone(),
                    hostname: k.hostname.clone(),
                    address: k.address.clone(),
                    started_at: k.started_at,
                })
                .collect();
            state.start_kernels(&started)
        }
        Fact::Moved {
            to,
            reason,
            exit_code,
            at,
        } => state.transition_at(*to, reason.clone(), *exit_code, *at),
        Fact::MovedThrough { through } => state.transition_through(through),
        Fact::PullProgressed {
            image,
            current_bytes,
            total_bytes,
            layers_done,
            layers,
        } => state.pull_progressed(
            image.clone(),
            *current_bytes,
            *total_bytes,
            *layers_done,
            *layers,
        ),
        Fact::CommitProgressed {
            commit_id,
            step,
            detail,
        } => state.commit_progressed(*commit_id, *step, detail.clone()),
        Fact::CommitEnded { commit_id, outcome } => {
            state.end_commit(*commit_id, agent_id, outcome.clone())
        }
        Fact::AppStartEnded {
            start_id,
            app,
            outcome,
        } => state.end_app_start(*start_id, app.clone(), outcome.clone()),
    }?;
    Ok(events)
}

/// The session and the trace it belongs to, when a kernel of it is placed on `agent_id`.
/// What was read is `known` from then on: an agent asks before it reports.
pub async fn session_for(
    pool: &Pool,
    known: &Known,
    agent_id: &str,
    session_id: Uuid,
) -> Result<Option<SessionView>, RecordError> {
    let recorded = EventStore::new(pool.clone())
        .read_stream(&stream_id("session", session_id))
        .await
        .map_err(LedgerError::from)?;
    let traceparent = recorded
        .first()
        .and_then(|first| first.metadata.traceparent.clone());
    Ok(match known.learn(session_id, &recorded) {
        Some(state) if state.placed_on(agent_id) => Some(SessionView { state, traceparent }),
        _ => None,
    })
}

/// The live sessions with kernels on `agent_id`: those it runs (main) and the other agents'
/// clusters it holds kernels of that are still going.
pub async fn live_sessions(pool: &Pool, agent_id: &str) -> Result<Vec<LiveSession>, RecordError> {
    Ok(db::live_sessions(pool, agent_id).await?)
}
