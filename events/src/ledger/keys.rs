//! API keys: the digest the ledger keeps, and the lookup of a key's owner.

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::LedgerError;
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

/// Looks an API key up; `None` when no user holds it.
pub async fn key_owner<C: GenericClient>(
    client: &C,
    key: &str,
) -> Result<Option<KeyOwner>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT u.user_id, u.email, u.role, u.resource_policy
             FROM ledger.api_keys k JOIN ledger.users u USING (user_id) WHERE k.key_sha256 = $1",
            &[&key_digest(key)],
        )
        .await?;
    Ok(row.map(|r| KeyOwner {
        user_id: r.get(0),
        email: r.get(1),
        role: Role::parse(r.get(2)).unwrap_or(Role::User),
        resource_policy: r.get(3),
    }))
}
