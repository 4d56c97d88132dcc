//! A user's recent launches, the launcher's "Recent History": the create requests they sent,
//! kept whole so that one can be launched again, each with a name they may give it and a pin
//! that keeps it among the recent ones however old it grows. Pure.

/// How many of a user's newest launches are recent (the pinned ones are besides).
pub const RECENT: i64 = 5;

/// The most characters a launch's name may have.
pub const MAX_LABEL_CHARS: usize = 64;

/// What a launch's name may hold: no control characters (the OpenAPI document states it).
pub const LABEL_PATTERN: &str = r"^[^\u0000-\u001F\u007F]*$";

/// A name a launch cannot have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadLabel {
    #[error("has {0} characters; at most {MAX_LABEL_CHARS}")]
    TooLong(usize),
    #[error("holds a control character")]
    Control,
}

/// Whether `label` can name a launch: at most [`MAX_LABEL_CHARS`] characters, none of them a
/// control character. An empty one takes the name away.
pub fn check_label(label: &str) -> Result<(), BadLabel> {
    let chars = label.chars().count();
    if chars > MAX_LABEL_CHARS {
        return Err(BadLabel::TooLong(chars));
    }
    if label.chars().any(|c| c <= '\u{1f}' || c == '\u{7f}') {
        return Err(BadLabel::Control);
    }
    Ok(())
}

/// The name a launch keeps for `label`: `None` for an empty one.
pub fn label_of(label: &str) -> Option<String> {
    (!label.is_empty()).then(|| label.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_up_to_64_characters_without_control_characters() {
        for good in ["", "nightly", "训练 run #2", &"é".repeat(64)] {
            assert_eq!(check_label(good), Ok(()), "{good}");
        }
        assert_eq!(check_label(&"x".repeat(65)), Err(BadLabel::TooLong(65)));
        for bad in ["a\nb", "tab\there", "nul\0", "del\u{7f}"] {
            assert_eq!(check_label(bad), Err(BadLabel::Control), "{bad:?}");
        }
    }

    #[test]
    fn an_empty_label_takes_the_name_away() {
        assert_eq!(label_of(""), None);
        assert_eq!(label_of("mine").as_deref(), Some("mine"));
    }
}
