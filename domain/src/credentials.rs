//! What a person signs in with besides an API key: the rule a password keeps, and how long a
//! web-console sign-in lasts. Hashing and tokens need crates this one may not depend on, so
//! they live in `events::ledger::credentials`; the rules they apply are here, tested alone.

use chrono::{DateTime, TimeDelta, Utc};

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

#[cfg(test)]
mod tests {
    use super::*;

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
