//! What a launch that names no environment, or no resources, gets: the resource group's
//! defaults as an operator set them (`ResourceGroupDefaultsSet`; an install's first group has
//! berth's shell image), else a fallback that needs no setting: the group's most used image
//! that an agent still offers, and the smallest preset that fits both the owner's policy and
//! one of the group's agents. So "Skip to review" in the console, and an API create that
//! says only what it cares about, launch. An image merely offered is never a default by
//! itself: an agent's host holds server images (a registry, a database) beside session ones.

use std::collections::BTreeSet;

use crate::payloads::ResourceSlots;

/// Why a default was chosen, as the console's review says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// An operator set it for the group.
    Set,
    /// The group's most used image among those offered now.
    MostUsed,
    /// The smallest preset that fits the owner's policy and an agent of the group.
    SmallestFitting,
}

impl Why {
    /// The reason in words, after "the group's default:".
    pub fn words(self) -> &'static str {
        match self {
            Why::Set => "set by an operator",
            Why::MostUsed => "its most used environment",
            Why::SmallestFitting => "the smallest preset that fits",
        }
    }
}

/// A chosen default and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub value: String,
    pub why: Why,
}

/// The image a launch without one gets: the operator's (`set`), else the most used of `used`
/// (image, sessions) that is `offered` now (ties by name); `None` when neither.
pub fn image(
    set: Option<&str>,
    used: &[(String, u64)],
    offered: &BTreeSet<String>,
) -> Option<Chosen> {
    if let Some(image) = set {
        return Some(Chosen {
            value: image.to_owned(),
            why: Why::Set,
        });
    }
    used.iter()
        .filter(|(image, count)| *count > 0 && offered.contains(image))
        .max_by(|(a, x), (b, y)| x.cmp(y).then_with(|| b.cmp(a)))
        .map(|(image, _)| Chosen {
            value: image.clone(),
            why: Why::MostUsed,
        })
}

/// The preset a launch without resources gets: the operator's (`set`), else the smallest of
/// `presets` (fewest GPUs, then least memory, then fewest cores, then by name) that fits in
/// `policy` (the most the owner may hold) and in at least one of `agents` (their capacity).
pub fn preset(
    set: Option<&str>,
    presets: &[(String, ResourceSlots)],
    policy: ResourceSlots,
    agents: &[ResourceSlots],
) -> Option<Chosen> {
    if let Some(name) = set {
        return Some(Chosen {
            value: name.to_owned(),
            why: Why::Set,
        });
    }
    presets
        .iter()
        .filter(|(_, slots)| {
            slots.fits_in(policy) && agents.iter().any(|agent| slots.fits_in(*agent))
        })
        .min_by_key(|(name, s)| (s.gpu_milli, s.memory_bytes, s.cpu_milli, name.clone()))
        .map(|(name, _)| Chosen {
            value: name.clone(),
            why: Why::SmallestFitting,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn slots(cpu: u64, memory_gib: u64, gpu: u64) -> ResourceSlots {
        ResourceSlots {
            cpu_milli: cpu * 1000,
            memory_bytes: memory_gib * GIB,
            gpu_milli: gpu * 1000,
        }
    }

    fn offered(images: &[&str]) -> BTreeSet<String> {
        images.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn the_image_is_the_operators_else_the_most_used_still_offered_else_none() {
        let now = offered(&["berth/python:latest", "berth/shell:latest"]);
        let used = vec![
            ("gone/image:1".to_owned(), 50),
            ("berth/shell:latest".to_owned(), 3),
            ("berth/python:latest".to_owned(), 3),
        ];
        assert_eq!(
            image(Some("mine:1"), &used, &now),
            Some(Chosen {
                value: "mine:1".into(),
                why: Why::Set
            })
        );
        // An image no agent offers now is passed over, however used; a tie goes by name.
        assert_eq!(
            image(None, &used, &now),
            Some(Chosen {
                value: "berth/python:latest".into(),
                why: Why::MostUsed
            })
        );
        assert_eq!(image(None, &[], &now), None, "offered alone is no default");
        assert_eq!(image(None, &used, &BTreeSet::new()), None);
    }

    #[test]
    fn the_preset_is_the_smallest_that_fits_the_policy_and_an_agent() {
        let presets = vec![
            ("gpu".to_owned(), slots(4, 16, 1)),
            ("large".to_owned(), slots(8, 32, 0)),
            ("medium".to_owned(), slots(2, 4, 0)),
            ("small".to_owned(), slots(1, 2, 0)),
        ];
        let policy = slots(16, 64, 4);
        let agents = [slots(8, 32, 0)];
        let chosen = |policy, agents: &[ResourceSlots]| {
            preset(None, &presets, policy, agents).map(|c| c.value)
        };
        assert_eq!(chosen(policy, &agents).as_deref(), Some("small"));
        // The policy allows less memory than any preset holds: none fits.
        assert_eq!(chosen(slots(16, 1, 0), &agents), None);
        // One agent too small for it is passed over for one that holds it.
        assert_eq!(
            chosen(policy, &[slots(1, 1, 0), slots(2, 4, 0)]).as_deref(),
            Some("small")
        );
        // No agent holds a GPU: the GPU preset never fits, however large the policy.
        let gpu_only = &presets[..1];
        assert_eq!(preset(None, gpu_only, policy, &agents), None);
        assert_eq!(chosen(policy, &[]), None, "no agent: nothing fits");
        assert_eq!(
            preset(Some("large"), &presets, policy, &[]).map(|c| c.why),
            Some(Why::Set)
        );
    }
}
