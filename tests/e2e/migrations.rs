//! The database's migrations as `berth::app::migrate` runs them: the backbone's, then the
//! schemas the services own (recorder, idle-reaper, notification, image-commit, the gateway's
//! proxy), each from its crate.
//! A fresh database gets every history row, the backbone's moved versions included (so an
//! older berth finds nothing left to do); a database migrated before the services owned their
//! schemas, when the backbone's 0010-0012 made those tables and its 0003, 0005, 0008, 0009 and
//! 0024 made the recorder's in `public`, migrates on with its rows kept.

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
        "recorder.session_logs",
        "recorder.session_usage",
        "recorder.agent_liveness",
        "recorder.liveness_watch",
        "idle_reaper.watched",
        "idle_reaper.checks",
        "idle_reaper.owners",
        "notification.sessions",
        "notification.notices",
        "notification.webhooks",
        "notification.deliveries",
        "notification.webhook_secrets",
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
    let mut rows: Vec<(String, i32)> = events::migrations::MIGRATIONS
        .iter()
        .map(|(component, v, _)| ((*component).to_owned(), *v))
        .collect();
    for component in [
        "gateway",
        "idle_reaper",
        "image_commit",
        "notification",
        "recorder",
    ] {
        rows.push((component.to_owned(), 1));
    }
    // The recorder's logs in bounded chunks.
    rows.push(("recorder".to_owned(), 2));
    // Folders' usage.
    rows.push(("recorder".to_owned(), 3));
    // Each session's usage series.
    rows.push(("recorder".to_owned(), 4));
    // Webhook signing secrets.
    rows.push(("notification".to_owned(), 2));
    // Durable subscriptions' acknowledgements.
    rows.push(("gateway".to_owned(), 2));
    // Model endpoints' token digests.
    rows.push(("gateway".to_owned(), 3));
    rows.sort();
    rows
}

#[tokio::test]
async fn a_fresh_database_gets_the_backbone_history_and_each_services_schema() {
    let (pool, url) = empty_database().await;
    berth::app::migrate(&pool).await.unwrap();
    assert_eq!(history(&owner(&url).await).await, expected_history());
    assert_eq!(service_rows(&pool).await, vec![0; 15]);
    // Again: nothing left to do.
    berth::app::migrate(&pool).await.unwrap();
    assert_eq!(history(&owner(&url).await).await, expected_history());
    drop_database(pool, &url).await;
}

#[tokio::test]
async fn a_database_migrated_before_the_services_owned_their_schemas_migrates_on() {
    let (pool, url) = empty_database().await;
    // What the backbone alone made before: its history (the same rows as now), the
    // recorder's tables in `public` and the other services' tables in their schemas, with no
    // history row of their own components.
    events::store::migrate(&pool, &[]).await.unwrap();
    let old = owner(&url).await;
    old.batch_execute(RECORDER_TABLES_IN_PUBLIC).await.unwrap();
    for (component, _, sql) in berth::app::service_migrations() {
        if component != "recorder" {
            old.batch_execute(sql).await.unwrap();
        }
    }
    let (user, session) = (Uuid::new_v4(), Uuid::new_v4());
    old.batch_execute(&format!(
        "INSERT INTO session_logs (session_id, kernel, content, complete, epoch, kept_bytes)
           VALUES ('{session}', 0, 'kept output', true, '{session}', 11);
         INSERT INTO agent_liveness VALUES ('old-agent', now());
         INSERT INTO liveness_watch VALUES ('old-recorder', now(), now());"
    ))
    .await
    .unwrap();
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
    assert_eq!(
        history(&old).await.len(),
        events::migrations::MIGRATIONS.len()
    );

    berth::app::migrate(&pool).await.unwrap();
    assert_eq!(history(&old).await, expected_history());
    assert_eq!(
        service_rows(&pool).await,
        vec![1, 0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0]
    );
    // The recorder's tables moved, with their rows: none is left in `public`, and the kept
    // output reads as the recorder wrote it.
    for table in [
        "session_logs",
        "session_usage",
        "agent_liveness",
        "liveness_watch",
    ] {
        let left: bool = old
            .query_one(
                &format!("SELECT to_regclass('public.{table}') IS NOT NULL"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(!left, "public.{table} is still there");
    }
    // (now as one chunk at its offset: the recorder keeps logs in bounded chunks)
    let kept = pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT c.content, l.kept_bytes, c.start FROM recorder.session_logs l
               JOIN recorder.session_log_chunks c USING (session_id, kernel)
             WHERE session_id = $1",
            &[&session],
        )
        .await
        .unwrap();
    assert_eq!(kept.get::<_, String>(0), "kept output");
    assert_eq!(kept.get::<_, i64>(1), 11);
    assert_eq!(kept.get::<_, i64>(2), 0);
    drop_database(pool, &url).await;
}

#[tokio::test]
async fn the_recorders_tables_of_an_older_shape_get_their_later_columns() {
    let (pool, url) = empty_database().await;
    // A database migrated before the backbone's 0008 and 0024: the logs without their
    // reading and byte count, the usage without the GPUs, no liveness tables yet.
    events::store::migrate(&pool, &[]).await.unwrap();
    let old = owner(&url).await;
    let before_0008 = RECORDER_TABLES_IN_PUBLIC
        .split("ALTER TABLE session_logs")
        .next()
        .unwrap();
    old.batch_execute(before_0008).await.unwrap();
    let session = Uuid::new_v4();
    old.execute(
        "INSERT INTO session_logs (session_id, kernel, content) VALUES ($1, 0, 'héllo')",
        &[&session],
    )
    .await
    .unwrap();

    berth::app::migrate(&pool).await.unwrap();
    assert_eq!(history(&old).await, expected_history());
    let client = pool.get().await.unwrap();
    let kept = client
        .query_one(
            "SELECT epoch IS NULL, kept_bytes FROM recorder.session_logs WHERE session_id = $1",
            &[&session],
        )
        .await
        .unwrap();
    assert!(kept.get::<_, bool>(0));
    assert_eq!(kept.get::<_, i64>(1), "héllo".len() as i64);
    client
        .execute(
            "INSERT INTO recorder.session_usage (session_id, cpu_seconds, memory_bytes, rx_bytes,
               tx_bytes, gpu_percent, gpu_memory_percent) VALUES ($1, 1, 1, 0, 0, 50, 25)",
            &[&session],
        )
        .await
        .unwrap();
    assert_eq!(service_rows(&pool).await[..4], [1, 1, 0, 0]);
    drop(client);
    drop_database(pool, &url).await;
}

/// The recorder's tables as the backbone's migrations 0003, 0005, 0008, 0009 and 0024 made
/// them, in `public`, with the grants of 0006 and 0009.
const RECORDER_TABLES_IN_PUBLIC: &str = "
CREATE TABLE session_logs (
    session_id uuid        NOT NULL,
    kernel     integer     NOT NULL,
    content    text        NOT NULL,
    complete   boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, kernel)
);
CREATE TABLE session_usage (
    session_id   uuid PRIMARY KEY,
    cpu_seconds  float8      NOT NULL,
    cpu_percent  float8,
    memory_bytes bigint      NOT NULL,
    rx_bytes     bigint      NOT NULL,
    tx_bytes     bigint      NOT NULL,
    sampled_at   timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT, INSERT, UPDATE, DELETE ON session_logs, session_usage TO berth_service;
ALTER TABLE session_logs
    ADD COLUMN epoch uuid,
    ADD COLUMN kept_bytes bigint NOT NULL DEFAULT 0;
UPDATE session_logs SET kept_bytes = octet_length(content);
CREATE TABLE agent_liveness (
    agent_id text        PRIMARY KEY,
    seen_at  timestamptz NOT NULL
);
CREATE TABLE liveness_watch (
    watcher         text        PRIMARY KEY,
    listening_since timestamptz NOT NULL,
    checked_at      timestamptz NOT NULL
);
GRANT SELECT, INSERT, UPDATE, DELETE ON agent_liveness, liveness_watch TO berth_service;
ALTER TABLE session_usage ADD COLUMN gpu_percent float8;
ALTER TABLE session_usage ADD COLUMN gpu_memory_percent float8;
";
