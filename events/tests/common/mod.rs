//! What the events crate's integration tests share: a database of each test's own, migrated,
//! on the PostgreSQL `infra/services.sh up` starts (or `BERTH_DATABASE_URL`'s).

use deadpool_postgres::Pool;
use events::store;
use uuid::Uuid;

/// A fresh database with the store's schema, a pool of `connections` to it, and its url.
pub async fn fresh_database(connections: usize) -> (Pool, String) {
    let base = std::env::var("BERTH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://berth@127.0.0.1:55432/berth".into());
    let (prefix, _) = base.rsplit_once('/').expect("url has a database");
    let url = format!("{prefix}/test_{}", Uuid::new_v4().simple());
    store::ensure_database(&url)
        .await
        .expect("create test database");
    let pool = store::pool(&url, connections).expect("pool");
    store::migrate(&pool, &[]).await.expect("migrate");
    (pool, url)
}
