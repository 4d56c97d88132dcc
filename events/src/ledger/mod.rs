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
//! One room per family of tables ([`Family`]), each holding side by side its two accounts of
//! how its events change its tables, written apart (`apply_sql`, as [`record`] applies them;
//! `apply_in_memory`, as [`replay`] folds the log) and the `COPY` of its tables into the
//! replay's scratch schema:
//!
//! - `accounts`: users, their API keys, passwords, console sign-ins and folders, projects and
//!   their members.
//! - `resources`: resource groups and the projects granted them, resource policies, presets.
//! - `agents`: the agents, their capacity and whether they are offered to the scheduler.
//! - `sessions`: the sessions and their kernels (with the shares these hold on agents).
//! - `apps`: the app proxy's circuits and the apps started in sessions.
//! - `images`: the customized images sessions were committed to.
//! - `launches`: each user's create requests, kept to be launched again, named and pinned.
//!
//! And the corridors that route each event to its family:
//!
//! - [`record`]: append and apply, in the caller's transaction ([`record_now`]: in one of
//!   its own; [`record_many`]: many streams at once, a scheduler's pass).
//! - `fold`: the SQL account, routed by family.
//! - `memory`: the in-memory account, routed by family, for [`replay`] to write out.
//! - [`replay`]: fold the whole log again into a scratch schema and compare.
//! - [`keys`]: the API-key lookup.
//! - [`principals`]: a user's role and projects, as the authorization rule weighs them.
//! - [`credentials`]: passwords (Argon2id) and web-console sign-ins, and who they sign in.

mod accounts;
mod agents;
mod apps;
pub mod credentials;
mod fold;
mod images;
pub mod keys;
mod launches;
mod memory;
pub mod principals;
mod record;
mod replay;
mod resources;
mod sessions;

pub use agents::ever_admitted;
pub use credentials::{console_owner, password_owner};
pub use images::{keep_registry_password, listing_of_column, registry_login};
pub use keys::{
    api_keys_by_prefix, backendai_key_owner, backendai_keypairs, key_digest, key_owner, live_key,
    ApiKeyRecord, BackendAiKeypair, KeyOwner,
};
pub use principals::principal;
pub use record::{record, record_many, record_now, Recording};
pub use replay::{replay, Replay, NOT_COMPARED};

use serde::Serialize;
use tokio_postgres::error::SqlState;

use crate::catalogue::Event;
use crate::store::StoreError;

/// The family of ledger tables an event changes: the room whose two folds apply it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Accounts,
    Resources,
    Agents,
    Sessions,
    Apps,
    Images,
    Launches,
    /// Events the ledger takes no notice of: the services that care fold them themselves
    /// (admissions in the agent's stream by the recorder, idle checks by the idle-reaper,
    /// notifications by the notification service, durable subscriptions in their own streams
    /// by the gateway), and no command decides on them here.
    Ignored,
}

impl Family {
    /// The family of `event`. The match is exhaustive, so a new event does not compile until
    /// it is given a family (or said to be ignored).
    fn of(event: &Event) -> Family {
        match event {
            Event::UserCreated(_)
            | Event::ApiKeyIssued(_)
            | Event::BackendAiKeypairIssued(_)
            | Event::BackendAiKeypairRevoked(_)
            | Event::ProjectCreated(_)
            | Event::UserJoinedProject(_)
            | Event::FolderCreated(_)
            | Event::FolderShared(_)
            | Event::FolderUnshared(_)
            | Event::FolderRenamed(_)
            | Event::FolderTrashed(_)
            | Event::FolderRestored(_)
            | Event::FolderPurged(_)
            | Event::UserPasswordSet(_)
            | Event::ConsoleSignedIn(_)
            | Event::ConsoleSignedOut(_)
            | Event::ApiKeyRevoked(_)
            | Event::UserDisabled(_)
            | Event::UserEnabled(_)
            | Event::UserRoleChanged(_)
            | Event::ConsoleSignedOutEverywhere(_) => Family::Accounts,
            Event::ResourceGroupCreated(_)
            | Event::ResourceGroupSchedulingSet(_)
            | Event::ResourceGroupDefaultsSet(_)
            | Event::ResourceGroupGranted(_)
            | Event::ResourcePolicySet(_)
            | Event::PresetSaved(_) => Family::Resources,
            Event::AgentRegistered(_)
            | Event::AgentHeartbeated(_)
            | Event::AgentLost(_)
            | Event::AgentDeparted(_)
            | Event::AgentReturned(_)
            | Event::AgentRevoked(_) => Family::Agents,
            Event::SessionRequested(_)
            | Event::SchedulingAttempted(_)
            | Event::SessionScheduled(_)
            | Event::SessionStatusChanged(_)
            | Event::SessionRenamed(_)
            | Event::SessionPriorityChanged(_)
            | Event::SessionTerminationRequested(_)
            | Event::SessionResourcesReleased(_)
            | Event::KernelStarted(_)
            | Event::SessionIdleExempted(_)
            | Event::SessionPullProgressed(_)
            | Event::SessionStartEstimated(_)
            | Event::SessionIdleReaped(_) => Family::Sessions,
            Event::AppCircuitOpened(_)
            | Event::AppCircuitClosed(_)
            | Event::AppStartRequested(_)
            | Event::AppStartEnded(_) => Family::Apps,
            Event::SessionCommitRequested(_)
            | Event::SessionCommitProgressed(_)
            | Event::SessionCommitEnded(_)
            | Event::CustomImageRemoved(_)
            | Event::RegistryCredentialSet(_)
            | Event::RegistryCredentialRemoved(_)
            | Event::ImageListingSet(_) => Family::Images,
            Event::LaunchRecorded(_)
            | Event::LaunchRenamed(_)
            | Event::LaunchPinned(_)
            | Event::FitWatchRequested(_)
            | Event::FitWatchFired(_) => Family::Launches,
            Event::AgentAdmitted(_)
            | Event::IdleChecksSet(_)
            | Event::NotificationsRead(_)
            | Event::NotificationWebhookSet(_)
            | Event::NotificationWebhookSecretSet(_)
            | Event::SchedulerWakeupsMissed(_)
            | Event::SubscriptionCreated(_)
            | Event::SubscriptionDeleted(_)
            | Event::EndpointCreated(_)
            | Event::EndpointScaled(_)
            | Event::EndpointReplicaAdded(_)
            | Event::EndpointReplicaRemoved(_)
            | Event::EndpointRouteHealthy(_)
            | Event::EndpointRouteUnhealthy(_)
            | Event::EndpointTokenIssued(_)
            | Event::EndpointAutoscalingSet(_)
            | Event::EndpointUpdated(_)
            | Event::EndpointRouteDraining(_)
            | Event::EndpointDestroyed(_) => Family::Ignored,
        }
    }
}

/// A count or size as the ledger's `bigint` columns hold it (the log's figures fit; a
/// larger one is held at the largest).
fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// An enum's stored name (its serde form), as the ledger's text columns hold it, for the
/// enums that have no `as_str`.
fn name_of<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

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
    #[error("the owner's policy allows {most} {what}, and that many exist or are being made")]
    LimitReached { what: &'static str, most: i64 },
    #[error("database: {}", crate::fault::described(.0))]
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
                .and_then(|d| d.split_once(")=("))
                .and_then(|(_, values)| values.split_once(", "))
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
