//! `berth session wait` and `berth session ls --watch`: following a session, or the list,
//! through the API until what the user waits for happens. What a wait ends with is decided
//! by [`outcome`], apart from the polling, so the rule is tested on its own.

use serde_json::Value;

/// The statuses a session never leaves.
const ENDED: [&str; 3] = ["TERMINATED", "ERROR", "CANCELLED"];

/// What a wait on a session ends with: its exit status, and why when it is not what was
/// waited for.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub code: u8,
    pub complaint: Option<String>,
}

/// Whether the wait on session `detail` (the API's detail) is over, and with what: with
/// `wanted`, once the session is in that status (0) or has ended in another (1); without, once
/// it has ended: a session that terminated with an exit code (a batch session) gives its code
/// (a code outside 0 to 255 gives 1), one that terminated without gives 0, and one that
/// failed or was cancelled gives 1. `None` while the wait goes on.
pub fn outcome(detail: &Value, wanted: Option<&str>) -> Option<Outcome> {
    let status = detail["status"].as_str().unwrap_or_default();
    let ended = ENDED.contains(&status);
    let why = || match detail["status_reason"].as_str() {
        Some(reason) => format!("{status} ({reason})"),
        None => status.to_owned(),
    };
    if let Some(wanted) = wanted {
        if status.eq_ignore_ascii_case(wanted) {
            return Some(Outcome {
                code: 0,
                complaint: None,
            });
        }
        return ended.then(|| Outcome {
            code: 1,
            complaint: Some(format!(
                "the session ended {} without reaching {}",
                why(),
                wanted.to_uppercase()
            )),
        });
    }
    if !ended {
        return None;
    }
    Some(match (status, detail["exit_code"].as_i64()) {
        ("TERMINATED", None) => Outcome {
            code: 0,
            complaint: None,
        },
        ("TERMINATED", Some(code)) => Outcome {
            code: u8::try_from(code).unwrap_or(1),
            complaint: (code != 0).then(|| format!("the session ended {}", why())),
        },
        _ => Outcome {
            code: 1,
            complaint: Some(format!("the session ended {}", why())),
        },
    })
}

/// Whether session `s` (a list row or a detail) has ended.
pub fn has_ended(s: &Value) -> bool {
    ENDED.contains(&s["status"].as_str().unwrap_or_default())
}

/// Whether `wanted` names a status a session may be in (`running`, `TERMINATED`, ...).
pub fn is_status(wanted: &str) -> bool {
    domain::payloads::SessionStatus::ALL
        .iter()
        .any(|s| s.as_str().eq_ignore_ascii_case(wanted))
}

/// A session list with what changes on its own (elapsed time) left out, so a watch redraws
/// only when a session came, went or moved.
pub fn settled(page: &Value) -> Value {
    let mut page = page.clone();
    for s in page["sessions"].as_array_mut().into_iter().flatten() {
        if let Some(s) = s.as_object_mut() {
            s.remove("elapsed_secs");
        }
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(status: &str, exit_code: Option<i64>) -> Value {
        json!({"status": status, "exit_code": exit_code, "status_reason": "why"})
    }

    #[test]
    fn a_wait_for_the_end_gives_the_batch_sessions_exit_code() {
        assert_eq!(outcome(&at("RUNNING", None), None), None);
        assert_eq!(outcome(&at("PULLING", None), None), None);
        assert_eq!(outcome(&at("TERMINATED", Some(0)), None).unwrap().code, 0);
        let failed = outcome(&at("TERMINATED", Some(3)), None).unwrap();
        assert_eq!(failed.code, 3);
        assert!(failed.complaint.unwrap().contains("TERMINATED (why)"));
        assert_eq!(outcome(&at("TERMINATED", Some(300)), None).unwrap().code, 1);
        assert_eq!(outcome(&at("TERMINATED", Some(-1)), None).unwrap().code, 1);
        assert_eq!(outcome(&at("TERMINATED", None), None).unwrap().code, 0);
        let error = outcome(&at("ERROR", None), None).unwrap();
        assert_eq!(error.code, 1);
        assert!(error.complaint.unwrap().contains("ERROR (why)"));
        assert_eq!(outcome(&at("CANCELLED", None), None).unwrap().code, 1);
    }

    #[test]
    fn a_wait_for_a_status_ends_there_or_fails_when_the_session_ends_first() {
        assert_eq!(outcome(&at("PENDING", None), Some("running")), None);
        assert_eq!(
            outcome(&at("RUNNING", None), Some("running")),
            Some(Outcome {
                code: 0,
                complaint: None
            })
        );
        let missed = outcome(&at("ERROR", None), Some("running")).unwrap();
        assert_eq!(missed.code, 1);
        assert!(missed
            .complaint
            .unwrap()
            .contains("without reaching RUNNING"));
        assert_eq!(
            outcome(&at("TERMINATED", Some(3)), Some("terminated"))
                .unwrap()
                .code,
            0,
            "it reached what was waited for"
        );
        assert!(is_status("running") && is_status("TERMINATED") && !is_status("done"));
    }

    #[test]
    fn a_watch_ignores_the_clock() {
        let one = json!({"sessions": [{"name": "a", "status": "RUNNING", "elapsed_secs": 1.0}]});
        let two = json!({"sessions": [{"name": "a", "status": "RUNNING", "elapsed_secs": 2.0}]});
        let moved =
            json!({"sessions": [{"name": "a", "status": "TERMINATING", "elapsed_secs": 2.0}]});
        assert_eq!(settled(&one), settled(&two));
        assert_ne!(settled(&two), settled(&moved));
    }
}
