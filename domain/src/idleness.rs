//! Idleness: when a session stops being worth what it holds. Pure: the idle-reaper feeds it
//! what it folded from the log and the usage agents sent, and a clock.
//!
//! Three checkers, as Backend.AI's users know them:
//! - **lifetime**: the session has existed longer than its maximum (counted from creation);
//! - **network idle**: no byte went in or out of the session for the timeout (an open but
//!   silent connection is idle); batch sessions are exempt;
//! - **utilization**: after a grace period counted from when the session started running,
//!   the average use of the resources that have a threshold stayed below it over the idle
//!   window: every one of them (`all`) or any (`any`). A brief burst raises the average a
//!   little and never restarts the grace period; a resource without a threshold, one the
//!   session does not hold, or one nobody measured is left out.
//!
//! A resource group sets the checks ([`IdleChecks`]); the owner's resource policy may set
//! any of them again, field by field ([`IdleChecks::overridden_by`]).

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::payloads::{ResourceSlots, SessionType};

/// Which checker.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum IdleChecker {
    Lifetime,
    NetworkIdle,
    Utilization,
}

impl IdleChecker {
    pub fn as_str(self) -> &'static str {
        match self {
            IdleChecker::Lifetime => "lifetime",
            IdleChecker::NetworkIdle => "network_idle",
            IdleChecker::Utilization => "utilization",
        }
    }
}

/// How the utilization checker combines its resources.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    /// Idle only when every resource with a threshold is below it (Backend.AI's `and`).
    #[default]
    All,
    /// Idle when any of them is below its threshold (`or`).
    Any,
}

/// Below which average use (percent of what the session holds) a resource counts as idle.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Thresholds {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_percent: Option<f64>,
}

/// The utilization checker's settings.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UtilizationCheck {
    /// From the start of RUNNING, a time in which this checker never fires.
    pub grace_period_secs: u64,
    /// The span the averages are taken over.
    pub window_secs: u64,
    pub thresholds: Thresholds,
    #[serde(default)]
    pub combine: Combine,
}

/// The idle checks of a resource group or a resource policy; `None` leaves a checker off
/// (or, on a policy, as the group set it).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IdleChecks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_lifetime_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_idle_timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<UtilizationCheck>,
}

impl IdleChecks {
    /// These checks with every checker `policy` sets taken from it instead.
    pub fn overridden_by(&self, policy: &IdleChecks) -> IdleChecks {
        IdleChecks {
            max_lifetime_secs: policy.max_lifetime_secs.or(self.max_lifetime_secs),
            network_idle_timeout_secs: policy
                .network_idle_timeout_secs
                .or(self.network_idle_timeout_secs),
            utilization: policy.utilization.or(self.utilization),
        }
    }

    /// These checks with the lifetime bounded by `cap` too (the policy's hard maximum that
    /// the request carries): the shorter one holds.
    pub fn with_lifetime_cap(mut self, cap: Option<u64>) -> IdleChecks {
        self.max_lifetime_secs = shorter(self.max_lifetime_secs, cap);
        self
    }

    /// These checks with the network idle timeout bounded by `cap` too (one the request
    /// carries, as an upload session's): the shorter one holds.
    pub fn with_network_idle_cap(mut self, cap: Option<u64>) -> IdleChecks {
        self.network_idle_timeout_secs = shorter(self.network_idle_timeout_secs, cap);
        self
    }

    /// Why these checks cannot work, naming the field; `None` when they can.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let positive = |field, value: Option<u64>| match value {
            Some(0) => Some((field, "must be above 0 seconds".to_owned())),
            _ => None,
        };
        positive("max_lifetime", self.max_lifetime_secs)
            .or_else(|| positive("network_idle_timeout", self.network_idle_timeout_secs))
            .or_else(|| {
                let u = self.utilization?;
                if u.window_secs == 0 {
                    return Some(("utilization_window", "must be above 0 seconds".into()));
                }
                let t = u.thresholds;
                let all = [
                    ("cpu_threshold", t.cpu_percent),
                    ("memory_threshold", t.memory_percent),
                    ("gpu_threshold", t.gpu_percent),
                    ("gpu_memory_threshold", t.gpu_memory_percent),
                ];
                if all.iter().all(|(_, v)| v.is_none()) {
                    return Some((
                        "utilization",
                        "needs at least one threshold (cpu, memory, gpu, gpu memory)".into(),
                    ));
                }
                all.into_iter().find_map(|(field, v)| match v {
                    Some(p) if !(0.0..=100.0).contains(&p) => {
                        Some((field, format!("{p} is not a percentage from 0 to 100")))
                    }
                    _ => None,
                })
            })
    }
}

/// The shorter of two bounds, either of which may be absent.
fn shorter(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Where a set of idle checks applies.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum IdleScope {
    ResourceGroup(String),
    ResourcePolicy(String),
}

impl IdleScope {
    /// The stream its checks are recorded in.
    pub fn stream_id(&self) -> String {
        match self {
            IdleScope::ResourceGroup(name) => format!("idle-group-{name}"),
            IdleScope::ResourcePolicy(name) => format!("idle-policy-{name}"),
        }
    }
}

/// One reading of what an agent measured of a session's use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsagePoint {
    pub at: DateTime<Utc>,
    /// Percent of one core, over the time since the previous reading.
    pub cpu_percent: Option<f64>,
    pub memory_bytes: Option<u64>,
    /// Percent of the GPUs the session holds, where the agent measures it.
    pub gpu_percent: Option<f64>,
    pub gpu_memory_percent: Option<f64>,
    /// Bytes received and sent since the container started: shown, never a sign of use (the
    /// session's own downloads are no user at it).
    pub network_bytes: Option<u64>,
}

/// What the reaper knows of one live session: folded from its events and its usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Watched {
    pub session_id: Uuid,
    pub owner: Uuid,
    pub session_type: SessionType,
    pub resource_group: String,
    pub resources: ResourceSlots,
    pub created_at: DateTime<Utc>,
    /// The policy's hard lifetime, as the request carried it.
    pub lifetime_cap_secs: Option<u64>,
    /// The network idle timeout the request carried (an upload session's).
    #[serde(default)]
    pub network_idle_cap_secs: Option<u64>,
    /// The agent of the main kernel, the one whose usage counts.
    pub agent_id: Option<String>,
    pub running_since: Option<DateTime<Utc>>,
    pub exempt: bool,
    /// Readings of the last window, oldest first (not persisted: read again from the
    /// telemetry stream).
    #[serde(skip)]
    pub usage: VecDeque<UsagePoint>,
    /// When a user last reached the session: bytes through its apps' circuits (the terminal
    /// and the SSH tunnel are apps too), its files or a command run in it, as the gateways
    /// report them. The container's own traffic is not use: a session that downloads with
    /// nobody at it is network-idle, as the seeds define it.
    #[serde(skip)]
    pub last_traffic_at: Option<DateTime<Utc>>,
    /// Since when this reaper has watched the session (its first reading or report, or its
    /// start, for a reaper started again, which cannot know what users did before): network
    /// idleness is never counted from before it.
    #[serde(skip)]
    pub observed_since: Option<DateTime<Utc>>,
}

/// One figure a checker decided on.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IdleMeasure {
    /// `age_secs`, `idle_secs`, `cpu_percent`, `memory_percent`, `gpu_percent`,
    /// `gpu_memory_percent`.
    pub name: String,
    pub value: f64,
    pub threshold: f64,
}

/// What one checker says of a session now.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IdleReading {
    pub checker: IdleChecker,
    pub measures: Vec<IdleMeasure>,
    /// Seconds until it fires if nothing changes; `None` when use keeps it from firing (or
    /// it cannot tell yet).
    pub remaining_secs: Option<f64>,
    pub fires: bool,
    /// The reading in words.
    pub explanation: String,
}

/// What every checker says of one session, as the idle-reaper answers the gateway.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionReadings {
    pub session_id: Uuid,
    /// Exempted by its owner or an admin: it shows its readings and is never reaped.
    pub exempt: bool,
    pub readings: Vec<IdleReading>,
}

/// A session the idle-reaper would reap now, and the reading that decides it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IdleVerdict {
    pub session_id: Uuid,
    pub reading: IdleReading,
}

fn secs_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds() as f64 / 1000.0
}

impl Watched {
    /// Takes in a user's reach into the session at `at` (traffic through its circuits, its
    /// files, a command): network activity of the user's own.
    pub fn saw_traffic(&mut self, at: DateTime<Utc>) {
        self.observed_since.get_or_insert(at);
        if self.last_traffic_at.is_none_or(|last| last < at) {
            self.last_traffic_at = Some(at);
        }
    }

    /// Takes in a usage reading (readings out of order are dropped), keeping those of the
    /// last `keep_secs`.
    pub fn observe(&mut self, point: UsagePoint, keep_secs: u64) {
        if self.usage.back().is_some_and(|last| last.at >= point.at) {
            return;
        }
        self.observed_since.get_or_insert(point.at);
        self.usage.push_back(point);
        let horizon = point.at - chrono::Duration::seconds(keep_secs as i64);
        while self.usage.front().is_some_and(|p| p.at < horizon) {
            self.usage.pop_front();
        }
    }

    /// What every configured checker says now. A checker that does not apply (network idle
    /// for a batch session, any before RUNNING but the lifetime) gives no reading.
    pub fn readings(&self, checks: &IdleChecks, now: DateTime<Utc>) -> Vec<IdleReading> {
        let mut readings = Vec::new();
        if let Some(max) = checks.max_lifetime_secs {
            let age = secs_between(self.created_at, now);
            let fires = age >= max as f64;
            readings.push(IdleReading {
                checker: IdleChecker::Lifetime,
                measures: vec![measure("age_secs", age, max as f64)],
                remaining_secs: Some((max as f64 - age).max(0.0)),
                fires,
                explanation: format!("created {age:.1} s ago; the most a session lives is {max} s"),
            });
        }
        let Some(running_since) = self.running_since else {
            return readings;
        };
        if let Some(timeout) = checks.network_idle_timeout_secs {
            if self.session_type != SessionType::Batch {
                let since = [self.last_traffic_at, self.observed_since]
                    .into_iter()
                    .flatten()
                    .fold(running_since, DateTime::max);
                let idle = secs_between(since, now).max(0.0);
                readings.push(IdleReading {
                    checker: IdleChecker::NetworkIdle,
                    measures: vec![measure("idle_secs", idle, timeout as f64)],
                    remaining_secs: Some((timeout as f64 - idle).max(0.0)),
                    fires: idle >= timeout as f64,
                    explanation: format!(
                        "nobody reached it (apps, terminal, SSH, files) for {idle:.1} s; the timeout is {timeout} s"
                    ),
                });
            }
        }
        if let Some(check) = checks.utilization {
            readings.push(self.utilization(&check, running_since, now));
        }
        readings
    }

    /// The first reading that fires, if any (lifetime, then network, then utilization).
    pub fn verdict(&self, checks: &IdleChecks, now: DateTime<Utc>) -> Option<IdleReading> {
        if self.exempt {
            return None;
        }
        self.readings(checks, now).into_iter().find(|r| r.fires)
    }

    fn utilization(
        &self,
        check: &UtilizationCheck,
        running_since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> IdleReading {
        let window_start = now - chrono::Duration::seconds(check.window_secs as i64);
        let in_window: Vec<&UsagePoint> =
            self.usage.iter().filter(|p| p.at >= window_start).collect();
        let t = check.thresholds;
        let held = self.resources;
        let average = |value: &Reading<'_>| {
            let values: Vec<f64> = in_window.iter().filter_map(|p| value(p)).collect();
            (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
        };
        let cpu_of_held = |p: &UsagePoint| {
            let cores = held.cpu_milli as f64 / 1000.0;
            p.cpu_percent.map(|c| c / cores)
        };
        let memory_of_held = |p: &UsagePoint| {
            p.memory_bytes
                .map(|m| m as f64 / held.memory_bytes as f64 * 100.0)
        };
        let candidates: [(&str, Option<f64>, bool, &Reading<'_>); 4] = [
            (
                "cpu_percent",
                t.cpu_percent,
                held.cpu_milli > 0,
                &cpu_of_held,
            ),
            (
                "memory_percent",
                t.memory_percent,
                held.memory_bytes > 0,
                &memory_of_held,
            ),
            ("gpu_percent", t.gpu_percent, held.gpu_milli > 0, &|p| {
                p.gpu_percent
            }),
            (
                "gpu_memory_percent",
                t.gpu_memory_percent,
                held.gpu_milli > 0,
                &|p| p.gpu_memory_percent,
            ),
        ];
        let measures: Vec<IdleMeasure> = candidates
            .into_iter()
            .filter(|(_, threshold, holds, _)| threshold.is_some() && *holds)
            .filter_map(|(name, threshold, _, value)| {
                Some(measure(name, average(value)?, threshold?))
            })
            .collect();
        let below = |m: &IdleMeasure| m.value < m.threshold;
        let idle_now = !measures.is_empty()
            && match check.combine {
                Combine::All => measures.iter().all(below),
                Combine::Any => measures.iter().any(below),
            };
        let grace_ends = running_since + chrono::Duration::seconds(check.grace_period_secs as i64);
        // The window must be covered by what was observed: RUNNING for the whole window.
        let window_full = running_since + chrono::Duration::seconds(check.window_secs as i64);
        let earliest = grace_ends.max(window_full);
        let fires = idle_now && now >= earliest;
        let joiner = match check.combine {
            Combine::All => " and ",
            Combine::Any => " or ",
        };
        let figures = measures
            .iter()
            .map(|m| format!("{} {:.1}% (threshold {}%)", m.name, m.value, m.threshold))
            .collect::<Vec<_>>()
            .join(joiner);
        let explanation = if measures.is_empty() {
            "nothing measured yet over the window".to_owned()
        } else if now < grace_ends {
            format!(
                "in its grace period for {:.1} s more; average over {} s: {figures}",
                secs_between(now, grace_ends),
                check.window_secs
            )
        } else {
            format!("average over the last {} s: {figures}", check.window_secs)
        };
        IdleReading {
            checker: IdleChecker::Utilization,
            measures,
            remaining_secs: idle_now.then(|| secs_between(now, earliest).max(0.0)),
            fires,
            explanation,
        }
    }
}

/// What a usage point says of one resource, in percent of what the session holds.
type Reading<'a> = dyn Fn(&UsagePoint) -> Option<f64> + 'a;

fn measure(name: &str, value: f64, threshold: f64) -> IdleMeasure {
    IdleMeasure {
        name: name.to_owned(),
        value,
        threshold,
    }
}

/// How near a reading is to reaping, as the console colours it (the seeds' tooltip: yellow,
/// then red, as utilization nears its threshold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alarm {
    Calm,
    /// Yellow: a time past nine tenths of its limit or within a minute of it, or a
    /// utilization within twice its threshold.
    Near,
    /// Red: it fires, or a utilization at or below its threshold.
    Due,
}

impl IdleReading {
    /// This reading's [`Alarm`].
    pub fn alarm(&self) -> Alarm {
        if self.fires {
            return Alarm::Due;
        }
        let ratios = self
            .measures
            .iter()
            .filter(|m| m.threshold > 0.0)
            .map(|m| m.value / m.threshold);
        match self.checker {
            IdleChecker::Utilization => match ratios.fold(f64::INFINITY, f64::min) {
                r if r <= 1.0 => Alarm::Due,
                r if r <= 2.0 => Alarm::Near,
                _ => Alarm::Calm,
            },
            IdleChecker::Lifetime | IdleChecker::NetworkIdle => {
                let near_limit = ratios.fold(0.0, f64::max) >= 0.9;
                let within_a_minute = self.remaining_secs.is_some_and(|left| left < 60.0);
                if near_limit || within_a_minute {
                    Alarm::Near
                } else {
                    Alarm::Calm
                }
            }
        }
    }
}

/// The reason a reaped session's termination carries: the checker and its figures.
pub fn reap_reason(reading: &IdleReading) -> String {
    format!(
        "reaped by the idle-reaper's {} checker: {}",
        reading.checker.as_str(),
        reading.explanation
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn session(kind: SessionType) -> Watched {
        Watched {
            session_id: Uuid::nil(),
            owner: Uuid::nil(),
            session_type: kind,
            resource_group: "default".into(),
            resources: ResourceSlots {
                cpu_milli: 2000,
                memory_bytes: GIB,
                gpu_milli: 0,
            },
            created_at: t(0),
            lifetime_cap_secs: None,
            network_idle_cap_secs: None,
            agent_id: Some("a1".into()),
            running_since: Some(t(10)),
            exempt: false,
            usage: VecDeque::new(),
            last_traffic_at: None,
            observed_since: None,
        }
    }

    /// `cpu` percent of one core and `memory` percent of the session's memory, at `at`.
    fn point(at: i64, cpu: f64, memory: f64) -> UsagePoint {
        UsagePoint {
            at: t(at),
            cpu_percent: Some(cpu),
            memory_bytes: Some((memory / 100.0 * GIB as f64) as u64),
            gpu_percent: None,
            gpu_memory_percent: None,
            network_bytes: Some(100),
        }
    }

    fn utilization(grace: u64, window: u64, cpu: Option<f64>, memory: Option<f64>) -> IdleChecks {
        IdleChecks {
            utilization: Some(UtilizationCheck {
                grace_period_secs: grace,
                window_secs: window,
                thresholds: Thresholds {
                    cpu_percent: cpu,
                    memory_percent: memory,
                    ..Default::default()
                },
                combine: Combine::All,
            }),
            ..Default::default()
        }
    }

    /// Readings every 5 s from the start of RUNNING (t 10) to `until`, all at `cpu`.
    fn steady(w: &mut Watched, until: i64, cpu: f64, memory: f64) {
        for at in (10..=until).step_by(5) {
            w.observe(point(at, cpu, memory), 600);
        }
    }

    #[test]
    fn the_lifetime_counts_from_creation_and_fires_at_its_end() {
        let mut w = session(SessionType::Interactive);
        w.running_since = None;
        let checks = IdleChecks {
            max_lifetime_secs: Some(30),
            ..Default::default()
        };
        let before = w.verdict(&checks, t(29));
        assert_eq!(before, None);
        assert_eq!(w.readings(&checks, t(20))[0].remaining_secs, Some(10.0));
        let reading = w.verdict(&checks, t(30)).expect("fires at 30 s");
        assert_eq!(reading.checker, IdleChecker::Lifetime);
        assert_eq!(reading.measures[0].value, 30.0);
        assert!(
            reap_reason(&reading).contains("lifetime checker"),
            "{reading:?}"
        );
    }

    #[test]
    fn traffic_through_the_proxy_keeps_a_session_from_being_network_idle() {
        let mut w = session(SessionType::Interactive);
        let checks = IdleChecks {
            network_idle_timeout_secs: Some(60),
            ..Default::default()
        };
        // The container's counters do not move.
        steady(&mut w, 100, 50.0, 50.0);
        assert!(w.verdict(&checks, t(100)).is_some(), "idle from t 10");
        w.saw_traffic(t(90));
        assert_eq!(
            w.verdict(&checks, t(100)),
            None,
            "the proxy saw bytes at t 90"
        );
        w.saw_traffic(t(50));
        assert_eq!(
            w.last_traffic_at,
            Some(t(90)),
            "an older report changes nothing"
        );
        assert!(
            w.verdict(&checks, t(150)).is_some(),
            "idle again 60 s later"
        );
    }

    #[test]
    fn a_reaper_started_again_counts_network_idleness_from_its_start() {
        let checks = IdleChecks {
            network_idle_timeout_secs: Some(60),
            ..Default::default()
        };
        // Running since t 10, in use until the reaper stopped; it starts again at t 500.
        let mut w = session(SessionType::Interactive);
        w.observed_since = Some(t(500));
        assert_eq!(w.verdict(&checks, t(550)), None, "not idle from t 10");
        assert!(w.verdict(&checks, t(560)).is_some(), "60 s after its start");
    }

    #[test]
    fn the_policy_overrides_the_group_and_the_lifetime_cap_bounds_both() {
        let group = IdleChecks {
            max_lifetime_secs: Some(100),
            network_idle_timeout_secs: Some(60),
            utilization: None,
        };
        let policy = IdleChecks {
            max_lifetime_secs: Some(500),
            ..Default::default()
        };
        let merged = group.overridden_by(&policy);
        assert_eq!(merged.max_lifetime_secs, Some(500));
        assert_eq!(merged.network_idle_timeout_secs, Some(60));
        assert_eq!(
            merged.with_lifetime_cap(Some(200)).max_lifetime_secs,
            Some(200)
        );
        assert_eq!(
            IdleChecks::default()
                .with_lifetime_cap(Some(7))
                .max_lifetime_secs,
            Some(7)
        );
    }

    #[test]
    fn a_requests_network_idle_timeout_holds_where_the_group_sets_none_or_a_longer_one() {
        let group = IdleChecks {
            network_idle_timeout_secs: Some(60),
            ..Default::default()
        };
        let capped =
            |checks: IdleChecks, cap| checks.with_network_idle_cap(cap).network_idle_timeout_secs;
        assert_eq!(capped(group, Some(30)), Some(30));
        assert_eq!(
            capped(group, Some(600)),
            Some(60),
            "the group's shorter one"
        );
        assert_eq!(capped(IdleChecks::default(), Some(600)), Some(600));
        assert_eq!(capped(group, None), Some(60));
        // An upload session (a system one) with no traffic since it started running ends.
        let mut w = session(SessionType::System);
        w.network_idle_cap_secs = Some(20);
        let checks = IdleChecks::default().with_network_idle_cap(w.network_idle_cap_secs);
        // Running since 10 s: idle for 15 s at 25 s, for 21 s at 31 s.
        assert!(w.verdict(&checks, t(25)).is_none());
        let verdict = w.verdict(&checks, t(31)).expect("idle past its timeout");
        assert_eq!(verdict.checker, IdleChecker::NetworkIdle);
    }

    #[test]
    fn utilization_never_fires_within_the_grace_period() {
        let mut w = session(SessionType::Interactive);
        steady(&mut w, 70, 0.0, 1.0);
        let checks = utilization(60, 10, Some(5.0), None);
        let during = w.readings(&checks, t(65));
        assert!(!during[0].fires, "{during:?}");
        assert_eq!(during[0].remaining_secs, Some(5.0));
        assert!(
            w.verdict(&checks, t(70)).is_some(),
            "fires once the grace period ends"
        );
    }

    #[test]
    fn utilization_needs_a_whole_window_of_running() {
        let mut w = session(SessionType::Interactive);
        steady(&mut w, 25, 0.0, 1.0);
        let checks = utilization(0, 30, Some(5.0), None);
        assert_eq!(
            w.verdict(&checks, t(25)),
            None,
            "RUNNING for 15 s of a 30 s window"
        );
        steady(&mut w, 40, 0.0, 1.0);
        assert!(w.verdict(&checks, t(40)).is_some());
    }

    #[test]
    fn the_average_over_the_window_decides_and_a_brief_burst_does_not_save_a_session() {
        let mut w = session(SessionType::Interactive);
        let checks = utilization(0, 60, Some(10.0), None);
        // Idle for a minute, with one reading of 100% of a core (50% of the two held).
        for at in (10..=70).step_by(5) {
            let cpu = if at == 40 { 100.0 } else { 0.0 };
            w.observe(point(at, cpu, 1.0), 600);
        }
        let reading = w
            .verdict(&checks, t(70))
            .expect("the burst is averaged away");
        let cpu = &reading.measures[0];
        assert_eq!(cpu.name, "cpu_percent");
        assert!((cpu.value - 50.0 / 13.0).abs() < 1e-9, "{cpu:?}");
        // A session busy all along is kept, and says it cannot tell when it would fire.
        let mut busy = session(SessionType::Interactive);
        steady(&mut busy, 70, 60.0, 1.0);
        let kept = &busy.readings(&checks, t(70))[0];
        assert!(!kept.fires);
        assert_eq!(kept.remaining_secs, None);
        assert!(kept.measures[0].value > 10.0);
    }

    #[test]
    fn old_readings_leave_the_window() {
        let mut w = session(SessionType::Interactive);
        let checks = utilization(0, 20, Some(10.0), None);
        steady(&mut w, 40, 90.0, 1.0);
        for at in (45..=70).step_by(5) {
            w.observe(point(at, 0.0, 1.0), 600);
        }
        assert!(
            w.verdict(&checks, t(70)).is_some(),
            "busy once, idle for the whole window"
        );
    }

    #[test]
    fn missing_thresholds_and_unheld_or_unmeasured_resources_are_ignored() {
        let mut w = session(SessionType::Interactive);
        steady(&mut w, 70, 0.0, 90.0);
        let checks = IdleChecks {
            utilization: Some(UtilizationCheck {
                grace_period_secs: 0,
                window_secs: 30,
                thresholds: Thresholds {
                    cpu_percent: Some(5.0),
                    // The session holds no GPU: this threshold is left out.
                    gpu_percent: Some(5.0),
                    ..Default::default()
                },
                combine: Combine::All,
            }),
            ..Default::default()
        };
        // Memory is at 90%, but it has no threshold: only the CPU counts.
        let reading = w.verdict(&checks, t(70)).expect("idle CPU decides alone");
        let names: Vec<&str> = reading.measures.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["cpu_percent"]);
        // A GPU the session holds but nobody measured is left out too.
        w.resources.gpu_milli = 1000;
        let reading = w.verdict(&checks, t(70)).expect("still CPU alone");
        assert_eq!(reading.measures.len(), 1);
        // No threshold that applies: never fires.
        let gpu_only = IdleChecks {
            utilization: Some(UtilizationCheck {
                thresholds: Thresholds {
                    gpu_percent: Some(5.0),
                    ..Default::default()
                },
                ..checks.utilization.unwrap()
            }),
            ..Default::default()
        };
        assert_eq!(w.verdict(&gpu_only, t(70)), None);
    }

    #[test]
    fn all_needs_every_resource_idle_and_any_needs_one() {
        let mut w = session(SessionType::Interactive);
        // CPU idle, memory busy.
        steady(&mut w, 70, 0.0, 80.0);
        let mut checks = utilization(0, 30, Some(5.0), Some(50.0));
        assert_eq!(w.verdict(&checks, t(70)), None, "all: memory is in use");
        checks.utilization.as_mut().unwrap().combine = Combine::Any;
        let reading = w.verdict(&checks, t(70)).expect("any: the CPU is idle");
        assert_eq!(reading.measures.len(), 2);
        assert!(
            reading.explanation.contains(" or "),
            "{}",
            reading.explanation
        );
    }

    #[test]
    fn network_idle_counts_a_users_traffic_not_the_containers_and_exempts_batch_sessions() {
        let checks = IdleChecks {
            network_idle_timeout_secs: Some(30),
            ..Default::default()
        };
        let mut w = session(SessionType::Interactive);
        let bytes = |w: &mut Watched, at: i64, n: u64| {
            let mut p = point(at, 0.0, 1.0);
            p.network_bytes = Some(n);
            w.observe(p, 600);
        };
        // The session downloads steadily on its own: no user at it.
        for (at, n) in [(10, 500), (20, 900), (30, 5_000), (40, 90_000)] {
            bytes(&mut w, at, n);
        }
        assert!(w.verdict(&checks, t(40)).is_some(), "its own download");
        w.saw_traffic(t(20)); // a user's terminal at 20
        let reading = &w.readings(&checks, t(45))[0];
        assert!(!reading.fires);
        assert_eq!(reading.remaining_secs, Some(5.0));
        assert!(
            w.verdict(&checks, t(50)).is_some(),
            "30 s with nobody at it"
        );
        let mut batch = session(SessionType::Batch);
        bytes(&mut batch, 10, 500);
        assert!(
            batch.readings(&checks, t(500)).is_empty(),
            "batch sessions are exempt"
        );
    }

    #[test]
    fn an_exempt_session_is_never_reaped_but_still_shows_its_readings() {
        let mut w = session(SessionType::Interactive);
        w.exempt = true;
        let checks = IdleChecks {
            max_lifetime_secs: Some(1),
            ..Default::default()
        };
        assert_eq!(w.verdict(&checks, t(100)), None);
        assert!(w.readings(&checks, t(100))[0].fires);
    }

    #[test]
    fn checks_that_cannot_work_name_their_field() {
        let zero = IdleChecks {
            max_lifetime_secs: Some(0),
            ..Default::default()
        };
        assert_eq!(zero.problem().unwrap().0, "max_lifetime");
        let no_threshold = utilization(0, 10, None, None);
        assert_eq!(no_threshold.problem().unwrap().0, "utilization");
        let over = utilization(0, 10, Some(150.0), None);
        assert_eq!(over.problem().unwrap().0, "cpu_threshold");
        assert_eq!(utilization(0, 10, Some(5.0), None).problem(), None);
    }

    #[test]
    fn a_reading_turns_yellow_then_red_as_it_nears_its_threshold() {
        let reading = |checker, value: f64, threshold: f64, remaining: f64| IdleReading {
            checker,
            measures: vec![measure("x", value, threshold)],
            remaining_secs: Some(remaining),
            fires: false,
            explanation: String::new(),
        };
        use IdleChecker::*;
        assert_eq!(reading(Utilization, 50.0, 10.0, 100.0).alarm(), Alarm::Calm);
        assert_eq!(reading(Utilization, 15.0, 10.0, 100.0).alarm(), Alarm::Near);
        assert_eq!(
            reading(Utilization, 8.0, 10.0, 100.0).alarm(),
            Alarm::Due,
            "below its threshold, though its window has not run out"
        );
        assert_eq!(
            reading(NetworkIdle, 100.0, 1000.0, 900.0).alarm(),
            Alarm::Calm
        );
        assert_eq!(
            reading(NetworkIdle, 950.0, 1000.0, 50.0).alarm(),
            Alarm::Near
        );
        assert_eq!(reading(Lifetime, 10.0, 60.0, 50.0).alarm(), Alarm::Near);
        let mut fired = reading(Lifetime, 10.0, 3600.0, 0.0);
        fired.fires = true;
        assert_eq!(fired.alarm(), Alarm::Due);
    }
}
