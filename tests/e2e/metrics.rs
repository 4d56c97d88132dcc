//! Metrics: the gateway's `/metrics` scraped before and after a session's life finds the
//! counters and histograms moved, in an exposition a Prometheus text parser reads; an
//! agent's own metrics listener answers too.

use std::time::Duration;

use prom_text_format_parser::{Scrape, Type, ValueType};
use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

use crate::common::*;

/// `url`'s exposition, parsed (every line of it, or the test fails).
async fn scrape(http: &reqwest::Client, url: &str) -> Scrape {
    // Right after the start, under load, no metric may have been recorded yet: the
    // exposition is empty, which the parser refuses. The first sample comes within moments.
    let mut tries = 0;
    loop {
        let response = http.get(url).send().await.expect("the scrape is answered");
        assert_eq!(response.status(), StatusCode::OK, "{url}");
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(content_type.starts_with("text/plain"), "{content_type}");
        let text = response.text().await.unwrap();
        tries += 1;
        if text.trim().is_empty() && tries < 50 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        return Scrape::parse(&text)
            .unwrap_or_else(|e| panic!("not Prometheus's text format: {e:?}\n{text}"));
    }
}

/// The sum of the samples named `name` whose labels include `labels`: a counter's or a
/// gauge's value, or a histogram's `_count` (its observations); 0 when there is none.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (metric, wanted) = match name.strip_suffix("_count") {
        Some(base)
            if scrape
                .metrics
                .iter()
                .any(|m| m.name == base && m.kind == Type::Histogram) =>
        {
            (base, ValueType::Count)
        }
        _ => (name, ValueType::Sample),
    };
    scrape
        .metrics
        .iter()
        .filter(|m| m.name == metric)
        .flat_map(|m| &m.samples)
        .filter(|s| s.value.value_type == wanted)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|l| l.key == *k && l.value == *v))
        })
        .map(|s| s.value.value.as_f64())
        .sum()
}

/// Whether `name` is in the exposition with help text.
fn described(scrape: &Scrape, name: &str) -> bool {
    scrape
        .metrics
        .iter()
        .any(|m| m.name == name && m.help_desc.as_deref().is_some_and(|h| !h.is_empty()))
}

#[tokio::test]
async fn a_sessions_life_moves_the_counters_and_histograms_on_metrics() {
    let h = start().await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let url = format!("{}/metrics", h.base);
    let before = scrape(&h.http, &url).await;

    admit(&h, "metered", "default").await;
    let outbox = std::env::temp_dir().join(format!("berth-outbox-{}", Uuid::new_v4().simple()));
    let agent = h
        .simulated_agent(&nats, "metered", &outbox, Duration::from_secs(1))
        .await;
    // The agent's listener, as `berth agent --metrics-listen` serves it (the agent runs in
    // this process, so it shares the test's recorder).
    let handle = berth::metrics::install().expect("the recorder is installed");
    let stop = tokio_util::sync::CancellationToken::new();
    let (agent_address, _served) = berth::metrics::listen("127.0.0.1:0", handle, stop.clone())
        .await
        .unwrap();

    let (status, created) = h
        .create(
            &h.admin_key,
            json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
                   "resources": {"cpu": 1, "memory": "256m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| s["status"] == "TERMINATED").await;

    let after = scrape(&h.http, &url).await;
    for name in [
        "berth_http_requests_total",
        "berth_scheduler_pass_seconds",
        "berth_session_create_to_running_seconds",
    ] {
        assert!(described(&after, name), "{name} has help text");
    }
    let moved = |metric: &str, labels: &[(&str, &str)]| {
        value(&after, metric, labels) - value(&before, metric, labels)
    };
    let batch = [("type", "batch")];
    assert_eq!(moved("berth_sessions_created_total", &batch), 1.0);
    assert_eq!(
        moved(
            "berth_sessions_ended_total",
            &[("type", "batch"), ("status", "TERMINATED")]
        ),
        1.0
    );
    assert_eq!(
        moved("berth_session_create_to_placed_seconds_count", &batch),
        1.0
    );
    assert_eq!(
        moved("berth_session_create_to_running_seconds_count", &batch),
        1.0
    );
    assert_eq!(
        moved(
            "berth_http_requests_total",
            &[
                ("method", "POST"),
                ("route", "/v1/sessions"),
                ("status", "201")
            ]
        ),
        1.0
    );
    assert!(
        moved(
            "berth_http_request_duration_seconds_count",
            &[("method", "GET"), ("route", "/v1/sessions/{id}")]
        ) >= 1.0,
        "the detail's route is its pattern, never the raw path"
    );
    assert!(
        !after
            .metrics
            .iter()
            .flat_map(|m| &m.samples)
            .any(|s| s.labels.iter().any(|l| l.value.contains(&id))),
        "no series names a session"
    );
    assert!(moved("berth_scheduler_pass_seconds_count", &[]) >= 1.0);
    assert_eq!(
        moved("berth_scheduler_decisions_total", &[("outcome", "placed")]),
        1.0
    );
    assert!(moved("berth_relay_published_events_total", &[]) >= 1.0);
    assert!(
        moved(
            "berth_projection_applied_events_total",
            &[("projection", "sessions")]
        ) >= 1.0
    );

    // The sessions gauge is counted from the view every 10 s.
    wait_for(|| async {
        let now = scrape(&h.http, &url).await;
        let counted = value(
            &now,
            "berth_sessions",
            &[("status", "TERMINATED"), ("type", "batch")],
        );
        (counted == 1.0).then_some(())
    })
    .await;

    let agents = scrape(&h.http, &format!("http://{agent_address}/metrics")).await;
    assert!(
        value(
            &agents,
            "berth_agent_commands_total",
            &[("command", "assign")]
        ) >= 1.0
    );
    stop.cancel();
    agent.stop().await;
}
