//! A session's usage over its whole life, kept bounded: each sample lands in a bucket of a
//! minute and in a bucket of an hour (the latest sample of a bucket stands for it); the minute
//! buckets of the last day are kept, the hour buckets for at most [`MOST_HOURS`]. So a session
//! keeps at most 1,440 + 2,160 points however long it lives, a minute apart where it is recent
//! and an hour apart where it is old. Pure: the recorder keeps the buckets, the gateway reads
//! the series back through [`series`].

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

/// The two bucket widths, in seconds.
pub const MINUTE: i32 = 60;
pub const HOUR: i32 = 3600;
/// How long minute buckets are kept.
pub const MINUTES_KEPT: TimeDelta = TimeDelta::days(1);
/// The most hour buckets a session keeps (90 days).
pub const MOST_HOURS: i64 = 2160;

/// The buckets a sample taken `at` lands in: `(width in seconds, the bucket's start)`.
pub fn buckets(at: DateTime<Utc>) -> [(i32, DateTime<Utc>); 2] {
    let start = |width: i32| {
        at.duration_trunc(TimeDelta::seconds(i64::from(width)))
            .unwrap_or(at)
    };
    [(MINUTE, start(MINUTE)), (HOUR, start(HOUR))]
}

/// Before when minute buckets are dropped, seen at `now`.
pub fn minutes_kept_since(now: DateTime<Utc>) -> DateTime<Utc> {
    now - MINUTES_KEPT
}

/// One point of a session's series.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SeriesPoint {
    pub at: DateTime<Utc>,
    /// Percent of one core.
    pub cpu_percent: Option<f64>,
    pub memory_bytes: i64,
    /// Bytes received and sent since the container started.
    pub network_bytes: i64,
    pub gpu_percent: Option<f64>,
}

/// The series from the kept buckets `(width, point)`: hour points from before the minute
/// buckets begin, then the minute points, oldest first.
pub fn series(kept: Vec<(i32, SeriesPoint)>) -> Vec<SeriesPoint> {
    let minutes_from = kept
        .iter()
        .filter(|(w, _)| *w == MINUTE)
        .map(|(_, p)| p.at)
        .min();
    let mut points: Vec<SeriesPoint> = kept
        .into_iter()
        .filter(|(width, point)| match (*width, minutes_from) {
            (MINUTE, _) => true,
            (_, Some(from)) => point.at < from,
            (_, None) => true,
        })
        .map(|(_, p)| p)
        .collect();
    points.sort_by_key(|p| p.at);
    points
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 29, h, m, s).unwrap()
    }

    fn point(when: DateTime<Utc>) -> SeriesPoint {
        SeriesPoint {
            at: when,
            cpu_percent: Some(1.0),
            memory_bytes: 1,
            network_bytes: 1,
            gpu_percent: None,
        }
    }

    #[test]
    fn a_sample_lands_in_its_minute_and_its_hour() {
        let [(w1, m), (w2, h)] = buckets(at(12, 34, 56));
        assert_eq!((w1, m), (MINUTE, at(12, 34, 0)));
        assert_eq!((w2, h), (HOUR, at(12, 0, 0)));
        assert_eq!(
            minutes_kept_since(at(12, 0, 0)),
            at(12, 0, 0) - TimeDelta::days(1)
        );
    }

    #[test]
    fn the_series_is_hours_where_old_and_minutes_where_recent() {
        // Hours 9, 10, 11 and 12; minutes from 11:58 on (those before were dropped).
        let mut kept: Vec<(i32, SeriesPoint)> = [9, 10, 11, 12]
            .iter()
            .map(|h| (HOUR, point(at(*h, 0, 0))))
            .collect();
        kept.extend((58..60).map(|m| (MINUTE, point(at(11, m, 0)))));
        kept.push((MINUTE, point(at(12, 0, 0))));
        let times: Vec<DateTime<Utc>> = series(kept).iter().map(|p| p.at).collect();
        assert_eq!(
            times,
            [
                at(9, 0, 0),
                at(10, 0, 0),
                at(11, 0, 0),
                at(11, 58, 0),
                at(11, 59, 0),
                at(12, 0, 0)
            ]
        );
        // With no minute kept, the hours alone.
        assert_eq!(series(vec![(HOUR, point(at(9, 0, 0)))]).len(), 1);
    }
}
