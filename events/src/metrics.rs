//! The names and help of the metrics the backbone records where it knows the facts: the
//! relay's events published and how old the newest was, each projection's events applied and
//! how old the newest was, and each consumer's events pending on NATS and how old the one in
//! hand is. Recorded through the `metrics` facade; the process installs the recorder.

use chrono::{DateTime, Utc};

pub const RELAY_PUBLISHED: &str = "berth_relay_published_events_total";
pub const RELAY_LAG_SECONDS: &str = "berth_relay_lag_seconds";
pub const PROJECTION_APPLIED: &str = "berth_projection_applied_events_total";
pub const PROJECTION_LAG_SECONDS: &str = "berth_projection_lag_seconds";
pub const CONSUMER_LAG_EVENTS: &str = "berth_consumer_lag_events";
pub const CONSUMER_LAG_SECONDS: &str = "berth_consumer_lag_seconds";

/// Seconds since `at` (0 for a time ahead of this host's clock).
pub(crate) fn age_secs(at: DateTime<Utc>) -> f64 {
    (Utc::now() - at)
        .to_std()
        .map_or(0.0, |age| age.as_secs_f64())
}

/// Describes the backbone's metrics to the installed recorder.
pub fn describe_metrics() {
    use ::metrics::{describe_counter, describe_gauge, Unit};
    describe_counter!(
        RELAY_PUBLISHED,
        "Events the relay published to NATS JetStream"
    );
    describe_gauge!(
        RELAY_LAG_SECONDS,
        Unit::Seconds,
        "Age of the newest event of the relay's last batch when NATS acknowledged it"
    );
    describe_counter!(
        PROJECTION_APPLIED,
        "Events each projection applied to its tables, by projection"
    );
    describe_gauge!(
        PROJECTION_LAG_SECONDS,
        Unit::Seconds,
        "Age of the newest event of each projection's last batch when it was applied"
    );
    describe_gauge!(
        CONSUMER_LAG_EVENTS,
        "Events still pending on NATS for each durable consumer (notification, idle-reaper, \
         image-commit, ...) after the one it took last"
    );
    describe_gauge!(
        CONSUMER_LAG_SECONDS,
        Unit::Seconds,
        "Age of the event each durable consumer took last, when it took it"
    );
}
