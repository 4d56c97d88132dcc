//! Folders: a user's folders and those shared with them, from the ledger (`ledger.folders`
//! and `ledger.folder_shares`, written by `events::ledger`), with what each held when last
//! measured (`recorder.folder_usage`, kept by the recorder).

use deadpool_postgres::Pool;
use domain::folders::Quota;
use domain::sharing::{FolderAccess, FolderPermission};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::{Folder, FolderShare, FolderUsage};

/// The folders' columns [`folder_of`] reads: name, made, volume, usage (4), owner's email,
/// usage mode, when trashed, the quota of the owner's policy (`p`), the owner's id.
const FOLDER_COLUMNS: &str = "f.name, f.created_at, coalesce(f.volume, $2),
    u.bytes, u.files, u.measured_at, u.agent_id, o.email, f.usage_mode, f.trashed_at,
    p.max_folder_bytes, f.owner";

/// The quota of the policy of the folder's owner (`o`).
const OWNERS_POLICY: &str = "LEFT JOIN ledger.policies p ON p.name = o.resource_policy";

/// Whether share `s` reaches the user `$1`: it names them, or a project they are a member of.
const REACHES_ME: &str = "((s.grantee_kind = 'user' AND s.grantee = $1::text)
    OR (s.grantee_kind = 'project' AND s.grantee IN
          (SELECT project FROM ledger.project_members WHERE user_id = $1)))";

/// A policy's `max_folder_bytes` as the domain reads it.
fn quota(max_folder_bytes: Option<i64>) -> Option<Quota> {
    max_folder_bytes.map(|bytes| Quota(bytes.max(0) as u64))
}

/// A listed folder with its owner's id (where its files live).
pub struct Listed {
    pub owner: Uuid,
    pub folder: Folder,
}

fn folder_of(r: &Row, permission: &str, shares: Vec<FolderShare>) -> Listed {
    Listed {
        owner: r.get(11),
        folder: folder_of_columns(r, permission, shares),
    }
}

fn folder_of_columns(r: &Row, permission: &str, shares: Vec<FolderShare>) -> Folder {
    Folder {
        name: r.get(0),
        created_at: r.get(1),
        volume: r.get(2),
        usage: r.get::<_, Option<i64>>(3).map(|bytes| FolderUsage {
            bytes: bytes.max(0) as u64,
            files: r.get::<_, i64>(4).max(0) as u64,
            measured_at: r.get(5),
            agent_id: r.get(6),
        }),
        owner: r.get(7),
        permission: permission.to_owned(),
        shares,
        usage_mode: r.get(8),
        trashed_at: r.get(9),
        quota_bytes: quota(r.get(10)).map(|q| q.0),
    }
}

/// `user`'s folders, by name, each with its shares (those in the trash too); then the folders others shared with them
/// (directly or through a project), by name and owner, each with the strongest share's
/// permission.
pub async fn folders(pool: &Pool, user: Uuid) -> Result<Vec<Folder>, ApiError> {
    Ok(listed(pool, user)
        .await?
        .into_iter()
        .map(|l| l.folder)
        .collect())
}

/// [`folders`], each with its owner's id.
pub async fn listed(pool: &Pool, user: Uuid) -> Result<Vec<Listed>, ApiError> {
    let client = pool.get().await?;
    let own = client
        .query(
            &format!(
                "SELECT {FOLDER_COLUMNS}
                 FROM ledger.folders f JOIN ledger.users o ON o.user_id = f.owner
                 {OWNERS_POLICY}
                 LEFT JOIN recorder.folder_usage u ON u.owner = f.owner AND u.folder = f.name
                 WHERE f.owner = $1 ORDER BY f.name"
            ),
            &[&user, &domain::volumes::HOST_LOCAL],
        )
        .await?;
    let shares = client
        .query(
            "SELECT s.name, s.grantee_kind, coalesce(g.email, s.grantee), s.permission
             FROM ledger.folder_shares s
             LEFT JOIN ledger.users g ON s.grantee_kind = 'user' AND g.user_id::text = s.grantee
             WHERE s.owner = $1 ORDER BY s.name, s.grantee_kind, 3",
            &[&user],
        )
        .await?;
    let mut folders: Vec<Listed> = own
        .iter()
        .map(|r| {
            let name: String = r.get(0);
            let shares = shares
                .iter()
                .filter(|s| s.get::<_, String>(0) == name)
                .map(|s| FolderShare {
                    kind: s.get(1),
                    with: s.get(2),
                    permission: s.get(3),
                })
                .collect();
            folder_of(r, "owner", shares)
        })
        .collect();
    let shared = client
        .query(
            &format!(
                "SELECT {FOLDER_COLUMNS}, max(s.permission)
                 FROM ledger.folder_shares s
                 JOIN ledger.folders f USING (owner, name)
                 JOIN ledger.users o ON o.user_id = f.owner
                 {OWNERS_POLICY}
                 LEFT JOIN recorder.folder_usage u ON u.owner = f.owner AND u.folder = f.name
                 WHERE f.owner <> $1 AND f.trashed_at IS NULL
                   AND {REACHES_ME}
                 GROUP BY f.name, f.created_at, f.volume, u.bytes, u.files, u.measured_at,
                          u.agent_id, o.email, f.usage_mode, f.trashed_at, p.max_folder_bytes,
                          f.owner
                 ORDER BY f.name, o.email"
            ),
            &[&user, &domain::volumes::HOST_LOCAL],
        )
        .await?;
    folders.extend(
        shared
            .iter()
            .map(|r| folder_of(r, r.get::<_, &str>(12), Vec::new())),
    );
    Ok(folders)
}

/// The usage mode of `owner`'s folder `name` (general when it has none it names).
pub async fn usage_mode(
    pool: &Pool,
    owner: Uuid,
    name: &str,
) -> Result<domain::folders::UsageMode, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT usage_mode FROM ledger.folders WHERE owner = $1 AND name = $2",
            &[&owner, &name],
        )
        .await?;
    Ok(row
        .and_then(|r| domain::folders::UsageMode::parse(r.get(0)))
        .unwrap_or_default())
}

/// A folder a caller may reach: whose it is, its volume, and what they may do with it.
pub struct Reachable {
    pub owner: Uuid,
    pub volume: String,
    pub access: FolderAccess,
    /// The most bytes it may hold (its owner's policy's), if bounded.
    pub quota: Option<Quota>,
}

/// The quota of `user`'s resource policy: the most bytes each of their folders may hold.
pub async fn quota_of(pool: &Pool, user: Uuid) -> Result<Option<Quota>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            &format!(
                "SELECT p.max_folder_bytes FROM ledger.users o {OWNERS_POLICY}
                 WHERE o.user_id = $1"
            ),
            &[&user],
        )
        .await?;
    Ok(row.and_then(|r| quota(r.get(0))))
}

/// The folder `name` as `user` reaches it: their own by that name, else the one another user
/// shared with them by that name; `None` when neither is, and 409 when several users shared
/// one by that name or their own is in the trash (one shared with them in the trash is none).
pub async fn reachable(pool: &Pool, user: Uuid, name: &str) -> Result<Option<Reachable>, ApiError> {
    let client = pool.get().await?;
    if let Some(row) = client
        .query_opt(
            &format!(
                "SELECT coalesce(f.volume, $3), f.trashed_at IS NOT NULL, p.max_folder_bytes
                 FROM ledger.folders f JOIN ledger.users o ON o.user_id = f.owner
                 {OWNERS_POLICY}
                 WHERE f.owner = $1 AND f.name = $2"
            ),
            &[&user, &name, &domain::volumes::HOST_LOCAL],
        )
        .await?
    {
        if row.get(1) {
            return Err(ApiError::new(
                axum::http::StatusCode::CONFLICT,
                "folder_trashed",
                format!("folder `{name}` is in the trash: restore it first"),
            )
            .field("name"));
        }
        return Ok(Some(Reachable {
            owner: user,
            volume: row.get(0),
            access: FolderAccess::Owner,
            quota: quota(row.get(2)),
        }));
    }
    let rows = client
        .query(
            &format!(
                "SELECT f.owner, coalesce(f.volume, $3), max(s.permission), p.max_folder_bytes
                 FROM ledger.folder_shares s JOIN ledger.folders f USING (owner, name)
                 JOIN ledger.users o ON o.user_id = f.owner
                 {OWNERS_POLICY}
                 WHERE f.name = $2 AND f.owner <> $1 AND f.trashed_at IS NULL
                   AND {REACHES_ME}
                 GROUP BY f.owner, f.volume, p.max_folder_bytes"
            ),
            &[&user, &name, &domain::volumes::HOST_LOCAL],
        )
        .await?;
    match rows.as_slice() {
        [] => Ok(None),
        [row] => Ok(
            FolderPermission::parse(row.get(2)).map(|permission| Reachable {
                owner: row.get(0),
                volume: row.get(1),
                access: FolderAccess::Shared(permission),
                quota: quota(row.get(3)),
            }),
        ),
        _ => Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "folder_ambiguous",
            format!("more than one user shared a folder named `{name}` with you"),
        )
        .field("name")),
    }
}
