//! The statements this crate makes: the commits in progress (`image_commit.pending`, in the
//! schema the crate migrates itself: [`MIGRATIONS`]). The only place in the crate that writes
//! SQL.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use events::store::Migration;
use tokio_postgres::Error;
use uuid::Uuid;

/// The schema `image_commit`, for `events::store::migrate` (component `image_commit`).
pub const MIGRATIONS: &[Migration] = &[(
    "image_commit",
    1,
    include_str!("../migrations/0001_image_commit.sql"),
)];

pub async fn keep(
    client: &impl GenericClient,
    commit_id: Uuid,
    session_id: Uuid,
    asked: DateTime<Utc>,
) -> Result<(), Error> {
    client
        .execute(
            "INSERT INTO image_commit.pending VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&commit_id, &session_id, &asked],
        )
        .await?;
    Ok(())
}

pub async fn forget(client: &impl GenericClient, commit_id: Uuid) -> Result<(), Error> {
    client
        .execute(
            "DELETE FROM image_commit.pending WHERE commit_id = $1",
            &[&commit_id],
        )
        .await?;
    Ok(())
}

pub async fn pending(
    client: &impl tokio_postgres::GenericClient,
) -> Result<HashMap<Uuid, (Uuid, DateTime<Utc>)>, Error> {
    Ok(client
        .query(
            "SELECT commit_id, session_id, requested_at FROM image_commit.pending",
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect())
}
