//! Folders: a user's folders, from the ledger (`ledger.folders`, written by `events::ledger`),
//! with what each held when last measured (`recorder.folder_usage`, kept by the recorder).

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::{Folder, FolderUsage};

/// `owner`'s folders, by name.
pub async fn folders(pool: &Pool, owner: Uuid) -> Result<Vec<Folder>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT f.name, f.created_at, coalesce(f.volume, $2),
                    u.bytes, u.files, u.measured_at, u.agent_id
             FROM ledger.folders f
             LEFT JOIN recorder.folder_usage u ON u.owner = f.owner AND u.folder = f.name
             WHERE f.owner = $1 ORDER BY f.name",
            &[&owner, &domain::volumes::HOST_LOCAL],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Folder {
            name: r.get(0),
            created_at: r.get(1),
            volume: r.get(2),
            usage: r.get::<_, Option<i64>>(3).map(|bytes| FolderUsage {
                bytes: bytes.max(0) as u64,
                files: r.get::<_, i64>(4).max(0) as u64,
                measured_at: r.get(5),
                agent_id: r.get(6),
            }),
        })
        .collect())
}

/// The volume of `owner`'s folder `name`, if they have one by that name.
pub async fn volume_of(pool: &Pool, owner: Uuid, name: &str) -> Result<Option<String>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT coalesce(volume, $3) FROM ledger.folders WHERE owner = $1 AND name = $2",
            &[&owner, &name, &domain::volumes::HOST_LOCAL],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}
