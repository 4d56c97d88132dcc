//! The ledger: the tables commands decide on, changed in the same transaction as the append
//! of the events that change them.
//!
//! Projections read the log behind the horizon and lag it a little; a command cannot wait
//! for them. Is this name taken among the owner's live sessions? Does the agent still have
//! two cores free? Which API key is this? The ledger answers at once and exactly, because
//! [`record`] appends the events and applies them to these tables in one transaction.
//! Two schedulers racing for the last core meet here: the reserving update is conditional,
//! the loser's transaction fails, and nothing of it is written. Every table can be folded
//! again from the log: [`replay`] does so into a scratch copy and compares it with the live
//! tables (`berth replay ledger`).

//!
//! - [`record`]: append and apply, in the caller's transaction ([`record_now`]: in one of
//!   its own).
//! - `fold`: how each event changes the tables, as [`record`] applies it.
//! - `memory`: the same folded in memory, for [`replay`] to write out with `COPY` and compare.
//! - [`replay`]: fold the whole log again into a scratch schema and compare.
//! - [`keys`]: the API-key lookup.

mod fold;
pub mod keys;
mod memory;
mod record;
mod replay;

pub use keys::{key_digest, key_owner, KeyOwner};
pub use record::{record, record_now};
pub use replay::{replay, Replay};

use tokio_postgres::error::SqlState;

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the owner already has a live session named `{0}`")]
    NameTaken(String),
    #[error("agent `{0}` does not have the resources free any more")]
    AgentFull(String),
    #[error("{what} `{name}` already exists")]
    Exists { what: &'static str, name: String },
    #[error("database: {0}")]
    Database(tokio_postgres::Error),
    #[error("database pool: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
}

impl From<tokio_postgres::Error> for LedgerError {
    fn from(e: tokio_postgres::Error) -> Self {
        let db = e.as_db_error();
        if e.code() == Some(&SqlState::UNIQUE_VIOLATION)
            && db.and_then(|d| d.constraint()) == Some("sessions_live_name")
        {
            // The detail reads `Key (owner, name)=(<uuid>, <name>) already exists.`
            let name = db
                .and_then(|d| d.detail())
                .and_then(|d| d.split_once(", "))
                .and_then(|(_, rest)| rest.split_once(") already exists"))
                .map(|(name, _)| name.to_owned())
                .unwrap_or_default();
            return LedgerError::NameTaken(name);
        }
        if e.code() == Some(&SqlState::UNIQUE_VIOLATION)
            && db.and_then(|d| d.constraint()) == Some("circuits_port_key")
        {
            return LedgerError::Exists {
                what: "circuit on port",
                name: db.and_then(|d| d.detail()).unwrap_or_default().to_owned(),
            };
        }
        LedgerError::Database(e)
    }
}

impl LedgerError {
    /// Whether PostgreSQL was unavailable (an outage, not a mistake): nothing was written,
    /// and the same request may succeed once it is back.
    pub fn is_unavailable(&self) -> bool {
        match self {
            LedgerError::Store(e) => e.is_unavailable(),
            LedgerError::Database(e) => crate::fault::postgres_unavailable(e),
            LedgerError::Pool(e) => crate::fault::pool_unavailable(e),
            _ => false,
        }
    }

    /// Whether the caller should re-read and decide again (a race, not a mistake).
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            LedgerError::Store(StoreError::Conflict { .. }) | LedgerError::AgentFull(_)
        )
    }

    /// Whether this is only the echo of an earlier failure in the same transaction
    /// ("current transaction is aborted"): statements pipelined behind the one that failed
    /// all fail this way, and the cause is that one's error.
    pub fn is_aborted_transaction(&self) -> bool {
        let code = match self {
            LedgerError::Database(e) | LedgerError::Store(StoreError::Database(e)) => e.code(),
            _ => None,
        };
        code == Some(&SqlState::IN_FAILED_SQL_TRANSACTION)
    }

    /// The error that caused the others among `errors` (one that is not the echo of an
    /// aborted transaction), or any of them.
    pub fn cause(errors: impl IntoIterator<Item = LedgerError>) -> Option<LedgerError> {
        let mut echo = None;
        for e in errors {
            if !e.is_aborted_transaction() {
                return Some(e);
            }
            echo.get_or_insert(e);
        }
        echo
    }
}
