//! What a person signs in with and how long it lasts: the rule a password keeps, how long a
//! web-console sign-in lasts, when an API key expires, and which changes to an account a
//! superadmin may make (never disabling themselves or changing their own role, so an install
//! cannot lock its last superadmin out by a slip). Hashing and tokens need crates this one may
//! not depend on, so they live in `events::ledger::credentials`; the rules they apply are
//! here, tested alone.

use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

use crate::payloads::Role;

/// Fewest characters a password may have.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Most characters a password may have: hashing costs the same whatever the length, but a
/// bound keeps a request's work and a log line's size known.
pub const MAX_PASSWORD_CHARS: usize = 256;

/// How long a web-console sign-in lasts, from the moment it is made (not renewed by use).
pub const CONSOLE_SIGN_IN_HOURS: i64 = 12;

/// A password that breaks the rule, naming the field it came in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PasswordError {
    pub field: &'static str,
    pub message: String,
}

/// Checks a new password: 8 to 256 characters (Unicode scalar values, as JSON Schema's
/// `minLength` counts them), none of them NUL. `field` names where it came from (`new`,
/// `password`), for the error.
pub fn check_password(field: &'static str, password: &str) -> Result<(), PasswordError> {
    let chars = password.chars().count();
    let message = if chars < MIN_PASSWORD_CHARS {
        format!("must be at least {MIN_PASSWORD_CHARS} characters; it has {chars}")
    } else if chars > MAX_PASSWORD_CHARS {
        format!("must be at most {MAX_PASSWORD_CHARS} characters; it has {chars}")
    } else if password.contains('\0') {
        "may not contain a NUL character".to_owned()
    } else {
        return Ok(());
    };
    Err(PasswordError { field, message })
}

/// When a console sign-in made at `signed_in_at` stops being honoured.
pub fn console_expiry(signed_in_at: DateTime<Utc>) -> DateTime<Utc> {
    signed_in_at + TimeDelta::hours(CONSOLE_SIGN_IN_HOURS)
}

/// Whether a sign-in that expires at `expires_at` is still honoured at `now` (the end is
/// excluded: at `expires_at` it is over).
pub fn sign_in_is_live(expires_at: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    now < expires_at
}

/// The longest an API key may be issued for (ten years, in seconds).
pub const MAX_KEY_LIFETIME_SECS: i64 = 315_360_000;

/// A credential rule broken, naming the field it came in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CredentialError {
    pub field: &'static str,
    pub message: String,
}

fn refuse(field: &'static str, message: impl Into<String>) -> CredentialError {
    CredentialError {
        field,
        message: message.into(),
    }
}

/// When a key issued at `now` expires: after `expires_in_secs` seconds (1 to ten years), at
/// `expires_at` (after `now`, within ten years), or never when neither is given; both at once
/// are refused (naming `expires_at`).
pub fn key_expiry(
    now: DateTime<Utc>,
    expires_in_secs: Option<i64>,
    expires_at: Option<DateTime<Utc>>,
) -> Result<Option<DateTime<Utc>>, CredentialError> {
    let latest = now + TimeDelta::seconds(MAX_KEY_LIFETIME_SECS);
    match (expires_in_secs, expires_at) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(refuse(
            "expires_at",
            "give `expires_in_secs` or `expires_at`, not both",
        )),
        (Some(secs), None) => {
            if (1..=MAX_KEY_LIFETIME_SECS).contains(&secs) {
                Ok(Some(now + TimeDelta::seconds(secs)))
            } else {
                Err(refuse(
                    "expires_in_secs",
                    format!("{secs} is not from 1 to {MAX_KEY_LIFETIME_SECS}"),
                ))
            }
        }
        (None, Some(at)) if at <= now => {
            Err(refuse("expires_at", format!("{at} is not in the future")))
        }
        (None, Some(at)) if at > latest => Err(refuse(
            "expires_at",
            format!("{at} is more than ten years ahead"),
        )),
        (None, Some(at)) => Ok(Some(at)),
    }
}

/// Whether a key that expires at `expires_at` (never, with none) is honoured at `now` (the
/// end is excluded, as a sign-in's).
pub fn key_is_live(expires_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    expires_at.is_none_or(|at| sign_in_is_live(at, now))
}

/// A change a superadmin makes to a user's account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountChange {
    Disable,
    Enable,
    SetRole(Role),
}

/// Whether `actor` may make `change` to `target`'s account: nobody disables, enables or
/// changes the role of themselves (refused naming `email`), so a superadmin cannot lock
/// themselves, and with them perhaps the last superadmin, out.
pub fn check_account_change(
    actor: Uuid,
    target: Uuid,
    change: AccountChange,
) -> Result<(), CredentialError> {
    if actor != target {
        return Ok(());
    }
    let what = match change {
        AccountChange::Disable => "disable yourself",
        AccountChange::Enable => "enable yourself",
        AccountChange::SetRole(_) => "change your own role",
    };
    Err(refuse(
        "email",
        format!("you may not {what}; another superadmin may"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_expires_after_its_seconds_or_at_its_time_or_never() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        assert_eq!(key_expiry(now, None, None), Ok(None));
        assert_eq!(
            key_expiry(now, Some(60), None),
            Ok(Some(now + TimeDelta::seconds(60)))
        );
        let at = now + TimeDelta::days(30);
        assert_eq!(key_expiry(now, None, Some(at)), Ok(Some(at)));
        assert_eq!(
            key_expiry(now, Some(60), Some(at)).unwrap_err().field,
            "expires_at"
        );
        for secs in [0, -5, MAX_KEY_LIFETIME_SECS + 1] {
            assert_eq!(
                key_expiry(now, Some(secs), None).unwrap_err().field,
                "expires_in_secs",
                "{secs}"
            );
        }
        assert!(key_expiry(now, Some(MAX_KEY_LIFETIME_SECS), None).is_ok());
        assert_eq!(
            key_expiry(now, None, Some(now)).unwrap_err().field,
            "expires_at"
        );
        let too_far = now + TimeDelta::seconds(MAX_KEY_LIFETIME_SECS + 1);
        assert!(key_expiry(now, None, Some(too_far)).is_err());
    }

    #[test]
    fn an_expired_key_is_refused_from_its_expiry_on() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        assert!(key_is_live(None, at));
        assert!(key_is_live(Some(at), at - TimeDelta::milliseconds(1)));
        assert!(!key_is_live(Some(at), at));
        assert!(!key_is_live(Some(at), at + TimeDelta::days(1)));
    }

    #[test]
    fn nobody_disables_enables_or_re_roles_themselves() {
        let (me, other) = (Uuid::from_u128(1), Uuid::from_u128(2));
        for change in [
            AccountChange::Disable,
            AccountChange::Enable,
            AccountChange::SetRole(Role::User),
            AccountChange::SetRole(Role::Superadmin),
        ] {
            assert_eq!(check_account_change(me, other, change), Ok(()));
            let refused = check_account_change(me, me, change).unwrap_err();
            assert_eq!(refused.field, "email");
        }
        assert!(check_account_change(me, me, AccountChange::Disable)
            .unwrap_err()
            .message
            .contains("disable yourself"));
    }

    #[test]
    fn a_password_has_8_to_256_characters_counted_as_characters_not_bytes() {
        assert!(check_password("new", "12345678").is_ok());
        assert!(check_password("new", &"x".repeat(256)).is_ok());
        // Eight characters of two bytes each: sixteen bytes, eight characters.
        assert!(check_password("new", "éééééééé").is_ok());
        let short = check_password("new", "1234567").unwrap_err();
        assert_eq!(short.field, "new");
        assert!(short.message.contains("at least 8"), "{short}");
        // 256 characters of four bytes each are within the rule; 257 are not.
        assert!(check_password("password", &"🔑".repeat(256)).is_ok());
        let long = check_password("password", &"🔑".repeat(257)).unwrap_err();
        assert_eq!(long.field, "password");
        assert!(long.message.contains("at most 256"), "{long}");
        assert_eq!(long.to_string(), format!("password: {}", long.message));
    }

    #[test]
    fn a_password_may_not_hold_a_nul() {
        let err = check_password("new", "abc\0defgh").unwrap_err();
        assert_eq!(err.field, "new");
        assert!(err.message.contains("NUL"), "{err}");
    }

    #[test]
    fn a_console_sign_in_lasts_twelve_hours_and_not_a_moment_more() {
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let expires = console_expiry(at);
        assert_eq!((expires - at).num_seconds(), 12 * 3600);
        assert!(sign_in_is_live(expires, at));
        assert!(sign_in_is_live(
            expires,
            expires - TimeDelta::milliseconds(1)
        ));
        assert!(!sign_in_is_live(expires, expires));
        assert!(!sign_in_is_live(expires, expires + TimeDelta::hours(1)));
    }
}
