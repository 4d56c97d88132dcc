//! Containers fenced (S3, S4, S5, S6): reserved variables refused, a network per session
//! with no route to other tenants or the host, hardening, and pids and log caps.

use crate::common::*;
use crate::containers::{local_agent, logs, run_as, run_to_end};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

// Containers fenced (S3, S4, S5, S6)

/// A policy `name` with container bounds `fence` (its other limits generous), and a user
/// bound by it: their key.
async fn fenced_user(h: &Harness, name: &str, fence: Value) -> String {
    let mut limits = json!({"max_concurrent_sessions": 10,
        "max_total": {"cpu": 8, "memory_bytes": 8u64 << 30}});
    limits
        .as_object_mut()
        .unwrap()
        .extend(fence.as_object().unwrap().clone());
    let (status, answer) = h
        .call(
            &h.admin_key,
            Method::PUT,
            &format!("/v1/admin/policies/{name}"),
            Some(limits),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    let email = format!("{name}@fence.test");
    let (status, answer) = h
        .post(
            &h.admin_key,
            "/v1/admin/users",
            json!({"email": email, "resource_policy": name}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    answer["api_key"].as_str().unwrap().to_owned()
}

fn shell_batch(command: &str) -> Value {
    json!({"type": "batch", "image": "berth/shell:latest", "startup_command": command,
           "resources": {"cpu": 0.5, "memory": "128m"}})
}

#[tokio::test]
async fn a_request_setting_a_gpu_or_berth_variable_is_refused_naming_it() {
    let h = start().await;
    for variable in [
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "CUDA_VISIBLE_DEVICES",
        "BERTH_SESSION_ID",
    ] {
        let mut body = shell_batch("true");
        body["environment"] = json!({ variable: "all" });
        let (status, answer) = h.create(&h.admin_key, body).await;
        assert!(status.is_client_error(), "{variable}: {status} {answer}");
        assert!(
            answer
                .to_string()
                .contains(&format!("environment.{variable}")),
            "the answer names {variable}: {answer}"
        );
    }
}

#[tokio::test]
async fn a_session_reaches_no_other_tenants_container_nor_the_hosts_ports_nor_the_metadata_address()
{
    let h = start().await;
    let _agent = local_agent(&h).await;
    let bob = fenced_user(&h, "bobfence", json!({"max_pids": 256})).await;
    let alice = h.user("alice@fence.test").await;
    // A port of the host's own on every interface: Docker's bridges alone let containers
    // reach it through their gateway.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let host_port = listener.local_addr().unwrap().port();
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = reached.clone();
    let accepting = tokio::spawn(async move {
        while listener.accept().await.is_ok() {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let database_port = std::env::var("BERTH_DATABASE_URL")
        .ok()
        .and_then(|url| {
            let after_at = url.rsplit_once('@')?.1.to_owned();
            let host_port = after_at.split('/').next()?.to_owned();
            host_port.rsplit_once(':')?.1.parse::<u16>().ok()
        })
        .unwrap_or(5432);

    // Bob serves on a port of his container.
    let (status, created) = h
        .create(
            &bob,
            json!({"type": "interactive", "image": "berth/shell:latest",
                   "resources": {"cpu": 0.5, "memory": "128m"}, "preopen_ports": [8080],
                   "startup_command": "echo bobs > index.html && httpd -f -p 8080"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let bob_id = ids(&created)[0].clone();
    h.wait_session(&bob_id, |s| s["status"] == "RUNNING").await;
    let docker = agent::docker::connect().await.unwrap();
    let bob_container = format!(
        "berth-{}-0",
        uuid::Uuid::parse_str(&bob_id).unwrap().simple()
    );
    let inspected = docker
        .inspect_container(&bob_container, None)
        .await
        .unwrap();
    let networks = inspected
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.clone())
        .unwrap_or_default();
    // One network: the session's own, or a spare bridge the agent made ahead, which its
    // container's label names.
    assert_eq!(
        networks.len(),
        1,
        "a single kernel on one network: {networks:?}"
    );
    let bob_network = networks.keys().next().unwrap().clone();
    let labels = inspected.config.as_ref().and_then(|c| c.labels.clone());
    assert_eq!(
        labels.unwrap_or_default().get("ai.berth.network"),
        Some(&bob_network)
    );
    let bob_ip = networks[&bob_network].ip_address.clone().unwrap();

    // The container's fence, as the engine holds it.
    let host = inspected.host_config.unwrap();
    let dropped = host.cap_drop.unwrap_or_default();
    assert!(dropped.contains(&"NET_RAW".to_string()), "{dropped:?}");
    assert!(dropped.contains(&"MKNOD".to_string()), "{dropped:?}");
    assert_eq!(host.security_opt, Some(vec!["no-new-privileges".into()]));
    assert_eq!(host.pids_limit, Some(256), "Bob's policy's max_pids");
    assert_eq!(host.ipc_mode.as_deref(), Some("private"));
    let log = host.log_config.unwrap();
    assert_eq!(log.typ.as_deref(), Some("json-file"));
    assert!(log.config.unwrap().contains_key("max-size"));
    let env = inspected.config.unwrap().env.unwrap_or_default();
    assert!(
        env.contains(&"NVIDIA_VISIBLE_DEVICES=void".to_string()),
        "no device, none seen: {env:?}"
    );
    let network = docker
        .inspect_network::<String>(&bob_network, None)
        .await
        .unwrap();
    let options = network.options.unwrap_or_default();
    assert_eq!(
        options.get("com.docker.network.bridge.enable_icc"),
        Some(&"false".to_string())
    );
    // A bridge the fence's rules match, and Bob's container alone on it.
    let bridge = options.get("com.docker.network.bridge.name").unwrap();
    assert!(
        bridge.starts_with(agent::docker::fence::BRIDGE_PREFIX),
        "{bridge}"
    );
    let on_it: Vec<_> = network.containers.unwrap_or_default().into_keys().collect();
    assert_eq!(
        on_it,
        [inspected.id.clone().unwrap()],
        "a network of its own"
    );

    // Alice tries Bob's port, the host's ports (PostgreSQL's and the listener's, through her
    // bridge's gateway), the metadata address, and a raw socket.
    let probe = |what: &str, target: &str| {
        format!("if nc -w 3 {target} </dev/null; then echo {what}=reached; else echo {what}=fenced; fi; ")
    };
    let command = format!(
        "gw=$(ip route | awk '/default/ {{print $3}}'); echo gateway=$gw; {}{}{}{}\
         ping -c 1 -W 1 $gw 2>&1 | tail -n 1; echo done",
        probe("tenant", &format!("{bob_ip} 8080")),
        probe("database", &format!("$gw {database_port}")),
        probe("host", &format!("$gw {host_port}")),
        probe("metadata", "169.254.169.254 80"),
    );
    let ended = run_as(&h, &alice, shell_batch(&command)).await;
    assert_eq!(ended["status"], "TERMINATED", "{ended}");
    let said = logs(&h, ended["session_id"].as_str().unwrap()).await;
    assert!(said.contains("done"), "{said}");
    for what in ["tenant", "database", "host", "metadata"] {
        assert!(said.contains(&format!("{what}=fenced")), "{what}: {said}");
    }
    assert!(said.contains("permission denied"), "no raw sockets: {said}");
    assert_eq!(
        reached.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no connection reached the host's listener"
    );
    accepting.abort();

    // Bob's own session still serves him (the fence is between tenants, not inside one):
    // from his own container.
    let exec = docker
        .create_exec(
            &bob_container,
            bollard::exec::CreateExecOptions::<String> {
                cmd: Some(vec![
                    "sh".into(),
                    "-c".into(),
                    "wget -q -O - http://127.0.0.1:8080/".into(),
                ]),
                attach_stdout: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut served = String::new();
    if let bollard::exec::StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&exec.id, None).await.unwrap()
    {
        use futures::StreamExt;
        while let Some(Ok(chunk)) = output.next().await {
            served.push_str(&chunk.to_string());
        }
    }
    assert!(served.contains("bobs"), "{served}");

    // Ended, the session takes its network with it.
    let (status, answer) = h.delete(&bob, &format!("/v1/sessions/{bob_id}")).await;
    assert!(status.is_success(), "{answer}");
    h.wait_session(&bob_id, |s| s["status"] == "TERMINATED")
        .await;
    wait_for(|| async {
        docker
            .inspect_network::<String>(&bob_network, None)
            .await
            .is_err()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_fork_bomb_hits_its_pids_limit_and_a_later_session_still_starts() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let key = fenced_user(&h, "bomber", json!({"max_pids": 64})).await;
    // Builtins only once the bomb is lit: a fork would fail like the bomb's.
    let command = "read max < /sys/fs/cgroup/pids/pids.max 2>/dev/null || read max < /sys/fs/cgroup/pids.max; \
        echo max=$max; bomb() { bomb | bomb & }; bomb; \
        i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; \
        read now < /sys/fs/cgroup/pids/pids.current 2>/dev/null || read now < /sys/fs/cgroup/pids.current; \
        echo current=$now";
    let mut body = shell_batch(command);
    body["batch_timeout"] = json!(60);
    let ended = run_as(&h, &key, body).await;
    let said = logs(&h, ended["session_id"].as_str().unwrap()).await;
    assert!(said.contains("max=64"), "{said}");
    let current: Option<u32> = said
        .lines()
        .find_map(|l| l.trim().strip_prefix("current=")?.parse().ok());
    assert!(
        said.contains("can't fork") || current.is_some_and(|c| c >= 60),
        "the bomb ran into its limit: {said}"
    );
    // The agent is still there for the next session.
    let later = run_to_end(&h, shell_batch("echo alive")).await;
    assert_eq!(later["status"], "TERMINATED", "{later}");
    assert!(logs(&h, later["session_id"].as_str().unwrap())
        .await
        .contains("alive"));
}

#[tokio::test]
async fn a_session_printing_without_end_keeps_its_log_within_the_cap_read_by_range() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let cap = 16u64 << 10;
    let key = fenced_user(&h, "talker", json!({"max_log_bytes": cap})).await;
    // Prints long lines until its batch timeout stops it.
    let mut body = shell_batch(
        "pad=$(printf '%0200d' 0); i=0; while :; do echo line-$pad-$i; i=$((i+1)); done",
    );
    body["batch_timeout"] = json!(4);
    let ended = run_as(&h, &key, body).await;
    let id = ended["session_id"].as_str().unwrap().to_owned();
    let (status, answer) = h.get(&key, &format!("/v1/sessions/{id}/logs")).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let kernel = &answer["kernels"][0];
    let content = kernel["content"].as_str().unwrap();
    let total = kernel["total_bytes"].as_i64().unwrap();
    assert!(
        content.len() as u64 <= cap,
        "{} bytes answered",
        content.len()
    );
    assert!(total as u64 > cap, "it printed more than its cap: {total}");
    assert!(
        kernel["kept_from"].as_i64().unwrap() > 0,
        "the oldest is gone"
    );
    assert!(content.trim_end().ends_with(|c: char| c.is_ascii_digit()));
    assert_eq!(
        kernel["offset"].as_i64().unwrap() + content.len() as i64,
        total,
        "the most recent bytes"
    );
    // What PostgreSQL holds of it: the cap and at most one chunk more.
    let client = h.pool.get().await.unwrap();
    let row = client
        .query_one(
            "SELECT coalesce(sum(octet_length(content)), 0)::int8 FROM recorder.session_log_chunks
             WHERE session_id = $1",
            &[&uuid::Uuid::parse_str(&id).unwrap()],
        )
        .await
        .unwrap();
    let stored: i64 = row.get(0);
    assert!(
        stored as u64 <= cap + bus::protocol::LogChunk::MOST_TEXT as u64,
        "{stored} bytes stored"
    );
    // A byte range of it.
    let from = kernel["kept_from"].as_i64().unwrap();
    let (status, ranged) = h
        .get(
            &key,
            &format!("/v1/sessions/{id}/logs?offset={from}&length=10"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{ranged}");
    let piece = &ranged["kernels"][0];
    assert_eq!(piece["offset"].as_i64(), Some(from));
    assert!(piece["content"].as_str().unwrap().len() <= 10, "{piece}");
    assert!(!piece["content"].as_str().unwrap().is_empty(), "{piece}");
}
