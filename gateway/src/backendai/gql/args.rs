//! The arguments of `compute_session_list` as Backend.AI's client writes them, read into
//! what berth's list takes: the status filter (berth has statuses the 23.09 client does not
//! know, and lacks one it sends) and the order expression.

use events::payloads::SessionStatus;

use crate::db::backendai_gql::{OrderBy, OrderKey};

/// The status Backend.AI has and berth does not: a session with a lost kernel. It is
/// accepted and matches nothing.
pub const RUNNING_DEGRADED: &str = "RUNNING_DEGRADED";

/// The berth statuses a comma list of Backend.AI status names matches, each once, in the
/// order named. PREPARING also matches PREPARED and CREATING, berth's steps between
/// preparing and running that the 23.09 client never asks for (or a starting session would
/// vanish from `backend.ai ps`); RUNNING_DEGRADED matches nothing. An unknown name is an
/// error naming it.
pub fn statuses(list: &str) -> Result<Vec<SessionStatus>, String> {
    let mut matched = Vec::new();
    for name in list.split(',').map(str::trim) {
        let these = match name {
            RUNNING_DEGRADED => Vec::new(),
            "PREPARING" => vec![
                SessionStatus::Preparing,
                SessionStatus::Prepared,
                SessionStatus::Creating,
            ],
            other => match SessionStatus::parse(other) {
                Some(status) => vec![status],
                None => {
                    return Err(format!(
                        "unknown session status `{other}` (one of {}, {RUNNING_DEGRADED})",
                        SessionStatus::ALL.map(SessionStatus::as_str).join(", ")
                    ))
                }
            },
        };
        for status in these {
            if !matched.contains(&status) {
                matched.push(status);
            }
        }
    }
    Ok(matched)
}

/// The most keys an order expression may have.
pub const MAX_ORDER_KEYS: usize = 4;

/// Reads an order expression: a comma list of `[+|-]key` (`+`, or no sign, ascending), the
/// keys `created_at`, `name`, `status` and `status_changed`. A blank expression is the
/// default order (newest first).
pub fn order(expression: &str) -> Result<Vec<OrderBy>, String> {
    if expression.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut order = Vec::new();
    for item in expression.split(',').map(str::trim) {
        let (descending, name) = match item.as_bytes().first() {
            Some(b'-') => (true, &item[1..]),
            Some(b'+') => (false, &item[1..]),
            _ => (false, item),
        };
        let key = match name {
            "created_at" => OrderKey::CreatedAt,
            "name" => OrderKey::Name,
            "status" => OrderKey::Status,
            "status_changed" => OrderKey::StatusChanged,
            _ => {
                return Err(format!(
                    "cannot order by `{item}`: order by [+|-]created_at, name, status or \
                     status_changed"
                ))
            }
        };
        order.push(OrderBy { key, descending });
    }
    if order.len() > MAX_ORDER_KEYS {
        return Err(format!(
            "an order has at most {MAX_ORDER_KEYS} keys, this one {}",
            order.len()
        ));
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionStatus::*;

    #[test]
    fn preparing_also_matches_prepared_and_creating() {
        assert_eq!(
            statuses("PREPARING").unwrap(),
            [Preparing, Prepared, Creating]
        );
        // The CLI's default list for `ps`: every starting status is in it.
        let default = statuses(
            "PENDING,SCHEDULED,PULLING,PREPARING,RUNNING,RUNNING_DEGRADED,TERMINATING,ERROR",
        )
        .unwrap();
        assert_eq!(
            default,
            [
                Pending,
                Scheduled,
                Pulling,
                Preparing,
                Prepared,
                Creating,
                Running,
                Terminating,
                Error
            ]
        );
        // Named on their own, berth's own statuses match themselves, each once.
        assert_eq!(
            statuses("CREATING, PREPARING,CREATING").unwrap(),
            [Creating, Preparing, Prepared]
        );
        assert_eq!(
            statuses("TERMINATED,CANCELLED").unwrap(),
            [Terminated, Cancelled]
        );
    }

    #[test]
    fn running_degraded_matches_nothing_and_an_unknown_status_is_named() {
        assert_eq!(statuses(RUNNING_DEGRADED).unwrap(), []);
        assert_eq!(statuses("RUNNING,RUNNING_DEGRADED").unwrap(), [Running]);
        let e = statuses("RUNNING,SLEEPING").unwrap_err();
        assert!(e.contains("`SLEEPING`"), "{e}");
        assert!(statuses("running").is_err(), "names are upper-case");
        assert!(statuses("").is_err());
    }

    #[test]
    fn an_order_is_a_comma_list_of_signed_keys() {
        let by = |key, descending| OrderBy { key, descending };
        assert_eq!(order("").unwrap(), []);
        assert_eq!(
            order("-created_at").unwrap(),
            [by(OrderKey::CreatedAt, true)]
        );
        assert_eq!(
            order("+name, status_changed,-status").unwrap(),
            [
                by(OrderKey::Name, false),
                by(OrderKey::StatusChanged, false),
                by(OrderKey::Status, true)
            ]
        );
        for bad in [
            "-image",
            "name,",
            "--name",
            "status_changed_at",
            "name,name,name,name,name",
        ] {
            assert!(order(bad).is_err(), "{bad}");
        }
    }
}
