//! Multi-node clusters over agents of different cluster networks: a cluster no network scope
//! could hold is cancelled at once, its history saying why (no wait until a deadline); one
//! that a scope can hold goes to that scope's agents alone.

use crate::common::*;
use events::payloads::ResourceSlots;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Registers agent `id` of group `default` with `cpu` cores on the cluster network `scope`,
/// as an agent on that engine would.
async fn scoped_agent(h: &Harness, id: &str, cpu: u64, scope: &str) {
    let offer = bus::protocol::Offer {
        unlabelled_images: Vec::new(),
        resource_group: "default".into(),
        capacity: ResourceSlots {
            cpu_milli: cpu * 1000,
            memory_bytes: 64 * GIB,
            gpu_milli: 0,
        },
        images: vec!["berth/shell:latest".into()],
        address: None,
        image_apps: Default::default(),
        network_scope: Some(scope.into()),
        volumes: Default::default(),
    };
    admit(h, id, "default").await;
    recorder::record::register(&h.pool, id, &offer)
        .await
        .unwrap();
}

/// A multi-node cluster of two kernels of 3 cores.
fn cluster() -> Value {
    json!({"image": "berth/shell:latest", "cluster_mode": "multi-node", "cluster_size": 2,
           "resources": {"cpu": 3, "memory": "1g"}})
}

#[tokio::test]
async fn a_cluster_goes_to_one_network_scope_or_is_refused_at_once_saying_why() {
    let h = start().await;
    // Together these hold both kernels, but each engine only one.
    scoped_agent(&h, "x1", 4, "engine:x").await;
    scoped_agent(&h, "y1", 4, "engine:y").await;

    let (status, created) = h.create(&h.admin_key, cluster()).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let refused = ids(&created)[0].clone();
    let detail = h
        .wait_session(&refused, |s| s["status"] == "CANCELLED")
        .await;
    let reason = detail["status_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("cluster network"), "{detail}");
    let history = h.history(&refused).await;
    let entry = history
        .iter()
        .find(|e| e["error_code"] == "NO_SHARED_NETWORK")
        .unwrap_or_else(|| panic!("no history entry says why: {history:?}"));
    let message = entry["message"].as_str().unwrap();
    assert!(
        message.contains("`engine:x` 1, `engine:y` 1"),
        "the history names each scope and what it could hold: {message}"
    );
    assert_eq!(
        entry["attempts"], 1,
        "refused at the first attempt: {entry}"
    );

    // A second agent on engine x: the scope now holds the cluster, which goes there alone.
    scoped_agent(&h, "x2", 4, "engine:x").await;
    let (status, created) = h.create(&h.admin_key, cluster()).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let placed = ids(&created)[0].clone();
    let detail = h
        .wait_session(&placed, |s| s["status"] == "SCHEDULED")
        .await;
    let mut agents: Vec<&str> = detail["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["agent_id"].as_str().unwrap())
        .collect();
    agents.sort();
    assert_eq!(agents, ["x1", "x2"], "{detail}");
}
