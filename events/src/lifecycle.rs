//! Commands on a session, recorded: the I/O shell around the pure moves in
//! [`domain::lifecycle`], which this module re-exports so callers keep one path. The moves
//! are recorded with the history rows of the phases they end ([`domain::history`]).

pub use domain::lifecycle::*;

use crate::aggregate::SessionState;
use crate::catalogue::Event;

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
    session_id: uuid::Uuid,
    metadata: &crate::Metadata,
    mut decide: F,
) -> Result<SessionState, CommandError<E>>
where
    F: FnMut(&SessionState) -> Result<Vec<Event>, E>,
    E: From<TransitionError>,
{
    let store = crate::EventStore::new(pool.clone());
    let stream = crate::catalogue::stream_id("session", session_id);
    let mut tries = 0;
    loop {
        let recorded = store
            .read_stream(&stream)
            .await
            .map_err(crate::ledger::LedgerError::from)?;
        let Some(last) = recorded.last() else {
            return Err(CommandError::NotFound(session_id));
        };
        let version = last.stream_version;
        let domain::aggregate::StreamState::Session(state) = domain::aggregate::fold(&recorded)
        else {
            return Err(CommandError::NotFound(session_id));
        };
        let events = decide(&state).map_err(CommandError::Refused)?;
        if events.is_empty() {
            return Ok(*state);
        }
        // Every phase the moves end gets its history row, in the same append.
        let events = domain::history::with_phases(&state, events, chrono::Utc::now());
        let expected = crate::ExpectedVersion::Exact(version);
        match crate::ledger::record_now(pool, &stream, expected, &events, metadata).await {
            Ok(_) => {
                let mut state = *state;
                for e in &events {
                    state = state.evolve(e);
                }
                return Ok(state);
            }
            Err(e) if e.is_conflict() && tries < 8 => tries += 1,
            Err(e) => return Err(e.into()),
        }
    }
}
