//! Advice on when a session starts: the shapes of the question and the answer, shared by the
//! scheduler (which runs the live queue forward to answer) and the gateway (which asks for the
//! launcher's review and shows the estimate recorded for a waiting session). Pure.

use chrono::TimeDelta;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::payloads::ResourceSlots;

/// The shape asked about.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Shape {
    pub per_kernel: ResourceSlots,
    pub cluster_size: u32,
}

impl Shape {
    /// The shape in words: "2 cores, 1 GiB", with its GPUs and kernels when it has some.
    pub fn words(&self) -> String {
        let k = self.per_kernel;
        let cores = k.cpu_milli as f64 / 1000.0;
        let gib = k.memory_bytes as f64 / f64::from(1u32 << 30);
        let mut words = format!("{cores} cores, {gib} GiB");
        if k.gpu_milli > 0 {
            words.push_str(&format!(", {} GPUs", k.gpu_milli as f64 / 1000.0));
        }
        if self.cluster_size > 1 {
            words.push_str(&format!(" x {} kernels", self.cluster_size));
        }
        words
    }
}

/// When a session is expected to start.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Estimate {
    /// Seconds from now; `None` when the simulation never places it (`never` says why).
    pub wait_secs: Option<u64>,
    /// The waiting sessions the simulation places first, in that order.
    pub ahead: Vec<Uuid>,
    pub never: Option<String>,
}

impl Estimate {
    pub fn placed(wait: TimeDelta, ahead: Vec<Uuid>) -> Estimate {
        Estimate {
            wait_secs: Some(wait.num_seconds().max(0) as u64),
            ahead,
            never: None,
        }
    }

    pub fn never(why: impl Into<String>, ahead: Vec<Uuid>) -> Estimate {
        Estimate {
            wait_secs: None,
            ahead,
            never: Some(why.into()),
        }
    }

    /// Whether this one starts sooner than `other`.
    pub fn sooner_than(&self, other: &Estimate) -> bool {
        match (self.wait_secs, other.wait_secs) {
            (Some(a), Some(b)) => a < b,
            (Some(_), None) => true,
            _ => false,
        }
    }

    /// The wait in words: "now", "about 40 min".
    pub fn words(&self) -> String {
        match (self.wait_secs, &self.never) {
            (Some(s), _) if s < 60 => "now".into(),
            (Some(s), _) if s < 3600 => format!("in about {} min", s.div_ceil(60)),
            (Some(s), _) if s < 48 * 3600 => format!("in about {:.1} h", s as f64 / 3600.0),
            (Some(s), _) => format!("in about {} days", s / 86_400),
            (None, Some(why)) => format!("not expected to start: {why}"),
            (None, None) => "not expected to start".into(),
        }
    }
}

/// A shape or a group that would start sooner than the one asked.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Alternative {
    /// In words: "half the resources", "resource group `b`".
    pub label: String,
    pub resource_group: String,
    pub shape: Shape,
    pub estimate: Estimate,
}

/// What the launcher asks the scheduler: when a session of `shape` by `owner` would start in
/// `resource_group`, and which of `other_groups` (open to the owner) would start it sooner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AdviceAsked {
    pub owner: uuid::Uuid,
    pub resource_group: String,
    pub shape: Shape,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub other_groups: Vec<String>,
}

/// The scheduler's answer: the estimate for the shape asked, and what would start sooner.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Advice {
    pub resource_group: String,
    pub shape: Shape,
    pub estimate: Estimate,
    /// Sooner than `estimate`, soonest first.
    pub alternatives: Vec<Alternative>,
    /// How long a session typically holds its agents in the group, the model's one guess.
    pub typical_hold_secs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_and_a_wait_are_said_in_words() {
        let shape = Shape {
            per_kernel: ResourceSlots {
                cpu_milli: 2500,
                memory_bytes: 3 << 29,
                gpu_milli: 0,
            },
            cluster_size: 1,
        };
        assert_eq!(shape.words(), "2.5 cores, 1.5 GiB");
        let two = Shape {
            cluster_size: 2,
            ..shape
        };
        assert_eq!(two.words(), "2.5 cores, 1.5 GiB x 2 kernels");
        let wait = |secs| Estimate {
            wait_secs: Some(secs),
            ahead: vec![],
            never: None,
        };
        assert_eq!(wait(30).words(), "now");
        assert_eq!(wait(40 * 60).words(), "in about 40 min");
        assert!(wait(30).sooner_than(&wait(60)));
        let never = Estimate::never("not within a week", vec![]);
        assert_eq!(never.words(), "not expected to start: not within a week");
        assert!(wait(10_000).sooner_than(&never));
    }
}
