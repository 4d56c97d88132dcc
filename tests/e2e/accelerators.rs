//! GPUs without a GPU: a Docker agent with simulated devices (the mock accelerator, behind
//! the same plugin interface as NVML) runs real containers through the whole path: the
//! scheduler counts its GPUs, the agent picks the devices and tells each container its
//! devices and, for a fraction, its part of the compute and memory; a request the free GPUs
//! cannot hold waits saying so; the agent samples the GPUs' use, which the session's detail
//! shows and by which the idle checker reaps a session whose GPU is idle and keeps one whose
//! GPU is busy. An agent never offers GPUs its discovery does not find.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use crate::containers::{data_dir, fresh_agent_id, logs, start_agent, DockerAgent};
use agent::gpu::{GpuConfig, MockGpus};
use agent::host::HostError;
use events::idleness::*;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Two mock GPUs of 16 GiB, their use read from `usage`.
fn two_mock_gpus(usage: Option<PathBuf>) -> GpuConfig {
    GpuConfig::mock(MockGpus {
        count: 2,
        memory_bytes: 16 * GIB,
        model: "Mock A100".into(),
        usage_file: usage,
    })
}

/// A Docker agent with two mock GPUs, offering what its discovery finds.
async fn gpu_agent(h: &Harness, usage: Option<PathBuf>) -> DockerAgent {
    start_agent(
        h,
        &fresh_agent_id(),
        &data_dir(),
        8_000,
        None,
        two_mock_gpus(usage),
        None,
    )
    .await
    .expect("the agent with mock GPUs starts")
}

/// An interactive session asking for `gpu` GPUs that prints what it was told of them, then
/// idles.
fn gpu_session(gpu: f64) -> Value {
    json!({
        "image": "berth/shell:latest",
        "startup_command": "env | grep -E '^(CUDA|BERTH_GPU)' | sort; sleep 600",
        "resources": {"cpu": 0.5, "memory": "128m", "gpu": gpu},
    })
}

async fn create(h: &Harness, body: Value) -> String {
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    ids(&created)[0].clone()
}

fn is(status: &'static str) -> impl Fn(&Value) -> bool {
    move |s: &Value| s["status"] == status
}

/// What the session's container printed of its GPUs (`NAME=value` lines), once it has.
async fn gpu_environment(h: &Harness, id: &str) -> Vec<String> {
    wait_for(|| async {
        let printed = logs(h, id).await;
        let lines: Vec<String> = printed
            .lines()
            .filter(|l| l.starts_with("CUDA") || l.starts_with("BERTH_GPU"))
            .map(str::to_owned)
            .collect();
        lines
            .iter()
            .any(|l| l.starts_with("BERTH_GPU_DEVICES="))
            .then_some(lines)
    })
    .await
}

fn value_of<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
    env.iter()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
}

async fn end(h: &Harness, id: &str) {
    let (status, body) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    h.wait_session(id, is("TERMINATED")).await;
}

#[tokio::test]
async fn an_agent_refuses_to_offer_gpus_its_discovery_does_not_find() {
    let h = start().await;
    // Two GPUs offered, one mock device declared.
    let one = GpuConfig::mock(MockGpus {
        count: 1,
        memory_bytes: 16 * GIB,
        model: "Mock A100".into(),
        usage_file: None,
    });
    let id = fresh_agent_id();
    let refused = start_agent(&h, &id, &data_dir(), 8_000, None, one, Some(2_000)).await;
    match refused {
        Err(e @ HostError::GpusNotFound { .. }) => {
            let said = e.to_string();
            assert!(
                said.contains("offers 2 GPUs") && said.contains("found 1: Mock A100"),
                "{said}"
            );
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("an agent offered GPUs its discovery does not find"),
    }
    // No device at all (no mock declared, whatever NVML would say): one GPU is too many.
    let none = GpuConfig::mock(MockGpus {
        count: 0,
        memory_bytes: 0,
        model: String::new(),
        usage_file: None,
    });
    let refused = start_agent(&h, &id, &data_dir(), 8_000, None, none, Some(1_000)).await;
    let said = refused.err().expect("refused").to_string();
    assert!(said.contains("found 0: no GPU"), "{said}");
    // Refused at start: it never registered, so nothing can be placed on it.
    let client = h.pool.get().await.unwrap();
    let registered = client
        .query_opt("SELECT 1 FROM ledger.agents WHERE agent_id = $1", &[&id])
        .await
        .unwrap();
    assert!(registered.is_none(), "the refused agent registered");
}

#[tokio::test]
async fn whole_and_fractional_sessions_get_their_devices_and_limits_and_the_rest_waits() {
    let h = start().await;
    let _agent = gpu_agent(&h, None).await;

    // A whole device: one of the two, no MPS limits.
    let whole = create(&h, gpu_session(1.0)).await;
    h.wait_session(&whole, is("RUNNING")).await;
    let env = gpu_environment(&h, &whole).await;
    assert_eq!(value_of(&env, "CUDA_VISIBLE_DEVICES"), Some("0"), "{env:?}");
    let whole_device = value_of(&env, "BERTH_GPU_DEVICES").unwrap().to_owned();
    assert!(whole_device.starts_with("mock-gpu-"), "{env:?}");
    assert!(
        !env.iter().any(|l| l.starts_with("CUDA_MPS")),
        "a whole device is not limited: {env:?}"
    );

    // Half a device: the other one, with half its threads and 8 GiB of its 16.
    let half = create(&h, gpu_session(0.5)).await;
    h.wait_session(&half, is("RUNNING")).await;
    let env = gpu_environment(&h, &half).await;
    let half_device = value_of(&env, "BERTH_GPU_DEVICES").unwrap();
    assert_ne!(
        half_device, whole_device,
        "a fraction never shares a whole device"
    );
    assert_eq!(value_of(&env, "CUDA_VISIBLE_DEVICES"), Some("0"), "{env:?}");
    assert_eq!(
        value_of(&env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
        Some("50"),
        "{env:?}"
    );
    assert_eq!(
        value_of(&env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
        Some("0=8192M"),
        "{env:?}"
    );

    // More GPUs than any agent has is refused at once, naming the field.
    let (status, refused) = h.create(&h.admin_key, gpu_session(3.0)).await;
    assert!(status.is_client_error(), "{status} {refused}");
    assert_eq!(refused["error"]["field"], "resources.gpu", "{refused}");

    // A whole device while 1.5 of 2 are held waits, and says the GPU is short.
    let waiting = create(&h, gpu_session(1.0)).await;
    let history = wait_for(|| async {
        let hs = h.history(&waiting).await;
        (!hs.is_empty()).then_some(hs)
    })
    .await;
    assert_eq!(history[0]["error_code"], "NO_CAPACITY", "{history:?}");
    let message = history[0]["message"].as_str().unwrap();
    assert!(message.contains("gpu 0.5"), "{message}");
    let (_, detail) = h
        .get(&h.admin_key, &format!("/v1/sessions/{waiting}"))
        .await;
    assert_eq!(detail["status"], "PENDING", "{detail}");

    // The whole device freed, the waiting session gets it.
    end(&h, &whole).await;
    h.wait_session(&waiting, is("RUNNING")).await;
    let env = gpu_environment(&h, &waiting).await;
    assert_eq!(
        value_of(&env, "BERTH_GPU_DEVICES"),
        Some(whole_device.as_str()),
        "{env:?}"
    );
    end(&h, &waiting).await;
    end(&h, &half).await;
}

/// Writes what each mock device is doing, as the agent's mock reads it.
fn set_use(file: &Path, uses: &[(&str, f64)]) {
    let map: serde_json::Map<String, Value> = uses
        .iter()
        .map(|(device, percent)| {
            let used = json!({"utilization_percent": percent, "memory_used_bytes": 1 << 30});
            (device.to_string(), used)
        })
        .collect();
    let written = file.with_extension("new");
    std::fs::write(&written, Value::Object(map).to_string()).unwrap();
    // Renamed into place: the agent never reads half a file.
    std::fs::rename(&written, file).unwrap();
}

#[tokio::test]
async fn a_session_idle_by_its_gpu_is_reaped_while_one_whose_gpu_is_busy_is_kept() {
    let h = start().await;
    let usage = data_dir().join("gpu-use.json");
    let _agent = gpu_agent(&h, Some(usage.clone())).await;
    h.set_group_idle_checks(
        "default",
        IdleChecks {
            utilization: Some(UtilizationCheck {
                grace_period_secs: 2,
                window_secs: 4,
                thresholds: Thresholds {
                    gpu_percent: Some(10.0),
                    ..Default::default()
                },
                combine: Combine::All,
            }),
            ..Default::default()
        },
    )
    .await;
    // Both sleep: only their GPUs tell them apart.
    let idle = create(&h, gpu_session(1.0)).await;
    let busy = create(&h, gpu_session(1.0)).await;
    h.wait_session(&idle, is("RUNNING")).await;
    h.wait_session(&busy, is("RUNNING")).await;
    let idle_env = gpu_environment(&h, &idle).await;
    let busy_env = gpu_environment(&h, &busy).await;
    let idle_device = value_of(&idle_env, "BERTH_GPU_DEVICES").unwrap();
    let busy_device = value_of(&busy_env, "BERTH_GPU_DEVICES").unwrap();
    assert_ne!(idle_device, busy_device);
    set_use(&usage, &[(idle_device, 0.0), (busy_device, 85.0)]);

    let ended = h
        .wait_session_within(&idle, Duration::from_secs(40), is("TERMINATED"))
        .await;
    let reason = ended["status_reason"].as_str().unwrap();
    assert!(reason.contains("utilization checker"), "{reason}");
    assert!(reason.contains("gpu_percent"), "{reason}");

    // The busy one has run past grace and window, measured busy, and is kept.
    let shown = wait_for(|| async {
        let (status, body) = h
            .get(&h.admin_key, &format!("/v1/sessions/{busy}/idle"))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let utilization = body["readings"]
            .as_array()?
            .iter()
            .find(|r| r["checker"] == "utilization")?
            .clone();
        utilization["measures"]
            .as_array()
            .is_some_and(|m| !m.is_empty())
            .then_some(utilization)
    })
    .await;
    assert_eq!(shown["fires"], false, "{shown}");
    let gpu = &shown["measures"][0];
    assert_eq!(gpu["name"], "gpu_percent", "{shown}");
    assert!(gpu["value"].as_f64().unwrap() > 80.0, "{shown}");
    // Its detail shows its GPU's use beside its CPU's: 85 %, 1 GiB of 16 used.
    let detail = wait_for(|| async {
        let (_, detail) = h.get(&h.admin_key, &format!("/v1/sessions/{busy}")).await;
        detail["usage"]["gpu_percent"]
            .as_f64()
            .is_some()
            .then_some(detail)
    })
    .await;
    assert_eq!(detail["status"], "RUNNING", "{detail}");
    assert_eq!(detail["usage"]["gpu_percent"], 85.0, "{detail}");
    assert_eq!(detail["usage"]["gpu_memory_percent"], 6.25, "{detail}");
    end(&h, &busy).await;
}
