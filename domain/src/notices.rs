//! Notifications: which events a session's owner is told about, and in what words. Pure;
//! the notification service keeps them, pushes them live and delivers them to webhooks.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::catalogue::Event;
use crate::payloads::SessionStatus;

/// What a notification is about.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    SessionCreated,
    SessionStarted,
    SessionFailed,
    SessionTerminated,
    SessionCancelled,
    SessionReaped,
    CommitDone,
    CommitFailed,
    /// A shape its owner watched would be placed at once ("notify me when it fits").
    ShapeFits,
}

impl NoticeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::SessionCreated => "session_created",
            NoticeKind::SessionStarted => "session_started",
            NoticeKind::SessionFailed => "session_failed",
            NoticeKind::SessionTerminated => "session_terminated",
            NoticeKind::SessionCancelled => "session_cancelled",
            NoticeKind::SessionReaped => "session_reaped",
            NoticeKind::CommitDone => "commit_done",
            NoticeKind::CommitFailed => "commit_failed",
            NoticeKind::ShapeFits => "shape_fits",
        }
    }
}

/// One notification, as its owner reads it. Its id is the id of the event it tells of, so
/// it is made once and a webhook receiver can drop a repeat.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Notice {
    pub notice_id: Uuid,
    pub user_id: Uuid,
    /// The session it tells of; for `shape_fits`, the watch's id.
    pub session_id: Uuid,
    /// The session's name; for `shape_fits`, the shape in words.
    pub session_name: String,
    pub kind: NoticeKind,
    /// In words, with the reason where there is one.
    pub message: String,
    pub at: DateTime<Utc>,
}

/// Why a URL cannot be a webhook.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadWebhookUrl {
    #[error("at most 2,048 characters")]
    TooLong,
    #[error("`{0}` is not an http:// or https:// URL")]
    NotHttp(String),
}

/// Whether `url` can be a webhook: `http://` or `https://` with a host, at most 2,048
/// characters, no whitespace or control characters. Pure.
pub fn check_webhook_url(url: &str) -> Result<(), BadWebhookUrl> {
    if url.chars().count() > 2048 {
        return Err(BadWebhookUrl::TooLong);
    }
    let host = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
    // What the API document's pattern forbids: JSON Schema's `\s` and control characters.
    let clean = !url
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\u{feff}');
    match host {
        Some(host) if !host.is_empty() && clean => Ok(()),
        _ => Err(BadWebhookUrl::NotHttp(url.to_owned())),
    }
}

/// What the service knows of a session to word its notices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NoticedSession {
    pub session_id: Uuid,
    pub owner: Uuid,
    pub name: String,
}

/// The notice `event` (with id `event_id`, recorded `at`) makes for the owner of `session`,
/// if any. A session's own request names its owner; later events need `session`.
pub fn notice_for(
    event: &Event,
    event_id: Uuid,
    at: DateTime<Utc>,
    session: Option<&NoticedSession>,
) -> Option<Notice> {
    if let Event::FitWatchFired(e) = event {
        return Some(Notice {
            notice_id: event_id,
            user_id: e.owner,
            session_id: e.watch_id,
            session_name: e.label.clone(),
            kind: NoticeKind::ShapeFits,
            message: format!(
                "{} fits in resource group {} now: launch it before someone else does",
                e.label, e.resource_group
            ),
            at,
        });
    }
    let requested;
    let session = match event {
        Event::SessionRequested(r) => {
            requested = NoticedSession {
                session_id: r.session_id,
                owner: r.owner.user_id,
                name: r.name.clone(),
            };
            &requested
        }
        _ => session?,
    };
    let name = &session.name;
    let because = |reason: &Option<String>| match reason {
        Some(r) => format!(": {r}"),
        None => String::new(),
    };
    let (kind, message) = match event {
        Event::SessionRequested(r) => (
            NoticeKind::SessionCreated,
            format!(
                "session {name} was created ({}, {})",
                r.image, r.resource_group
            ),
        ),
        Event::SessionStatusChanged(e) => match e.to {
            SessionStatus::Running => (
                NoticeKind::SessionStarted,
                format!("session {name} is running"),
            ),
            SessionStatus::Error => (
                NoticeKind::SessionFailed,
                format!("session {name} failed{}", because(&e.reason)),
            ),
            SessionStatus::Terminated => {
                let code = e
                    .exit_code
                    .map(|c| format!(" with exit code {c}"))
                    .unwrap_or_default();
                (
                    NoticeKind::SessionTerminated,
                    format!("session {name} ended{code}{}", because(&e.reason)),
                )
            }
            SessionStatus::Cancelled => (
                NoticeKind::SessionCancelled,
                format!("session {name} was cancelled{}", because(&e.reason)),
            ),
            _ => return None,
        },
        Event::SessionIdleReaped(e) => (
            NoticeKind::SessionReaped,
            format!(
                "session {name} is being terminated by the idle-reaper's {} checker: {}",
                e.reading.checker.as_str(),
                e.reading.explanation
            ),
        ),
        Event::SessionCommitEnded(e) => match &e.outcome {
            crate::payloads::CommitOutcome::Done { .. } => (
                NoticeKind::CommitDone,
                format!("session {name} is committed to the image {}", e.image),
            ),
            crate::payloads::CommitOutcome::Failed { reason } => (
                NoticeKind::CommitFailed,
                format!(
                    "the commit of session {name} to {} failed: {reason}",
                    e.image
                ),
            ),
        },
        _ => return None,
    };
    Some(Notice {
        notice_id: event_id,
        user_id: session.owner,
        session_id: session.session_id,
        session_name: session.name.clone(),
        kind,
        message,
        at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idleness::{IdleChecker, IdleReading};
    use crate::payloads::*;

    fn at() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn session() -> NoticedSession {
        NoticedSession {
            session_id: Uuid::nil(),
            owner: Uuid::from_u128(7),
            name: "train1".into(),
        }
    }

    fn moved(to: SessionStatus, reason: Option<&str>, exit_code: Option<i32>) -> Event {
        Event::SessionStatusChanged(SessionStatusChanged {
            session_id: Uuid::nil(),
            from: SessionStatus::Running,
            to,
            reason: reason.map(Into::into),
            exit_code,
            occurred_at: None,
        })
    }

    #[test]
    fn the_owner_hears_of_starts_failures_and_ends_with_their_reasons() {
        let s = session();
        let id = Uuid::now_v7();
        let started = notice_for(
            &moved(SessionStatus::Running, None, None),
            id,
            at(),
            Some(&s),
        )
        .unwrap();
        assert_eq!(
            (started.kind, started.user_id),
            (NoticeKind::SessionStarted, s.owner)
        );
        assert_eq!(started.notice_id, id, "one notice per event");
        let failed = notice_for(
            &moved(SessionStatus::Error, Some("image not found"), None),
            id,
            at(),
            Some(&s),
        )
        .unwrap();
        assert_eq!(failed.message, "session train1 failed: image not found");
        let ended = notice_for(
            &moved(SessionStatus::Terminated, Some("done"), Some(3)),
            id,
            at(),
            Some(&s),
        )
        .unwrap();
        assert_eq!(ended.message, "session train1 ended with exit code 3: done");
        assert_eq!(
            notice_for(
                &moved(SessionStatus::Preparing, None, None),
                id,
                at(),
                Some(&s)
            ),
            None
        );
        assert_eq!(
            notice_for(&moved(SessionStatus::Running, None, None), id, at(), None),
            None,
            "an unknown session"
        );
    }

    #[test]
    fn a_webhook_is_an_http_or_https_url() {
        assert!(check_webhook_url("http://hooks.example.com:8080/berth?x=1").is_ok());
        assert!(check_webhook_url("https://hooks.example.com/berth").is_ok());
        for bad in [
            "https://",
            "https:///path",
            "ftp://x",
            "not a url",
            "http://",
            "http:///path",
            "http://a b",
        ] {
            assert!(check_webhook_url(bad).is_err(), "{bad}");
        }
        assert!(check_webhook_url(&format!("http://x/{}", "a".repeat(2100))).is_err());
    }

    #[test]
    fn a_reaped_session_names_its_checker() {
        let reaped = Event::SessionIdleReaped(SessionIdleReaped {
            session_id: Uuid::nil(),
            reading: IdleReading {
                checker: IdleChecker::NetworkIdle,
                measures: Vec::new(),
                remaining_secs: Some(0.0),
                fires: true,
                explanation: "no byte in or out for 600.0 s; the timeout is 600 s".into(),
            },
        });
        let notice = notice_for(&reaped, Uuid::now_v7(), at(), Some(&session())).unwrap();
        assert_eq!(notice.kind, NoticeKind::SessionReaped);
        assert!(
            notice.message.contains("network_idle checker"),
            "{}",
            notice.message
        );
    }
}
