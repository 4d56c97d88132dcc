//! Rule 7, end to end: one session's journey shares one trace. A session created over HTTP
//! with a `traceparent` header is scheduled and run by a real Docker agent; the trace id of
//! that header is in the metadata of its `SessionRequested`, its `SessionScheduled` and every
//! status the agent records, and in the NATS headers of the messages that carry them.

use std::collections::BTreeSet;
use std::time::Duration;

use events::trace::{headers, trace_id_of};
use events::EventStore;
use futures::StreamExt;
use serde_json::json;

use crate::common::*;
use crate::containers::local_agent;

/// The subscriber with the OpenTelemetry layer, as every berth process installs it; once per
/// test process (nextest runs each test in its own).
fn install_telemetry() {
    if let Ok(telemetry) = berth::telemetry::init("berth-test", berth::config::LogFormat::Text) {
        std::mem::forget(telemetry);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sessions_journey_shares_the_trace_of_the_request_that_created_it() {
    install_telemetry();
    let h = start().await;
    let _agent = local_agent(&h).await;
    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let incoming = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let response = h
        .http
        .post(format!("{}/v1/sessions", h.base))
        .header("x-api-key", &h.admin_key)
        .header("traceparent", &incoming)
        .json(&json!({"type": "batch", "image": "berth/shell:latest",
                      "startup_command": "echo traced", "resources": {"cpu": 1, "memory": "256m"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let created: serde_json::Value = response.json().await.unwrap();
    let id = ids(&created).remove(0);
    h.wait_session(&id, |s| s["status"] == "TERMINATED").await;

    // In the log: every event of the session carries the request's trace.
    let stream = format!("session-{}", uuid::Uuid::parse_str(&id).unwrap().simple());
    let recorded = EventStore::new(h.pool.clone())
        .read_stream(&stream)
        .await
        .unwrap();
    let mut traced = BTreeSet::new();
    for event in &recorded {
        let traceparent = event.metadata.traceparent.as_deref();
        assert_eq!(
            traceparent.and_then(trace_id_of),
            Some(trace_id.as_str()),
            "{} by {:?} is not in the request's trace: {traceparent:?}",
            event.event_type(),
            event.metadata.actor
        );
        traced.insert((
            event.event_type(),
            event.metadata.actor.clone().unwrap_or_default(),
        ));
    }
    let agent_moves = recorded
        .iter()
        .filter(|e| e.event_type() == "SessionStatusChanged")
        .filter(|e| {
            e.metadata
                .actor
                .as_deref()
                .is_some_and(|a| a.starts_with("agent"))
        })
        .count();
    assert!(
        agent_moves >= 4,
        "the agent's moves (PREPARING ... TERMINATED): {traced:?}"
    );
    for wanted in ["SessionRequested", "SessionScheduled", "KernelStarted"] {
        assert!(
            traced.iter().any(|(t, _)| *t == wanted),
            "{wanted} missing: {traced:?}"
        );
    }

    // On NATS: the relay sets the same trace on the message headers.
    let client = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let consumer = js
        .get_stream(&h.topology.stream)
        .await
        .unwrap()
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: format!("{}.session.{stream}", h.topology.prefix),
            deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut seen = 0;
    while seen < recorded.len() {
        let message = tokio::time::timeout(Duration::from_secs(20), messages.next())
            .await
            .expect("the relay publishes every event of the session")
            .expect("the consumer goes on")
            .unwrap();
        let header = message
            .headers
            .as_ref()
            .and_then(|h| h.get(headers::TRACEPARENT))
            .map(|v| v.as_str().to_owned());
        let event_type = message
            .headers
            .as_ref()
            .and_then(|h| h.get(headers::EVENT_TYPE))
            .map(|v| v.as_str().to_owned());
        assert_eq!(
            header.as_deref().and_then(trace_id_of),
            Some(trace_id.as_str()),
            "the {event_type:?} message's traceparent header: {header:?}"
        );
        seen += 1;
    }
}
