//! Agents on the bus: what an agent reports is recorded once, only for sessions placed on it;
//! commands wait for an agent that is away; a report that finds no recorder waits (in the
//! agent's outbox, across an agent restart) and is recorded once the recorder is back.
//! Agents here are the simulated runtime (`agent::host::Runtime::Simulated`) or raw NATS requests: the
//! recorder, dispatcher, relay and PostgreSQL are the real ones.

use std::time::Duration;

use berth::app::Parts;
use bus::protocol::{Answer, Command, Fact, Offer, Report, Request};
use events::payloads::*;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::common::*;

fn offer() -> Offer {
    Offer {
        unlabelled_images: Vec::new(),
        resource_group: "default".into(),
        capacity: ResourceSlots {
            cpu_milli: 8_000,
            memory_bytes: 16 * GIB,
            gpu_milli: 0,
        },
        images: vec!["berth/shell:latest".into()],
        address: None,
        image_apps: Default::default(),
        network_scope: None,
        volumes: Default::default(),
    }
}

/// Sends `request` as agent `agent` and reads the answer (asking again while the recorder,
/// just started, does not listen yet).
async fn ask(nats: &async_nats::Client, h: &Harness, agent: &str, request: &Request) -> Answer {
    let body: bytes::Bytes = serde_json::to_vec(request).unwrap().into();
    let message = wait_for(|| async {
        nats.request(h.agent_bus.requests_of(agent), body.clone())
            .await
            .ok()
    })
    .await;
    serde_json::from_slice(&message.payload).unwrap()
}

async fn status_changes(h: &Harness, session: &str, to: &str) -> i64 {
    let client = h.pool.get().await.unwrap();
    client
        .query_one(
            "SELECT count(*) FROM events WHERE stream_id = $1
               AND event_type = 'SessionStatusChanged' AND payload->>'to' = $2",
            &[
                &events::catalogue::stream_id("session", Uuid::parse_str(session).unwrap()),
                &to,
            ],
        )
        .await
        .unwrap()
        .get(0)
}

async fn stream_version(h: &Harness, session: &str) -> i64 {
    let client = h.pool.get().await.unwrap();
    client
        .query_one(
            "SELECT coalesce(max(stream_version), 0) FROM events WHERE stream_id = $1",
            &[&events::catalogue::stream_id(
                "session",
                Uuid::parse_str(session).unwrap(),
            )],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_report_is_recorded_once_and_only_by_the_agent_the_session_is_placed_on() {
    let h = start().await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    // Not admitted: refused.
    let answer = ask(&nats, &h, "a1", &Request::Register(offer())).await;
    assert!(
        matches!(answer, Answer::Denied { ref reason } if reason.contains("not admitted")),
        "{answer:?}"
    );
    for agent in ["a1", "a2"] {
        admit(&h, agent, "default").await;
        let answer = ask(&nats, &h, agent, &Request::Register(offer())).await;
        assert_eq!(answer, Answer::Done);
    }
    let mut body = shell(1.0);
    body["agent"] = json!("a1");
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| s["status"] == "SCHEDULED").await;
    let session_id = Uuid::parse_str(&id).unwrap();

    // a2 cannot move a1's session, nor claim its kernels, nor read it: nothing is appended.
    let before = stream_version(&h, &id).await;
    let moved = |report_id| {
        Request::Report(Report {
            report_id,
            session_id,
            fact: Fact::Moved {
                to: SessionStatus::Preparing,
                reason: None,
                exit_code: None,
                at: None,
            },
            traceparent: None,
        })
    };
    let answer = ask(&nats, &h, "a2", &moved(Uuid::now_v7())).await;
    assert!(matches!(answer, Answer::Denied { .. }), "{answer:?}");
    let claim = Request::Report(Report {
        report_id: Uuid::now_v7(),
        session_id,
        fact: Fact::KernelsStarted {
            kernels: vec![bus::protocol::StartedKernel {
                kernel: 0,
                container_id: "forged".into(),
                ports: vec![],
                hostname: None,
                address: None,
                started_at: None,
            }],
        },
        traceparent: None,
    });
    let answer = ask(&nats, &h, "a2", &claim).await;
    assert!(matches!(answer, Answer::Denied { .. }), "{answer:?}");
    let answer = ask(&nats, &h, "a2", &Request::Session { session_id }).await;
    assert_eq!(answer, Answer::Session { session: None });
    assert_eq!(stream_version(&h, &id).await, before);

    // a1's report, sent twice with one id (its answer lost, say), is recorded once.
    let report_id = Uuid::now_v7();
    for _ in 0..2 {
        let answer = ask(&nats, &h, "a1", &moved(report_id)).await;
        assert_eq!(
            answer,
            Answer::Recorded {
                status: SessionStatus::Preparing
            }
        );
    }
    assert_eq!(status_changes(&h, &id, "PREPARING").await, 1);
    // A new report of the same move is a new fact, and the lifecycle refuses it.
    let answer = ask(&nats, &h, "a1", &moved(Uuid::now_v7())).await;
    assert!(matches!(answer, Answer::Refused { .. }), "{answer:?}");
    assert_eq!(status_changes(&h, &id, "PREPARING").await, 1);

    // Several moves in one report are recorded all or none: PREPARED may follow, RUNNING
    // may not follow PREPARED, so neither is recorded.
    let before = stream_version(&h, &id).await;
    let through = |statuses: Vec<SessionStatus>| {
        Request::Report(Report {
            report_id: Uuid::now_v7(),
            session_id,
            fact: Fact::MovedThrough { through: statuses },
            traceparent: None,
        })
    };
    let answer = ask(
        &nats,
        &h,
        "a1",
        &through(vec![SessionStatus::Prepared, SessionStatus::Running]),
    )
    .await;
    assert!(matches!(answer, Answer::Refused { .. }), "{answer:?}");
    assert_eq!(stream_version(&h, &id).await, before);
    let answer = ask(
        &nats,
        &h,
        "a1",
        &through(vec![SessionStatus::Prepared, SessionStatus::Creating]),
    )
    .await;
    assert_eq!(
        answer,
        Answer::Recorded {
            status: SessionStatus::Creating
        }
    );
    assert_eq!(status_changes(&h, &id, "PREPARED").await, 1);

    // What a request cannot be is refused, never recorded.
    let message = nats
        .request(
            h.agent_bus.requests_of("a1"),
            "{\"request\":\"drop\"}".into(),
        )
        .await
        .unwrap();
    let answer: Answer = serde_json::from_slice(&message.payload).unwrap();
    assert!(matches!(answer, Answer::Denied { .. }), "{answer:?}");
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

#[tokio::test(flavor = "multi_thread")]
async fn commands_wait_in_the_stream_for_an_agent_that_is_away() {
    let h = start().await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    // Registering makes the agent's consumer; the agent then goes away.
    admit(&h, "away1", "default").await;
    assert_eq!(
        ask(&nats, &h, "away1", &Request::Register(offer())).await,
        Answer::Done
    );
    let mut body = shell(1.0);
    body["agent"] = json!("away1");
    let (_, created) = h.create(&h.admin_key, body).await;
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| s["status"] == "SCHEDULED").await;
    let (status, _) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Back, it finds what was sent meanwhile, in order: assign, then stop.
    let js = async_nats::jetstream::new(nats);
    let consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_consumer_from_stream(
            h.agent_bus.consumer_of("away1"),
            h.agent_bus.commands_stream.clone(),
        )
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let session_id = Uuid::parse_str(&id).unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .expect("the commands are waiting")
            .unwrap()
            .unwrap();
        got.push(serde_json::from_slice::<Command>(&message.payload).unwrap());
        message.ack().await.unwrap();
    }
    assert_eq!(
        got[0],
        Command::Assign {
            session_id,
            main: true
        }
    );
    assert!(
        matches!(got[1], Command::Stop { session_id: s, .. } if s == session_id),
        "{:?}",
        got[1]
    );
}

fn start_recorder(
    h: &Harness,
    nats: &async_nats::Client,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let stop = CancellationToken::new();
    let task = tokio::spawn(recorder::run(
        nats.clone(),
        h.pool.clone(),
        h.agent_bus.clone(),
        h.topology.clone(),
        stop.clone(),
    ));
    let task = tokio::spawn(async move {
        task.await.unwrap().unwrap();
    });
    (stop, task)
}

fn outbox_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_report_made_while_the_recorder_is_down_is_kept_and_recorded_once_when_it_is_back() {
    let parts = Parts {
        recorder: false,
        ..Parts::ALL
    };
    let h = start_parts(test_config(), parts).await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let (recorder_stop, recorder) = start_recorder(&h, &nats);
    let dir = std::env::temp_dir().join(format!("berth-outbox-{}", Uuid::new_v4().simple()));
    admit(&h, "sim1", "default").await;
    let agent = h
        .simulated_agent(&nats, "sim1", &dir, Duration::from_secs(2))
        .await;
    let body = json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
                      "resources": {"cpu": 1, "memory": "256m"}});
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| s["status"] == "RUNNING").await;

    // The recorder goes away while the batch command "runs"; it ends meanwhile.
    recorder_stop.cancel();
    recorder.await.unwrap();
    wait_for(|| async { (outbox_files(&dir) == 1).then_some(()) }).await;
    // The agent too is stopped and started again: the report waits on its disk.
    agent.stop().await;
    assert_eq!(outbox_files(&dir), 1);
    let detail = h.wait_session(&id, |s| s["status"] == "RUNNING").await;
    assert_eq!(
        detail["status"], "RUNNING",
        "nothing recorded without the recorder"
    );

    let (recorder_stop, recorder) = start_recorder(&h, &nats);
    let agent = h
        .simulated_agent(&nats, "sim1", &dir, Duration::from_secs(2))
        .await;
    let detail = h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    assert_eq!(detail["exit_code"], 0, "{detail}");
    assert_eq!(status_changes(&h, &id, "TERMINATED").await, 1);
    assert_eq!(outbox_files(&dir), 0);
    h.assert_running();
    agent.stop().await;
    recorder_stop.cancel();
    recorder.await.unwrap();
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `recorder`'s answer to `report` from agent `agent`, as the recorder's replica that
/// `known` is the memory of gives it.
async fn report_to(
    h: &Harness,
    known: &events::lifecycle::Known,
    agent: &str,
    report: &Report,
) -> Answer {
    recorder::record::report(&h.pool, known, agent, report)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn recorders_deciding_on_what_they_last_knew_record_each_report_once_and_in_order() {
    let h = start().await;
    h.agent("k1", "default", 8).await;
    let (status, created) = h
        .create(
            &h.admin_key,
            json!({"name": "known1", "image": "berth/shell:latest"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| s["status"] == "SCHEDULED").await;
    let session_id = Uuid::parse_str(&id).unwrap();
    // Two replicas of the recorder, each knowing the session as the agent's first question
    // found it: from then on each decides its reports without reading the stream first.
    let (a, b) = (
        events::lifecycle::Known::default(),
        events::lifecycle::Known::default(),
    );
    for known in [&a, &b] {
        let view = recorder::record::session_for(&h.pool, known, "k1", session_id)
            .await
            .unwrap();
        assert_eq!(view.unwrap().state.status, SessionStatus::Scheduled);
    }
    let moved = |to| Report {
        report_id: Uuid::now_v7(),
        session_id,
        fact: Fact::Moved {
            to,
            reason: None,
            exit_code: None,
            at: None,
        },
        traceparent: None,
    };
    let recorded = |status| Answer::Recorded { status };

    let preparing = moved(SessionStatus::Preparing);
    assert_eq!(
        report_to(&h, &a, "k1", &preparing).await,
        recorded(SessionStatus::Preparing)
    );
    // The same report reaches b, whose guess is stale now: its append expects the version
    // gone by and conflicts, and the stream it then reads holds the report already.
    let version = stream_version(&h, &id).await;
    assert_eq!(
        report_to(&h, &b, "k1", &preparing).await,
        recorded(SessionStatus::Preparing)
    );
    assert_eq!(stream_version(&h, &id).await, version, "recorded once");
    // And sent again to a, which recorded it, it is answered from the log.
    assert_eq!(
        report_to(&h, &a, "k1", &preparing).await,
        recorded(SessionStatus::Preparing)
    );
    assert_eq!(stream_version(&h, &id).await, version, "recorded once");

    // b knows the stream as it read it, and records PREPARED on it. a, stale, decides
    // CREATING on PREPARING: refused there, or recorded against a version gone by; either
    // way it is decided again on the stream as read, and recorded once.
    assert_eq!(
        report_to(&h, &b, "k1", &moved(SessionStatus::Prepared)).await,
        recorded(SessionStatus::Prepared)
    );
    assert_eq!(
        report_to(&h, &a, "k1", &moved(SessionStatus::Creating)).await,
        recorded(SessionStatus::Creating)
    );
    // A report the session's state refuses is refused on the stream as read, not on a guess.
    let refused = report_to(&h, &b, "k1", &moved(SessionStatus::Preparing)).await;
    assert!(matches!(refused, Answer::Refused { .. }), "{refused:?}");
    // Nor may another agent's report be recorded on what a replica knows.
    let denied = report_to(&h, &a, "k2", &moved(SessionStatus::Terminated)).await;
    assert!(matches!(denied, Answer::Denied { .. }), "{denied:?}");
    for to in ["PREPARING", "PREPARED", "CREATING"] {
        assert_eq!(status_changes(&h, &id, to).await, 1, "{to}");
    }
    assert_eq!(status_changes(&h, &id, "TERMINATED").await, 0);
    // The API's read of it follows the log.
    h.wait_session(&id, |s| s["status"] == "CREATING").await;

    // Its kernel published at an address that is not its agent's is refused (the agent is
    // read for it); published at none, on the agent's host alone, it runs.
    let started = |address: Option<&str>| Report {
        report_id: Uuid::now_v7(),
        session_id,
        fact: Fact::KernelsStarted {
            kernels: vec![bus::protocol::StartedKernel {
                kernel: 0,
                container_id: "c0".into(),
                ports: vec![],
                hostname: None,
                address: address.map(str::to_owned),
                started_at: None,
            }],
        },
        traceparent: None,
    };
    let foreign = report_to(&h, &a, "k1", &started(Some("10.9.9.9"))).await;
    assert!(matches!(foreign, Answer::Denied { .. }), "{foreign:?}");
    assert_eq!(
        report_to(&h, &a, "k1", &started(None)).await,
        recorded(SessionStatus::Running)
    );
}
