//! The event backbone against real PostgreSQL and NATS JetStream (started by
//! `infra/services.sh up`). Every test gets a database and a JetStream stream of its own.

use std::collections::{HashMap, HashSet};

use std::time::Duration;

use async_nats::jetstream;
use deadpool_postgres::{Pool, Transaction};
use events::audit;
use events::catalogue::{Event, Metadata};
use events::consumer::{self, Applied, ConsumerConfig, Handler, HandlerError};
use events::payloads::{AgentHeartbeated, AgentLost, AgentRegistered, ResourceSlots};
use events::projection::{self, StreamIndex};
use events::relay::{self, RelayConfig, Topology};
use events::store::{self, EventStore, ExpectedVersion, LogPosition, ProposedEvent, StoreError};
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

mod common;

fn nats_url() -> String {
    std::env::var("BERTH_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:54222".into())
}

/// Connects to NATS as the user `BERTH_NATS_URL` names (the control plane's, on a server
/// with authorization).
async fn connect_nats() -> Result<async_nats::Client, bus::LinkError> {
    bus::link::connect_as_url_says(&nats_url()).await
}

/// A fresh database with the store's schema, and its url.
async fn fresh_store() -> (EventStore, String) {
    let (pool, url) = common::fresh_database(32).await;
    (EventStore::new(pool), url)
}

fn topology() -> Topology {
    let id = Uuid::new_v4().simple().to_string();
    Topology {
        stream: format!("T_{id}"),
        prefix: format!("t{id}.evt"),
    }
}

fn lost(agent: &str, reason: &str) -> ProposedEvent {
    ProposedEvent::new(
        &Event::AgentLost(AgentLost {
            agent_id: agent.into(),
            reason: reason.into(),
            last_heard: None,
        }),
        Metadata {
            actor: Some("test".into()),
            ..Metadata::default()
        },
    )
}

/// Appends `events` losses spread over `streams` agents' streams (`agent-<prefix><n>`).
async fn append_losses(store: &EventStore, prefix: &str, events: usize, streams: usize) {
    for i in 0..events {
        let stream = format!("agent-{prefix}{}", i % streams);
        store
            .append(
                &stream,
                ExpectedVersion::Any,
                &[lost(&stream, &i.to_string())],
            )
            .await
            .unwrap();
    }
}

/// `streams` streams `agent-{prefix}{n}` of a hundred events each, appended one after the
/// other, so that the log's order is theirs.
async fn append_streams_of_a_hundred(store: &EventStore, prefix: &str, streams: usize) {
    for stream in 0..streams {
        let id = format!("agent-{prefix}{stream}");
        let batch: Vec<ProposedEvent> = (0..100).map(|i| lost(&id, &i.to_string())).collect();
        store
            .append(&id, ExpectedVersion::NoStream, &batch)
            .await
            .unwrap();
    }
}

/// The log's events in its order, by position and id.
async fn log_order(store: &EventStore) -> Vec<(LogPosition, Uuid)> {
    store
        .read_all(LogPosition::START, 100_000)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.position, e.event_id))
        .collect()
}

fn registered(agent: &str) -> ProposedEvent {
    ProposedEvent::new(
        &Event::AgentRegistered(AgentRegistered {
            unlabelled_images: Vec::new(),
            agent_id: agent.into(),
            resource_group: "default".into(),
            capacity: ResourceSlots {
                cpu_milli: 8000,
                memory_bytes: 32 << 30,
                gpu_milli: 0,
            },
            images: vec!["berth/shell:latest".into()],
            address: None,
            image_apps: Default::default(),
            network_scope: None,
            volumes: Default::default(),
        }),
        Metadata::default(),
    )
}

async fn count(pool: &Pool) -> i64 {
    pool.get()
        .await
        .unwrap()
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn optimistic_concurrency_conflicts_are_typed() {
    let (store, _) = fresh_store().await;
    let s = "agent-a1";
    let first = store
        .append(s, ExpectedVersion::NoStream, &[registered("a1")])
        .await
        .unwrap();
    assert_eq!(first.stream_version, 0);
    let second = store
        .append(
            s,
            ExpectedVersion::Exact(0),
            &[lost("a1", "x"), lost("a1", "y")],
        )
        .await
        .unwrap();
    assert_eq!(second.stream_version, 2);
    assert!(second.position > first.position);

    let stale = store
        .append(s, ExpectedVersion::Exact(0), &[lost("a1", "z")])
        .await;
    assert!(
        matches!(
            stale,
            Err(StoreError::Conflict {
                actual: Some(2),
                ..
            })
        ),
        "{stale:?}"
    );
    let again = store
        .append(s, ExpectedVersion::NoStream, &[lost("a1", "z")])
        .await;
    assert!(
        matches!(
            again,
            Err(StoreError::Conflict {
                actual: Some(2),
                ..
            })
        ),
        "{again:?}"
    );
    let any = store
        .append(s, ExpectedVersion::Any, &[lost("a1", "z")])
        .await
        .unwrap();
    assert_eq!(any.stream_version, 3);

    let events = store.read_stream(s).await.unwrap();
    let versions: Vec<u64> = events.iter().map(|e| e.stream_version).collect();
    assert_eq!(versions, vec![0, 1, 2, 3]);
    assert_eq!(count(store.pool()).await, 4);
}

#[tokio::test]
async fn a_refused_append_in_a_callers_transaction_writes_nothing_and_leaves_it_usable() {
    // One event and a batch take different statements; each says why it was refused without
    // failing the caller's transaction, which goes on and commits only what was appended.
    let (store, _) = fresh_store().await;
    store
        .append("agent-t1", ExpectedVersion::NoStream, &[registered("t1")])
        .await
        .unwrap();
    let mut client = store.pool().get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    let one = [lost("t1", "a")];
    let one = store::append_with(&tx, "agent-t1", ExpectedVersion::Exact(3), &one).await;
    assert!(
        matches!(
            one,
            Err(StoreError::ExpectedVersionAhead {
                expected: 3,
                actual: Some(0),
                ..
            })
        ),
        "{one:?}"
    );
    let batch = [lost("t1", "b"), lost("t1", "c")];
    let many = store::append_with(&tx, "agent-t1", ExpectedVersion::NoStream, &batch).await;
    assert!(matches!(
        many,
        Err(StoreError::Conflict {
            actual: Some(0),
            ..
        })
    ));
    let appended = store::append_with(
        &tx,
        "agent-t1",
        ExpectedVersion::Exact(0),
        &[lost("t1", "d")],
    )
    .await
    .unwrap();
    assert_eq!(appended.stream_version, 1);
    tx.commit().await.unwrap();
    let reasons: Vec<String> = store
        .read_stream("agent-t1")
        .await
        .unwrap()
        .iter()
        .skip(1)
        .map(|e| match &e.event {
            Event::AgentLost(lost) => lost.reason.clone(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(reasons, ["d"]);
}

#[tokio::test]
async fn many_streams_append_in_one_statement_all_or_nothing_in_the_order_given() {
    let (store, _) = fresh_store().await;
    let client = store.pool().get().await.unwrap();
    store
        .append("agent-m1", ExpectedVersion::NoStream, &[registered("m1")])
        .await
        .unwrap();
    let batch = |expected_m1| {
        vec![
            store::StreamAppend {
                stream_id: "agent-m1",
                expected: expected_m1,
                events: vec![lost("m1", "a"), lost("m1", "b")],
            },
            store::StreamAppend {
                stream_id: "agent-m2",
                expected: ExpectedVersion::NoStream,
                events: vec![registered("m2")],
            },
            store::StreamAppend {
                stream_id: "agent-m3",
                expected: ExpectedVersion::Any,
                events: vec![lost("m3", "c")],
            },
        ]
    };

    // One stream not at its version: nothing of any stream is written, and the error names it.
    let stale = store::append_many(&client, &batch(ExpectedVersion::NoStream)).await;
    assert!(
        matches!(
            &stale,
            Err(StoreError::Conflict { stream_id, actual: Some(0), .. }) if stream_id == "agent-m1"
        ),
        "{stale:?}"
    );
    let ahead = store::append_many(&client, &batch(ExpectedVersion::Exact(5))).await;
    assert!(
        matches!(
            &ahead,
            Err(StoreError::ExpectedVersionAhead { stream_id, expected: 5, actual: Some(0) }) if stream_id == "agent-m1"
        ),
        "{ahead:?}"
    );
    assert_eq!(count(store.pool()).await, 1);

    let appended = store::append_many(&client, &batch(ExpectedVersion::Exact(0)))
        .await
        .unwrap();
    assert_eq!(appended.versions, vec![2, 0, 0]);
    // The log holds them in the order given: each stream's events in turn, every version once;
    // all recorded at the one moment the append returned. It is read behind the horizon, which
    // a transaction still open elsewhere on the cluster (another test's) may hold back a moment.
    wait_until(Duration::from_secs(30), || async {
        store.read_all(LogPosition::START, 100).await.unwrap().len() == 5
    })
    .await;
    let log = store.read_all(LogPosition::START, 100).await.unwrap();
    assert!(log[1..]
        .iter()
        .all(|e| e.recorded_at == appended.recorded_at));
    let order: Vec<(&str, u64)> = log
        .iter()
        .map(|e| (e.stream_id.as_str(), e.stream_version))
        .collect();
    assert_eq!(
        order,
        vec![
            ("agent-m1", 0),
            ("agent-m1", 1),
            ("agent-m1", 2),
            ("agent-m2", 0),
            ("agent-m3", 0)
        ]
    );
    assert!(log.windows(2).all(|w| w[0].position < w[1].position));

    // The same events again: refused by their ids, nothing written.
    let again = vec![store::StreamAppend {
        stream_id: "agent-m9",
        expected: ExpectedVersion::Any,
        events: vec![ProposedEvent {
            event_id: log[4].event_id,
            ..lost("m9", "d")
        }],
    }];
    let duplicate = store::append_many(&client, &again).await;
    assert!(
        matches!(duplicate, Err(StoreError::DuplicateEventId(id)) if id == log[4].event_id),
        "{duplicate:?}"
    );
    assert_eq!(count(store.pool()).await, 5);
}

#[tokio::test]
async fn concurrent_appends_to_one_stream_never_both_win() {
    let (store, _) = fresh_store().await;
    store
        .append(
            "agent-race",
            ExpectedVersion::NoStream,
            &[registered("race")],
        )
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .append(
                    "agent-race",
                    ExpectedVersion::Exact(0),
                    &[lost("race", &i.to_string())],
                )
                .await
        }));
    }
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => won += 1,
            Err(StoreError::Conflict { .. }) => {}
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert_eq!(won, 1);
    assert_eq!(store.read_stream("agent-race").await.unwrap().len(), 2);
}

#[tokio::test]
async fn bad_input_is_a_typed_error_and_writes_nothing() {
    let (store, _) = fresh_store().await;
    store
        .append("agent-b", ExpectedVersion::NoStream, &[registered("b")])
        .await
        .unwrap();

    let mut unknown = lost("b", "x");
    unknown.event_type = "AgentExploded".into();
    let r = store
        .append(
            "agent-b",
            ExpectedVersion::Exact(0),
            &[lost("b", "ok"), unknown],
        )
        .await;
    assert!(
        matches!(
            r,
            Err(StoreError::Catalogue(
                events::catalogue::CatalogueError::UnknownEventType(_)
            ))
        ),
        "{r:?}"
    );

    let mut wrong_version = lost("b", "x");
    wrong_version.schema_version = 7;
    let r = store
        .append("agent-b", ExpectedVersion::Exact(0), &[wrong_version])
        .await;
    assert!(
        matches!(
            r,
            Err(StoreError::Catalogue(
                events::catalogue::CatalogueError::WrongSchemaVersion { given: 7, .. }
            ))
        ),
        "{r:?}"
    );

    let mut bad_shape = lost("b", "x");
    bad_shape.payload = json!({"agent_id": 5}).to_string();
    let r = store
        .append("agent-b", ExpectedVersion::Exact(0), &[bad_shape])
        .await;
    assert!(
        matches!(
            r,
            Err(StoreError::Catalogue(
                events::catalogue::CatalogueError::BadPayload { .. }
            ))
        ),
        "{r:?}"
    );

    let huge = lost("b", &"x".repeat(store::MAX_PAYLOAD_BYTES + 1));
    let r = store
        .append("agent-b", ExpectedVersion::Exact(0), &[huge])
        .await;
    assert!(
        matches!(r, Err(StoreError::PayloadTooLarge { index: 0, .. })),
        "{r:?}"
    );

    let r = store
        .append("agent-b", ExpectedVersion::Exact(5), &[lost("b", "x")])
        .await;
    assert!(
        matches!(
            r,
            Err(StoreError::ExpectedVersionAhead {
                expected: 5,
                actual: Some(0),
                ..
            })
        ),
        "{r:?}"
    );

    let r = store
        .append("Agent B", ExpectedVersion::Any, &[lost("b", "x")])
        .await;
    assert!(matches!(r, Err(StoreError::BadStreamId(_))), "{r:?}");

    let dup = lost("b", "once");
    store
        .append(
            "agent-b",
            ExpectedVersion::Exact(0),
            std::slice::from_ref(&dup),
        )
        .await
        .unwrap();
    let r = store
        .append(
            "agent-c",
            ExpectedVersion::NoStream,
            &[registered("c"), dup.clone()],
        )
        .await;
    assert!(
        matches!(r, Err(StoreError::DuplicateEventId(id)) if id == dup.event_id),
        "{r:?}"
    );

    assert_eq!(
        count(store.pool()).await,
        2,
        "only the two good appends are in the log"
    );
    assert!(store.read_stream("agent-c").await.unwrap().is_empty());
}

#[tokio::test]
async fn old_schema_versions_are_upcast_on_read() {
    let (store, _) = fresh_store().await;
    let client = store.pool().get().await.unwrap();
    client
        .execute(
            "INSERT INTO events (event_id, stream_id, category, stream_version, event_type, schema_version, payload, metadata)
             VALUES ($1, 'agent-old', 'agent', 0, 'AgentHeartbeated', 1, $2, '{}')",
            &[&Uuid::new_v4(), &json!({"agent_id": "old", "at_ms": 1_700_000_000_123i64})],
        )
        .await
        .unwrap();
    let events = store.read_stream("agent-old").await.unwrap();
    assert_eq!(events[0].schema_version, 1);
    let Event::AgentHeartbeated(AgentHeartbeated { agent_id, at }) = &events[0].event else {
        panic!("not a heartbeat: {:?}", events[0].event)
    };
    assert_eq!(agent_id, "old");
    assert_eq!(at.timestamp_millis(), 1_700_000_000_123);
}

/// How a replay or a rebuild compares two tables: the rows each holds that the other does not,
/// counted as `EXCEPT ALL` counts them (a duplicate is a row of its own, NULL matches NULL);
/// two tables whose rows swapped a column's values differ too (the order-blind sum that
/// passes equal tables over mixes each row's hash), and equal tables in any order do not.
#[tokio::test]
async fn two_tables_differences_are_counted_as_except_all_counts_them() {
    let (store, _) = fresh_store().await;
    let mut client = store.pool().get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    tx.batch_execute(
        r#"CREATE SCHEMA live; CREATE SCHEMA folded;
           CREATE TABLE live.t (a int, b text, c jsonb);
           CREATE TABLE folded.t (a int, b text, c jsonb);
           INSERT INTO live.t VALUES (1, 'x', '{}'), (1, 'x', '{}'), (2, NULL, NULL), (3, 'y', '[1]'),
                                     (4, 'z', '{"k": 1}');
           INSERT INTO folded.t VALUES (1, 'x', '{}'), (2, NULL, NULL), (2, NULL, NULL), (3, 'y', '[2]'),
                                       (5, 'w', '{"k": 1}');
           CREATE TABLE live.swapped (session text, owner text, started timestamptz);
           CREATE TABLE folded.swapped (session text, owner text, started timestamptz);
           INSERT INTO live.swapped VALUES ('s1', 'ann', '2026-12-01 10:00Z'), ('s2', 'bob', NULL);
           INSERT INTO folded.swapped VALUES ('s1', 'bob', '2026-12-01 10:00Z'), ('s2', 'ann', NULL);
           CREATE TABLE live.same (a int, b text);
           CREATE TABLE folded.same (a int, b text);
           INSERT INTO live.same SELECT i, i::text FROM generate_series(1, 100) i;
           INSERT INTO folded.same SELECT i, i::text FROM generate_series(100, 1, -1) i;"#,
    )
    .await
    .unwrap();
    let counted =
        events::pg::differing_tables(&tx, &["t", "swapped", "same"], "live", "folded", |_, _| {
            true
        })
        .await
        .unwrap();
    let row = tx
        .query_one(
            "SELECT (SELECT count(*) FROM (SELECT * FROM live.t EXCEPT ALL SELECT * FROM folded.t) a),
                    (SELECT count(*) FROM (SELECT * FROM folded.t EXCEPT ALL SELECT * FROM live.t) b)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        counted,
        [("t".to_owned(), 3, 3), ("swapped".to_owned(), 2, 2)]
    );
    assert_eq!((counted[0].1, counted[0].2), (row.get(0), row.get(1)));
    assert_eq!(
        events::pg::differing_tables(&tx, &["t"], "live", "live", |_, _| true)
            .await
            .unwrap(),
        []
    );
}

/// `read_through` hands over the whole log in global order, batch by batch, each event once,
/// the same events `read_all` reads one batch at a time; a corrupt event stops it with the
/// event's position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_log_read_through_in_batches_is_the_log_in_order() {
    let (store, _) = fresh_store().await;
    for agent in 0..23 {
        let events: Vec<ProposedEvent> = (0..7).map(|_| registered(&format!("a{agent}"))).collect();
        store
            .append(&format!("agent-a{agent}"), ExpectedVersion::Any, &events)
            .await
            .unwrap();
    }
    // The log is read behind the horizon, which a transaction still open elsewhere on the
    // cluster (another test's) may hold back a moment.
    wait_until(Duration::from_secs(30), || async {
        store
            .read_all(LogPosition::START, 1_000)
            .await
            .unwrap()
            .len()
            == 23 * 7
    })
    .await;
    let everything = store.read_all(LogPosition::START, 1_000).await.unwrap();
    assert_eq!(everything.len(), 23 * 7);
    let client = store.pool().get().await.unwrap();
    let mut batches = Vec::new();
    let read = store::read_through(&client, LogPosition::START, 10, |batch| {
        batches.push(batch);
        Ok(())
    })
    .await
    .unwrap();
    assert_eq!(read, everything.len() as u64);
    assert!(batches.iter().all(|b| b.len() <= 10) && batches.len() == 17);
    let through: Vec<_> = batches.concat();
    let ids = |events: &[events::RecordedEvent]| -> Vec<Uuid> {
        events.iter().map(|e| e.event_id).collect()
    };
    assert_eq!(ids(&through), ids(&everything));
    // A fold that fails stops the read with its error, and nothing is handed over after it
    // (the batch read and decoded meanwhile is dropped).
    let mut handed = 0;
    let stopped = store::read_through(&client, LogPosition::START, 10, |_| {
        handed += 1;
        match handed {
            3 => Err(StoreError::BadBatchSize(0)),
            _ => Ok(()),
        }
    })
    .await;
    assert!(
        matches!(stopped, Err(StoreError::BadBatchSize(0))),
        "{stopped:?}"
    );
    assert_eq!(handed, 3);
    // From a position on, only what follows it.
    let from = everything[100].position;
    let rest = store::read_through(&client, from, 10, |_| Ok(()))
        .await
        .unwrap();
    assert_eq!(rest, (everything.len() - 101) as u64);
    // An event that does not decode is an error naming where it is.
    client
        .execute(
            "INSERT INTO events (event_id, stream_id, category, stream_version, event_type, schema_version, payload, metadata)
             VALUES ($1, 'agent-bad', 'agent', 0, 'AgentHeartbeated', 1, '{\"nonsense\": true}', '{}')",
            &[&Uuid::new_v4()],
        )
        .await
        .unwrap();
    // It is read once the horizon passes it: a transaction still open elsewhere on the
    // cluster (another test's) holds the horizon back for a moment (10 s at most here).
    for _ in 0..200 {
        match store::read_through(&client, LogPosition::START, 10, |_| Ok(())).await {
            Ok(read) => {
                assert_eq!(
                    read,
                    everything.len() as u64,
                    "only the good events, meanwhile"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(error) => {
                assert!(matches!(error, StoreError::Corrupt { .. }), "{error}");
                return;
            }
        }
    }
    panic!("the undecodable event never came behind the horizon");
}

/// 8 writers append 20,000 events (single and batched, many streams) while a reader tails
/// the log: the reader sees each event exactly once, in one global order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tailing_reader_sees_every_event_once_under_concurrent_writers() {
    const WRITERS: usize = 8;
    const PER_WRITER: usize = 2_500;
    let (store, _) = fresh_store().await;
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        writers.push(tokio::spawn(async move {
            let mut written = 0;
            let mut round = 0;
            while written < PER_WRITER {
                let stream = format!("agent-w{w}s{}", round % 50);
                // Alternate single events and batches of up to 10.
                let n = if round % 2 == 0 {
                    1
                } else {
                    (round % 10 + 1).min(PER_WRITER - written)
                };
                let batch: Vec<ProposedEvent> = (0..n)
                    .map(|i| lost(&stream, &format!("{round}/{i}")))
                    .collect();
                store
                    .append(&stream, ExpectedVersion::Any, &batch)
                    .await
                    .expect("append");
                written += n;
                round += 1;
            }
        }));
    }
    let reader = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut seen = Vec::with_capacity(WRITERS * PER_WRITER);
            let mut after = LogPosition::START;
            while seen.len() < WRITERS * PER_WRITER {
                let batch = store.read_all(after, 500).await.expect("read");
                if batch.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                for event in batch {
                    assert!(event.position > after, "order broken at {}", event.position);
                    after = event.position;
                    seen.push(event);
                }
            }
            seen
        })
    };
    for writer in writers {
        writer.await.unwrap();
    }
    let seen = tokio::time::timeout(Duration::from_secs(120), reader)
        .await
        .expect("reader finished")
        .unwrap();
    assert_eq!(seen.len(), WRITERS * PER_WRITER);
    let ids: HashSet<Uuid> = seen.iter().map(|e| e.event_id).collect();
    assert_eq!(ids.len(), seen.len(), "no event seen twice");
    // Within each stream, versions arrive in order with no gap.
    let mut versions: HashMap<&str, u64> = HashMap::new();
    for event in &seen {
        let next = versions.entry(&event.stream_id).or_insert(0);
        assert_eq!(
            event.stream_version, *next,
            "stream {} out of order",
            event.stream_id
        );
        *next += 1;
    }
    // Nothing more appears behind the reader afterwards.
    let last = seen.last().unwrap().position;
    assert!(store.read_all(last, 10).await.unwrap().is_empty());
    let total: i64 = count(store.pool()).await;
    assert_eq!(total as usize, seen.len());
}

/// Counts how often each event was applied, in the consumer's own transaction.
struct CountingHandler;

impl Handler for CountingHandler {
    async fn handle<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        event: &'a events::RecordedEvent,
    ) -> Result<(), HandlerError> {
        {
            tx.execute(
                "INSERT INTO applied (event_id, times) VALUES ($1, 1)
                 ON CONFLICT (event_id) DO UPDATE SET times = applied.times + 1",
                &[&event.event_id],
            )
            .await?;
            Ok(())
        }
    }
}

/// The relay is killed and restarted mid-stream, and so is the consumer: in the end every
/// event was published and applied exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn relay_and_consumer_survive_kills_and_apply_every_event_once() {
    const EVENTS: usize = 3_000;
    let (store, url) = fresh_store().await;
    let pool = store.pool().clone();
    pool.get()
        .await
        .unwrap()
        .batch_execute("CREATE TABLE applied (event_id uuid PRIMARY KEY, times int NOT NULL)")
        .await
        .unwrap();
    let nats = connect_nats().await.expect("nats");
    let js = jetstream::new(nats);
    let topology = topology();

    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..EVENTS / 10 {
                let stream = format!("agent-r{}", i % 7);
                let meta = Metadata {
                    traceparent: Some(
                        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
                    ),
                    ..Metadata::default()
                };
                let batch: Vec<_> = (0..10)
                    .map(|j| {
                        let mut e = lost(&stream, &format!("{i}/{j}"));
                        e.metadata = meta.clone();
                        e
                    })
                    .collect();
                store
                    .append(&stream, ExpectedVersion::Any, &batch)
                    .await
                    .unwrap();
                if i % 20 == 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        })
    };

    let start_relay = || {
        let stop = CancellationToken::new();
        let handle = tokio::spawn(relay::run(
            pool.clone(),
            url.clone(),
            js.clone(),
            topology.clone(),
            RelayConfig::default(),
            stop.clone(),
        ));
        (stop, handle)
    };
    let start_consumer = || {
        let stop = CancellationToken::new();
        let config = ConsumerConfig {
            ack_wait: Duration::from_secs(5),
            ..ConsumerConfig::new("counter", vec![topology.category_subject("agent")])
        };
        let handle = tokio::spawn(consumer::run(
            pool.clone(),
            js.clone(),
            topology.clone(),
            config,
            CountingHandler,
            stop.clone(),
        ));
        (stop, handle)
    };

    let (_s1, relay1) = start_relay();
    let (_c1, consumer1) = start_consumer();
    // Let the first relay publish part of the log and the first consumer apply some of it,
    // then kill both mid-stream.
    wait_until(Duration::from_secs(60), || async {
        let applied: i64 = pool
            .get()
            .await
            .unwrap()
            .query_one(
                "SELECT count(*) FROM processed_events WHERE consumer = 'counter'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        relay::checkpoint(&pool).await.unwrap() > LogPosition::START && applied > 0
    })
    .await;
    relay1.abort();
    consumer1.abort();
    // Aborted while running: a task that had failed before would show here.
    for (what, ended) in [
        ("relay", relay1.await.map(|_| ())),
        ("consumer", consumer1.await.map(|_| ())),
    ] {
        assert!(
            ended.is_err_and(|e| e.is_cancelled()),
            "the {what} had ended before its kill"
        );
    }
    let published_before = relay::checkpoint(&pool).await.unwrap();

    writer.await.unwrap();
    let (stop2, relay2) = start_relay();
    let (stop_c2, consumer2) = start_consumer();
    let applied = || async {
        let c = pool.get().await.unwrap();
        c.query_one("SELECT count(*), coalesce(max(times), 0) FROM applied", &[])
            .await
            .unwrap()
    };
    wait_until(Duration::from_secs(90), || async {
        applied().await.get::<_, i64>(0) as usize == EVENTS
    })
    .await;
    let row = applied().await;
    assert_eq!(row.get::<_, i64>(0) as usize, EVENTS, "every event applied");
    assert_eq!(row.get::<_, i32>(1), 1, "no event applied twice");
    assert!(relay::checkpoint(&pool).await.unwrap() > published_before);

    // JetStream holds each event once, in global order, with the trace context in its headers.
    let mut stream = js.get_stream(&topology.stream).await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages as usize, EVENTS);
    let first = stream.get_raw_message(1).await.unwrap();
    assert_eq!(
        first.headers.get("traceparent").map(|v| v.as_str()),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );

    // A duplicate handed to the consumer again is recognised and not applied.
    let event = store
        .read_all(LogPosition::START, 1)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        consumer::apply(&pool, "counter", &CountingHandler, &event)
            .await
            .unwrap(),
        Applied::Already
    );

    stop2.cancel();
    stop_c2.cancel();
    relay2.await.unwrap().unwrap();
    consumer2.await.unwrap().unwrap();
    js.delete_stream(&topology.stream).await.unwrap();
}

async fn wait_until<F, Fut>(limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A store with three streams of five events each, sealed.
async fn sealed_store() -> EventStore {
    let (store, _) = fresh_store().await;
    for agent in ["x", "y", "z"] {
        let stream = format!("agent-{agent}");
        store
            .append(&stream, ExpectedVersion::NoStream, &[registered(agent)])
            .await
            .unwrap();
        for i in 0..4 {
            store
                .append(
                    &stream,
                    ExpectedVersion::Any,
                    &[lost(agent, &i.to_string())],
                )
                .await
                .unwrap();
        }
    }
    assert_eq!(audit::seal_all(store.pool()).await.unwrap(), 15);
    let clean = audit::verify(store.pool()).await.unwrap();
    assert_eq!(clean.sealed, 15);
    assert_eq!(clean.first_break, None);
    store
}

#[tokio::test]
async fn a_window_read_in_parts_at_once_seals_every_event_in_order() {
    let (store, _) = fresh_store().await;
    // 3,500 events: the sealer reads a window this size over four connections at once.
    append_streams_of_a_hundred(&store, "w", 35).await;
    assert_eq!(audit::seal_all(store.pool()).await.unwrap(), 3_500);
    let clean = audit::verify(store.pool()).await.unwrap();
    assert_eq!(clean.sealed, 3_500);
    assert_eq!(clean.first_break, None);
}

#[tokio::test]
async fn the_running_sealer_gathers_a_busy_log_into_blocks_and_stops_when_told() {
    let (store, _) = fresh_store().await;
    let stop = CancellationToken::new();
    let idle = Duration::from_millis(50);
    let started = tokio::time::Instant::now();
    let sealer = tokio::spawn({
        let (pool, stop) = (store.pool().clone(), stop.clone());
        async move { audit::keep_sealing(&pool, idle, &stop).await }
    });
    // Forty appends of one event, a few milliseconds apart: a sealer that went again as soon
    // as a pass found anything would seal most of them a pass (and a block) each.
    let stream = "agent-trickle";
    for i in 0..40u64 {
        let expected = if i == 0 {
            ExpectedVersion::NoStream
        } else {
            ExpectedVersion::Exact(i - 1)
        };
        store
            .append(stream, expected, &[lost("trickle", &i.to_string())])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    wait_until(Duration::from_secs(10), || async {
        audit::head(store.pool())
            .await
            .unwrap()
            .map(|h| h.audit_seq)
            == Some(40)
    })
    .await;
    // Each pass that sealed anything wrote one block and rested at least `idle` (the gather
    // time, capped by it) after it: however slowly the appends went, no more passes fit.
    let elapsed = started.elapsed();
    let passes_that_fit = (elapsed.as_secs_f64() / idle.as_secs_f64()).floor() as i64 + 1;
    let blocks: i64 = first_column(store.pool(), "SELECT count(*) FROM event_seal_blocks").await[0];
    assert!(
        blocks <= passes_that_fit.min(39),
        "{blocks} blocks for 40 events appended and sealed in {elapsed:?}"
    );
    let clean = audit::verify(store.pool()).await.unwrap();
    assert_eq!((clean.sealed, clean.first_break), (40, None));
    stop.cancel();
    sealer.await.unwrap().unwrap();
}

/// SQL that lays the chain's links out one to a row in a table `links` (audit_seq, tx_id, seq,
/// hash) for the rest of a tamperer's transaction, and [`LINKS_IN`] that writes them back as
/// the chain, in one block, numbered from 1.
const LINKS_OUT: &str = "CREATE TEMP TABLE links ON COMMIT DROP AS
    SELECT b.first_audit_seq + l.n - 1 AS audit_seq, l.tx_id, l.seq,
           substring(b.hashes FROM (l.n - 1)::int * 32 + 1 FOR 32) AS hash
    FROM event_seal_blocks b, unnest(b.tx_ids, b.seqs) WITH ORDINALITY AS l(tx_id, seq, n);";
const LINKS_IN: &str = "DELETE FROM event_seal_blocks;
    INSERT INTO event_seal_blocks
    SELECT 1, array_agg(tx_id ORDER BY audit_seq), array_agg(seq ORDER BY audit_seq),
           string_agg(hash, ''::bytea ORDER BY audit_seq)
    FROM links;";

/// Runs `sql` with the owner's rights (the service role may not touch the log), as an
/// operator with access to the database could, and returns the first break `verify` finds.
async fn tamper(store: &EventStore, sql: &str) -> audit::Break {
    store
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(&format!("BEGIN; SET LOCAL ROLE NONE; {sql}; COMMIT;"))
        .await
        .unwrap();
    audit::verify(store.pool())
        .await
        .unwrap()
        .first_break
        .expect("tampering is found")
}

/// Edits the payload of `stream_id`'s event `stream_version` as an operator could, and
/// returns the first break `verify` finds.
async fn alter(store: &EventStore, stream_id: &str, stream_version: i64) -> audit::Break {
    tamper(
        store,
        &format!(
            "UPDATE events SET payload = jsonb_set(payload, '{{reason}}', '\"edited\"')
             WHERE stream_id = '{stream_id}' AND stream_version = {stream_version}"
        ),
    )
    .await
}

#[tokio::test]
async fn the_audit_chain_finds_every_kind_of_tampering() {
    let altered = alter(&sealed_store().await, "agent-y", 2).await;
    assert!(altered.reason.contains("altered"), "{altered}");
    assert_eq!(
        (altered.stream_id.as_deref(), altered.stream_version),
        (Some("agent-y"), Some(2))
    );

    let deleted = tamper(
        &sealed_store().await,
        "DELETE FROM events WHERE stream_id = 'agent-x' AND stream_version = 3",
    )
    .await;
    assert!(deleted.reason.contains("deleted"), "{deleted}");
    assert_eq!(deleted.audit_seq, Some(4));

    let stream_gone = tamper(
        &sealed_store().await,
        "DELETE FROM events WHERE stream_id = 'agent-y'",
    )
    .await;
    assert!(stream_gone.reason.contains("deleted"), "{stream_gone}");
    assert_eq!(stream_gone.audit_seq, Some(6));

    let store = sealed_store().await;
    let inserted = tamper(&store,
        "INSERT INTO events (tx_id, event_id, stream_id, category, stream_version, event_type, schema_version, payload, metadata)
         SELECT tx_id, gen_random_uuid(), 'agent-forged', 'agent', 0, 'AgentLost', 1, '{\"agent_id\":\"f\",\"reason\":\"r\"}', '{}'
         FROM events ORDER BY tx_id LIMIT 1").await;
    assert!(inserted.reason.contains("inserted"), "{inserted}");
    assert_eq!(inserted.stream_id.as_deref(), Some("agent-forged"));

    // The last three events and their links gone. The links are laid out one to a row and
    // written back as one block: the sealer may have sealed the 15 in more than one (an open
    // transaction of another test holds the horizon back), and the tamperer redoes blocks.
    let truncated = tamper(
        &sealed_store().await,
        &format!(
            "{LINKS_OUT}
             DELETE FROM events WHERE (tx_id, seq) IN (SELECT tx_id, seq FROM links WHERE audit_seq > 12);
             DELETE FROM links WHERE audit_seq > 12;
             {LINKS_IN}"
        ),
    )
    .await;
    assert!(truncated.reason.contains("truncated"), "{truncated}");

    // An event removed with its link (the 11th, agent-z's first): the chain breaks at the
    // next one, whose link was made on the removed one's hash.
    let relinked = tamper(
        &sealed_store().await,
        &format!(
            "{LINKS_OUT}
             DELETE FROM events WHERE stream_id = 'agent-z' AND stream_version = 0;
             DELETE FROM links WHERE audit_seq = 11;
             {LINKS_IN}"
        ),
    )
    .await;
    assert!(
        relinked.reason.contains("a seal before it was removed"),
        "{relinked}"
    );
    assert_eq!(
        (
            relinked.audit_seq,
            relinked.stream_id.as_deref(),
            relinked.stream_version
        ),
        (Some(11), Some("agent-z"), Some(1))
    );

    // The blocks of the first 15 links removed with their events: the blocks' numbering has
    // a hole before the next sealing's first block.
    let store = sealed_store().await;
    append_losses(&store, "later", 6, 2).await;
    assert_eq!(audit::seal_all(store.pool()).await.unwrap(), 6);
    let block_gone = tamper(
        &store,
        "DELETE FROM events WHERE (tx_id, seq) IN (
           SELECT l.tx_id, l.seq FROM event_seal_blocks b,
             unnest(b.tx_ids, b.seqs) AS l(tx_id, seq) WHERE b.first_audit_seq <= 15);
         DELETE FROM event_seal_blocks WHERE first_audit_seq <= 15;",
    )
    .await;
    assert!(
        block_gone.reason.contains("seals 1 to 15 are missing"),
        "{block_gone}"
    );
    assert_eq!(block_gone.audit_seq, Some(16));
}

#[tokio::test]
async fn a_chain_of_full_blocks_and_a_trickle_of_small_ones_verifies_in_stretches() {
    let (store, _) = fresh_store().await;
    // 12,000 links in blocks of a thousand: more than `verify` reads at once.
    append_streams_of_a_hundred(&store, "s", 120).await;
    assert_eq!(audit::seal_all(store.pool()).await.unwrap(), 12_000);
    // Then a trickle, sealed as it comes: a block of one link each.
    for i in 0..30 {
        append_losses(&store, &format!("t{i}-"), 1, 1).await;
        assert_eq!(audit::seal_all(store.pool()).await.unwrap(), 1);
    }
    let blocks: i64 = first_column(store.pool(), "SELECT count(*) FROM event_seal_blocks")
        .await
        .into_iter()
        .next()
        .unwrap();
    // At least: a window the horizon cut short (another test's open transaction) is sealed
    // in more blocks.
    assert!(blocks >= 12 + 30, "{blocks} blocks");
    let verified = audit::verify(store.pool()).await.unwrap();
    assert_eq!((verified.sealed, verified.first_break), (12_030, None));

    // An event in the second stretch is found, and so is one in the trickle.
    let altered = alter(&store, "agent-t14-0", 0).await;
    assert_eq!(
        (altered.audit_seq, altered.stream_id.as_deref()),
        (Some(12_015), Some("agent-t14-0"))
    );
    let altered = alter(&store, "agent-s114", 99).await;
    assert!(altered.reason.contains("altered"), "{altered}");
    assert_eq!(altered.audit_seq, Some(11_500));
}

#[tokio::test]
async fn a_chain_sealed_a_link_to_a_row_moves_into_blocks_whole_and_in_order() {
    let (store, _) = fresh_store().await;
    append_streams_of_a_hundred(&store, "m", 25).await;
    assert_eq!(audit::seal_all(store.pool()).await.unwrap(), 2_500);
    let head = audit::head(store.pool()).await.unwrap().unwrap();
    let log = log_order(&store).await;
    // The chain as the shape before migration 44 kept it, a link to a row (the table as
    // migration 1 made it), and the database as it stood before 44 ran.
    store
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute(&format!(
            "BEGIN; SET LOCAL ROLE NONE;
             CREATE TABLE event_seals (
                 audit_seq bigint PRIMARY KEY, tx_id xid8 NOT NULL, seq bigint NOT NULL,
                 hash bytea NOT NULL, UNIQUE (tx_id, seq));
             {LINKS_OUT}
             INSERT INTO event_seals SELECT audit_seq, tx_id, seq, hash FROM links;
             DROP TABLE event_seal_blocks;
             GRANT SELECT, INSERT ON event_seals TO berth_service;
             DELETE FROM schema_migrations WHERE component = 'events' AND version = 44;
             COMMIT;"
        ))
        .await
        .unwrap();
    events::store::migrate(store.pool(), &[]).await.unwrap();

    // Every link moved, a thousand to a block, in order: the chain verifies whole, with the
    // same head, over the same log in the same order.
    let blocks: Vec<(i64, i32)> = store
        .pool()
        .get()
        .await
        .unwrap()
        .query(
            "SELECT first_audit_seq, cardinality(seqs) FROM event_seal_blocks
             ORDER BY first_audit_seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(blocks, vec![(1, 1_000), (1_001, 1_000), (2_001, 500)]);
    let verified = audit::verify(store.pool()).await.unwrap();
    assert_eq!((verified.sealed, verified.first_break), (2_500, None));
    assert_eq!(audit::head(store.pool()).await.unwrap().unwrap(), head);
    let after = log_order(&store).await;
    assert_eq!(after, log);

    // The chain goes on from the moved head, and the moved links still guard their events.
    append_losses(&store, "after", 4, 2).await;
    assert_eq!(audit::seal_all(store.pool()).await.unwrap(), 4);
    let verified = audit::verify(store.pool()).await.unwrap();
    assert_eq!((verified.sealed, verified.first_break), (2_504, None));
    let altered = alter(&store, "agent-m12", 34).await;
    assert!(altered.reason.contains("altered"), "{altered}");
    assert_eq!(altered.audit_seq, Some(12 * 100 + 34 + 1));
}

#[tokio::test]
async fn a_rebuilt_projection_equals_the_live_one() {
    let (store, _) = fresh_store().await;
    let pool = store.pool();
    // Installed on an empty log, the live projection applies every event with its SQL; the
    // rebuild folds the log in memory: two accounts of the same rules, compared.
    projection::install(pool, &StreamIndex).await.unwrap();
    append_losses(&store, "p", 40, 6).await;
    assert_eq!(projection::catch_up(pool, &StreamIndex).await.unwrap(), 40);
    // More events arrive after the live projection caught up; the rebuild compares at the
    // live projection's position, not the log's head.
    store
        .append(
            "agent-late",
            ExpectedVersion::NoStream,
            &[registered("late")],
        )
        .await
        .unwrap();

    let report = projection::rebuild(pool, &StreamIndex, false)
        .await
        .unwrap();
    assert!(report.equal(), "{report:?}");
    assert_eq!(report.events, 40);

    // A live table that drifted from the log is caught, and a swap repairs it.
    pool.get()
        .await
        .unwrap()
        .batch_execute("UPDATE proj_streams.streams SET events = 99 WHERE stream_id = 'agent-p1'")
        .await
        .unwrap();
    let drifted = projection::rebuild(pool, &StreamIndex, true).await.unwrap();
    assert_eq!(drifted.differences, vec![("streams".to_string(), 1, 1)]);
    assert!(drifted.swapped);
    let after_swap = projection::rebuild(pool, &StreamIndex, false)
        .await
        .unwrap();
    assert!(after_swap.equal(), "{after_swap:?}");
    // The swapped-in tables were written with their secondary index dropped, and have it
    // again as the projection's DDL makes it, beside their key.
    let indexes: Vec<String> = first_column(
        pool,
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'proj_streams' ORDER BY indexname",
    )
    .await;
    assert_eq!(
        indexes,
        [
            "CREATE INDEX streams_category_last_recorded_at_idx ON proj_streams.streams USING btree (category, last_recorded_at)",
            "CREATE UNIQUE INDEX streams_pkey ON proj_streams.streams USING btree (stream_id)",
        ]
    );
    assert_eq!(
        projection::catch_up(pool, &StreamIndex).await.unwrap(),
        1,
        "the live runner goes on from the swapped checkpoint"
    );
}

/// Two runners of one projection take turns on its checkpoint: every event is applied once,
/// and a runner the other overtook (whose idle probe asks after the checkpoint where it last
/// saw it) goes on with the events after, whichever of the two reads them.
#[tokio::test]
async fn two_runners_of_a_projection_apply_each_event_once_and_follow_each_other() {
    let (store, _) = fresh_store().await;
    let pool = store.pool().clone();
    projection::install(&pool, &StreamIndex).await.unwrap();
    let stop = CancellationToken::new();
    let runners: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(projection::run(
                pool.clone(),
                StreamIndex,
                Duration::from_millis(5),
                stop.clone(),
            ))
        })
        .collect();
    for round in 0..6 {
        append_losses(&store, &format!("r{round}"), 5, 2).await;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let client = pool.get().await.unwrap();
    let applied = "SELECT coalesce(sum(events), 0)::bigint FROM proj_streams.streams";
    wait_until(Duration::from_secs(30), || async {
        client
            .query_one(applied, &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            >= 30
    })
    .await;
    stop.cancel();
    for runner in runners {
        runner.await.unwrap().unwrap();
    }
    let row = client
        .query_one(
            "SELECT (SELECT coalesce(sum(events), 0)::bigint FROM proj_streams.streams),
                    (SELECT count(*) FROM events)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i64>(0), row.get::<_, i64>(1)),
        (30, 30),
        "each event applied once"
    );
}

#[tokio::test]
async fn a_projection_installed_on_a_written_log_folds_it_at_once() {
    let (store, _) = fresh_store().await;
    append_losses(&store, "i", 30, 4).await;
    let pool = store.pool();
    // The log is read behind the horizon, which other tests' transactions on the cluster
    // may hold back a moment.
    let client = pool.get().await.unwrap();
    let behind = "SELECT berth_log_horizon() > (SELECT max(tx_id) FROM events)";
    for _ in 0..300 {
        if client
            .query_one(behind, &[])
            .await
            .unwrap()
            .get::<_, bool>(0)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    projection::install(pool, &StreamIndex).await.unwrap();
    assert_eq!(
        projection::catch_up(pool, &StreamIndex).await.unwrap(),
        0,
        "the install folded the whole log and left its checkpoint after it"
    );
    let row = client
        .query_one(
            "SELECT count(*), sum(events)::bigint, max(version) FROM proj_streams.streams",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, i64>(0),
            row.get::<_, i64>(1),
            row.get::<_, i64>(2)
        ),
        (4, 30, 7)
    );
}

#[tokio::test]
async fn the_relay_keeps_global_order_on_jetstream() {
    let (store, url) = fresh_store().await;
    append_losses(&store, "o", 50, 5).await;
    let js = jetstream::new(connect_nats().await.unwrap());
    let topology = topology();
    let stop = CancellationToken::new();
    let pool = store.pool().clone();
    let relay = tokio::spawn(relay::run(
        pool.clone(),
        url,
        js.clone(),
        topology.clone(),
        RelayConfig::default(),
        stop.clone(),
    ));
    let stream = relay::ensure_stream(&js, &topology).await.unwrap();
    let ordered = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
        .await
        .unwrap();
    let mut messages = ordered.messages().await.unwrap();
    let mut positions = Vec::new();
    while positions.len() < 50 {
        let message = tokio::time::timeout(Duration::from_secs(30), messages.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let event: events::RecordedEvent = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(message.subject.as_str(), topology.subject_of(&event));
        positions.push(event.position);
    }
    let log: Vec<LogPosition> = store
        .read_all(LogPosition::START, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.position)
        .collect();
    assert_eq!(positions, log);
    // Once the log is quiet, the checkpoint written beside the relay's loop reaches its head
    // while the relay still runs, and stays there when it stops.
    let head = *log.last().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while relay::checkpoint(&pool).await.unwrap() != head {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay's checkpoint never reached the quiet log's head"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    relay.await.unwrap().unwrap();
    assert_eq!(relay::checkpoint(&pool).await.unwrap(), head);
    js.delete_stream(&topology.stream).await.unwrap();
}

#[tokio::test]
async fn the_service_role_can_append_and_read_the_log_but_never_change_it() {
    let store = sealed_store().await;
    let client = store.pool().get().await.unwrap();
    let role: String = client
        .query_one("SELECT current_user::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(role, events::store::SERVICE_ROLE);
    for sql in [
        "UPDATE events SET payload = '{}' WHERE stream_id = 'agent-y'",
        "DELETE FROM events WHERE stream_id = 'agent-y'",
        "TRUNCATE events",
        "UPDATE event_seal_blocks SET hashes = '\\x00'",
        "DELETE FROM event_seal_blocks",
        "TRUNCATE event_seal_blocks",
    ] {
        let error = client.batch_execute(sql).await.expect_err(sql);
        assert_eq!(
            error.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{sql}: {error}"
        );
    }
    // Nothing was changed, and the log still takes appends through the store.
    assert!(audit::verify(store.pool())
        .await
        .unwrap()
        .first_break
        .is_none());
    let before = store.read_stream("agent-y").await.unwrap().len();
    store
        .append(
            "agent-y",
            ExpectedVersion::Any,
            &[lost("y", "after the checks")],
        )
        .await
        .unwrap();
    assert_eq!(
        store.read_stream("agent-y").await.unwrap().len(),
        before + 1
    );
}

/// A handler for the consumer tests: counts its calls per event; fails for now on every
/// `AgentLost`, takes `slow` over each event, and records the rest in `applied`.
#[derive(Clone, Default)]
struct Picky {
    calls: std::sync::Arc<std::sync::Mutex<HashMap<Uuid, usize>>>,
    slow: Duration,
}

impl Picky {
    fn calls(&self, event_id: Uuid) -> usize {
        self.calls
            .lock()
            .unwrap()
            .get(&event_id)
            .copied()
            .unwrap_or(0)
    }
}

impl Handler for Picky {
    async fn handle<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        event: &'a events::RecordedEvent,
    ) -> Result<(), HandlerError> {
        *self
            .calls
            .lock()
            .unwrap()
            .entry(event.event_id)
            .or_default() += 1;
        tokio::time::sleep(self.slow).await;
        if event.event_type() == "AgentLost" {
            return Err(HandlerError::Transient("not now".into()));
        }
        CountingHandler.handle(tx, event).await
    }
}

/// A database with an `applied` table, a relay publishing its log, and JetStream: where the
/// consumer tests run their consumers.
struct ConsumerBench {
    store: EventStore,
    pool: Pool,
    js: jetstream::Context,
    topology: Topology,
    stop: CancellationToken,
}

impl ConsumerBench {
    /// Runs a consumer of `config` with `handler` until [`ConsumerBench::finish`].
    fn consume<H: Handler + 'static>(&self, config: ConsumerConfig, handler: H) {
        tokio::spawn(consumer::run(
            self.pool.clone(),
            self.js.clone(),
            self.topology.clone(),
            config,
            handler,
            self.stop.clone(),
        ));
    }

    /// Appends `proposed` to `stream`; their ids.
    async fn append(&self, stream: &str, proposed: &[ProposedEvent]) -> Vec<Uuid> {
        self.store
            .append(stream, ExpectedVersion::Any, proposed)
            .await
            .unwrap();
        proposed.iter().map(|e| e.event_id).collect()
    }

    async fn info(&self, consumer: &str) -> jetstream::consumer::Info {
        self.js
            .get_stream(&self.topology.stream)
            .await
            .unwrap()
            .consumer_info(consumer)
            .await
            .unwrap()
    }

    async fn finish(self) {
        self.stop.cancel();
        self.js.delete_stream(&self.topology.stream).await.unwrap();
    }
}

async fn consumer_bench() -> ConsumerBench {
    let (store, url) = fresh_store().await;
    store
        .pool()
        .get()
        .await
        .unwrap()
        .batch_execute("CREATE TABLE applied (event_id uuid PRIMARY KEY, times int NOT NULL)")
        .await
        .unwrap();
    let js = jetstream::new(connect_nats().await.expect("nats"));
    let topology = topology();
    let stop = CancellationToken::new();
    tokio::spawn(relay::run(
        store.pool().clone(),
        url,
        js.clone(),
        topology.clone(),
        RelayConfig::default(),
        stop.clone(),
    ));
    ConsumerBench {
        pool: store.pool().clone(),
        store,
        js,
        topology,
        stop,
    }
}

/// The first column of every row `sql` returns.
async fn first_column<T>(pool: &Pool, sql: &str) -> Vec<T>
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    pool.get()
        .await
        .unwrap()
        .query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn times_applied(pool: &Pool, event_id: Uuid) -> i32 {
    pool.get()
        .await
        .unwrap()
        .query_opt(
            "SELECT times FROM applied WHERE event_id = $1",
            &[&event_id],
        )
        .await
        .unwrap()
        .map_or(0, |r| r.get(0))
}

/// An event whose handler keeps failing is delivered `attempts` times, no more, then given
/// up; the events behind it are applied meanwhile.
#[tokio::test]
async fn a_failing_event_is_retried_a_bounded_number_of_times_then_given_up() {
    let bench = consumer_bench().await;
    let (pool, topology) = (&bench.pool, &bench.topology);
    let proposed = [registered("p"), lost("agent-p", "poison"), registered("p")];
    let ids = bench.append("agent-p", &proposed).await;
    let handler = Picky::default();
    let config = ConsumerConfig {
        redelivery: consumer::Redelivery {
            attempts: 3,
            base: Duration::from_millis(20),
            max: Duration::from_millis(100),
        },
        ..ConsumerConfig::new("picky", vec![topology.category_subject("agent")])
    };
    bench.consume(config, handler.clone());
    wait_until(Duration::from_secs(30), || async {
        times_applied(pool, ids[2]).await == 1
            && handler.calls(ids[1]) == 3
            && bench.info("picky").await.num_ack_pending == 0
    })
    .await;
    assert_eq!(times_applied(pool, ids[0]).await, 1);
    assert_eq!(
        times_applied(pool, ids[1]).await,
        0,
        "the failing event is not applied"
    );
    assert_eq!(
        handler.calls(ids[1]),
        3,
        "delivered exactly `attempts` times"
    );
    bench.finish().await;
}

/// Applies only registrations: an agent's loss is passed over.
struct RegistrationsOnly;

impl Handler for RegistrationsOnly {
    fn wants(&self, event: &events::RecordedEvent) -> bool {
        event.event_type() == "AgentRegistered"
    }

    async fn handle<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        event: &'a events::RecordedEvent,
    ) -> Result<(), HandlerError> {
        assert_eq!(
            event.event_type(),
            "AgentRegistered",
            "handed a passed-over event"
        );
        CountingHandler.handle(tx, event).await
    }
}

/// An event the handler does not want is acknowledged without being handled or recorded as
/// applied; the events around it are applied once.
#[tokio::test]
async fn a_passed_over_event_is_acknowledged_with_no_transaction() {
    let bench = consumer_bench().await;
    let (pool, topology) = (&bench.pool, &bench.topology);
    let proposed = [registered("w"), lost("agent-w", "gone"), registered("w")];
    let ids = bench.append("agent-w", &proposed).await;
    let config = ConsumerConfig::new("wanting", vec![topology.category_subject("agent")]);
    bench.consume(config, RegistrationsOnly);
    // The consumer exists once the last event was applied; then every message is settled.
    wait_until(Duration::from_secs(30), || async {
        times_applied(pool, ids[2]).await == 1 && {
            let info = bench.info("wanting").await;
            info.num_ack_pending == 0 && info.num_pending == 0
        }
    })
    .await;
    assert_eq!(times_applied(pool, ids[0]).await, 1);
    assert_eq!(times_applied(pool, ids[1]).await, 0, "passed over");
    let rows: Vec<Uuid> = first_column(
        pool,
        "SELECT event_id FROM processed_events WHERE consumer = 'wanting' ORDER BY event_id",
    )
    .await;
    let mut applied = vec![ids[0], ids[2]];
    applied.sort();
    assert_eq!(
        rows, applied,
        "no applied-events row for the passed-over event"
    );
    bench.finish().await;
}

/// A handler that runs for several ack waits keeps its message: nothing is redelivered.
#[tokio::test]
async fn a_long_handler_keeps_its_message_with_progress_acks() {
    let bench = consumer_bench().await;
    let (pool, topology) = (&bench.pool, &bench.topology);
    let id = bench.append("agent-l", &[registered("l")]).await[0];
    let handler = Picky {
        slow: Duration::from_millis(3_500),
        ..Picky::default()
    };
    let config = ConsumerConfig {
        ack_wait: Duration::from_secs(1),
        ..ConsumerConfig::new("slow", vec![topology.category_subject("agent")])
    };
    bench.consume(config, handler.clone());
    wait_until(Duration::from_secs(30), || async {
        times_applied(pool, id).await == 1
    })
    .await;
    // One message, delivered once: a redelivery would have taken a second consumer sequence.
    let info = bench.info("slow").await;
    assert_eq!(info.delivered.consumer_sequence, 1, "{info:?}");
    assert_eq!(handler.calls(id), 1);
    bench.finish().await;
}

/// A consumer takes only the subjects of its filters, and one deleted on the server is made
/// again: it goes on with what comes next, and applies nothing twice.
#[tokio::test]
async fn a_consumer_with_several_filters_is_made_again_when_deleted() {
    let bench = consumer_bench().await;
    let (pool, topology) = (&bench.pool, &bench.topology);
    let mut ids = HashMap::new();
    for agent in ["a", "b", "c"] {
        let appended = bench
            .append(&format!("agent-{agent}"), &[registered(agent)])
            .await;
        ids.insert(agent, appended[0]);
    }
    let subject = |stream: &str| format!("{}.agent.{stream}", topology.prefix);
    let config = ConsumerConfig::new("two", vec![subject("agent-a"), subject("agent-b")]);
    bench.consume(config, CountingHandler);
    wait_until(Duration::from_secs(30), || async {
        times_applied(pool, ids["a"]).await == 1 && times_applied(pool, ids["b"]).await == 1
    })
    .await;

    bench
        .js
        .get_stream(&topology.stream)
        .await
        .unwrap()
        .delete_consumer("two")
        .await
        .unwrap();
    let later_id = bench.append("agent-a", &[registered("a")]).await[0];
    wait_until(Duration::from_secs(30), || async {
        times_applied(pool, later_id).await == 1
    })
    .await;
    // Made again from the stream's start: the events it had applied were recognised.
    let most: i32 = pool
        .get()
        .await
        .unwrap()
        .query_one("SELECT max(times) FROM applied", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(most, 1, "no event applied twice");
    assert_eq!(
        times_applied(pool, ids["c"]).await,
        0,
        "agent-c is outside the filters"
    );
    bench.finish().await;
}

/// A statement PostgreSQL refuses reaches the user with PostgreSQL's own words: its
/// severity, code, message, detail and constraint, never tokio-postgres's bare "db error".
#[tokio::test]
async fn a_refused_statement_says_what_postgresql_said() {
    let (store, _) = fresh_store().await;
    let client = store.pool().get().await.unwrap();
    client
        .batch_execute("CREATE TABLE refusals (id int PRIMARY KEY, said text NOT NULL)")
        .await
        .unwrap();
    let refused = client
        .execute("INSERT INTO refusals (id, said) VALUES (1, NULL)", &[])
        .await
        .unwrap_err();
    let said = StoreError::from(refused).to_string();
    assert!(
        said.starts_with("database: ERROR 23502: null value in column \"said\""),
        "{said}"
    );
    client
        .execute("INSERT INTO refusals VALUES (1, 'once')", &[])
        .await
        .unwrap();
    let refused = client
        .execute("INSERT INTO refusals VALUES (1, 'twice')", &[])
        .await
        .unwrap_err();
    let said = events::ledger::LedgerError::from(refused).to_string();
    assert!(
        said.contains("duplicate key value violates unique constraint")
            && said.contains("(Key (id)=(1) already exists.)")
            && said.contains("[constraint refusals_pkey]"),
        "{said}"
    );
}
