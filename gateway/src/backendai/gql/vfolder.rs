//! The folders as GraphQL's `VirtualFolder` shows them (`vfolder list`: `vfolder_own_list`,
//! and `vfolder_list` of the folders the caller reaches, theirs and those shared with them),
//! from what `/v1/folders` lists (`db::folders::folders`). A page is cut from that list (a
//! user's folders are few); `filter` is refused as the sessions' is, `order` takes the
//! client's `[+|-]column` for `name`, `host`, `created_at` and `status`.

use async_graphql::{Result, SimpleObject};
use uuid::Uuid;

use super::session::DateTime;

use crate::model::Folder;

/// Backend.AI's `VirtualFolder`: the fields its client lists.
#[derive(SimpleObject, Clone)]
#[graphql(serial, rename_fields = "snake_case")]
pub struct VirtualFolder {
    id: Uuid,
    host: String,
    name: String,
    /// The owner's id.
    user: Option<Uuid>,
    /// berth's folders belong to users; a project reaches one through a share.
    group: Option<Uuid>,
    creator: String,
    /// `ready`, or `delete-pending` while in the trash.
    status: String,
    unmanaged_path: Option<String>,
    usage_mode: String,
    /// `rw` for the owner, the share's otherwise.
    permission: String,
    ownership_type: String,
    max_files: i64,
    max_size: i64,
    created_at: DateTime,
    last_used: Option<DateTime>,
    num_files: i64,
    cur_size: i64,
    cloneable: bool,
}

/// A page of folders, with how many there are in all.
#[derive(SimpleObject)]
#[graphql(serial, rename_fields = "snake_case")]
pub struct VirtualFolderList {
    items: Vec<VirtualFolder>,
    total_count: i64,
}

/// `folder` as GraphQL shows it; `owner` is its owner's id when it is the caller's (the
/// owner of one shared with them is named by email only).
pub fn virtual_folder(folder: &Folder, owner: Option<Uuid>, id: Uuid) -> VirtualFolder {
    let is_owner = folder.permission == "owner";
    VirtualFolder {
        id,
        host: folder.volume.clone(),
        name: folder.name.clone(),
        user: owner,
        group: None,
        creator: folder.owner.clone(),
        status: match folder.trashed_at {
            Some(_) => "delete-pending".into(),
            None => "ready".into(),
        },
        unmanaged_path: None,
        usage_mode: folder.usage_mode.clone(),
        permission: if is_owner {
            "rw".into()
        } else {
            folder.permission.clone()
        },
        ownership_type: "user".into(),
        max_files: 0,
        max_size: 0,
        created_at: DateTime(folder.created_at),
        last_used: None,
        num_files: folder.usage.as_ref().map_or(0, |u| u.files as i64),
        cur_size: folder.usage.as_ref().map_or(0, |u| u.bytes as i64),
        cloneable: false,
    }
}

/// A page of `folders`: ordered by `order` (`[+|-]name|host|created_at|status`, by name by
/// default), `offset` skipped, `limit` kept.
pub fn page(
    folders: Vec<VirtualFolder>,
    order: Option<&str>,
    filter: Option<&str>,
    limit: i32,
    offset: i32,
) -> Result<VirtualFolderList> {
    let sort = |folders: &mut Vec<VirtualFolder>, column: &str| {
        match column {
            "name" => folders.sort_by(|a, b| a.name.cmp(&b.name)),
            "host" => folders.sort_by(|a, b| a.host.cmp(&b.host).then(a.name.cmp(&b.name))),
            "created_at" => folders.sort_by_key(|f| f.created_at.0),
            "status" => folders.sort_by(|a, b| a.status.cmp(&b.status).then(a.name.cmp(&b.name))),
            other => {
                return Err(format!(
                    "cannot order by `{other}`: name, host, created_at or status"
                ))
            }
        }
        Ok(())
    };
    let (items, total_count) =
        super::page_of(folders, order, "name", filter, (limit, offset), sort)?;
    Ok(VirtualFolderList { items, total_count })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str, at: i64) -> VirtualFolder {
        VirtualFolder {
            id: Uuid::nil(),
            host: "host-local".into(),
            name: name.into(),
            user: None,
            group: None,
            creator: "a@b.c".into(),
            status: "ready".into(),
            unmanaged_path: None,
            usage_mode: "general".into(),
            permission: "rw".into(),
            ownership_type: "user".into(),
            max_files: 0,
            max_size: 0,
            created_at: DateTime(chrono::DateTime::from_timestamp(at, 0).unwrap()),
            last_used: None,
            num_files: 0,
            cur_size: 0,
            cloneable: false,
        }
    }

    #[test]
    fn a_page_is_cut_in_the_order_asked() {
        let all = || vec![named("b", 1), named("a", 3), named("c", 2)];
        let names = |list: VirtualFolderList| -> Vec<String> {
            list.items.into_iter().map(|f| f.name).collect()
        };
        assert_eq!(
            names(page(all(), None, None, 10, 0).unwrap()),
            ["a", "b", "c"]
        );
        assert_eq!(
            names(page(all(), Some("-created_at"), None, 2, 0).unwrap()),
            ["a", "c"]
        );
        let second = page(all(), Some("+name"), None, 2, 2).unwrap();
        assert_eq!(second.total_count, 3);
        assert_eq!(names(second), ["c"]);
        assert!(page(all(), Some("size"), None, 10, 0).is_err());
        assert!(page(all(), None, Some("name == 'a'"), 10, 0).is_err());
        assert!(page(all(), None, None, 0, 0).is_err());
    }
}
