//! Commands on a session, recorded: the I/O shell around the pure moves in
//! [`domain::lifecycle`], which this module re-exports so callers keep one path. The moves
//! are recorded with the history rows of the phases they end ([`domain::history`]).

pub use domain::lifecycle::*;

use std::collections::HashMap;
use std::sync::Mutex;

use uuid::Uuid;

use crate::aggregate::{SessionState, StreamState};
use crate::catalogue::Event;
use crate::store::ExpectedVersion;
use crate::RecordedEvent;

/// Why a command on a session did not happen. `E` is why its decision refused: the domain's
/// [`TransitionError`], or a caller's own error that carries it besides refusals of its own.
#[derive(Debug, thiserror::Error)]
pub enum CommandError<E = TransitionError> {
    #[error("no session has the id {0}")]
    NotFound(uuid::Uuid),
    #[error(transparent)]
    Refused(E),
    #[error(transparent)]
    Ledger(#[from] crate::ledger::LedgerError),
}

impl From<TransitionError> for CommandError {
    fn from(e: TransitionError) -> Self {
        CommandError::Refused(e)
    }
}

/// Runs a command on a session: folds its stream, lets `decide` turn the state into events,
/// and records them expecting the version it read. A concurrent change makes it re-read and
/// decide again (never overwrite). Returns the state after the command; `decide` may return
/// no events, and then nothing is recorded. `decide` refuses with the domain's
/// [`TransitionError`] or with an error of the caller's that can hold one (a caller's own
/// rule, such as whose session it is, refused in its own words).
pub async fn command<F, E>(
    pool: &deadpool_postgres::Pool,
    session_id: Uuid,
    metadata: &crate::Metadata,
    decide: F,
) -> Result<SessionState, CommandError<E>>
where
    F: FnMut(&SessionState) -> Result<Vec<Event>, E>,
    E: From<TransitionError>,
{
    command_on(pool, None, session_id, metadata, decide).await
}

/// [`command`] for a process that commands the same sessions again and again (the recorder,
/// six reports a session): what it knows of a session (`known`) stands in for reading its
/// stream, and the command is recorded once for its cause (`metadata.causation_id`): when the
/// stream holds an event of that cause already, nothing is decided or recorded and the state
/// is returned as it is.
///
/// What is known is only ever a guess. A decision on it is recorded expecting the version it
/// was known at, so a stream that moved on since (another process, another replica) is a
/// conflict, and the stream is read; a refusal, or no events, is decided again on the stream
/// as read. So nothing but a recorded command is ever answered from what is known.
pub async fn command_once<F, E>(
    pool: &deadpool_postgres::Pool,
    known: &Known,
    session_id: Uuid,
    metadata: &crate::Metadata,
    decide: F,
) -> Result<SessionState, CommandError<E>>
where
    F: FnMut(&SessionState) -> Result<Vec<Event>, E>,
    E: From<TransitionError>,
{
    command_on(pool, Some(known), session_id, metadata, decide).await
}

async fn command_on<F, E>(
    pool: &deadpool_postgres::Pool,
    known: Option<&Known>,
    session_id: Uuid,
    metadata: &crate::Metadata,
    mut decide: F,
) -> Result<SessionState, CommandError<E>>
where
    F: FnMut(&SessionState) -> Result<Vec<Event>, E>,
    E: From<TransitionError>,
{
    let stream = crate::catalogue::stream_id("session", session_id);
    let cause = metadata.causation_id;
    // What a command ends on is known from then on (by a process that keeps what it knows).
    let keep = |session: Session| match known {
        Some(known) => known.keep(session_id, session),
        None => session.state,
    };
    // A guess is used once: whatever else becomes of the command, the stream is read.
    if let Some(guess) = known.and_then(|known| known.take(session_id)) {
        let new_cause = cause.is_none_or(|c| !guess.causes.contains(&c));
        let decided = if new_cause {
            decide(&guess.state).ok()
        } else {
            None
        };
        if let Some(events) = decided.filter(|events| !events.is_empty()) {
            match record(pool, &stream, guess, events, metadata).await {
                Ok(after) => return Ok(keep(after)),
                // The stream moved on since: read below.
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let store = crate::EventStore::new(pool.clone());
    let mut tries = 0;
    loop {
        let recorded = store
            .read_stream(&stream)
            .await
            .map_err(crate::ledger::LedgerError::from)?;
        let Some(read) = Session::read(&recorded) else {
            return Err(CommandError::NotFound(session_id));
        };
        let done = known.is_some() && cause.is_some_and(|c| read.causes.contains(&c));
        let decided = if done {
            Ok(Vec::new())
        } else {
            decide(&read.state)
        };
        let events = match decided {
            Ok(events) => events,
            Err(refused) => {
                keep(read);
                return Err(CommandError::Refused(refused));
            }
        };
        if events.is_empty() {
            return Ok(keep(read));
        }
        match record(pool, &stream, read, events, metadata).await {
            Ok(after) => return Ok(keep(after)),
            Err(e) if e.is_conflict() && tries < 8 => tries += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Records `events` decided on `before`, with the history rows of the phases they end,
/// expecting `before`'s version; returns the session after them.
async fn record(
    pool: &deadpool_postgres::Pool,
    stream: &str,
    before: Session,
    events: Vec<Event>,
    metadata: &crate::Metadata,
) -> Result<Session, crate::ledger::LedgerError> {
    // Every phase the moves end gets its history row, in the same append.
    let events = domain::history::with_phases(&before.state, events, chrono::Utc::now());
    let expected = ExpectedVersion::Exact(before.version);
    let appended = crate::ledger::record_now(pool, stream, expected, &events, metadata).await?;
    let mut after = before;
    for event in &events {
        after.state = after.state.recorded(event, appended.recorded_at);
    }
    after.version = appended.stream_version;
    after.causes.extend(metadata.causation_id);
    Ok(after)
}

/// A session as its stream was read or last recorded: its last version, its state (the fold
/// of its events up to that version) and the causes its events name.
#[derive(Debug, Clone)]
struct Session {
    version: u64,
    state: SessionState,
    causes: Vec<Uuid>,
}

impl Session {
    /// The session `recorded` (a session's whole stream) folds into; `None` when it is not one.
    fn read(recorded: &[RecordedEvent]) -> Option<Session> {
        let version = recorded.last()?.stream_version;
        let StreamState::Session(state) = domain::aggregate::fold(recorded) else {
            return None;
        };
        Some(Session {
            version,
            state: *state,
            causes: recorded
                .iter()
                .filter_map(|e| e.metadata.causation_id)
                .collect(),
        })
    }
}

/// Sessions as one process last read or recorded them, for [`command_once`]: at most
/// [`Known::MOST`], and none that has ended (no command of the process's follows an end).
#[derive(Debug, Default)]
pub struct Known {
    sessions: Mutex<HashMap<Uuid, Session>>,
}

impl Known {
    /// The most sessions known at once; past it, an arbitrary one is forgotten (it is read
    /// again when it is next commanded).
    pub const MOST: usize = 4_096;

    /// Learns session `session_id` from its stream as just read (`recorded`, the whole of
    /// it), and returns the state it folds into (`None`: the stream is not a session's).
    pub fn learn(&self, session_id: Uuid, recorded: &[RecordedEvent]) -> Option<SessionState> {
        Session::read(recorded).map(|session| self.keep(session_id, session))
    }

    /// Whether anything is known of session `session_id`.
    pub fn knows(&self, session_id: Uuid) -> bool {
        self.lock().contains_key(&session_id)
    }

    /// Whether what is known of session `session_id` names an event caused by `cause`.
    pub fn recorded(&self, session_id: Uuid, cause: Uuid) -> bool {
        self.lock()
            .get(&session_id)
            .is_some_and(|session| session.causes.contains(&cause))
    }

    /// Takes what is known of `session_id`: a guess is used once, and what the command that
    /// used it recorded or read is kept in its place.
    fn take(&self, session_id: Uuid) -> Option<Session> {
        self.lock().remove(&session_id)
    }

    /// Keeps `session` (unless it has ended) and returns its state.
    fn keep(&self, session_id: Uuid, session: Session) -> SessionState {
        let mut sessions = self.lock();
        if session.state.status.is_terminal() {
            sessions.remove(&session_id);
            return session.state;
        }
        if sessions.len() >= Self::MOST && !sessions.contains_key(&session_id) {
            if let Some(&any) = sessions.keys().next() {
                sessions.remove(&any);
            }
        }
        let state = session.state.clone();
        sessions.insert(session_id, session);
        state
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Session>> {
        // A panic while holding the map leaves nothing half-written in it.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}
