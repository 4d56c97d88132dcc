//! Passwords and web-console sign-ins: the hashing, and the lookups of who signs in.
//!
//! A password is kept as an Argon2id PHC string (RustCrypto's `argon2`, its default cost:
//! 19 MiB, two passes), never as itself; a console sign-in by the SHA-256 of its token, as
//! an API key is. The rules (a password's length, how long a sign-in lasts) are the domain's
//! (`domain::credentials`). Hashing takes tens of milliseconds of one core on purpose, so it
//! runs on tokio's blocking threads, never on the ones that serve requests, and at most
//! [`hashing_slots`] hashes at once (twice the cores): a flood of sign-ins waits its turn
//! rather than taking 19 MiB and a thread each (the gateway also limits them per address and
//! per email).

use std::sync::LazyLock;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use rand::Rng;
use uuid::Uuid;

use super::keys::{key_digest, KeyOwner};
use super::LedgerError;
use crate::credentials::sign_in_is_live;
use crate::payloads::Role;

/// Hashes `password` with Argon2id and a fresh random salt, into the PHC string the ledger
/// keeps (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`). Blocks its thread for the whole
/// hashing: call it through [`hash_password_off_thread`] from async code.
pub fn hash_password(password: &str) -> String {
    let salt: [u8; 16] = rand::rng().random();
    let salt = SaltString::encode_b64(&salt).expect("16 bytes are a valid salt");
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .expect("the default parameters hash any password of the rule's length")
        .to_string()
}

/// Whether `password` is the one `hash` (a PHC string) was made from. A hash that cannot be
/// read matches nothing. Blocks its thread as [`hash_password`] does.
pub fn verify_password(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// How many hashes may run at once: twice the cores this process may use.
pub fn hashing_slots() -> usize {
    2 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

static HASHING: LazyLock<tokio::sync::Semaphore> =
    LazyLock::new(|| tokio::sync::Semaphore::new(hashing_slots()));

/// A turn to hash, waited for.
async fn hashing_turn() -> tokio::sync::SemaphorePermit<'static> {
    HASHING
        .acquire()
        .await
        .expect("the hashing semaphore is never closed")
}

/// [`hash_password`] on a blocking thread, in its turn.
pub async fn hash_password_off_thread(password: &str) -> String {
    let password = password.to_owned();
    let _turn = hashing_turn().await;
    tokio::task::spawn_blocking(move || hash_password(&password))
        .await
        .expect("hashing does not panic")
}

/// [`verify_password`] on a blocking thread, in its turn; with no hash, checks against one of a password
/// nobody has (and answers false), spending the same work.
pub async fn verify_password_off_thread(hash: Option<String>, password: &str) -> bool {
    let password = password.to_owned();
    let _turn = hashing_turn().await;
    tokio::task::spawn_blocking(move || match hash {
        Some(hash) => verify_password(&hash, &password),
        None => {
            verify_password(&NOBODYS_HASH, &password);
            false
        }
    })
    .await
    .expect("verifying does not panic")
}

/// A hash of a password nobody has, made once with the same parameters as every other:
/// checked against when there is no password to check, so that an unknown email costs the
/// same work as a wrong password and the answer's time does not tell them apart.
static NOBODYS_HASH: LazyLock<String> =
    LazyLock::new(|| hash_password("not the password of anyone"));

/// The user whose email and password these are; `None` for an unknown email, a user with no
/// password set, a disabled user, or a wrong password (alike, and in about the same time).
pub async fn password_owner<C: GenericClient>(
    client: &C,
    email: &str,
    password: &str,
) -> Result<Option<KeyOwner>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT u.user_id, u.role, u.resource_policy, p.password_hash, u.disabled
             FROM ledger.users u LEFT JOIN secrets.password_hashes p USING (user_id)
             WHERE u.email = $1",
            &[&email],
        )
        .await?;
    // A disabled user's password is checked all the same (the same work), then refused.
    let disabled = row.as_ref().is_some_and(|r| r.get::<_, bool>(4));
    let found = row.and_then(|r| {
        let hash: Option<String> = r.get(3);
        hash.map(|hash| {
            let owner = KeyOwner {
                user_id: r.get(0),
                email: email.to_owned(),
                role: Role::parse(r.get(1)).unwrap_or(Role::User),
                resource_policy: r.get(2),
            };
            (owner, hash)
        })
    });
    let (owner, hash) = found.unzip();
    let matches = verify_password_off_thread(hash, password).await;
    let owner = owner.filter(|_| matches && !disabled);
    Ok(owner)
}

/// The hash of `user`'s password, `None` when they have none. In a transaction, the row is
/// locked until it ends (`FOR UPDATE`), so that a change checked against this hash is not
/// raced by another.
pub async fn password_hash<C: GenericClient>(
    client: &C,
    user: Uuid,
) -> Result<Option<String>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT password_hash FROM secrets.password_hashes WHERE user_id = $1 FOR UPDATE",
            &[&user],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Whether `user` has a password set.
pub async fn has_password<C: GenericClient>(client: &C, user: Uuid) -> Result<bool, LedgerError> {
    let row = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM ledger.user_passwords WHERE user_id = $1)",
            &[&user],
        )
        .await?;
    Ok(row.get(0))
}

/// A fresh console token: 32 random bytes as 64 hex digits. Shown once, to the browser.
pub fn new_console_token() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    hex::encode(bytes)
}

/// A console sign-in as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSignIn {
    pub user_id: Uuid,
    pub expires_at: DateTime<Utc>,
}

/// The sign-in `token` opened, whether or not it has expired; `None` when there is none (never
/// made, or signed out).
pub async fn console_sign_in<C: GenericClient>(
    client: &C,
    token: &str,
) -> Result<Option<ConsoleSignIn>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT user_id, expires_at FROM ledger.console_sign_ins WHERE token_sha256 = $1",
            &[&key_digest(token)],
        )
        .await?;
    Ok(row.map(|r| ConsoleSignIn {
        user_id: r.get(0),
        expires_at: r.get(1),
    }))
}

/// The user a console `token` signs in; `None` when it is unknown, signed out or expired, or
/// the user is disabled.
pub async fn console_owner<C: GenericClient>(
    client: &C,
    token: &str,
) -> Result<Option<KeyOwner>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT u.user_id, u.email, u.role, u.resource_policy, c.expires_at
             FROM ledger.console_sign_ins c JOIN ledger.users u USING (user_id)
             WHERE c.token_sha256 = $1 AND NOT u.disabled",
            &[&key_digest(token)],
        )
        .await?;
    Ok(row
        .filter(|r| sign_in_is_live(r.get(4), Utc::now()))
        .map(|r| KeyOwner {
            user_id: r.get(0),
            email: r.get(1),
            role: Role::parse(r.get(2)).unwrap_or(Role::User),
            resource_policy: r.get(3),
        }))
}

/// Keeps `hash` as `user`'s password (the last one set wins), apart from the log: call it in
/// the transaction that records their `UserPasswordSet`, which says only that one was set.
pub async fn keep_password_hash<C: GenericClient>(
    client: &C,
    user: Uuid,
    hash: &str,
) -> Result<(), LedgerError> {
    client
        .execute(
            "INSERT INTO secrets.password_hashes VALUES ($1, $2)
             ON CONFLICT (user_id) DO UPDATE SET password_hash = $2",
            &[&user, &hash],
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_argon2id_salted_afresh_and_verifies_only_its_password() {
        let first = hash_password("correct horse");
        let second = hash_password("correct horse");
        assert!(
            first.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{first}"
        );
        assert_ne!(first, second, "each hash has a salt of its own");
        assert!(!first.contains("correct horse"));
        assert!(verify_password(&first, "correct horse"));
        assert!(verify_password(&second, "correct horse"));
        assert!(!verify_password(&first, "correct horse "));
        assert!(!verify_password("not a PHC string", "correct horse"));
    }

    #[test]
    fn a_console_token_is_32_random_bytes_in_hex() {
        let token = new_console_token();
        assert_eq!(token.len(), 64);
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(token, new_console_token());
        assert_eq!(key_digest(&token).len(), 64);
    }
}
