//! The statements this crate makes: its projection in schema `notification`. The only place
//! in the crate that writes SQL (the workspace's tidy test checks it).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use events::notices::{Notice, NoticedSession};
use tokio_postgres::Error;
use uuid::Uuid;

pub async fn remember(
    client: &impl GenericClient,
    session_id: Uuid,
    owner: Uuid,
    name: &str,
) -> Result<(), Error> {
    client
        .execute(
            "INSERT INTO notification.sessions (session_id, owner, name) VALUES ($1, $2, $3)
             ON CONFLICT (session_id) DO NOTHING",
            &[&session_id, &owner, &name],
        )
        .await?;
    Ok(())
}

pub async fn rename(
    client: &impl GenericClient,
    session_id: Uuid,
    name: &str,
) -> Result<(), Error> {
    client
        .execute(
            "UPDATE notification.sessions SET name = $2 WHERE session_id = $1",
            &[&session_id, &name],
        )
        .await?;
    Ok(())
}

pub async fn session(
    client: &impl GenericClient,
    session_id: Uuid,
) -> Result<Option<NoticedSession>, Error> {
    let row = client
        .query_opt(
            "SELECT owner, name FROM notification.sessions WHERE session_id = $1",
            &[&session_id],
        )
        .await?;
    Ok(row.map(|r| NoticedSession {
        session_id,
        owner: r.get(0),
        name: r.get(1),
    }))
}

/// Keeps a notice; whether it is new.
pub async fn keep(client: &impl GenericClient, notice: &Notice) -> Result<bool, Error> {
    let kept = client
        .execute(
            "INSERT INTO notification.notices
               (notice_id, user_id, session_id, session_name, kind, message, at)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (notice_id) DO NOTHING",
            &[
                &notice.notice_id,
                &notice.user_id,
                &notice.session_id,
                &notice.session_name,
                &notice.kind.as_str(),
                &notice.message,
                &notice.at,
            ],
        )
        .await?;
    Ok(kept == 1)
}

/// Marks `user`'s notices `ids` read, or with `all` every one made by `at`.
pub async fn mark_read(
    client: &impl GenericClient,
    user: Uuid,
    ids: &[Uuid],
    all: bool,
    at: DateTime<Utc>,
) -> Result<(), Error> {
    client
        .execute(
            "UPDATE notification.notices SET read_at = $4
             WHERE user_id = $1 AND read_at IS NULL AND (notice_id = ANY($2) OR ($3 AND at <= $4))",
            &[&user, &ids, &all, &at],
        )
        .await?;
    Ok(())
}
