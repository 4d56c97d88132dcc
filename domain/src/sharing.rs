//! Shared folders: besides its owner, who may use a folder and how. An owner shares a folder
//! with a user or with a project (each member, present and future), read-only or read-write;
//! a user's access is the strongest of the shares that reach them. Pure: the ledger keeps the
//! shares (`ledger.folder_shares`), the launcher mounts by this rule and the files API
//! serves by it.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What a share allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum FolderPermission {
    /// Read its files; mounted read-only.
    #[serde(rename = "ro")]
    ReadOnly,
    /// Read and write, as its owner does.
    #[serde(rename = "rw")]
    ReadWrite,
}

impl FolderPermission {
    pub fn as_str(self) -> &'static str {
        match self {
            FolderPermission::ReadOnly => "ro",
            FolderPermission::ReadWrite => "rw",
        }
    }

    pub fn parse(text: &str) -> Option<FolderPermission> {
        match text {
            "ro" => Some(FolderPermission::ReadOnly),
            "rw" => Some(FolderPermission::ReadWrite),
            _ => None,
        }
    }
}

/// Whom a folder is shared with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Grantee {
    /// One user.
    User(Uuid),
    /// Every member of a project, as long as they are one.
    Project(String),
}

impl Grantee {
    /// The kind and the key the ledger keeps it by (`user`/`project`, the id or the name).
    pub fn parts(&self) -> (&'static str, String) {
        match self {
            Grantee::User(id) => ("user", id.to_string()),
            Grantee::Project(name) => ("project", name.clone()),
        }
    }

    /// Reads back what [`Grantee::parts`] wrote.
    pub fn from_parts(kind: &str, key: &str) -> Option<Grantee> {
        match kind {
            "user" => key.parse().ok().map(Grantee::User),
            "project" => Some(Grantee::Project(key.to_owned())),
            _ => None,
        }
    }
}

/// One share of a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub grantee: Grantee,
    pub permission: FolderPermission,
}

/// What a user may do with a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FolderAccess {
    /// Theirs: everything, sharing included.
    Owner,
    /// Shared with them, directly or through a project.
    Shared(FolderPermission),
}

impl FolderAccess {
    /// Whether they may change its files.
    pub fn may_write(self) -> bool {
        !matches!(self, FolderAccess::Shared(FolderPermission::ReadOnly))
    }
}

/// The access `user`, a member of `projects`, has to a folder `owner` owns and shared as
/// `shares`: none, the owner's, or the strongest share that names them or one of their
/// projects.
pub fn access(
    owner: Uuid,
    shares: &[Share],
    user: Uuid,
    projects: &[String],
) -> Option<FolderAccess> {
    if user == owner {
        return Some(FolderAccess::Owner);
    }
    shares
        .iter()
        .filter(|share| match &share.grantee {
            Grantee::User(id) => *id == user,
            Grantee::Project(project) => projects.contains(project),
        })
        .map(|share| share.permission)
        .max()
        .map(FolderAccess::Shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(grantee: Grantee, permission: FolderPermission) -> Share {
        Share {
            grantee,
            permission,
        }
    }

    #[test]
    fn the_owner_has_everything_and_a_stranger_nothing() {
        let (owner, stranger) = (Uuid::now_v7(), Uuid::now_v7());
        let shares = [share(
            Grantee::Project("ml".into()),
            FolderPermission::ReadWrite,
        )];
        assert_eq!(
            access(owner, &shares, owner, &[]),
            Some(FolderAccess::Owner)
        );
        assert_eq!(access(owner, &shares, stranger, &["web".into()]), None);
        assert!(FolderAccess::Owner.may_write());
    }

    #[test]
    fn a_user_gets_the_strongest_share_that_reaches_them_directly_or_by_a_project() {
        let (owner, bob) = (Uuid::now_v7(), Uuid::now_v7());
        let direct = share(Grantee::User(bob), FolderPermission::ReadOnly);
        let by_project = share(Grantee::Project("ml".into()), FolderPermission::ReadWrite);
        let read_only = access(owner, std::slice::from_ref(&direct), bob, &["ml".into()]);
        assert_eq!(
            read_only,
            Some(FolderAccess::Shared(FolderPermission::ReadOnly))
        );
        assert!(!read_only.unwrap().may_write());
        let both = [direct, by_project];
        assert_eq!(
            access(owner, &both, bob, &["ml".into()]),
            Some(FolderAccess::Shared(FolderPermission::ReadWrite))
        );
        // Out of the project, only the direct share is left.
        assert_eq!(
            access(owner, &both, bob, &[]),
            Some(FolderAccess::Shared(FolderPermission::ReadOnly))
        );
    }

    #[test]
    fn grantees_and_permissions_read_back_as_the_ledger_keeps_them() {
        for grantee in [Grantee::User(Uuid::now_v7()), Grantee::Project("ml".into())] {
            let (kind, key) = grantee.parts();
            assert_eq!(Grantee::from_parts(kind, &key), Some(grantee));
        }
        assert_eq!(Grantee::from_parts("group", "x"), None);
        for p in [FolderPermission::ReadOnly, FolderPermission::ReadWrite] {
            assert_eq!(FolderPermission::parse(p.as_str()), Some(p));
        }
        assert_eq!(
            serde_json::to_value(Grantee::Project("ml".into())).unwrap(),
            serde_json::json!({"project": "ml"})
        );
    }
}
