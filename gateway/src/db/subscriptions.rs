//! How far each durable subscription's consumer acknowledged the log: `feeds.acknowledged`,
//! the gateway's own schema, written here alone (`migrations/0002_subscription_acks.sql`).
//! The subscriptions themselves are read from their streams (`events::subscriptions`).

use deadpool_postgres::Pool;
use events::pg::Xid8;
use events::LogPosition;
use uuid::Uuid;

use crate::error::ApiError;

/// The position `subscription`'s consumer acknowledged last, if it did.
pub async fn acknowledged(
    pool: &Pool,
    subscription: Uuid,
) -> Result<Option<LogPosition>, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT tx_id, seq FROM feeds.acknowledged WHERE subscription_id = $1",
            &[&subscription],
        )
        .await?;
    Ok(row.map(|row| LogPosition {
        tx: row.get::<_, Xid8>(0).0,
        seq: row.get(1),
    }))
}

/// Keeps `position` as `subscription`'s acknowledgement unless a later one is kept; the
/// position kept now.
pub async fn acknowledge(
    pool: &Pool,
    subscription: Uuid,
    position: LogPosition,
) -> Result<LogPosition, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_one(
            "WITH kept AS (
                 INSERT INTO feeds.acknowledged AS a (subscription_id, tx_id, seq)
                 VALUES ($1, $2, $3)
                 ON CONFLICT (subscription_id) DO UPDATE
                     SET tx_id = excluded.tx_id, seq = excluded.seq, acked_at = now()
                     WHERE (a.tx_id, a.seq) < (excluded.tx_id, excluded.seq)
                 RETURNING tx_id, seq)
             SELECT tx_id, seq FROM kept
             UNION ALL
             SELECT tx_id, seq FROM feeds.acknowledged
             WHERE subscription_id = $1 AND NOT EXISTS (SELECT 1 FROM kept)",
            &[&subscription, &Xid8(position.tx), &position.seq],
        )
        .await?;
    Ok(LogPosition {
        tx: row.get::<_, Xid8>(0).0,
        seq: row.get(1),
    })
}

/// Forgets `subscription`'s acknowledgement (it was deleted).
pub async fn forget(pool: &Pool, subscription: Uuid) -> Result<(), ApiError> {
    let client = pool.get().await?;
    client
        .execute(
            "DELETE FROM feeds.acknowledged WHERE subscription_id = $1",
            &[&subscription],
        )
        .await?;
    Ok(())
}
