//! Notifications: a user's notifications and how many are unread, from the notification
//! service's table (`notification.notices`, written by `services/notification`).

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::error::ApiError;

/// `user`'s notifications, newest first (only the unread with `unread_only`), and how many
/// are unread.
pub async fn notices(
    pool: &Pool,
    user: Uuid,
    unread_only: bool,
    limit: i64,
) -> Result<crate::model::NoticePage, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT notice_id, session_id, session_name, kind, message, at, read_at
             FROM notification.notices
             WHERE user_id = $1 AND (NOT $2 OR read_at IS NULL)
             ORDER BY at DESC, notice_id DESC LIMIT $3",
            &[&user, &unread_only, &limit],
        )
        .await?;
    let items = rows
        .iter()
        .map(|r| {
            let kind: String = r.get(3);
            crate::model::NoticeItem {
                notice_id: r.get(0),
                session_id: r.get(1),
                session_name: r.get(2),
                kind: serde_json::from_value(serde_json::Value::String(kind))
                    .expect("the service writes only known kinds"),
                message: r.get(4),
                at: r.get(5),
                read_at: r.get(6),
            }
        })
        .collect();
    Ok(crate::model::NoticePage {
        unread: unread_count(pool, user).await?,
        items,
    })
}

/// How many of `user`'s notifications are unread.
pub async fn unread_count(pool: &Pool, user: Uuid) -> Result<i64, ApiError> {
    let client = pool.get().await?;
    Ok(client
        .query_one(
            "SELECT count(*) FROM notification.notices WHERE user_id = $1 AND read_at IS NULL",
            &[&user],
        )
        .await?
        .get(0))
}

/// How many of `user`'s notifications `ids`, or (with `made_by`) of those made by then, are
/// still unread.
pub async fn unread(
    pool: &Pool,
    user: Uuid,
    ids: &[Uuid],
    made_by: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<i64, ApiError> {
    let client = pool.get().await?;
    Ok(client
        .query_one(
            "SELECT count(*) FROM notification.notices
             WHERE user_id = $1 AND read_at IS NULL AND (notice_id = ANY($2) OR at <= $3)",
            &[&user, &ids, &made_by],
        )
        .await?
        .get(0))
}
