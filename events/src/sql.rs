//! SQL fragments built from the domain, so a set of statuses is written once (in
//! `berth-domain`) and every statement that filters on it says the same thing.

use domain::payloads::SessionStatus;

/// `'TERMINATED','ERROR','CANCELLED'`: the statuses as a list for `IN (...)`. Literals rather
/// than a bound array, so PostgreSQL can match the partial indexes built on the same sets.
pub fn status_list(statuses: &[SessionStatus]) -> String {
    statuses
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

/// `status NOT IN ('TERMINATED','ERROR','CANCELLED')` for the column `column`.
pub fn is_live(column: &str) -> String {
    format!(
        "{column} NOT IN ({})",
        status_list(&SessionStatus::TERMINAL)
    )
}

/// `status IN ('TERMINATED','ERROR','CANCELLED')` for the column `column`.
pub fn has_ended(column: &str) -> String {
    format!("{column} IN ({})", status_list(&SessionStatus::TERMINAL))
}

/// `status IN ('SCHEDULED', ..., 'TERMINATING')` for the column `column`.
pub fn holds_resources(column: &str) -> String {
    format!(
        "{column} IN ({})",
        status_list(&SessionStatus::HOLDING_RESOURCES)
    )
}

/// The order in which the scheduler tries a resource group's PENDING sessions, for the
/// sessions table (`ledger.sessions`) named or aliased `table`, in a group whose queue
/// policy is the SQL expression `policy`: higher priority first, then the order they were
/// requested in (kept when a session comes back to the queue), newest first under `lifo`.
/// The scheduler's queue and the gateway's view of it both sort by this, so they cannot part;
/// `drf` and `fair-share` turns are decided within each pass from this order (ties go by it).
pub fn queue_order(table: &str, policy: &str) -> String {
    format!(
        "{table}.priority DESC, CASE WHEN {policy} = 'lifo' THEN -{table}.queue_seq \
         ELSE {table}.queue_seq END"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The migrations are fixed text; they must spell the terminal set as the domain does.
    #[test]
    fn the_ledger_migration_spells_the_terminal_set_as_the_domain_does() {
        let migration = include_str!("../migrations/0002_ledger.sql").replace(", ", ",");
        let live = is_live("status");
        assert!(migration.contains(&live), "0002 lacks `{live}`");
        assert_eq!(
            has_ended("s.status"),
            "s.status IN ('TERMINATED','ERROR','CANCELLED')"
        );
    }
}
