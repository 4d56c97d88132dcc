//! The statements this crate makes: its projection in schema `notification`, which it
//! migrates itself ([`MIGRATIONS`]). The only place in the crate that writes SQL (the
//! workspace's tidy test checks it).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use events::notices::{Notice, NoticedSession};
use events::store::Migration;
use tokio_postgres::Error;
use uuid::Uuid;

use crate::NotificationError;

/// The schema `notification`, for `events::store::migrate` (component `notification`).
pub const MIGRATIONS: &[Migration] = &[
    (
        "notification",
        1,
        include_str!("../migrations/0001_notification.sql"),
    ),
    (
        "notification",
        2,
        include_str!("../migrations/0002_webhook_secrets.sql"),
    ),
];

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

/// Sets (or, with `None`, removes) `user`'s webhook.
pub async fn set_webhook(
    client: &impl GenericClient,
    user: Uuid,
    url: Option<&str>,
) -> Result<(), Error> {
    match url {
        Some(url) => {
            client
                .execute(
                    "INSERT INTO notification.webhooks (user_id, url) VALUES ($1, $2)
                     ON CONFLICT (user_id) DO UPDATE SET url = EXCLUDED.url",
                    &[&user, &url],
                )
                .await?
        }
        None => {
            client
                .execute(
                    "DELETE FROM notification.webhooks WHERE user_id = $1",
                    &[&user],
                )
                .await?
        }
    };
    Ok(())
}

/// Queues `notice` for its owner's webhook, if they set one; whether it was queued.
pub async fn queue_delivery(client: &impl GenericClient, notice: &Notice) -> Result<bool, Error> {
    let body = serde_json::to_string(notice).expect("a notice serialises");
    let queued = client
        .execute(
            "INSERT INTO notification.deliveries (notice_id, url, body, attempts, next_at)
             SELECT $1, url, $3, 0, now() FROM notification.webhooks WHERE user_id = $2
             ON CONFLICT (notice_id) DO NOTHING",
            &[&notice.notice_id, &notice.user_id, &body],
        )
        .await?;
    Ok(queued == 1)
}

/// A delivery claimed for sending.
pub struct Delivery {
    pub notice_id: Uuid,
    /// Whose notice it is: whose secret signs it.
    pub user_id: Uuid,
    pub url: String,
    pub body: String,
    pub attempts: i32,
}

/// Claims up to `limit` due deliveries for `lease`, in one short statement.
pub async fn claim_deliveries(
    pool: &deadpool_postgres::Pool,
    lease: std::time::Duration,
    limit: i64,
) -> Result<Vec<Delivery>, NotificationError> {
    let client = pool.get().await?;
    let lease_secs = lease.as_secs_f64();
    // In the order they fell due (a statement's RETURNING keeps no order of its own).
    let rows = client
        .query(
            "WITH due AS (
               SELECT notice_id, next_at FROM notification.deliveries
               WHERE delivered_at IS NULL AND attempts < $3 AND next_at <= now()
               ORDER BY next_at LIMIT $2 FOR UPDATE SKIP LOCKED)
             UPDATE notification.deliveries d SET next_at = now() + make_interval(secs => $1)
             FROM due WHERE d.notice_id = due.notice_id
             RETURNING d.notice_id, d.url, d.body, d.attempts, due.next_at,
               (SELECT n.user_id FROM notification.notices n WHERE n.notice_id = d.notice_id)",
            &[&lease_secs, &limit, &crate::webhook::MAX_ATTEMPTS],
        )
        .await?;
    let mut claimed: Vec<(chrono::DateTime<chrono::Utc>, Delivery)> = rows
        .iter()
        .map(|r| {
            let delivery = Delivery {
                notice_id: r.get(0),
                user_id: r.get(5),
                url: r.get(1),
                body: r.get(2),
                attempts: r.get(3),
            };
            (r.get(4), delivery)
        })
        .collect();
    claimed.sort_by_key(|(due, d)| (*due, d.notice_id));
    Ok(claimed.into_iter().map(|(_, d)| d).collect())
}

/// `user`'s webhook signing secret; `fresh` becomes it if they have none yet (a webhook set
/// before secrets were made).
pub async fn secret_of(
    pool: &deadpool_postgres::Pool,
    user: Uuid,
    fresh: [u8; 32],
) -> Result<Vec<u8>, NotificationError> {
    let client = pool.get().await?;
    client
        .execute(
            "INSERT INTO notification.webhook_secrets (user_id, secret) VALUES ($1, $2)
             ON CONFLICT (user_id) DO NOTHING",
            &[&user, &fresh.as_slice()],
        )
        .await?;
    let row = client
        .query_one(
            "SELECT secret FROM notification.webhook_secrets WHERE user_id = $1",
            &[&user],
        )
        .await?;
    Ok(row.get(0))
}

pub async fn delivered(
    pool: &deadpool_postgres::Pool,
    notice_id: Uuid,
) -> Result<(), NotificationError> {
    let client = pool.get().await?;
    client
        .execute(
            "UPDATE notification.deliveries SET delivered_at = now(), attempts = attempts + 1
             WHERE notice_id = $1",
            &[&notice_id],
        )
        .await?;
    Ok(())
}

pub async fn failed(
    pool: &deadpool_postgres::Pool,
    notice_id: Uuid,
    attempts: i32,
    wait: std::time::Duration,
    why: &str,
) -> Result<(), NotificationError> {
    let client = pool.get().await?;
    client
        .execute(
            "UPDATE notification.deliveries SET attempts = $2,
               next_at = now() + make_interval(secs => $3), last_error = $4
             WHERE notice_id = $1",
            &[&notice_id, &attempts, &wait.as_secs_f64(), &why],
        )
        .await?;
    Ok(())
}

/// How long until the next delivery falls due, if any waits.
pub async fn next_delivery_in(
    pool: &deadpool_postgres::Pool,
) -> Result<Option<std::time::Duration>, NotificationError> {
    let client = pool.get().await?;
    let row = client
        .query_one(
            "SELECT extract(epoch FROM min(next_at) - now())::float8 FROM notification.deliveries
             WHERE delivered_at IS NULL AND attempts < $1",
            &[&crate::webhook::MAX_ATTEMPTS],
        )
        .await?;
    Ok(row
        .get::<_, Option<f64>>(0)
        .map(|s| std::time::Duration::from_secs_f64(s.max(0.0))))
}
