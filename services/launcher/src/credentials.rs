//! Passwords and web-console sign-ins, each change an event: `UserPasswordSet` (by an admin,
//! `berth admin set-password`, or by the user, `PUT /v1/whoami/password`) on the user's
//! stream; `ConsoleSignedIn` and `ConsoleSignedOut` on the user's `console-<user>` stream,
//! kept as security records. A password set signs its user out everywhere
//! (`ConsoleSignedOutEverywhere`, in the same transaction): a sign-in made with the old one,
//! perhaps by whoever learnt it, ends with it. Hashing and the lookups are `events::ledger::credentials`'; the
//! password rule and a sign-in's lifetime are the domain's (`domain::credentials`).

use chrono::{DurationRound, TimeDelta, Utc};
use deadpool_postgres::Pool;
use events::catalogue::{stream_id, Event};
use events::credentials::{check_password, console_expiry};
use events::ledger::credentials::{
    console_sign_in, hash_password_off_thread, new_console_token, password_hash,
    verify_password_off_thread,
};
use events::ledger::{self, key_digest};
use events::payloads::{
    ConsoleSignedIn, ConsoleSignedOut, ConsoleSignedOutEverywhere, SignInMethod, SignOutReason,
    UserPasswordSet,
};
use events::store::ExpectedVersion;
use uuid::Uuid;

use crate::access::{admin_metadata, user_id_of, AccessError};

fn invalid(e: events::credentials::PasswordError) -> AccessError {
    AccessError::Invalid {
        field: e.field,
        message: e.message,
    }
}

/// An admin sets the password of the user with `email` (whether or not they had one);
/// returns the user's id. The password is checked against the rule (field `password`).
pub async fn set_password(pool: &Pool, email: &str, password: &str) -> Result<Uuid, AccessError> {
    check_password("password", password).map_err(invalid)?;
    let user_id = user_id_of(pool, email).await?;
    let hash = hash_password_off_thread(password).await;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    record_password(&tx, user_id, hash, &admin_metadata()).await?;
    events::activity::commit(tx).await?;
    Ok(user_id)
}

/// A user changes their own password to `new` (field `new`). When they have one, `current`
/// must be it: missing or wrong, the change is refused as [`AccessError::Forbidden`] naming
/// `current`; when they have none, `current` is not looked at. The check and the change are
/// one transaction holding the password's row, so two changes from the same current password
/// cannot both pass.
pub async fn change_password(
    pool: &Pool,
    user_id: Uuid,
    current: Option<&str>,
    new: &str,
) -> Result<(), AccessError> {
    check_password("new", new).map_err(invalid)?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    if let Some(hash) = password_hash(&tx, user_id).await? {
        let forbidden = |message: &str| AccessError::Forbidden {
            field: "current",
            message: message.to_owned(),
        };
        let current = current
            .ok_or_else(|| forbidden("you have a password: give it as `current` to change it"))?;
        if !verify_password_off_thread(Some(hash), current).await {
            return Err(forbidden("is not your current password"));
        }
    }
    let hash = hash_password_off_thread(new).await;
    let metadata = events::trace::metadata(&user_id.to_string(), None);
    record_password(&tx, user_id, hash, &metadata).await?;
    events::activity::commit(tx).await?;
    Ok(())
}

/// Records `user_id`'s new password `hash` and signs them out everywhere, in `tx`.
async fn record_password(
    tx: &deadpool_postgres::Transaction<'_>,
    user_id: Uuid,
    hash: String,
    metadata: &events::Metadata,
) -> Result<(), AccessError> {
    // The hash is kept apart from the log, in the same transaction as the event saying so.
    events::ledger::credentials::keep_password_hash(tx, user_id, &hash).await?;
    let set = Event::UserPasswordSet(UserPasswordSet { user_id });
    ledger::record(
        tx,
        &stream_id("user", user_id),
        ExpectedVersion::Any,
        &[set],
        metadata,
    )
    .await?;
    let out = Event::ConsoleSignedOutEverywhere(ConsoleSignedOutEverywhere {
        user_id,
        reason: SignOutReason::PasswordChanged,
    });
    ledger::record(
        tx,
        &stream_id("console", user_id),
        ExpectedVersion::Any,
        &[out],
        metadata,
    )
    .await?;
    Ok(())
}

/// Signs `user_id` in to the web console, having proved who they are `how` (the caller
/// checked it: `events::ledger::key_owner` or `events::ledger::password_owner`). Returns the
/// session's token, shown only now (the ledger keeps its SHA-256); it is honoured by
/// `events::ledger::console_owner` for `domain::credentials::CONSOLE_SIGN_IN_HOURS` hours, or
/// until [`sign_out`].
pub async fn sign_in(pool: &Pool, user_id: Uuid, how: SignInMethod) -> Result<String, AccessError> {
    let token = new_console_token();
    // Whole seconds: what a cookie's `Expires` can say.
    let now = Utc::now();
    let now = now.duration_trunc(TimeDelta::seconds(1)).unwrap_or(now);
    let event = Event::ConsoleSignedIn(ConsoleSignedIn {
        user_id,
        token_sha256: key_digest(&token),
        expires_at: console_expiry(now),
        how,
    });
    let metadata = events::trace::metadata(&user_id.to_string(), None);
    ledger::record_now(
        pool,
        &stream_id("console", user_id),
        ExpectedVersion::Any,
        &[event],
        &metadata,
    )
    .await?;
    Ok(token)
}

/// Ends the console session `token` opened; `false` when there is none (unknown, or signed
/// out already), in which case nothing is recorded. An expired one is signed out too.
pub async fn sign_out(pool: &Pool, token: &str) -> Result<bool, AccessError> {
    let client = pool.get().await?;
    let Some(signed_in) = console_sign_in(&client, token).await? else {
        return Ok(false);
    };
    drop(client);
    let user_id = signed_in.user_id;
    let event = Event::ConsoleSignedOut(ConsoleSignedOut {
        user_id,
        token_sha256: key_digest(token),
    });
    let metadata = events::trace::metadata(&user_id.to_string(), None);
    ledger::record_now(
        pool,
        &stream_id("console", user_id),
        ExpectedVersion::Any,
        &[event],
        &metadata,
    )
    .await?;
    Ok(true)
}
