//! Durable subscriptions as a service that must see every event once reads them: its
//! consumer, killed twice mid-stream, goes on from its last acknowledgement each time, with no
//! event lost and none at or before an acknowledgement served again, whatever
//! `Last-Event-ID` it sends; names, positions and other users' subscriptions refused by field.
//! A superadmin's subscription read over NATS: its own user pulls and acknowledges its own
//! consumer, and is refused the rest of JetStream.

use std::time::Duration;

use events::catalogue::Event;
use events::event_filter::EventFilter;
use events::payloads::SchedulerWakeupsMissed;
use events::store::{ExpectedVersion, ProposedEvent};
use events::{EventStore, LogPosition, Metadata};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::*;
use crate::event_stream::{read_url, Seen};

/// Appends `batches` appends of 100 events to `probe-stream` (what the subscriptions want),
/// each followed by 10 to `noise-stream` (what they do not).
async fn append_probes(pool: &deadpool_postgres::Pool, batches: usize) {
    let store = EventStore::new(pool.clone());
    let events = |n: usize| -> Vec<ProposedEvent> {
        let now = chrono::Utc::now();
        (0..n)
            .map(|_| {
                let event = Event::SchedulerWakeupsMissed(SchedulerWakeupsMissed {
                    from: now,
                    until: now,
                });
                ProposedEvent::new(&event, Metadata::default())
            })
            .collect()
    };
    for _ in 0..batches {
        for (stream, n) in [("probe-stream", 100), ("noise-stream", 10)] {
            store
                .append(stream, ExpectedVersion::Any, &events(n))
                .await
                .expect("appended");
        }
    }
}

/// The positions of the log's `probe` events after `after`, in its order.
async fn probes_after(h: &Harness, mut after: LogPosition) -> Vec<String> {
    let client = h.pool.get().await.unwrap();
    let filter = EventFilter::default().with_categories("probe");
    let mut positions = Vec::new();
    loop {
        let batch = events::store::read_filtered_with(&client, after, 5_000, &filter)
            .await
            .unwrap();
        let Some(last) = batch.last() else {
            return positions;
        };
        after = last.position;
        positions.extend(batch.iter().map(|e| e.position.to_string()));
    }
}

fn ids(seen: &[Seen]) -> Vec<String> {
    seen.iter().map(|(id, _)| id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_killed_twice_goes_on_from_its_acknowledgement_with_nothing_lost_or_redelivered()
{
    let h = start().await;
    let key = h.admin_key.clone();
    let (status, made) = h
        .post(
            &key,
            "/v1/subscriptions",
            json!({"name": "billing", "category": "probe"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert!(made["acknowledged"].is_null(), "{made}");
    assert_eq!(made["category"], json!(["probe"]));
    let made_at: LogPosition = made["resumes_after"].as_str().unwrap().parse().unwrap();

    // Events before and while the consumer reads: 3,000 it wants, 300 it does not.
    append_probes(&h.pool, 5).await;
    let appender = {
        let pool = h.pool.clone();
        tokio::spawn(async move { append_probes(&pool, 25).await })
    };
    let url = format!("{}/v1/subscriptions/billing/events", h.base);
    let ack = |position: String| {
        let (h, key) = (&h, key.clone());
        async move {
            h.post(
                &key,
                "/v1/subscriptions/billing/ack",
                json!({ "position": position }),
            )
            .await
        }
    };

    // The first consumer handles 1,000, acknowledges them, reads 50 more and is killed.
    let first = read_url(&h, &url, &key, None, |s| s.len() >= 1_050).await;
    let (status, kept) = ack(first[999].0.clone()).await;
    assert_eq!(status, StatusCode::OK, "{kept}");
    assert_eq!(kept["acknowledged"], first[999].0.as_str());
    let mut handled: Vec<Seen> = first[..1_000].to_vec();

    // The second goes on right after the acknowledgement: the 50 read but not acknowledged
    // come again, though it names the last of them as its `Last-Event-ID`.
    let second = read_url(&h, &url, &key, Some(&first[1_049].0), |s| s.len() >= 1_000).await;
    assert_eq!(ids(&second[..50]), ids(&first[1_000..1_050]));
    let (status, _) = ack(second[899].0.clone()).await;
    assert_eq!(status, StatusCode::OK);
    handled.extend_from_slice(&second[..900]);
    // An acknowledgement before the one kept changes nothing.
    let (status, kept) = ack(first[10].0.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(kept["acknowledged"], second[899].0.as_str());

    // The third, once everything is written and behind the log's horizon (under load, a
    // transaction still open elsewhere holds the last probes back for a moment), reads to
    // the log's end.
    appender.await.unwrap();
    let wanted = wait_for(|| async {
        let wanted = probes_after(&h, made_at).await;
        (wanted.len() >= 3_000).then_some(wanted)
    })
    .await;
    let third = read_url(&h, &format!("{url}?follow=false"), &key, None, |_| false).await;
    assert_eq!(
        third.first().map(|(id, _)| id),
        second.get(900).map(|(id, _)| id)
    );
    let last = third.last().expect("the rest").0.clone();
    let (status, _) = ack(last.clone()).await;
    assert_eq!(status, StatusCode::OK);
    handled.extend(third);

    // Every probe event after the subscription was made, once, in the log's order.
    let handled_ids = ids(&handled);
    assert_eq!(wanted.len(), 3_000);
    assert_eq!(handled_ids.len(), wanted.len());
    assert!(
        handled_ids == wanted,
        "not the log's probe events in its order"
    );
    for (_, data) in handled.iter().step_by(499) {
        assert_eq!(data["stream_id"], "probe-stream", "{data}");
    }
    let (status, one) = h.get(&key, "/v1/subscriptions/billing").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(one["acknowledged"], last.as_str());
    assert_eq!(one["resumes_after"], last.as_str());
    // Read again: nothing after the last acknowledgement.
    let again = read_url(&h, &format!("{url}?follow=false"), &key, None, |_| false).await;
    assert!(again.is_empty(), "{again:?}");

    // Refusals, each naming its field.
    for (path, body, want, field) in [
        (
            "/v1/subscriptions/billing/ack",
            json!({"position": "99999999:1"}),
            StatusCode::NOT_FOUND,
            "position",
        ),
        (
            "/v1/subscriptions/billing/ack",
            json!({"position": "soon"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "position",
        ),
        (
            "/v1/subscriptions/nobody/ack",
            json!({"position": last}),
            StatusCode::NOT_FOUND,
            "name",
        ),
        (
            "/v1/subscriptions",
            json!({"name": "Billing"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "name",
        ),
        (
            "/v1/subscriptions",
            json!({"name": "billing"}),
            StatusCode::CONFLICT,
            "name",
        ),
        (
            "/v1/subscriptions",
            json!({"name": "x", "category": "A"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "category",
        ),
    ] {
        let (status, answer) = h.post(&key, path, body.clone()).await;
        assert_eq!(status, want, "{path} {body}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{path} {body}: {answer}");
    }
    // Another user neither sees nor reads it, and their own sees their sessions' events only.
    let alice = h.user("alice@subscriptions.test").await;
    let (status, _) = h.get(&alice, "/v1/subscriptions/billing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, listed) = h.get(&alice, "/v1/subscriptions").await;
    assert_eq!(listed["subscriptions"], json!([]));
    let (status, answer) = h
        .post(
            &alice,
            "/v1/subscriptions",
            json!({"name": "mine", "from_start": true, "resource_group": "default"}),
        )
        .await;
    assert_eq!(
        (status, &answer["error"]["field"]),
        (StatusCode::FORBIDDEN, &json!("resource_group"))
    );
    let (status, mine) = h
        .post(
            &alice,
            "/v1/subscriptions",
            json!({"name": "mine", "from_start": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{mine}");
    assert!(
        mine["owner"].is_string(),
        "a user's subscription is kept to her sessions: {mine}"
    );
    let hers = read_url(
        &h,
        &format!("{}/v1/subscriptions/mine/events?follow=false", h.base),
        &alice,
        None,
        |_| false,
    )
    .await;
    assert!(hers.is_empty(), "none of the probes is hers: {hers:?}");

    // Deleted, it is gone; made again, it starts over.
    let (status, _) = h.delete(&key, "/v1/subscriptions/billing").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = h.get(&key, "/v1/subscriptions/billing").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, remade) = h
        .post(
            &key,
            "/v1/subscriptions",
            json!({"name": "billing", "from_start": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{remade}");
    assert!(remade["acknowledged"].is_null(), "{remade}");
    assert_eq!(remade["resumes_after"], "0:0");
    let (_, listed) = h.get(&key, "/v1/subscriptions").await;
    let names: Vec<&Value> = listed["subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["name"])
        .collect();
    assert_eq!(names, [&json!("billing")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_read_over_nats_pulls_its_own_consumer_and_nothing_else() {
    let h = start().await;
    if std::env::var_os("BERTH_NATS_AUTHORIZATION_DIR").is_none_or(|d| d.is_empty()) {
        eprintln!("skipped: the NATS server here has no authorization berth keeps");
        return;
    }
    let key = h.admin_key.clone();
    // Only what subjects can say, and only for superadmins.
    let alice = h.user("alice@nats-subscriptions.test").await;
    let (status, answer) = h
        .post(
            &alice,
            "/v1/subscriptions",
            json!({"name": "audit", "nats": true}),
        )
        .await;
    assert_eq!(
        (status, &answer["error"]["field"]),
        (StatusCode::FORBIDDEN, &json!("nats"))
    );
    let (status, answer) = h
        .post(
            &key,
            "/v1/subscriptions",
            json!({"name": "audit", "type": "Session*", "nats": true}),
        )
        .await;
    assert_eq!(
        (status, &answer["error"]["field"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("nats"))
    );

    // A name no subscription can have is refused before any consumer is made after it.
    let (status, answer) = h
        .post(
            &key,
            "/v1/subscriptions",
            json!({"name": "Audit.x", "category": "probe", "nats": true}),
        )
        .await;
    assert_eq!(
        (status, &answer["error"]["field"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("name"))
    );
    let (status, made) = h
        .post(
            &key,
            "/v1/subscriptions",
            json!({"name": "audit", "category": "probe", "nats": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let reader = &made["nats"];
    let (consumer, seed) = (
        reader["consumer"].as_str().unwrap().to_owned(),
        reader["seed"].as_str().unwrap().to_owned(),
    );
    assert_eq!(reader["stream"], h.topology.stream.as_str());
    let (_, one) = h.get(&key, "/v1/subscriptions/audit").await;
    assert!(
        one["nats"]["seed"].is_null(),
        "the seed is answered once: {one}"
    );

    // Its user gets in once the server knows it, and pulls what it wants.
    let client = tokio::time::timeout(
        Duration::from_secs(60),
        bus::link::connect(&nats_url(), &consumer, Some(seed)),
    )
    .await
    .expect("the reader's user is let in")
    .expect("connected");
    append_probes(&h.pool, 1).await;
    let js = async_nats::jetstream::new(client);
    let pulled = js
        .get_consumer_from_stream::<async_nats::jetstream::consumer::pull::Config, _, _>(
            &consumer,
            &h.topology.stream,
        )
        .await
        .expect("its own consumer");
    let mut messages = pulled.messages().await.expect("pulls");
    let mut streams = Vec::new();
    while streams.len() < 100 {
        let message = tokio::time::timeout(Duration::from_secs(30), messages.next())
            .await
            .expect("an event within 30 s")
            .expect("a message")
            .expect("delivered");
        let event: Value = serde_json::from_slice(&message.payload).unwrap();
        streams.push(event["stream_id"].as_str().unwrap().to_owned());
        message.ack().await.expect("acknowledged");
    }
    assert!(streams.iter().all(|s| s == "probe-stream"), "{streams:?}");

    // The rest of JetStream is not its to touch.
    let refused = tokio::time::timeout(Duration::from_secs(10), js.get_stream(&h.topology.stream))
        .await
        .map_or(true, |answer| answer.is_err());
    assert!(refused, "its user read the stream's configuration");
    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        js.get_consumer_from_stream::<async_nats::jetstream::consumer::pull::Config, _, _>(
            "agent-a1",
            &h.topology.stream,
        ),
    )
    .await
    .map_or(true, |answer| answer.is_err());
    assert!(refused, "its user reached another consumer");

    // Deleted: its consumer is gone.
    let (status, _) = h.delete(&key, "/v1/subscriptions/audit").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let control =
        async_nats::jetstream::new(bus::link::connect_as_url_says(&nats_url()).await.unwrap());
    let stream = control.get_stream(&h.topology.stream).await.unwrap();
    assert!(
        stream.consumer_info(&consumer).await.is_err(),
        "its consumer is kept"
    );
}
