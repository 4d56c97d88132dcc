//! A log that survives backup and restore: sessions run and recorded, the database dumped
//! (`berth backup`) and restored (`berth restore`) into a fresh PostgreSQL cluster the test
//! starts, whose transaction counter starts far below the log's; berth started on it runs a
//! new session that sorts after every restored event: the relay delivers it, the projections
//! show it, the consumers apply it, the audit chain verifies across the restore, and every
//! replay is equal.

use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

use crate::common::*;

/// A batch session the simulated agent runs for a moment and ends with exit code 0.
fn batch(command: &str) -> serde_json::Value {
    json!({"type": "batch", "image": "berth/shell:latest", "startup_command": command,
           "resources": {"cpu": 1, "memory": "256m"}})
}

async fn newest(pool: &deadpool_postgres::Pool) -> events::LogPosition {
    let client = pool.get().await.unwrap();
    events::store::last_committed(&client)
        .await
        .unwrap()
        .expect("the log holds events")
}

#[tokio::test]
async fn a_restored_log_keeps_its_order_and_berth_goes_on_from_it() {
    // Before: sessions run to their end, the log sealed and relayed.
    let h = start().await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let outbox = std::env::temp_dir().join(format!("berth-outbox-{}", Uuid::new_v4().simple()));
    admit(&h, "sim-before", "default").await;
    let agent = h
        .simulated_agent(&nats, "sim-before", &outbox, Duration::from_millis(200))
        .await;
    let alice = h.user("alice@example.com").await;
    for _ in 0..2 {
        let (status, created) = h.create(&alice, batch("true")).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let id = ids(&created)[0].clone();
        h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    }
    events::audit::seal_all(&h.pool).await.unwrap();
    let before = newest(&h.pool).await;
    let events_before = h.count_events("SessionStatusChanged").await;

    // The backup, taken while berth runs; then berth stops.
    let dump = std::env::temp_dir().join(format!("berth-dump-{}", Uuid::new_v4().simple()));
    berth::backup::backup(h.database_url(), &dump)
        .await
        .expect("berth backup");
    agent.stop().await;
    h.stop();

    // A new cluster counts transactions from a few hundred: far behind the log.
    // A cluster of the test's own: a new data directory, on a free port.
    let cluster = testkit::scratch::Postgres::start().unwrap();
    let (admin, connection) = deadpool_postgres::tokio_postgres::connect(
        &cluster.url("postgres"),
        deadpool_postgres::tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let fresh: i64 = admin
        .query_one("SELECT pg_current_xact_id()::text::bigint", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        (fresh as u64) < before.tx,
        "the test needs a cluster behind the log: {fresh} vs {}",
        before.tx
    );

    // Restored, with the log's clock moved past it.
    let mut config = test_config();
    config.database_url = cluster.url("berth_restored");
    config.topology = h.topology.clone();
    config.agent_bus = h.agent_bus.clone();
    let restored = berth::backup::restore(&config.database_url, &dump)
        .await
        .expect("berth restore");
    assert!(restored.clock_offset > 0, "{restored:?}");
    assert!(restored.events > 0);
    let again = berth::backup::restore(&config.database_url, &dump).await;
    let refused = again.expect_err("a restore into a database that holds a log is refused");
    assert!(
        format!("{refused:#}").contains("empty database"),
        "{refused:#}"
    );

    // `pg_restore` alone leaves the clock behind the log: berth refuses to start on it.
    admin
        .batch_execute("CREATE DATABASE berth_raw")
        .await
        .unwrap();
    let raw = Command::new(berth::backup::pg_tool("pg_restore"))
        .args(["--exit-on-error", "--dbname", &cluster.url("berth_raw")])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(
        raw.status.success(),
        "{}",
        String::from_utf8_lossy(&raw.stderr)
    );
    let _ = std::fs::remove_file(&dump);
    let mut behind = config.clone();
    behind.database_url = cluster.url("berth_raw");
    let refused = berth::app::start(&behind, berth::app::Parts::ALL)
        .await
        .err()
        .expect("berth does not start on a log its clock is behind");
    assert!(
        format!("{refused:#}").contains("berth restore"),
        "{refused:#}"
    );

    // berth on it: a new session runs, and everything downstream of the log sees it.
    let h2 = start_existing(config, h.admin_key.clone()).await;
    assert_eq!(
        h2.count_events("SessionStatusChanged").await,
        events_before,
        "the restored log"
    );
    let mut relayed = nats
        .subscribe(h2.topology.category_subject("session"))
        .await
        .unwrap();
    // The same agent comes back: its admission was restored with the rest.
    let agent = h2
        .simulated_agent(&nats, "sim-before", &outbox, Duration::from_millis(200))
        .await;
    let (status, created) = h2.create(&alice, batch("true")).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let detail = h2.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    assert_eq!(detail["exit_code"], 0, "the projections show it: {detail}");
    let delivered = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(message) = relayed.next().await {
            if String::from_utf8_lossy(&message.payload).contains(&id) {
                return;
            }
        }
    })
    .await;
    assert!(delivered.is_ok(), "the relay delivered the new session");
    let notices = wait_for(|| async {
        let (_, page) = h2.get(&alice, "/v1/notifications").await;
        let told = page["items"]
            .as_array()?
            .iter()
            .any(|n| n["kind"] == "session_terminated" && n.to_string().contains(&id));
        told.then_some(page)
    })
    .await;
    assert!(notices["unread"].as_u64().unwrap() >= 3, "{notices}");

    // Its events sort after every restored one, and the chain verifies across the restore.
    let client = h2.pool.get().await.unwrap();
    let first_new: Option<i64> = client
        .query_one(
            "SELECT min(tx_id::text::bigint) FROM events WHERE payload->>'session_id' = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    let first_new = first_new.expect("the new session's events");
    assert!(first_new as u64 > before.tx, "{first_new} after {before}");
    drop(client);
    agent.stop().await;
    events::audit::seal_all(&h2.pool).await.unwrap();
    let verified = events::audit::verify(&h2.pool).await.unwrap();
    assert_eq!(verified.first_break, None);
    assert!(verified.sealed > events_before);
    let replay = events::ledger::replay(&h2.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    let rebuild = events::projection::rebuild(&h2.pool, &gateway::projection::SessionsView, false)
        .await
        .unwrap();
    assert!(rebuild.equal(), "{:?}", rebuild.differences);
    let _ = std::fs::remove_dir_all(&outbox);
}

/// `database` on `cluster` as `role`, not as the cluster's superuser.
fn as_role(cluster: &testkit::scratch::Postgres, role: &str, database: &str) -> String {
    cluster
        .url(database)
        .replacen("berth@", &format!("{role}@"), 1)
}

/// What an operator makes, as the cluster's superuser, where berth's owner may create no
/// role (docs/operations.md, "A PostgreSQL berth does not own"): the services' role, `owner`
/// (no superuser, no CREATEROLE, no CREATEDB) a member of it, and `database`, owned by it.
async fn set_up_by_the_operator(cluster: &testkit::scratch::Postgres, owner: &str, database: &str) {
    let (admin, connection) = deadpool_postgres::tokio_postgres::connect(
        &cluster.url("postgres"),
        deadpool_postgres::tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    for statement in [
        "CREATE ROLE berth_service NOLOGIN".to_string(),
        format!("CREATE ROLE {owner} LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB"),
        format!("GRANT berth_service TO {owner}"),
        // `berth restore` moves the log's clock with a setting of the database.
        format!("GRANT SET ON PARAMETER berth.xid_offset TO {owner}"),
        // Alone: not in a transaction.
        format!("CREATE DATABASE {database} OWNER {owner}"),
    ] {
        admin.batch_execute(&statement).await.unwrap();
    }
}

#[tokio::test]
async fn berth_runs_and_is_restored_where_its_owner_is_no_superuser_under_another_owners_name() {
    // A cluster where berth's owner is a plain role: set-up (the migrations) and sessions.
    let first = testkit::scratch::Postgres::start().unwrap();
    set_up_by_the_operator(&first, "owner_a", "berth_a").await;
    let mut config = test_config();
    config.database_url = as_role(&first, "owner_a", "berth_a");
    let h = start_with(config).await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let outbox = std::env::temp_dir().join(format!("berth-outbox-{}", Uuid::new_v4().simple()));
    admit(&h, "sim-owned", "default").await;
    let agent = h
        .simulated_agent(&nats, "sim-owned", &outbox, Duration::from_millis(200))
        .await;
    let alice = h.user("alice@example.com").await;
    let (status, created) = h.create(&alice, batch("true")).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    // A rebuild by the services' role makes a schema of its own.
    let rebuild = events::projection::rebuild(&h.pool, &gateway::projection::SessionsView, false)
        .await
        .unwrap();
    assert!(rebuild.equal(), "{:?}", rebuild.differences);
    events::audit::seal_all(&h.pool).await.unwrap();
    let events_before = h.count_events("SessionStatusChanged").await;
    let dump = std::env::temp_dir().join(format!("berth-dump-{}", Uuid::new_v4().simple()));
    berth::backup::backup(h.database_url(), &dump)
        .await
        .expect("berth backup as a plain owner");
    agent.stop().await;
    h.stop();

    // Another cluster, where `owner_a` does not exist: restored as `owner_b`.
    let second = testkit::scratch::Postgres::start().unwrap();
    set_up_by_the_operator(&second, "owner_b", "berth_b").await;
    let mut config = test_config();
    config.database_url = as_role(&second, "owner_b", "berth_b");
    config.topology = h.topology.clone();
    config.agent_bus = h.agent_bus.clone();
    let restored = berth::backup::restore(&config.database_url, &dump)
        .await
        .expect("berth restore under another owner");
    assert!(restored.events > 0);
    let _ = std::fs::remove_file(&dump);
    let (client, connection) = deadpool_postgres::tokio_postgres::connect(
        &second.url("berth_b"),
        deadpool_postgres::tokio_postgres::NoTls,
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let owners: Vec<String> = client
        .query(
            "SELECT DISTINCT pg_get_userbyid(nspowner) FROM pg_namespace
             WHERE nspname NOT LIKE 'pg\\_%' AND nspname NOT IN ('information_schema', 'public')
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        owners,
        ["berth_service", "owner_b"],
        "the new owner's, and what the services' role had made"
    );

    // berth goes on there: a new session, the chain whole, replays equal, and the services'
    // role rebuilds its projection again (it owns what it made).
    let h2 = start_existing(config, h.admin_key.clone()).await;
    assert_eq!(h2.count_events("SessionStatusChanged").await, events_before);
    let agent = h2
        .simulated_agent(&nats, "sim-owned", &outbox, Duration::from_millis(200))
        .await;
    let (status, created) = h2.create(&alice, batch("true")).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let detail = h2.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    assert_eq!(detail["exit_code"], 0, "{detail}");
    agent.stop().await;
    events::audit::seal_all(&h2.pool).await.unwrap();
    let verified = events::audit::verify(&h2.pool).await.unwrap();
    assert_eq!(verified.first_break, None);
    let replay = events::ledger::replay(&h2.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    let rebuild = events::projection::rebuild(&h2.pool, &gateway::projection::SessionsView, false)
        .await
        .unwrap();
    assert!(rebuild.equal(), "{:?}", rebuild.differences);
    let _ = std::fs::remove_dir_all(&outbox);
}
