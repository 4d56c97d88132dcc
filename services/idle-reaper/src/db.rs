//! The statements this crate makes: its fold kept in schema `idle_reaper`, which it migrates
//! itself ([`MIGRATIONS`]). The only place in the crate that writes SQL (the workspace's tidy
//! test checks it).

use deadpool_postgres::{GenericClient, Pool};
use events::idleness::Watched;
use events::store::Migration;

use crate::watch::{Change, Watchlist};

/// The schema `idle_reaper`, for `events::store::migrate` (component `idle_reaper`).
pub const MIGRATIONS: &[Migration] = &[(
    "idle_reaper",
    1,
    include_str!("../migrations/0001_idle_reaper.sql"),
)];

/// Keeps what one event changed, in the consumer's transaction.
pub async fn keep(
    client: &impl GenericClient,
    change: &Change,
) -> Result<(), tokio_postgres::Error> {
    match change {
        Change::Nothing => {}
        Change::Watching(w) => {
            let doc = serde_json::to_value(w.as_ref()).expect("a watched session serialises");
            client
                .execute(
                    "INSERT INTO idle_reaper.watched (session_id, watched) VALUES ($1, $2)
                     ON CONFLICT (session_id) DO UPDATE SET watched = EXCLUDED.watched",
                    &[&w.session_id, &doc],
                )
                .await?;
        }
        Change::Unwatched(id) => {
            client
                .execute(
                    "DELETE FROM idle_reaper.watched WHERE session_id = $1",
                    &[id],
                )
                .await?;
        }
        Change::Checks(scope, checks) => {
            let scope = serde_json::to_value(scope).expect("a scope serialises");
            let checks = serde_json::to_value(checks).expect("checks serialise");
            client
                .execute(
                    "INSERT INTO idle_reaper.checks (scope, checks) VALUES ($1, $2)
                     ON CONFLICT (scope) DO UPDATE SET checks = EXCLUDED.checks",
                    &[&scope, &checks],
                )
                .await?;
        }
        Change::Owner(user, policy) => {
            client
                .execute(
                    "INSERT INTO idle_reaper.owners (user_id, policy) VALUES ($1, $2)
                     ON CONFLICT (user_id) DO UPDATE SET policy = EXCLUDED.policy",
                    &[user, policy],
                )
                .await?;
        }
    }
    Ok(())
}

/// The fold as the last run left it.
pub async fn load(pool: &Pool) -> Result<Watchlist, LoadError> {
    let client = pool.get().await.map_err(|e| LoadError(e.to_string()))?;
    let mut list = Watchlist::default();
    // What users did while no reaper watched is unknown: network idleness counts from now.
    let started = chrono::Utc::now();
    let undecodable = |e: serde_json::Error| LoadError(format!("a kept row does not decode: {e}"));
    for row in client
        .query("SELECT watched FROM idle_reaper.watched", &[])
        .await
        .map_err(|e| LoadError(e.to_string()))?
    {
        let mut w: Watched = serde_json::from_value(row.get(0)).map_err(undecodable)?;
        w.observed_since = Some(started);
        list.sessions.insert(w.session_id, w);
    }
    for row in client
        .query("SELECT scope, checks FROM idle_reaper.checks", &[])
        .await
        .map_err(|e| LoadError(e.to_string()))?
    {
        let scope = serde_json::from_value(row.get(0)).map_err(undecodable)?;
        let checks = serde_json::from_value(row.get(1)).map_err(undecodable)?;
        list.checks.insert(scope, checks);
    }
    for row in client
        .query("SELECT user_id, policy FROM idle_reaper.owners", &[])
        .await
        .map_err(|e| LoadError(e.to_string()))?
    {
        list.policies.insert(row.get(0), row.get(1));
    }
    Ok(list)
}

#[derive(Debug, thiserror::Error)]
#[error("the idle-reaper's kept state: {0}")]
pub struct LoadError(String);
