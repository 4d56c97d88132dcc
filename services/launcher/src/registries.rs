//! Registries an admin stores a credential for: every agent pulls their images with it, so
//! those images are offered to every user (`decide`). The event names the registry and the
//! user; the password is kept apart from the log, in the same transaction
//! (`events::ledger::keep_registry_password`), and handed only to an agent that pulls an image
//! of that registry for a session it runs (the recorder).

use deadpool_postgres::Pool;
use events::catalogue::Event;
use events::images::is_registry_name;
use events::ledger;
use events::payloads::{RegistryCredentialRemoved, RegistryCredentialSet};
use events::store::ExpectedVersion;

use crate::access::{admin_metadata, AccessError};

/// The most characters of a registry's user name or password.
const MOST_LOGIN_CHARS: usize = 1024;

/// A registry's stream: its name hashed, since a host's `.` and `:` are no stream id's.
fn stream_of(registry: &str) -> String {
    format!("registry-{}", &ledger::key_digest(registry)[..32])
}

/// Checks what an admin stores for a registry, naming the field at fault. Pure.
pub fn check_credential(registry: &str, username: &str, password: &str) -> Result<(), AccessError> {
    let invalid = |field, message: &str| AccessError::Invalid {
        field,
        message: message.to_owned(),
    };
    if !is_registry_name(registry) {
        return Err(invalid(
            "registry",
            "a registry's host, with its port if any, as an image reference begins \
             (`cr.example.com`, `192.0.2.2:5000`)",
        ));
    }
    let printable = |text: &str| {
        (1..=MOST_LOGIN_CHARS).contains(&text.chars().count())
            && !text.chars().any(char::is_control)
    };
    if !printable(username) || username.contains(':') {
        return Err(invalid(
            "username",
            "1 to 1024 characters, no control character and no `:`",
        ));
    }
    if !printable(password) {
        return Err(invalid(
            "password",
            "1 to 1024 characters, no control character",
        ));
    }
    Ok(())
}

/// Stores the credential agents pull `registry`'s images with (replacing one set before).
pub async fn set_credential(
    pool: &Pool,
    registry: &str,
    username: &str,
    password: &str,
) -> Result<(), AccessError> {
    check_credential(registry, username, password)?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    ledger::keep_registry_password(&tx, registry, Some((username, password))).await?;
    let set = Event::RegistryCredentialSet(RegistryCredentialSet {
        registry: registry.to_owned(),
        username: username.to_owned(),
    });
    record_and_commit(tx, registry, set).await
}

/// Removes `registry`'s credential; [`AccessError::Unknown`] when none is stored.
pub async fn remove_credential(pool: &Pool, registry: &str) -> Result<(), AccessError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    if ledger::registry_login(&tx, registry).await?.is_none() {
        return Err(AccessError::Unknown {
            what: "registry",
            name: registry.to_owned(),
        });
    }
    ledger::keep_registry_password(&tx, registry, None).await?;
    let removed = Event::RegistryCredentialRemoved(RegistryCredentialRemoved {
        registry: registry.to_owned(),
    });
    record_and_commit(tx, registry, removed).await
}

/// Records `event` in `registry`'s stream and commits `tx`, which kept or forgot the password
/// the event speaks of: both land, or neither.
async fn record_and_commit(
    tx: deadpool_postgres::Transaction<'_>,
    registry: &str,
    event: Event,
) -> Result<(), AccessError> {
    ledger::record(
        &tx,
        &stream_of(registry),
        ExpectedVersion::Any,
        &[event],
        &admin_metadata(),
    )
    .await?;
    events::activity::commit(tx).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(result: Result<(), AccessError>) -> &'static str {
        match result {
            Err(AccessError::Invalid { field, .. }) => field,
            other => panic!("not refused by a field: {other:?}"),
        }
    }

    #[test]
    fn a_credential_is_refused_by_the_field_at_fault() {
        assert!(check_credential("cr.example.com:5000", "puller", "s3cret").is_ok());
        assert_eq!(field(check_credential("berth", "u", "p")), "registry");
        assert_eq!(
            field(check_credential("cr.example.com/x", "u", "p")),
            "registry"
        );
        assert_eq!(
            field(check_credential("cr.example.com", "", "p")),
            "username"
        );
        assert_eq!(
            field(check_credential("cr.example.com", "a:b", "p")),
            "username"
        );
        assert_eq!(
            field(check_credential("cr.example.com", "u", "")),
            "password"
        );
        assert_eq!(
            field(check_credential("cr.example.com", "u", "p\n")),
            "password"
        );
    }

    #[test]
    fn a_registrys_stream_id_is_a_valid_one_of_its_own() {
        let stream = stream_of("192.0.2.2:55000");
        assert_eq!(events::store::category_of(&stream).unwrap(), "registry");
        assert_ne!(stream, stream_of("192.0.2.2:55001"));
    }
}
