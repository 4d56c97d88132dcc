//! Fair share over past use: how much each user and project has run in a resource group,
//! decayed by age, and the factor that orders a fair-share queue; and dominant resource
//! fairness's share. Pure, so the live scheduler, `berth replay workload` (simulated time)
//! and the gateway's read of every user's standing compute them the same way (the scheduler
//! re-exports this module as `scheduler::fair_share`).
//!
//! Usage is exact, not sampled: the log records when each session started and ended and what
//! it held, so a user's usage at `now` is the integral of what they held, each moment weighed
//! by `2^(-age / half_life)` and nothing older than `lookback` counted. For a session that held
//! `w` (its resources weighed into one figure, [`ResourceWeights`]) from `s` to `e`, with
//! `a = now - s` and `b = now - e` clipped to the lookback window, that is
//! `w * H / ln 2 * (2^(-b/H) - 2^(-a/H))` resource-seconds.
//!
//! The factor follows Slurm's classic fair-share formula: with `N` users (or projects) sharing
//! the group equally, one whose share of the group's decayed usage is `u` has the factor
//! `2^(-u * N)`: 1 for one who ran nothing, 0.5 for one who ran exactly their share, less for
//! more. A session's factor is its owner's times its project's.

use std::collections::HashMap;

use crate::payloads::ResourceSlots;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// What one unit of each resource counts for when usage is weighed into one figure (Slurm's
/// TRES billing weights): per core, per GiB of memory, per whole GPU, each per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResourceWeights {
    pub cpu_per_core: f64,
    pub memory_per_gib: f64,
    pub gpu_per_device: f64,
}

impl Default for ResourceWeights {
    fn default() -> Self {
        ResourceWeights {
            cpu_per_core: 1.0,
            memory_per_gib: 0.25,
            gpu_per_device: 10.0,
        }
    }
}

impl ResourceWeights {
    /// `slots` weighed into one figure per second.
    pub fn weigh(&self, slots: ResourceSlots) -> f64 {
        slots.cpu_milli as f64 / 1000.0 * self.cpu_per_core
            + slots.memory_bytes as f64 / (1u64 << 30) as f64 * self.memory_per_gib
            + slots.gpu_milli as f64 / 1000.0 * self.gpu_per_device
    }
}

/// A resource group's fair-share settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FairShareSettings {
    /// Usage this old counts half.
    pub half_life_secs: u64,
    /// Usage older than this counts not at all.
    pub lookback_secs: u64,
    pub weights: ResourceWeights,
}

impl Default for FairShareSettings {
    fn default() -> Self {
        FairShareSettings {
            half_life_secs: 7 * 24 * 3600,
            lookback_secs: 30 * 24 * 3600,
            weights: ResourceWeights::default(),
        }
    }
}

/// One session's hold on a group's resources, as the log records it: from the moment it ran
/// until it ended (`None`: it runs still).
#[derive(Debug, Clone, PartialEq)]
pub struct UsageInterval {
    pub owner: Uuid,
    pub project: Option<String>,
    pub resources: ResourceSlots,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// Decayed usage in weighed resource-seconds, per owner and per project.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub by_owner: HashMap<Uuid, f64>,
    pub by_project: HashMap<String, f64>,
}

/// The decayed usage of one interval at `now` (see the module's docs).
pub fn decayed(interval: &UsageInterval, now: DateTime<Utc>, settings: &FairShareSettings) -> f64 {
    let secs = |t: DateTime<Utc>| (now - t).num_milliseconds() as f64 / 1000.0;
    let lookback = settings.lookback_secs as f64;
    // Ages of the interval's start and end, clipped to [0, lookback].
    let older = secs(interval.started_at).clamp(0.0, lookback);
    let newer = interval.ended_at.map_or(0.0, secs).clamp(0.0, lookback);
    if older <= newer {
        return 0.0;
    }
    let weight = settings.weights.weigh(interval.resources);
    let half_life = settings.half_life_secs.max(1) as f64;
    let remains = |age: f64| (-age / half_life).exp2();
    weight * half_life / std::f64::consts::LN_2 * (remains(newer) - remains(older))
}

/// Every owner's and project's decayed usage at `now`.
pub fn usage(
    intervals: &[UsageInterval],
    now: DateTime<Utc>,
    settings: &FairShareSettings,
) -> Usage {
    let mut usage = Usage::default();
    for interval in intervals {
        let used = decayed(interval, now, settings);
        *usage.by_owner.entry(interval.owner).or_default() += used;
        if let Some(project) = &interval.project {
            *usage.by_project.entry(project.clone()).or_default() += used;
        }
    }
    usage
}

/// The fair-share factor of a party whose decayed usage is `used`, of `total` over `parties`
/// parties sharing equally: `2^(-(used / total) * parties)`, 1 when nothing was used at all.
pub fn factor(used: f64, total: f64, parties: usize) -> f64 {
    if total <= 0.0 || parties == 0 {
        return 1.0;
    }
    (-(used / total) * parties as f64).exp2()
}

/// An owner's dominant share: the largest of what they hold of each resource over the
/// group's capacity of it, and that resource in words.
#[derive(Debug, Clone, PartialEq)]
pub struct DominantShare {
    pub share: f64,
    pub dominant: String,
}

/// [`dominant_share`]'s figure alone, without the words (DRF computes it every turn).
pub fn dominant_share_value(held: ResourceSlots, capacity: ResourceSlots) -> f64 {
    let part = |held: u64, capacity: u64| {
        if capacity == 0 {
            0.0
        } else {
            held as f64 / capacity as f64
        }
    };
    part(held.cpu_milli, capacity.cpu_milli)
        .max(part(held.memory_bytes, capacity.memory_bytes))
        .max(part(held.gpu_milli, capacity.gpu_milli))
}

/// The dominant share of `held` in `capacity` (resources the group has none of are left out).
pub fn dominant_share(held: ResourceSlots, capacity: ResourceSlots) -> DominantShare {
    let gib = (1u64 << 30) as f64;
    let parts = [
        (held.cpu_milli, capacity.cpu_milli, "cpu", 1000.0, "cores"),
        (
            held.memory_bytes,
            capacity.memory_bytes,
            "memory",
            gib,
            "GiB",
        ),
        (held.gpu_milli, capacity.gpu_milli, "gpu", 1000.0, "devices"),
    ];
    let mut best = DominantShare {
        share: 0.0,
        dominant: "nothing held".into(),
    };
    for (held, capacity, name, unit, units) in parts {
        if capacity == 0 {
            continue;
        }
        let share = held as f64 / capacity as f64;
        if share > best.share || (best.share == 0.0 && held > 0) {
            best = DominantShare {
                share,
                dominant: format!(
                    "{name} {} of {} {units}",
                    trim(held as f64 / unit),
                    trim(capacity as f64 / unit)
                ),
            };
        }
    }
    best
}

/// A figure without trailing zeros (4, 2.5, 0.125).
fn trim(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Each owner's and project's fair-share factor, from decayed usage: the parties are the
/// owners (projects) with usage or a session in the queue, sharing the group equally.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Factors {
    pub by_owner: HashMap<Uuid, f64>,
    pub by_project: HashMap<String, f64>,
}

impl Factors {
    /// The factors of everyone in `usage` and of the `queued` sessions' owners and projects.
    pub fn new<'a>(
        usage: &Usage,
        queued: impl IntoIterator<Item = (Uuid, Option<&'a str>)>,
    ) -> Factors {
        let mut owners: std::collections::HashSet<Uuid> = usage.by_owner.keys().copied().collect();
        let mut projects: std::collections::HashSet<String> =
            usage.by_project.keys().cloned().collect();
        for (owner, project) in queued {
            owners.insert(owner);
            if let Some(project) = project {
                projects.insert(project.to_owned());
            }
        }
        let owner_total: f64 = usage.by_owner.values().sum();
        let project_total: f64 = usage.by_project.values().sum();
        let by_owner = owners
            .iter()
            .map(|o| {
                let used = usage.by_owner.get(o).copied().unwrap_or(0.0);
                (*o, factor(used, owner_total, owners.len()))
            })
            .collect();
        let by_project = projects
            .iter()
            .map(|p| {
                let used = usage.by_project.get(p).copied().unwrap_or(0.0);
                (p.clone(), factor(used, project_total, projects.len()))
            })
            .collect();
        Factors {
            by_owner,
            by_project,
        }
    }

    /// An owner's factor (1 for one nobody counted).
    pub fn owner(&self, owner: Uuid) -> f64 {
        self.by_owner.get(&owner).copied().unwrap_or(1.0)
    }

    /// A project's factor (1 for none, or one nobody counted).
    pub fn project(&self, project: Option<&str>) -> f64 {
        project
            .and_then(|p| self.by_project.get(p).copied())
            .unwrap_or(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 26, 12, 0, 0).unwrap()
    }

    fn cores(n: u64) -> ResourceSlots {
        ResourceSlots {
            cpu_milli: n * 1000,
            memory_bytes: 0,
            gpu_milli: 0,
        }
    }

    /// Within `percent` of `expected`.
    fn near(value: f64, expected: f64, percent: f64) -> bool {
        (value - expected).abs() <= expected * percent / 100.0
    }

    fn ran(owner: u128, cpu: u64, from_hours_ago: i64, to_hours_ago: Option<i64>) -> UsageInterval {
        UsageInterval {
            owner: Uuid::from_u128(owner),
            project: Some("lab".into()),
            resources: cores(cpu),
            started_at: now() - chrono::Duration::hours(from_hours_ago),
            ended_at: to_hours_ago.map(|h| now() - chrono::Duration::hours(h)),
        }
    }

    #[test]
    fn the_dominant_share_is_the_largest_of_any_resource_the_group_has() {
        let capacity = ResourceSlots {
            cpu_milli: 16_000,
            memory_bytes: 64 << 30,
            gpu_milli: 0,
        };
        let held = ResourceSlots {
            cpu_milli: 2_000,
            memory_bytes: 32 << 30,
            gpu_milli: 0,
        };
        let share = dominant_share(held, capacity);
        assert_eq!(
            (share.share, share.dominant.as_str()),
            (0.5, "memory 32 of 64 GiB")
        );
        assert_eq!(dominant_share_value(held, capacity), share.share);
        let none = ResourceSlots::default();
        assert_eq!(dominant_share(none, capacity).dominant, "nothing held");
        assert_eq!(dominant_share_value(held, none), 0.0);
    }

    #[test]
    fn recent_use_counts_almost_whole_and_a_half_life_ago_counts_half() {
        let settings = FairShareSettings::default();
        // Two cores for the last hour: 7,200 core-seconds, less the hour's own decay (0.2%).
        let recent = decayed(&ran(1, 2, 1, Some(0)), now(), &settings);
        assert!(near(recent, 7200.0 * 0.998, 0.05), "{recent}");
        // The same hour a week ago counts half.
        let week = 7 * 24;
        let old = decayed(&ran(1, 2, week + 1, Some(week)), now(), &settings);
        assert!(near(old, recent / 2.0, 0.01), "{old} against {recent}");
    }

    #[test]
    fn a_running_session_counts_until_now_and_nothing_before_the_lookback() {
        let settings = FairShareSettings::default();
        let running = decayed(&ran(1, 1, 2, None), now(), &settings);
        let ended_now = decayed(&ran(1, 1, 2, Some(0)), now(), &settings);
        assert_eq!(running, ended_now);
        assert!(near(running, 7200.0, 0.5), "{running}");
        let ancient = decayed(&ran(1, 64, 40 * 24, Some(31 * 24)), now(), &settings);
        assert_eq!(ancient, 0.0);
    }

    #[test]
    fn usage_adds_up_per_owner_and_project_and_the_factor_halves_at_a_fair_share() {
        let settings = FairShareSettings::default();
        let usage = usage(
            &[
                ran(1, 2, 1, Some(0)),
                ran(1, 2, 1, Some(0)),
                ran(2, 4, 1, Some(0)),
            ],
            now(),
            &settings,
        );
        let a = usage.by_owner[&Uuid::from_u128(1)];
        let b = usage.by_owner[&Uuid::from_u128(2)];
        assert!((a - b).abs() < 1e-6);
        assert!((usage.by_project["lab"] - 2.0 * a).abs() < 1e-6);
        // Each of two users ran exactly half: the factor is one half.
        assert!((factor(a, a + b, 2) - 0.5).abs() < 1e-12);
        assert_eq!(factor(0.0, 0.0, 2), 1.0);
        assert!(factor(a + b, a + b, 2) < factor(0.0, a + b, 2));
    }
}
