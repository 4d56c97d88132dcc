//! The control plane as processes, the two ways an operator runs it: `berth up` alone, and
//! each part as its own process (`berth relay`, `berth projections`, `berth scheduler`,
//! `berth reconciler`, `berth recorder`, `berth gateway`). Either way, with a `berth agent`
//! running real containers and reaching only NATS (its database URL points nowhere), the README's batch session goes from `berth session create` to TERMINATED,
//! with its output kept and its memory limit real. PostgreSQL, NATS and Docker are real.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use uuid::Uuid;

/// Processes started by a test, killed when it ends however it ends.
struct Processes {
    children: Vec<(String, Child)>,
    logs: PathBuf,
}

impl Processes {
    /// Starts `berth ARGS` with `env`, its output appended to a log named after `name`.
    fn spawn(&mut self, name: &str, args: &[&str], env: &[(String, String)]) {
        let log = std::fs::File::create(self.logs.join(format!("{name}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start berth");
        self.children.push((name.to_owned(), child));
    }

    /// Fails the test, with the process's log, if any process has exited.
    fn assert_running(&mut self) {
        for (name, child) in &mut self.children {
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(self.logs.join(format!("{name}.log")));
                panic!(
                    "`berth {name}` exited ({status}):\n{}",
                    log.unwrap_or_default()
                );
            }
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs the README's batch session through the gateway of processes started as `commands`
/// (each a `berth` subcommand), with an agent; checks it ends TERMINATED with its output.
async fn batch_session_end_to_end(commands: &[&str]) {
    let (_pool, url) = fresh_database().await;
    let key = init_install(&url);
    let admin = AdminGateway::with_key(&url, &key);
    let id = Uuid::new_v4().simple().to_string();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut env = bus_env("p", &id);
    let more: Vec<(String, String)> = [
        ("BERTH_DATABASE_URL", url.clone()),
        ("BERTH_GATEWAY_LISTEN", listen.clone()),
        ("BERTH_GATEWAY_URL", format!("http://{listen}")),
        ("BERTH_API_KEY", key),
        ("BERTH_SCHEDULER_INTERVAL_MS", "200".into()),
    ]
    .map(|(k, v)| (k.to_owned(), v))
    .into();
    env.extend(more);
    let logs = std::env::temp_dir().join(format!("berth-processes-{id}"));
    std::fs::create_dir_all(&logs).unwrap();
    let mut processes = Processes {
        children: Vec::new(),
        logs: logs.clone(),
    };
    for command in commands {
        processes.spawn(command, &[command], &env);
    }
    let data = logs.join("data");
    let agent_id = format!("proc{}", &id[..8]);
    let credential = logs.join("credential");
    admit_agent(&admin, &agent_id, &credential, &[]);
    let mut agent_env = env.clone();
    for (name, value) in &mut agent_env {
        if name == "BERTH_DATABASE_URL" {
            *value = NO_DATABASE.into();
        }
        if name == "BERTH_NATS_URL" {
            *value = without_user(value);
        }
    }
    agent_env.push((
        "BERTH_AGENT_CREDENTIAL".into(),
        credential.to_str().unwrap().into(),
    ));
    processes.spawn(
        "agent",
        &[
            "agent",
            "--id",
            &agent_id,
            "--cpu",
            "2",
            "--memory-gib",
            "2",
            "--data-dir",
        ]
        .into_iter()
        .chain([data.to_str().unwrap()])
        .collect::<Vec<_>>(),
        &agent_env,
    );

    events::tls::use_ring();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let api_key = env
        .iter()
        .find(|(k, _)| k == "BERTH_API_KEY")
        .unwrap()
        .1
        .clone();
    let get = |path: String| {
        let (http, api_key, listen) = (http.clone(), api_key.clone(), listen.clone());
        async move {
            let response = http
                .get(format!("http://{listen}{path}"))
                .header("x-api-key", api_key)
                .send()
                .await
                .ok()?;
            response.status().is_success().then_some(())?;
            response.json::<Value>().await.ok()
        }
    };
    let mut ready = false;
    for _ in 0..300 {
        processes.assert_running();
        let agents = get("/v1/resources".into()).await;
        if agents.is_some_and(|r| r["group"]["agents"].as_i64() == Some(1)) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        ready,
        "the gateway never saw the agent (logs in {})",
        logs.display()
    );

    let (ok, text) = berth_with(
        &[
            "session", "create", "--type", "batch", "--image", "berth/shell:latest", "--cpu", "1",
            "--memory", "256m", "--command",
            "echo hello from berth; cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
        ],
        &env,
    );
    assert!(ok, "{text}");
    let session = text
        .split_whitespace()
        .next()
        .expect("the session id")
        .to_owned();
    Uuid::parse_str(&session).unwrap_or_else(|_| panic!("not a session id: {text}"));

    let mut detail = Value::Null;
    for _ in 0..600 {
        processes.assert_running();
        if let Some(d) = get(format!("/v1/sessions/{session}")).await {
            let status = d["status"].as_str().unwrap_or_default().to_owned();
            detail = d;
            if ["TERMINATED", "ERROR", "CANCELLED"].contains(&status.as_str()) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(detail["status"], "TERMINATED", "{detail:#}");
    assert_eq!(detail["exit_code"], 0, "{detail:#}");
    let logs_body = get(format!("/v1/sessions/{session}/logs"))
        .await
        .expect("the logs answer");
    let output = logs_body["kernels"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(output.contains("hello from berth"), "{logs_body:#}");
    assert!(
        output.contains("268435456"),
        "the memory limit is real: {logs_body:#}"
    );

    // The CLI's read commands: a summary for a person, or the API's JSON.
    let (ok, text) = berth_with(&["session", "info", &session], &env);
    assert!(ok, "{text}");
    assert!(
        text.contains("status     TERMINATED (the startup command succeeded"),
        "{text}"
    );
    assert!(text.contains("exit code  0"), "{text}");
    let (ok, text) = berth_with(&["session", "info", "--output", "json", &session], &env);
    assert!(ok, "{text}");
    let json: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(json["status"], "TERMINATED");
    let (ok, text) = berth_with(&["session", "ls", "--output", "json"], &env);
    assert!(ok, "{text}");
    let list: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(list["total"], 1, "{list}");
    let (ok, text) = berth_with(&["session", "history", &session], &env);
    assert!(ok && text.contains("SUCCESS"), "{text}");

    // What a launch may choose from, and what was launched, as the console shows them.
    let json_of = |args: &[&str]| {
        let (ok, text) = berth_with(args, &env);
        assert!(ok, "{args:?}: {text}");
        serde_json::from_str::<Value>(&text).unwrap_or_else(|_| panic!("{args:?}: {text}"))
    };
    let groups = json_of(&["session", "groups", "-o", "json"]);
    assert_eq!(groups["resource_groups"][0]["name"], "default", "{groups}");
    let agents = json_of(&["session", "agents", "--group", "default", "-o", "json"]);
    assert_eq!(
        agents["agents"].as_array().map(Vec::len),
        Some(1),
        "{agents}"
    );
    let environments = json_of(&["session", "environments", "-o", "json"]);
    assert!(
        environments.to_string().contains("berth/shell:latest"),
        "{environments}"
    );
    let launches = json_of(&["session", "launches", "-o", "json"]);
    let launch = launches["launches"][0]["launch_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        launches["launches"][0]["request"]["image"],
        "berth/shell:latest"
    );
    let pinned = json_of(&[
        "session", "launch", &launch, "--label", "readme", "--pinned", "true",
    ]);
    assert_eq!(
        (&pinned["label"], &pinned["pinned"]),
        (&json!("readme"), &json!(true))
    );
    let queue = json_of(&["session", "queue", "-o", "json"]);
    assert!(queue["resource_groups"].is_array(), "{queue}");
    // A password for the console, from the environment, never a flag.
    let mut with_password = env.clone();
    with_password.push(("BERTH_NEW_PASSWORD".into(), "correct horse".into()));
    let (ok, text) = berth_with(&["session", "password"], &with_password);
    assert!(ok && text.contains("password is set"), "{text}");
    let whoami = get("/v1/whoami".into()).await.expect("whoami answers");
    assert_eq!(whoami["password_set"], true, "{whoami}");
    let (ok, text) = berth_with(&["session", "password"], &with_password);
    assert!(
        !ok && text.contains("current"),
        "the current one is asked for now: {text}"
    );
    drop(processes);
    remove_dir(&logs);
}

fn remove_dir(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread")]
async fn berth_up_and_an_agent_run_the_readme_batch_session() {
    batch_session_end_to_end(&["up"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_part_as_its_own_process_runs_the_readme_batch_session() {
    batch_session_end_to_end(&[
        "relay",
        "projections",
        "scheduler",
        "reconciler",
        "recorder",
        "gateway",
    ])
    .await;
}
