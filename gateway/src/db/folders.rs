//! Folders: a user's folders, from the ledger (`ledger.folders`, written by `events::ledger`).

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::error::ApiError;
use crate::model::Folder;

/// `owner`'s folders, by name.
pub async fn folders(pool: &Pool, owner: Uuid) -> Result<Vec<Folder>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT name, created_at, coalesce(volume, $2) FROM ledger.folders
             WHERE owner = $1 ORDER BY name",
            &[&owner, &domain::volumes::HOST_LOCAL],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Folder {
            name: r.get(0),
            created_at: r.get(1),
            volume: r.get(2),
        })
        .collect())
}
