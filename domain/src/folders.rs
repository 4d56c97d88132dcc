//! A folder's life: what it is for (its usage mode), and the moves its owner may make on it
//! (rename, to the trash, back from the trash, purged for good), each checked against where
//! the folder stands. A folder in the trash keeps its files and its shares but is reached by
//! nobody: it cannot be mounted, shared, renamed or have its files touched until restored.

use serde::{Deserialize, Serialize};

/// What a folder is for, as Backend.AI's usage modes: a user's general files, a model store
/// (what model serving mounts) or a dataset. It changes nothing of how the folder is reached;
/// lists show it and filter by it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;

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
