//! The database's migrations as `berth::app::migrate` runs them: the backbone's, then the
//! schemas the services own (idle-reaper, notification, image-commit, the gateway's proxy), each
//! from its crate.
//! A fresh database gets every history row, the backbone's moved versions included (so an
//! older berth finds nothing left to do); a database migrated before the services owned their
//! schemas, when the backbone's 0010-0012 made those tables, migrates on with its rows kept.

use deadpool_postgres::tokio_postgres::{self, NoTls};
use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::common::base_url;

/// A new database beside the configured one, not migrated: its pool and URL.
async fn empty_database() -> (Pool, String) {
    let (prefix, _) = base_url()
        .rsplit_once('/')
        .map(|(p, n)| (p.to_owned(), n.to_owned()))
        .unwrap();
    let url = format!("{prefix}/test_{}", Uuid::new_v4().simple());
    events::store::ensure_database(&url).await.unwrap();
    (events::store::pool(&url, 2).unwrap(), url)
}

/// A connection as the login role (the owner of what migrations make), not the service role.
async fn owner(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn drop_database(pool: Pool, url: &str) {
    drop(pool);
    let (prefix, name) = url.rsplit_once('/').unwrap();
    owner(&format!("{prefix}/postgres"))
        .await
        .batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
        .await
        .unwrap();
}

/// The history rows of `schema_migrations`, in order.
async fn history(client: &tokio_postgres::Client) -> Vec<(String, i32)> {
    client
        .query(
            "SELECT component, version FROM schema_migrations ORDER BY component, version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// How many rows each service table holds, read as the service role (so its grants are
/// checked too).
async fn service_rows(pool: &Pool) -> Vec<i64> {
    let client = pool.get().await.unwrap();
    let mut counts = Vec::new();
    for table in [
        "idle_reaper.watched",
        "idle_reaper.checks",
        "idle_reaper.owners",
        "notification.sessions",
        "notification.notices",
        "notification.webhooks",
        "notification.deliveries",
        "image_commit.pending",
        "proxy.tickets",
        "proxy.cookies",
    ] {
        let row = client
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap();
        counts.push(row.get(0));
    }
    counts
}

fn expected_history() -> Vec<(String, i32)> {
    let mut rows: Vec<(String, i32)> = events::store::MIGRATIONS
        .iter()
        .map(|(v, _)| ("events".to_owned(), *v))
        .collect();
    for component in ["gateway", "idle_reaper", "image_commit", "notification"] {
        rows.push((component.to_owned(), 1));
    }
    rows.sort();
    rows
}

#[tokio::test]
async fn a_fresh_database_gets_the_backbone_history_and_each_services_schema() {
    let (pool, url) = empty_database().await;
    berth::app::migrate(&pool).await.unwrap();
    assert_eq!(history(&owner(&url).await).await, expected_history());
    assert_eq!(service_rows(&pool).await, vec![0; 10]);
    // Again: nothing left to do.
    berth::app::migrate(&pool).await.unwrap();
    assert_eq!(history(&owner(&url).await).await, expected_history());
    drop_database(pool, &url).await;
}

#[tokio::test]
async fn a_database_migrated_before_the_services_owned_their_schemas_migrates_on() {
    let (pool, url) = empty_database().await;
    // What the backbone alone made before: its history (the same rows as now) and the
    // services' tables, with no history row of their own components.
    events::store::migrate(&pool, &[]).await.unwrap();
    let old = owner(&url).await;
    for (_, _, sql) in berth::app::service_migrations() {
        old.batch_execute(sql).await.unwrap();
    }
    let (user, session) = (Uuid::new_v4(), Uuid::new_v4());
    old.execute(
        "INSERT INTO idle_reaper.owners VALUES ($1, 'default')",
        &[&user],
    )
    .await
    .unwrap();
    old.execute(
        "INSERT INTO notification.sessions VALUES ($1, $2, 'kept')",
        &[&session, &user],
    )
    .await
    .unwrap();
    old.execute(
        "INSERT INTO image_commit.pending VALUES ($1, $2, now())",
        &[&Uuid::new_v4(), &session],
    )
    .await
    .unwrap();
    assert_eq!(history(&old).await.len(), events::store::MIGRATIONS.len());

    berth::app::migrate(&pool).await.unwrap();
    assert_eq!(history(&old).await, expected_history());
    assert_eq!(
        service_rows(&pool).await,
        vec![0, 0, 1, 1, 0, 0, 0, 1, 0, 0]
    );
    drop_database(pool, &url).await;
}
