//! Sessions' requests recorded together (`ledger::record_many`, as a launch of many sessions
//! records them), against real PostgreSQL (started by `infra/services.sh up`): one insert of
//! every row, each as a replay of the log folds it one by one, queued in the order given, and
//! a name already live refusing the whole launch.

use std::collections::BTreeMap;

use events::catalogue::{stream_id, Event, Metadata};
use events::ledger::{self, LedgerError, Recording};
use events::payloads::*;
use events::store::{EventStore, ExpectedVersion};
use uuid::Uuid;

mod common;

fn requesting(request: SessionRequested, traceparent: &str) -> Recording {
    Recording {
        stream_id: stream_id("session", request.session_id),
        expected: ExpectedVersion::NoStream,
        events: vec![Event::SessionRequested(Box::new(request))],
        metadata: Metadata {
            traceparent: Some(traceparent.into()),
            ..Metadata::default()
        },
    }
}

/// One session's request for each of `names`, all of `owner`'s, as a launch records them.
fn named_requests(owner: &Owner, names: &[&str], traceparent: &str) -> Vec<Recording> {
    names
        .iter()
        .map(|name| {
            let request = SessionRequested {
                name: (*name).into(),
                owner: owner.clone(),
                ..domain::fixtures::session_requested()
            };
            requesting(request, traceparent)
        })
        .collect()
}

async fn events_logged(pool: &deadpool_postgres::Pool) -> i64 {
    let client = pool.get().await.unwrap();
    client
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn requests_recorded_together_are_the_rows_a_replay_folds_in_the_order_given() {
    let (pool, _) = common::fresh_database(2).await;
    let owner = domain::fixtures::session_requested().owner;
    let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    // Every column the insert writes differs from the example in one request or another.
    let requests = vec![
        SessionRequested {
            name: "first".into(),
            owner: owner.clone(),
            ..domain::fixtures::session_requested()
        },
        SessionRequested {
            name: "second".into(),
            owner: Owner {
                project: Some("team".into()),
                ..owner.clone()
            },
            session_type: SessionType::Batch,
            resource_group: "gpu".into(),
            image: "berth/python:latest".into(),
            resources: ResourceSlots {
                cpu_milli: 2500,
                memory_bytes: 3 << 30,
                gpu_milli: 500,
            },
            cluster_mode: ClusterMode::MultiNode,
            cluster_size: 3,
            agent_id: Some("a1".into()),
            starts_at: Some(chrono::Utc::now() + chrono::TimeDelta::hours(1)),
            priority: 42,
            volumes: BTreeMap::from([
                ("data".into(), "shared".into()),
                ("cache".into(), "nfs".into()),
            ]),
            ..domain::fixtures::session_requested()
        },
        SessionRequested {
            name: "third".into(),
            owner: owner.clone(),
            ..domain::fixtures::session_requested()
        },
    ];
    let ids: Vec<Uuid> = requests.iter().map(|r| r.session_id).collect();
    let recordings: Vec<Recording> = requests.into_iter().map(|r| requesting(r, trace)).collect();
    let mut client = pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    ledger::record_many(&tx, &recordings).await.unwrap();
    tx.commit().await.unwrap();

    // Queued in the order given, each row as its event says, at the moment the log recorded.
    let rows = client
        .query(
            "SELECT session_id, name, status, volumes, traceparent, version, created_at,
                    status_since
             FROM ledger.sessions ORDER BY queue_seq",
            &[],
        )
        .await
        .unwrap();
    let order: Vec<Uuid> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(order, ids);
    let names: Vec<&str> = rows.iter().map(|r| r.get(1)).collect();
    assert_eq!(names, ["first", "second", "third"]);
    assert!(rows.iter().all(|r| r.get::<_, &str>(2) == "PENDING"));
    assert_eq!(rows[1].get::<_, Vec<String>>(3), ["nfs", "shared"]);
    assert!(rows[0].get::<_, Vec<String>>(3).is_empty());
    assert!(rows
        .iter()
        .all(|r| r.get::<_, Option<&str>>(4) == Some(trace)));
    assert!(rows.iter().all(|r| r.get::<_, i64>(5) == 0));
    let store = EventStore::new(pool.clone());
    let log = store
        .read_stream(&stream_id("session", ids[1]))
        .await
        .unwrap();
    let recorded_at = log[0].recorded_at;
    for row in &rows {
        let (created, since): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
            (row.get(6), row.get(7));
        assert_eq!((created, since), (recorded_at, recorded_at));
    }
    // The replay folds the log one event at a time, through the code that inserts one row:
    // every compared column agrees.
    let replay = ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);

    // A launch whose one session takes a live name: refused whole, naming it, nothing written.
    let before = events_logged(&pool).await;
    let again = named_requests(&owner, &["fourth", "second"], trace);
    let tx = client.transaction().await.unwrap();
    let taken = ledger::record_many(&tx, &again).await;
    assert!(
        matches!(&taken, Err(LedgerError::NameTaken(name)) if name == "second"),
        "{taken:?}"
    );
    drop(tx);
    let count: i64 = client
        .query_one("SELECT count(*) FROM ledger.sessions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 3);
    assert_eq!(
        events_logged(&pool).await,
        before,
        "nothing of the refused launch is logged"
    );
}

/// A replay compares the live ledger with the fold of the log table by table: a live row
/// changed behind the log's back is found, and so are two rows that swapped a column's
/// values (each table's sums are taken on a connection of their own while the log is read,
/// and a table whose sums differ has its rows counted).
#[tokio::test]
async fn a_live_row_changed_behind_the_log_is_found_by_the_replay() {
    let (pool, _) = common::fresh_database(4).await;
    let owner = domain::fixtures::session_requested().owner;
    let requests = named_requests(&owner, &["first", "second", "third"], "");
    let mut client = pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    ledger::record_many(&tx, &requests).await.unwrap();
    tx.commit().await.unwrap();
    drop(client);
    let replay = ledger::replay(&pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);

    let client = pool.get().await.unwrap();
    client
        .batch_execute(
            "UPDATE ledger.sessions SET name = 'swapping' WHERE name = 'first';
             UPDATE ledger.sessions SET name = 'first' WHERE name = 'second';
             UPDATE ledger.sessions SET name = 'second' WHERE name = 'swapping';",
        )
        .await
        .unwrap();
    drop(client);
    let replay = ledger::replay(&pool).await.unwrap();
    assert_eq!(replay.differences, [("sessions".to_owned(), 2, 2)]);

    let client = pool.get().await.unwrap();
    client
        .batch_execute("UPDATE ledger.sessions SET priority = 7 WHERE name = 'third'")
        .await
        .unwrap();
    drop(client);
    let replay = ledger::replay(&pool).await.unwrap();
    assert_eq!(replay.differences, [("sessions".to_owned(), 3, 3)]);

    // A table the replay writes beside `sessions`, on a connection of its own: a row only
    // the live side holds is counted there, and the sessions' differences still here.
    let client = pool.get().await.unwrap();
    client
        .batch_execute(
            "INSERT INTO ledger.kernels
             SELECT session_id, 0, 'nowhere', 1, 1, 0 FROM ledger.sessions WHERE name = 'first'",
        )
        .await
        .unwrap();
    drop(client);
    let replay = ledger::replay(&pool).await.unwrap();
    assert_eq!(
        replay.differences,
        [("kernels".to_owned(), 1, 0), ("sessions".to_owned(), 3, 3)]
    );
}
