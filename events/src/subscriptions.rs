//! Durable subscriptions to the log, recorded: made (`SubscriptionCreated`) and deleted
//! (`SubscriptionDeleted`) in a stream of their own, against its version, so two makings of a
//! name cannot both land; read back by folding those streams (`domain::subscriptions`). A
//! subscription read over NATS gets an nkey whose seed is shown once and whose public half is
//! recorded, as an agent's is.
//!
//! Here, in the backbone, because two parts read it: the gateway, which makes, lists and
//! serves subscriptions, and the control plane's NATS authority, which lets the NATS readers
//! in (`berth/src/nats_authority.rs`).

use deadpool_postgres::Pool;
use domain::event_filter::EventFilter;
use domain::subscriptions::{self as rules, Subscription};
use uuid::Uuid;

use crate::catalogue::Event;
use crate::ledger::{self, LedgerError};
use crate::payloads::{SubscriptionCreated, SubscriptionDeleted};
use crate::store::{ExpectedVersion, StoreError};
use crate::EventStore;

#[derive(Debug, thiserror::Error)]
pub enum SubscriptionError {
    /// Bad input: `field` names it.
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("you already have a subscription named `{0}`")]
    Exists(String),
    #[error("you have no subscription named `{0}`")]
    Unknown(String),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl From<StoreError> for SubscriptionError {
    fn from(e: StoreError) -> Self {
        SubscriptionError::Ledger(e.into())
    }
}

impl From<deadpool_postgres::PoolError> for SubscriptionError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        SubscriptionError::Ledger(e.into())
    }
}

/// What a user asks for when making a subscription.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSubscription {
    pub owner: Uuid,
    pub name: String,
    pub filter: EventFilter,
    pub from_start: bool,
    /// Read over NATS too: a NATS user of its own is made for it.
    pub nats: bool,
}

/// `owner`'s subscription `name`'s stream, folded.
async fn folded(
    pool: &Pool,
    owner: Uuid,
    name: &str,
) -> Result<(Option<Subscription>, Option<u64>), SubscriptionError> {
    let stream = EventStore::new(pool.clone())
        .read_stream(&rules::stream_of(owner, name))
        .await?;
    Ok(rules::fold(&stream))
}

fn checked_name(name: &str) -> Result<(), SubscriptionError> {
    if rules::is_valid_name(name) {
        return Ok(());
    }
    Err(SubscriptionError::Invalid {
        field: "name",
        message: format!(
            "`{name}`: 1 to {} lowercase letters, digits, `-` and `_`, starting with a letter \
             or a digit",
            rules::MOST_NAME_CHARS
        ),
    })
}

/// Whether `owner` may make a subscription named `name`: a name a subscription can have, not
/// one of a live subscription of theirs. The version of its stream (`None`: no stream yet),
/// against which the making is recorded.
pub async fn check_new(
    pool: &Pool,
    owner: Uuid,
    name: &str,
) -> Result<Option<u64>, SubscriptionError> {
    checked_name(name)?;
    match folded(pool, owner, name).await? {
        (Some(_), _) => Err(SubscriptionError::Exists(name.to_owned())),
        (None, version) => Ok(version),
    }
}

/// Records the subscription `new` asks for, refused as [`check_new`] says (also when another
/// making of it lands first); what was recorded, and the seed of its NATS user, which is
/// recorded nowhere.
pub async fn create(
    pool: &Pool,
    new: NewSubscription,
    by: &str,
) -> Result<(Subscription, Option<String>), SubscriptionError> {
    let version = check_new(pool, new.owner, &new.name).await?;
    let key = new.nats.then(nkeys::KeyPair::new_user);
    let seed = key
        .as_ref()
        .map(|key| key.seed().expect("a new user key has a seed"));
    let event = Event::SubscriptionCreated(SubscriptionCreated {
        subscription_id: Uuid::now_v7(),
        owner: new.owner,
        name: new.name.clone(),
        filter: new.filter,
        from_start: new.from_start,
        nats_key: key.map(|key| key.public_key()),
    });
    let expected = version.map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact);
    let stream = rules::stream_of(new.owner, &new.name);
    match ledger::record_now(
        pool,
        &stream,
        expected,
        &[event],
        &crate::trace::metadata(by, None),
    )
    .await
    {
        Err(LedgerError::Store(StoreError::Conflict { .. })) => {
            return Err(SubscriptionError::Exists(new.name))
        }
        other => other?,
    };
    Ok((one(pool, new.owner, &new.name).await?, seed))
}

/// `owner`'s live subscription `name` (a name no subscription can have is as unknown as any).
pub async fn one(pool: &Pool, owner: Uuid, name: &str) -> Result<Subscription, SubscriptionError> {
    if !rules::is_valid_name(name) {
        return Err(SubscriptionError::Unknown(name.to_owned()));
    }
    folded(pool, owner, name)
        .await?
        .0
        .ok_or_else(|| SubscriptionError::Unknown(name.to_owned()))
}

/// Deletes `owner`'s live subscription `name`; what it was.
pub async fn delete(
    pool: &Pool,
    owner: Uuid,
    name: &str,
    by: &str,
) -> Result<Subscription, SubscriptionError> {
    let live = one(pool, owner, name).await?;
    let event = Event::SubscriptionDeleted(SubscriptionDeleted {
        subscription_id: live.created.subscription_id,
        name: name.to_owned(),
    });
    let stream = rules::stream_of(owner, name);
    match ledger::record_now(
        pool,
        &stream,
        ExpectedVersion::Exact(live.version),
        &[event],
        &crate::trace::metadata(by, None),
    )
    .await
    {
        // Deleted (or made again) meanwhile: what this one meant to delete is gone.
        Err(LedgerError::Store(StoreError::Conflict { .. })) => {
            Err(SubscriptionError::Unknown(name.to_owned()))
        }
        other => other.map(|_| live).map_err(Into::into),
    }
}

/// `owner`'s live subscriptions, by name.
pub async fn of_owner(pool: &Pool, owner: Uuid) -> Result<Vec<Subscription>, SubscriptionError> {
    let client = pool.get().await?;
    let events = crate::store::read_streams_with_prefix(
        &client,
        rules::CATEGORY,
        &format!("{}-", rules::stream_prefix(owner)),
    )
    .await?;
    Ok(rules::live_among(&events))
}

/// Every live subscription read over NATS: what the NATS server's authorization lets in.
pub async fn nats_readers(pool: &Pool) -> Result<Vec<Subscription>, SubscriptionError> {
    let client = pool.get().await?;
    let events =
        crate::store::read_streams_with_prefix(&client, rules::CATEGORY, rules::CATEGORY).await?;
    Ok(rules::live_among(&events)
        .into_iter()
        .filter(|s| s.created.nats_key.is_some())
        .collect())
}
