//! A folder's life: what it is for (its usage mode), and the moves its owner may make on it
//! (rename, to the trash, back from the trash, purged for good), each checked against where
//! the folder stands. A folder in the trash keeps its files and its shares but is reached by
//! nobody: it cannot be mounted, shared, renamed or have its files touched until restored.
//!
//! Its quota: the owner's resource policy bounds the bytes each of their folders holds
//! ([`Quota`]); a write that would pass it is refused, whoever writes (a shared folder counts
//! against its owner's policy).

use serde::{Deserialize, Serialize};

/// What a folder is for, as Backend.AI's usage modes: a user's general files, a model store
/// (what model serving mounts) or a dataset. It changes nothing of how the folder is reached;
/// lists show it and filter by it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum UsageMode {
    #[default]
    General,
    Model,
    Data,
}

impl UsageMode {
    pub const ALL: [UsageMode; 3] = [UsageMode::General, UsageMode::Model, UsageMode::Data];

    pub fn as_str(self) -> &'static str {
        match self {
            UsageMode::General => "general",
            UsageMode::Model => "model",
            UsageMode::Data => "data",
        }
    }

    /// The mode a caller names, or `None` for a word that names none.
    pub fn parse(word: &str) -> Option<UsageMode> {
        UsageMode::ALL.into_iter().find(|m| m.as_str() == word)
    }
}

/// Where a folder stands in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// In use: listed, mountable, its files reachable as its shares allow.
    Live,
    /// In the trash: listed to its owner only, reached by nobody until restored or purged.
    Trashed,
}

/// A move of an owner on one of their folders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FolderMove {
    Rename,
    Trash,
    Restore,
    Purge,
}

/// Why a folder cannot make a move from where it stands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveRefused {
    #[error("the folder is in the trash: restore it first")]
    InTrash,
    #[error("the folder is not in the trash: move it there first")]
    NotInTrash,
}

/// Whether a folder standing at `standing` may make `step`: renaming and trashing take a live
/// folder; restoring and purging one in the trash (a purge removes the files for good, so it
/// takes the trash's second thought).
pub fn check_move(standing: Standing, step: FolderMove) -> Result<(), MoveRefused> {
    match (standing, step) {
        (Standing::Live, FolderMove::Rename | FolderMove::Trash) => Ok(()),
        (Standing::Trashed, FolderMove::Restore | FolderMove::Purge) => Ok(()),
        (Standing::Trashed, FolderMove::Rename | FolderMove::Trash) => Err(MoveRefused::InTrash),
        (Standing::Live, FolderMove::Restore | FolderMove::Purge) => Err(MoveRefused::NotInTrash),
    }
}

/// The most bytes a folder may hold (its owner's policy's `max_folder_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota(pub u64);

/// A write a folder's quota has no room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the folder holds {used} bytes of its {quota}-byte quota; {incoming} more would pass it")]
pub struct QuotaExceeded {
    pub used: u64,
    pub quota: u64,
    pub incoming: u64,
}

impl Quota {
    /// Whether `incoming` more bytes fit in a folder holding `used` now, of which `replaced`
    /// go (a file written over), or the refusal naming the figures.
    pub fn admits(self, used: u64, replaced: u64, incoming: u64) -> Result<(), QuotaExceeded> {
        let after = used.saturating_sub(replaced).checked_add(incoming);
        if after.is_some_and(|after| after <= self.0) {
            Ok(())
        } else {
            Err(QuotaExceeded {
                used,
                quota: self.0,
                incoming,
            })
        }
    }

    /// How many bytes a write may still make into a folder holding `used` (of which
    /// `replaced` go once it is whole): what a streamed upload of unknown length is cut at.
    pub fn room(self, used: u64, replaced: u64) -> u64 {
        self.0.saturating_sub(used.saturating_sub(replaced))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_admits_up_to_its_bytes_and_counts_what_a_write_replaces() {
        let quota = Quota(100);
        assert_eq!(quota.admits(60, 0, 40), Ok(()));
        assert_eq!(
            quota.admits(60, 0, 41),
            Err(QuotaExceeded {
                used: 60,
                quota: 100,
                incoming: 41
            })
        );
        // Writing over a 30-byte file frees its bytes once the new one is whole.
        assert_eq!(quota.admits(60, 30, 70), Ok(()));
        assert_eq!(quota.room(60, 30), 70);
        // A folder already past its quota (the policy lowered, or written inside a session)
        // takes nothing more, and nothing wraps.
        assert_eq!(quota.room(150, 0), 0);
        assert!(quota.admits(150, 0, 1).is_err());
        assert!(Quota(u64::MAX).admits(u64::MAX, 0, u64::MAX).is_err());
    }

    #[test]
    fn a_live_folder_is_renamed_or_trashed_and_a_trashed_one_restored_or_purged() {
        for step in [FolderMove::Rename, FolderMove::Trash] {
            assert_eq!(check_move(Standing::Live, step), Ok(()));
            assert_eq!(
                check_move(Standing::Trashed, step),
                Err(MoveRefused::InTrash)
            );
        }
        for step in [FolderMove::Restore, FolderMove::Purge] {
            assert_eq!(check_move(Standing::Trashed, step), Ok(()));
            assert_eq!(
                check_move(Standing::Live, step),
                Err(MoveRefused::NotInTrash)
            );
        }
    }

    #[test]
    fn usage_modes_read_back_as_written_and_general_is_the_default() {
        for mode in UsageMode::ALL {
            assert_eq!(UsageMode::parse(mode.as_str()), Some(mode));
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
        }
        assert_eq!(UsageMode::parse("models"), None);
        assert_eq!(UsageMode::default(), UsageMode::General);
    }
}
