//! A session's scheduling history past its placement, with a real Docker agent: a row for
//! every phase it went through (schedule, prepare, pull, create, start, terminate, cleanup),
//! in order and filterable by phase; an image whose pull fails is a failed `pull` row with
//! the engine's own words.

use bollard::image::CreateImageOptions;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::*;
use crate::containers::{local_agent, run_to_end, ABSENT};

/// Waits until session `id`'s history has a row of phase `phase` (the view lags the log);
/// the whole history then.
async fn history_through(h: &Harness, id: &str, phase: &str) -> Vec<Value> {
    wait_for(|| async {
        let history = h.history(id).await;
        history
            .iter()
            .any(|r| r["phase"] == phase)
            .then_some(history)
    })
    .await
}

fn rows<'a>(history: &'a [Value], fields: &[&str]) -> Vec<Vec<&'a str>> {
    history
        .iter()
        .map(|r| {
            fields
                .iter()
                .map(|f| r[*f].as_str().unwrap_or("-"))
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn a_session_shows_every_phase_in_order_and_a_failed_pull_the_engines_error() {
    let h = start().await;
    let _agent = local_agent(&h).await;

    // The image is there (built locally): its pull is skipped.
    let ended = run_to_end(
        &h,
        json!({"type": "batch", "image": "berth/python:latest", "preopen_ports": [8080],
               "startup_command": "python3 -c 'print(6 * 7)'",
               "resources": {"cpu": 1, "memory": "256m"}}),
    )
    .await;
    assert_eq!(ended["status"], "TERMINATED", "{ended}");
    let id = ended["session_id"].as_str().unwrap();
    let history = history_through(&h, id, "cleanup").await;
    assert_eq!(
        rows(&history, &["phase", "result", "from_status", "to_status"]),
        [
            ["schedule", "SUCCESS", "PENDING", "SCHEDULED"],
            ["prepare", "SUCCESS", "SCHEDULED", "PREPARING"],
            ["pull", "SKIPPED", "PREPARING", "PREPARED"],
            ["create", "SUCCESS", "CREATING", "RUNNING"],
            ["start", "SUCCESS", "CREATING", "RUNNING"],
            ["terminate", "SUCCESS", "RUNNING", "TERMINATED"],
            ["cleanup", "SUCCESS", "TERMINATED", "TERMINATED"],
        ],
        "{history:#?}"
    );
    let (status, detail) = h.get(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let container = detail["containers"][0]["container_id"].as_str().unwrap();
    let host_port = detail["containers"][0]["ports"][0]["host"]
        .as_u64()
        .unwrap();
    let create = &history[3]["sub_steps"][0];
    assert_eq!(create["step"], "kernel 0");
    assert!(
        create["message"]
            .as_str()
            .unwrap()
            .contains(&container[..12]),
        "{create}"
    );
    let start = &history[4]["sub_steps"][0];
    assert!(
        start["message"]
            .as_str()
            .unwrap()
            .contains(&format!("8080->{host_port}")),
        "{start}"
    );
    assert!(
        history[5]["message"]
            .as_str()
            .unwrap()
            .contains("exit code 0"),
        "{}",
        history[5]
    );
    // Filtered by the same API.
    for (query, phases) in [
        ("phase=pull", vec!["pull"]),
        ("phase=terminate&result=SUCCESS", vec!["terminate"]),
        ("to_status=RUNNING", vec!["create", "start"]),
        ("result=SKIPPED", vec!["pull"]),
    ] {
        let (status, filtered) = h
            .get(&h.admin_key, &format!("/v1/sessions/{id}/history?{query}"))
            .await;
        assert_eq!(status, StatusCode::OK, "{filtered}");
        let got: Vec<&str> = filtered["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["phase"].as_str().unwrap())
            .collect();
        assert_eq!(got, phases, "{query}");
    }
    let (_, newest_first) = h
        .get(
            &h.admin_key,
            &format!("/v1/sessions/{id}/history?sort=-created_at"),
        )
        .await;
    assert_eq!(newest_first["history"][0]["phase"], "cleanup");
    assert_eq!(newest_first["history"][6]["phase"], "schedule");

    // No registry has this image: the engine's pull fails, in its own words.
    let docker = agent::docker::connect().await.unwrap();
    let mut pull = docker.create_image(
        Some(CreateImageOptions::<String> {
            from_image: ABSENT.into(),
            ..Default::default()
        }),
        None,
        None,
    );
    let mut engine = None;
    while let Some(step) = pull.next().await {
        if let Err(e) = step {
            engine = Some(e.to_string());
            break;
        }
    }
    let engine = engine.expect("the engine cannot pull an image no registry has");
    let ended = run_to_end(
        &h,
        json!({"type": "batch", "image": ABSENT, "startup_command": "true",
               "resources": {"cpu": 1, "memory": "256m"}}),
    )
    .await;
    assert_eq!(ended["status"], "ERROR", "{ended}");
    let id = ended["session_id"].as_str().unwrap();
    let history = history_through(&h, id, "cleanup").await;
    assert_eq!(
        rows(&history, &["phase", "result", "from_status", "to_status"]),
        [
            ["schedule", "SUCCESS", "PENDING", "SCHEDULED"],
            ["prepare", "SUCCESS", "SCHEDULED", "PREPARING"],
            ["pull", "FAILURE", "PULLING", "ERROR"],
            ["cleanup", "SUCCESS", "ERROR", "ERROR"],
        ],
        "{history:#?}"
    );
    let (status, failed) = h
        .get(
            &h.admin_key,
            &format!("/v1/sessions/{id}/history?phase=pull&result=FAILURE"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{failed}");
    let pull = &failed["history"][0];
    assert_eq!(pull["error_code"], "IMAGE_PULL_FAILED", "{pull}");
    let message = pull["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("pulling `{ABSENT}` failed")) && message.contains(&engine),
        "{message} does not carry the engine's error: {engine}"
    );
    let step = &pull["sub_steps"][0];
    assert_eq!(
        (step["result"].as_str(), step["error_code"].as_str()),
        (Some("FAILURE"), Some("IMAGE_PULL_FAILED")),
        "{step}"
    );

    // The view folded live equals the log folded again, rows of every phase included.
    let rebuild = events::projection::rebuild(&h.pool, &gateway::projection::SessionsView, false)
        .await
        .unwrap();
    assert!(rebuild.differences.is_empty(), "{:?}", rebuild.differences);
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}
