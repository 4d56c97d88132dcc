//! Customized images: a user's images and how many their policy lets them keep, from the
//! ledger (`ledger.custom_images`, `ledger.image_claims`, `ledger.users`, `ledger.policies`, written by
//! `events::ledger`).

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::error::ApiError;

/// How many customized images `owner` may keep (their policy's most, `None`: no limit) and
/// those they keep or are committing (the names their commits under way claimed).
pub struct Allowance {
    pub policy: String,
    pub most: Option<i64>,
    pub images: Vec<String>,
}

pub async fn custom_image_allowance(pool: &Pool, owner: Uuid) -> Result<Allowance, ApiError> {
    let client = pool.get().await?;
    let row = client
        .query_opt(
            "SELECT u.resource_policy, p.max_custom_images FROM ledger.users u
               LEFT JOIN ledger.policies p ON p.name = u.resource_policy
             WHERE u.user_id = $1",
            &[&owner],
        )
        .await?;
    let (policy, most) = match row {
        Some(r) => (r.get(0), r.get::<_, Option<i32>>(1).map(i64::from)),
        None => (String::new(), None),
    };
    let images = client
        .query(
            "SELECT image FROM ledger.custom_images WHERE owner = $1
             UNION ALL SELECT image FROM ledger.image_claims WHERE owner = $1",
            &[&owner],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(Allowance {
        policy,
        most,
        images,
    })
}

/// `owner`'s customized images, newest first.
pub async fn custom_images(
    pool: &Pool,
    owner: Uuid,
) -> Result<Vec<crate::model::CustomImage>, ApiError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT image, session_id, agent_id, image_id, size_bytes, created_at, pushed
             FROM ledger.custom_images WHERE owner = $1 ORDER BY created_at DESC, image",
            &[&owner],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let image: String = r.get(0);
            crate::model::CustomImage {
                name: image
                    .rsplit_once(':')
                    .map(|(_, n)| n.to_owned())
                    .unwrap_or_default(),
                image,
                session_id: r.get(1),
                agent_id: r.get(2),
                image_id: r.get(3),
                size_bytes: r.get(4),
                created_at: r.get(5),
                runs_on: if r.get(6) {
                    crate::model::ImageReach::Everywhere
                } else {
                    crate::model::ImageReach::Agent
                },
            }
        })
        .collect())
}
