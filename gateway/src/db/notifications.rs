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

/// Records `events` of `user`'s notifications (their `notice-<user>` stream) and keeps
/// their webhook signing secret, in one transaction: `fresh` becomes the secret when they
/// have none (`replace: false`, answering whether it was made) or always (`replace: true`).
/// Answers the secret in force and whether `fresh` is it. The secret lives only in the
/// notification service's table (`notification.webhook_secrets`), never in an event; the
/// events are recorded only with the secret, so neither is kept without the other.
pub async fn record_with_secret(
    pool: &Pool,
    user: Uuid,
    fresh: [u8; 32],
    replace: bool,
    events: impl FnOnce(bool) -> Vec<events::catalogue::Event>,
) -> Result<Vec<u8>, ApiError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let upsert = if replace {
        "INSERT INTO notification.webhook_secrets (user_id, secret) VALUES ($1, $2)
         ON CONFLICT (user_id) DO UPDATE SET secret = EXCLUDED.secret, made_at = now()"
    } else {
        "INSERT INTO notification.webhook_secrets (user_id, secret) VALUES ($1, $2)
         ON CONFLICT (user_id) DO NOTHING"
    };
    let made = tx.execute(upsert, &[&user, &fresh.as_slice()]).await? == 1;
    let secret: Vec<u8> = tx
        .query_one(
            "SELECT secret FROM notification.webhook_secrets WHERE user_id = $1",
            &[&user],
        )
        .await?
        .get(0);
    let stream = events::catalogue::stream_id("notice", user);
    let metadata = events::trace::metadata(&user.to_string(), None);
    events::ledger::record(
        &tx,
        &stream,
        events::store::ExpectedVersion::Any,
        &events(made),
        &metadata,
    )
    .await?;
    events::activity::commit(tx).await?;
    Ok(secret)
}
