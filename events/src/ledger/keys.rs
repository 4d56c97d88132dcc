//! API keys: the digest the ledger keeps, and the lookup of a key's owner. A key is honoured
//! only while it is not revoked, not expired (`domain::credentials::key_is_live`) and its
//! owner not disabled; a Backend.AI keypair only while it is active and its owner not disabled.

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use chrono::Utc;

use super::LedgerError;
use crate::credentials::key_is_live;
use crate::payloads::Role;

/// The SHA-256 of an API key, as the ledger keeps it.
pub fn key_digest(key: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}

/// The user an API key belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyOwner {
    pub user_id: Uuid,
    pub email: String,
    pub role: Role,
    pub resource_policy: String,
}

/// A key's owner from a row of `user_id, email, role, resource_policy`.
fn owner_of_row(r: &tokio_postgres::Row) -> KeyOwner {
    KeyOwner {
        user_id: r.get(0),
        email: r.get(1),
        role: Role::parse(r.get(2)).unwrap_or(Role::User),
        resource_policy: r.get(3),
    }
}

/// Looks an API key up; `None` when no user holds it, it was revoked or has expired, or its
/// owner is disabled.
pub async fn key_owner<C: GenericClient>(
    client: &C,
    key: &str,
) -> Result<Option<KeyOwner>, LedgerError> {
    Ok(live_key(client, key).await?.map(|(owner, _)| owner))
}

/// [`key_owner`], with when the key expires (never, with none), for a cache that must stop
/// honouring it then.
pub async fn live_key<C: GenericClient>(
    client: &C,
    key: &str,
) -> Result<Option<(KeyOwner, Option<chrono::DateTime<Utc>>)>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT u.user_id, u.email, u.role, u.resource_policy, k.expires_at
             FROM ledger.api_keys k JOIN ledger.users u USING (user_id)
             WHERE k.key_sha256 = $1 AND NOT k.revoked AND NOT u.disabled",
            &[&key_digest(key)],
        )
        .await?;
    Ok(row
        .filter(|r| key_is_live(r.get(4), Utc::now()))
        .as_ref()
        .map(|r| (owner_of_row(r), r.get(4))))
}

/// An API key as the ledger keeps it (its digest, never the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    pub key_sha256: String,
    pub key_prefix: String,
    pub user_id: Uuid,
    pub revoked: bool,
    pub expires_at: Option<chrono::DateTime<Utc>>,
}

/// The API keys whose prefix is `prefix` (12 characters: `berth_` and 6 hex digits), revoked
/// ones included; more than one when two keys share it.
pub async fn api_keys_by_prefix<C: GenericClient>(
    client: &C,
    prefix: &str,
) -> Result<Vec<ApiKeyRecord>, LedgerError> {
    let rows = client
        .query(
            "SELECT key_sha256, key_prefix, user_id, revoked, expires_at
             FROM ledger.api_keys WHERE key_prefix = $1 ORDER BY key_sha256",
            &[&prefix],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ApiKeyRecord {
            key_sha256: r.get(0),
            key_prefix: r.get(1),
            user_id: r.get(2),
            revoked: r.get(3),
            expires_at: r.get(4),
        })
        .collect())
}

/// The user who holds Backend.AI access key `access_key`; `None` when nobody does, it was
/// revoked or its holder is disabled.
pub async fn backendai_key_owner<C: GenericClient>(
    client: &C,
    access_key: &str,
) -> Result<Option<KeyOwner>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT u.user_id, u.email, u.role, u.resource_policy
             FROM ledger.backendai_keypairs k JOIN ledger.users u USING (user_id)
             WHERE k.access_key = $1 AND k.active AND NOT u.disabled",
            &[&access_key],
        )
        .await?;
    Ok(row.as_ref().map(owner_of_row))
}

/// A Backend.AI keypair as the ledger keeps it (no secret: that is derived, never stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendAiKeypair {
    pub access_key: String,
    pub user_id: Uuid,
    pub email: String,
    pub role: Role,
    pub active: bool,
}

/// Every Backend.AI keypair, of one user (`user`), of one access key (`access_key`) or of all,
/// by access key; revoked ones included.
pub async fn backendai_keypairs<C: GenericClient>(
    client: &C,
    user: Option<Uuid>,
    access_key: Option<&str>,
) -> Result<Vec<BackendAiKeypair>, LedgerError> {
    let rows = client
        .query(
            "SELECT k.access_key, k.user_id, u.email, u.role, k.active
             FROM ledger.backendai_keypairs k JOIN ledger.users u USING (user_id)
             WHERE ($1::uuid IS NULL OR k.user_id = $1)
               AND ($2::text IS NULL OR k.access_key = $2)
             ORDER BY k.access_key",
            &[&user, &access_key],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| BackendAiKeypair {
            access_key: r.get(0),
            user_id: r.get(1),
            email: r.get(2),
            role: Role::parse(r.get(3)).unwrap_or(Role::User),
            active: r.get(4),
        })
        .collect())
}
