//! Storage volumes: where a folder's files live, so that every host that mounts its volume
//! finds them. A volume is a name an operator gives a shared file system (an NFS or CephFS
//! mount, say); each agent says which volumes it mounts and where. A folder on the volume
//! [`HOST_LOCAL`] lives on the data directory of whichever agent runs the session, as on a
//! one-host install. Pure.

use std::collections::{BTreeMap, BTreeSet};

/// The volume that is no shared file system: each agent's own data directory.
pub const HOST_LOCAL: &str = "host-local";

/// Why a volume's name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a volume's name is 1 to 64 of a-z, 0-9, `-` and `_`, beginning with a letter or digit")]
pub struct BadVolumeName;

/// `name` as a volume's name: lower-case letters, digits, `-` and `_`, up to 64, beginning
/// with a letter or a digit (it names a directory and appears in settings).
pub fn volume_name(name: &str) -> Result<&str, BadVolumeName> {
    let first_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if first_ok && rest_ok && name.len() <= 64 {
        Ok(name)
    } else {
        Err(BadVolumeName)
    }
}

/// The shared volumes a session needs mounted, from its folders' volumes (folder → volume):
/// each once, in order, [`HOST_LOCAL`] left out (every agent has it).
pub fn needed(volumes: &BTreeMap<String, String>) -> Vec<String> {
    volumes
        .values()
        .filter(|v| v.as_str() != HOST_LOCAL)
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Of the volumes `needed`, those an agent mounting `mounted` lacks.
pub fn lacking<'a>(needed: &'a [String], mounted: &[String]) -> Vec<&'a str> {
    needed
        .iter()
        .filter(|v| !mounted.contains(v))
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_name_is_a_short_lower_case_word() {
        for good in ["shared", "nfs-1", "ceph_fast", "0scratch"] {
            assert_eq!(volume_name(good), Ok(good));
        }
        for bad in ["", "Shared", "-x", "a/b", "a b", &"v".repeat(65)] {
            assert_eq!(volume_name(bad), Err(BadVolumeName), "{bad:?}");
        }
    }

    #[test]
    fn a_session_needs_each_shared_volume_of_its_folders_once() {
        let folders = BTreeMap::from([
            ("a".to_string(), "shared".to_string()),
            ("b".to_string(), HOST_LOCAL.to_string()),
            ("c".to_string(), "shared".to_string()),
            ("d".to_string(), "ceph".to_string()),
        ]);
        assert_eq!(needed(&folders), ["ceph", "shared"]);
        let mounted = vec!["shared".to_string()];
        assert_eq!(lacking(&needed(&folders), &mounted), ["ceph"]);
        assert!(lacking(&[], &mounted).is_empty());
    }
}
