//! `berth session` as kubectl and nomad users expect it, run as a person runs it against
//! `berth up` and a `berth agent` with real containers: `-o json` of every read command is
//! the API's own answer to the same request (and `-o yaml` the same document), tables for a
//! person, `session wait` and `session run` returning with a batch session's exit code (`run`
//! printing its output), `folder` moving a file in and out and sharing a folder, and a name
//! that two users' sessions share refused, listing them, even for a superadmin. PostgreSQL,
//! NATS and Docker are real.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;
use uuid::Uuid;

/// What one `berth` run ended with.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `berth ARGS` with `env` (at most 3 minutes: a hang fails the test, naming it).
fn cli(args: &[&str], env: &[(String, String)]) -> Ran {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run berth");
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out = read(Box::new(child.stdout.take().unwrap()));
    let err = read(Box::new(child.stderr.take().unwrap()));
    let mut polls = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        polls += 1;
        if polls > 9_000 {
            let _ = child.kill();
            panic!("`berth {}` did not end within 3 minutes", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// `key`'s environment for the CLI: the gateway at `listen`.
fn as_user(env: &[(String, String)], key: &str) -> Vec<(String, String)> {
    let mut env = env.to_vec();
    env.retain(|(k, _)| k != "BERTH_API_KEY");
    env.push(("BERTH_API_KEY".into(), key.into()));
    env
}

/// What changes between two reads on its own (how long ago an agent was heard): left out of
/// both sides of a comparison.
fn without_clock(mut v: Value) -> Value {
    for agent in v["agents"].as_array_mut().into_iter().flatten() {
        if let Some(agent) = agent.as_object_mut() {
            agent.remove("heartbeat_age_secs");
        }
    }
    v
}

struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    async fn get(&self, key: &str, path: &str) -> (reqwest::StatusCode, Value) {
        self.try_get(key, path).await.expect("the gateway answers")
    }

    async fn try_get(
        &self,
        key: &str,
        path: &str,
    ) -> reqwest::Result<(reqwest::StatusCode, Value)> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header("x-api-key", key)
            .send()
            .await?;
        let status = response.status();
        Ok((status, response.json().await.unwrap_or(Value::Null)))
    }
}

fn log_of(dir: &Path) -> String {
    ["up.log", "agent.log"]
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            format!("--- {name}\n{text}")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_prints_the_apis_answers_waits_for_exit_codes_and_refuses_a_shared_name() {
    let (pool, url) = fresh_database().await;
    let admin_key = init_install(&url);
    let id = Uuid::new_v4().simple().to_string();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut env = bus_env("o", &id);
    env.extend(
        [
            ("BERTH_DATABASE_URL", url.clone()),
            ("BERTH_GATEWAY_LISTEN", listen.clone()),
            ("BERTH_GATEWAY_URL", format!("http://{listen}")),
            ("BERTH_API_KEY", admin_key.clone()),
            ("BERTH_SCHEDULER_INTERVAL_MS", "200".into()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let logs = tempdir("berth-cli-output");
    // One host: the gateway serves the files of the agent's data directory (host-local).
    let data = logs.join("data");
    std::fs::create_dir_all(&data).unwrap();
    env.push(("BERTH_AGENT_DATA".into(), data.to_str().unwrap().into()));
    let _up = BerthProcess::start(&["up"], &env, &logs.join("up.log"));
    let agent_id = format!("cli{}", &id[..8]);
    // Dropped after the agent process (declared before it), so nothing it started survives.
    let _containers = RemovesContainersOf(agent_id.clone());
    let credential = logs.join("credential");
    admit_agent(
        &AdminGateway::with_key(&url, &admin_key),
        &agent_id,
        &credential,
        &[],
    );
    let mut agent_env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| match k.as_str() {
            "BERTH_DATABASE_URL" => (k.clone(), NO_DATABASE.to_owned()),
            "BERTH_NATS_URL" => (k.clone(), without_user(v)),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    agent_env.push((
        "BERTH_AGENT_CREDENTIAL".into(),
        credential.to_str().unwrap().into(),
    ));
    let _agent = BerthProcess::start(
        &[
            "agent",
            "--id",
            &agent_id,
            "--cpu",
            "2",
            "--memory-gib",
            "2",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &agent_env,
        &logs.join("agent.log"),
    );
    events::tls::use_ring();
    let api = Api {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
        base: format!("http://{listen}"),
    };
    let mut ready = false;
    for _ in 0..600 {
        if let Ok((status, r)) = api.try_get(&admin_key, "/v1/resources").await {
            if status.is_success() && r["group"]["agents"] == 1 {
                ready = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(ready, "the agent never joined:\n{}", log_of(&logs));
    let (_, bob_key) = launcher::access::create_user(
        &pool,
        "bob@example.com",
        events::payloads::Role::User,
        "default",
        &["default".into()],
    )
    .await
    .unwrap();

    // A batch session that fails with exit code 3: `wait` exits with it.
    let ran = cli(
        &[
            "session",
            "create",
            "--type",
            "batch",
            "--name",
            "exit3",
            "--image",
            "berth/shell:latest",
            "--cpu",
            "0.5",
            "--memory",
            "128m",
            "--command",
            "echo about to fail; exit 3",
        ],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}{}", ran.stdout, ran.stderr);
    let batch = ran.stdout.split_whitespace().next().unwrap().to_owned();
    // By id: the list a name is looked up in may not show a session created an instant ago.
    let waited = cli(&["session", "wait", &batch], &env);
    assert_eq!(
        waited.code,
        Some(3),
        "{}{}\n{}",
        waited.stdout,
        waited.stderr,
        log_of(&logs)
    );
    assert!(waited.stderr.contains("exit code 3"), "{}", waited.stderr);
    let by_name = cli(&["session", "wait", "exit3"], &env);
    assert_eq!(by_name.code, Some(3), "{}", by_name.stderr);
    let (_, detail) = api.get(&admin_key, &format!("/v1/sessions/{batch}")).await;
    assert_eq!(
        (&detail["status"], &detail["exit_code"]),
        (&Value::from("TERMINATED"), &Value::from(3))
    );
    // Waiting for a status the session ended without reaching fails, saying so.
    let missed = cli(&["session", "wait", &batch, "--for", "restarting"], &env);
    assert_eq!(missed.code, Some(1), "{}", missed.stderr);
    assert!(
        missed.stderr.contains("without reaching RESTARTING"),
        "{}",
        missed.stderr
    );
    let refused = cli(&["session", "wait", &batch, "--for", "done"], &env);
    assert!(
        refused.code != Some(0) && refused.stderr.contains("--for done"),
        "{}",
        refused.stderr
    );

    // Every read command's `-o json` is the API's answer to the same request, and its
    // `-o yaml` the same document; the tables print for a person.
    let reads: Vec<(Vec<&str>, String)> = vec![
        (vec!["ls"], "/v1/sessions?limit=50".into()),
        (
            vec!["ls", "--state", "finished", "--type", "batch"],
            "/v1/sessions?limit=50&type=batch&state=finished".into(),
        ),
        (vec!["info", "exit3"], format!("/v1/sessions/{batch}")),
        (vec!["show", &batch], format!("/v1/sessions/{batch}")),
        (
            vec!["history", "exit3"],
            format!("/v1/sessions/{batch}/history"),
        ),
        (vec!["logs", "exit3"], format!("/v1/sessions/{batch}/logs")),
        (
            vec!["app", "list", "exit3"],
            format!("/v1/sessions/{batch}/apps"),
        ),
        (vec!["images"], "/v1/images".into()),
        (vec!["environments"], "/v1/environments".into()),
        (
            vec!["environments", "--group", "default"],
            "/v1/environments?resource_group=default".into(),
        ),
        (vec!["groups"], "/v1/resource-groups".into()),
        (vec!["agents"], "/v1/agents".into()),
        (vec!["launches"], "/v1/launches".into()),
        (vec!["queue"], "/v1/queue".into()),
        (vec!["notifications"], "/v1/notifications?limit=50".into()),
    ];
    for (args, path) in &reads {
        let mut command = vec!["session"];
        command.extend(args);
        for format in ["json", "yaml"] {
            let mut command = command.clone();
            command.extend(["-o", format]);
            // The API read before and after the CLI's, until both agree: a notice arriving
            // between them is not the CLI's doing.
            let mut agreed = None;
            for _ in 0..10 {
                let (status, before) = api.get(&admin_key, path).await;
                let ran = cli(&command, &env);
                let (_, after) = api.get(&admin_key, path).await;
                if without_clock(before.clone()) == without_clock(after) {
                    agreed = Some((status, before, ran));
                    break;
                }
            }
            let (status, answer, ran) =
                agreed.unwrap_or_else(|| panic!("GET {path} never settled"));
            if !status.is_success() {
                assert_ne!(ran.code, Some(0), "{command:?} when the API says {answer}");
                continue;
            }
            assert_eq!(ran.code, Some(0), "{command:?}: {}", ran.stderr);
            let printed: Value = if format == "json" {
                serde_json::from_str(&ran.stdout)
                    .unwrap_or_else(|e| panic!("{command:?} printed no JSON ({e}): {}", ran.stdout))
            } else {
                serde_norway::from_str(&ran.stdout)
                    .unwrap_or_else(|e| panic!("{command:?} printed no YAML ({e}): {}", ran.stdout))
            };
            assert_eq!(
                without_clock(printed),
                without_clock(answer),
                "{command:?} against GET {path}"
            );
        }
        command.extend(["-o", "table"]);
        for table in ["table", "wide"] {
            *command.last_mut().unwrap() = table;
            let ran = cli(&command, &env);
            assert_eq!(ran.code, Some(0), "{command:?}: {}", ran.stderr);
            assert!(
                !ran.stdout.contains('\u{1b}'),
                "no colour off a terminal: {command:?}: {}",
                ran.stdout
            );
        }
    }
    let table = cli(&["session", "ls"], &env).stdout;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["ID", "NAME", "TYPE", "STATUS", "AGENT", "OWNER"]);
    assert!(
        table.contains("exit3") && table.contains("TERMINATED") && table.contains("1 of 1"),
        "{table}"
    );
    let wide = cli(&["session", "ls", "-o", "wide"], &env).stdout;
    assert!(
        wide.contains("IMAGE") && wide.contains("berth/shell:latest"),
        "{wide}"
    );
    let logs_text = cli(&["session", "logs", "exit3"], &env).stdout;
    assert!(logs_text.contains("about to fail"), "{logs_text}");
    // The old spelling still works.
    let old = cli(&["session", "ls", "--output", "json"], &env);
    assert_eq!(old.code, Some(0), "{}", old.stderr);
    let completion = cli(&["completion", "bash"], &env);
    assert!(
        completion.code == Some(0)
            && completion
                .stdout
                .contains("berth__subcmd__session__subcmd__wait"),
        "{}",
        completion.stderr
    );

    // Two users' sessions named `twin`: the superadmin, who sees both, is refused and shown
    // both; Bob, who sees only his own, reaches it.
    let mut twins = Vec::new();
    for owner in [None, Some("bob@example.com")] {
        let mut args = vec![
            "session",
            "create",
            "--name",
            "twin",
            "--image",
            "berth/shell:latest",
            "--cpu",
            "0.25",
            "--memory",
            "64m",
        ];
        if let Some(owner) = owner {
            args.extend(["--owner", owner]);
        }
        let ran = cli(&args, &env);
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        twins.push(ran.stdout.split_whitespace().next().unwrap().to_owned());
    }
    // The list is the sessions view, which follows the log a moment behind a create (more
    // under a loaded run): wait, bounded, for both creates to reach it.
    let mut both = Value::Null;
    for _ in 0..100 {
        both = api.get(&admin_key, "/v1/sessions?name=twin").await.1;
        if both["total"] == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(both["total"], 2, "{both}");
    let (_, his) = api.get(&bob_key, "/v1/sessions?name=twin").await;
    assert_eq!(his["total"], 1, "{his}");
    assert_eq!(his["sessions"][0]["session_id"], twins[1].as_str());
    for command in [
        vec!["session", "rm", "twin"],
        vec!["session", "info", "twin"],
        vec!["session", "wait", "twin"],
    ] {
        let ran = cli(&command, &env);
        assert_eq!(ran.code, Some(1), "{command:?}: {}", ran.stdout);
        for (twin, owner) in twins.iter().zip(["admin@berth.local", "bob@example.com"]) {
            assert!(
                ran.stderr.contains(twin.as_str()) && ran.stderr.contains(owner),
                "{command:?} lists {twin} of {owner}: {}",
                ran.stderr
            );
        }
    }
    for twin in &twins {
        let (_, detail) = api.get(&admin_key, &format!("/v1/sessions/{twin}")).await;
        assert_eq!(
            detail["termination_requested"], false,
            "nothing was removed on a guess: {detail}"
        );
    }
    let bob = as_user(&env, &bob_key);
    let ran = cli(&["session", "rm", "twin", "--force"], &bob);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout.contains(&twins[1]),
        "Bob's own twin: {}",
        ran.stdout
    );
    // Bob's has gone from the live ones: the name is the superadmin's alone again.
    let ran = cli(&["session", "wait", &twins[1], "--for", "terminated"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["session", "rm", "twin", "--force"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(ran.stdout.contains(&twins[0]), "{}", ran.stdout);
    let ran = cli(
        &[
            "session",
            "wait",
            "--timeout",
            "120",
            &twins[0],
            "--for",
            "terminated",
        ],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);

    // `run`: a batch session of the command, its output printed as it comes, its exit code
    // this command's own.
    let ran = cli(
        &[
            "session",
            "run",
            "berth/shell:latest",
            "--cpu",
            "0.5",
            "--memory",
            "128m",
            "--",
            "sh",
            "-c",
            "echo hi; exit 3",
        ],
        &env,
    );
    assert_eq!(ran.code, Some(3), "{}{}", ran.stdout, ran.stderr);
    assert_eq!(ran.stdout.trim(), "hi", "{}", ran.stderr);

    // `folder`: a folder made, a file uploaded to it, listed, downloaded the same, removed.
    let ran = cli(&["folder", "create", "stuff"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let local = logs.join("numbers.txt");
    let numbers: String = (1..=5000).map(|n| format!("{n}\n")).collect();
    std::fs::write(&local, &numbers).unwrap();
    let ran = cli(
        &[
            "folder",
            "upload",
            "stuff",
            local.to_str().unwrap(),
            "in/numbers.txt",
        ],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["folder", "files", "stuff", "in"], &env);
    assert!(
        ran.stdout.contains("numbers.txt") && ran.stdout.contains(&numbers.len().to_string()),
        "{}{}",
        ran.stdout,
        ran.stderr
    );
    let back = logs.join("back.txt");
    let ran = cli(
        &[
            "folder",
            "download",
            "stuff",
            "in/numbers.txt",
            "-O",
            back.to_str().unwrap(),
        ],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(std::fs::read_to_string(&back).unwrap(), numbers);
    let ran = cli(&["folder", "download", "stuff", "../up.log"], &env);
    assert_ne!(ran.code, Some(0));
    assert!(ran.stderr.contains("path"), "{}", ran.stderr);
    // Shared read-only with bob: both lists say so, and his upload is refused.
    let ran = cli(
        &["folder", "share", "stuff", "--user", "bob@example.com"],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert!(
        ran.stdout.contains("user bob@example.com (ro)"),
        "{}",
        ran.stdout
    );
    let ran = cli(&["folder", "ls"], &env);
    assert!(
        ran.stdout.contains("user bob@example.com (ro)"),
        "{}",
        ran.stdout
    );
    let ran = cli(&["folder", "ls"], &bob);
    assert!(
        ran.stdout.contains("stuff") && ran.stdout.contains("(from admin@berth.local)"),
        "{}",
        ran.stdout
    );
    let ran = cli(
        &["folder", "upload", "stuff", local.to_str().unwrap()],
        &bob,
    );
    assert_ne!(ran.code, Some(0));
    assert!(ran.stderr.contains("read-only"), "{}", ran.stderr);
    let ran = cli(
        &["folder", "unshare", "stuff", "--user", "bob@example.com"],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["folder", "ls"], &bob);
    assert!(!ran.stdout.contains("stuff"), "{}", ran.stdout);
    let ran = cli(
        &["folder", "mv", "stuff", "in/numbers.txt", "kept/n.txt"],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["folder", "rm", "stuff", "in"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["folder", "files", "stuff"], &env);
    assert!(
        !ran.stdout.contains(" in\n") && ran.stdout.contains("kept"),
        "{}",
        ran.stdout
    );
    // The folder's life: renamed, to the trash (listed so, its files refused), restored,
    // and purged from the trash.
    let ran = cli(&["folder", "rename", "stuff", "things"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["folder", "trash", "things"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["folder", "ls"], &env);
    assert!(ran.stdout.contains("in trash"), "{}", ran.stdout);
    let ran = cli(&["folder", "files", "things"], &env);
    assert_ne!(ran.code, Some(0));
    assert!(ran.stderr.contains("trash"), "{}", ran.stderr);
    let ran = cli(&["folder", "restore", "things"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["folder", "files", "things", "kept"], &env);
    assert!(ran.stdout.contains("n.txt"), "{}{}", ran.stdout, ran.stderr);
    let ran = cli(&["folder", "clone", "things", "twin"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["folder", "files", "twin", "kept"], &env);
    assert!(ran.stdout.contains("n.txt"), "{}{}", ran.stdout, ran.stderr);
    for step in ["trash", "purge"] {
        let ran = cli(&["folder", step, "things"], &env);
        assert_eq!(ran.code, Some(0), "{step}: {}", ran.stderr);
    }
    let ran = cli(&["folder", "ls"], &env);
    assert!(!ran.stdout.contains("things"), "{}", ran.stdout);

    // `cp`: a file and a directory into a running interactive session, and back out whole.
    let ran = cli(
        &[
            "session",
            "create",
            "--name",
            "copier",
            "--image",
            "berth/shell:latest",
            "--cpu",
            "0.25",
            "--memory",
            "64m",
        ],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["session", "wait", "copier", "--for", "running"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let tree = logs.join("tree");
    std::fs::create_dir_all(tree.join("deep")).unwrap();
    std::fs::write(tree.join("deep/leaf.txt"), "leaf\n").unwrap();
    let ran = cli(
        &["session", "cp", local.to_str().unwrap(), "copier:in.txt"],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}{}", ran.stdout, ran.stderr);
    let ran = cli(
        &["session", "cp", tree.to_str().unwrap(), "copier:/tmp"],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}{}", ran.stdout, ran.stderr);
    let out = logs.join("out.txt");
    let ran = cli(
        &["session", "cp", "copier:in.txt", out.to_str().unwrap()],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}{}", ran.stdout, ran.stderr);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), numbers);
    let back = logs.join("back");
    std::fs::create_dir_all(&back).unwrap();
    let ran = cli(
        &["session", "cp", "copier:/tmp/tree", back.to_str().unwrap()],
        &env,
    );
    assert_eq!(ran.code, Some(0), "{}{}", ran.stdout, ran.stderr);
    assert_eq!(
        std::fs::read_to_string(back.join("tree/deep/leaf.txt")).unwrap(),
        "leaf\n"
    );
    let ran = cli(
        &["session", "cp", "copier:/no/such", out.to_str().unwrap()],
        &env,
    );
    assert_ne!(ran.code, Some(0));
    assert!(ran.stderr.contains("path"), "{}", ran.stderr);
    // `exec`: a command in the session, its output and exit code this command's.
    let ran = cli(
        &[
            "session",
            "exec",
            "copier",
            "--",
            "sh",
            "-c",
            "wc -l < in.txt; echo to stderr >&2; exit 5",
        ],
        &env,
    );
    assert_eq!(ran.code, Some(5), "{}{}", ran.stdout, ran.stderr);
    assert_eq!(ran.stdout.trim(), "5000", "{}", ran.stderr);
    assert!(ran.stderr.contains("to stderr"), "{}", ran.stderr);
    let ran = cli(&["session", "rm", "copier", "--force"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);

    // An upload session: started from a folder, reached by Debian's `sftp` with the session's
    // key through the proxy's tunnel, a file put into the folder and got back; listed as a
    // system session (the console's Upload Sessions), which a user cannot start directly; it
    // ends by itself once idle.
    let ran = cli(&["folder", "create", "inbox"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let ran = cli(&["folder", "sftp", "inbox", "--idle-timeout", "9"], &env);
    assert_ne!(ran.code, Some(0), "below the least timeout");
    assert!(ran.stderr.contains("idle_timeout_secs"), "{}", ran.stderr);
    let ran = cli(&["folder", "sftp", "inbox", "--idle-timeout", "20"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let upload = ran.stdout.trim().to_owned();
    assert!(ran.stderr.contains("sftp -i"), "{}", ran.stderr);
    let ran = cli(&["session", "wait", &upload, "--for", "running"], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let (_, system) = api.get(&admin_key, "/v1/sessions?type=system").await;
    assert_eq!(
        system["sessions"][0]["session_id"],
        upload.as_str(),
        "{system}"
    );
    let ran = cli(&["session", "ssh-key", &upload], &env);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let key = logs.join("id_upload");
    std::fs::write(&key, &ran.stdout).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let batch = logs.join("sftp.batch");
    let back = logs.join("got.txt");
    std::fs::write(
        &batch,
        format!(
            "put {} /home/work/inbox/up.txt\nget /home/work/inbox/up.txt {}\n",
            local.display(),
            back.display()
        ),
    )
    .unwrap();
    let proxy = format!(
        "ProxyCommand={} session app tunnel {upload} sshd --stdio",
        env!("CARGO_BIN_EXE_berth")
    );
    let sftp = Command::new("sftp")
        .args(["-b", batch.to_str().unwrap(), "-i", key.to_str().unwrap()])
        .args(["-o", &proxy, "-o", "StrictHostKeyChecking=no"])
        .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes"])
        .arg(format!("work@{upload}"))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .expect("Debian's sftp runs");
    assert!(
        sftp.status.success(),
        "{}{}",
        String::from_utf8_lossy(&sftp.stdout),
        String::from_utf8_lossy(&sftp.stderr)
    );
    assert_eq!(std::fs::read_to_string(&back).unwrap(), numbers);
    let ran = cli(&["folder", "files", "inbox"], &env);
    assert!(
        ran.stdout.contains("up.txt"),
        "{}{}",
        ran.stdout,
        ran.stderr
    );
    let ran = cli(
        &[
            "session",
            "create",
            "--type",
            "system",
            "--image",
            "berth/sftp:latest",
        ],
        &bob,
    );
    assert_ne!(ran.code, Some(0));
    assert!(ran.stderr.contains("system"), "{}", ran.stderr);
    // Nobody sends it a byte now: the idle-reaper ends it after 20 s without traffic.
    let ran = cli(&["session", "wait", &upload, "--timeout", "240"], &env);
    assert_eq!(ran.code, Some(0), "{}{}", ran.stdout, ran.stderr);
    let (_, ended) = api.get(&admin_key, &format!("/v1/sessions/{upload}")).await;
    let reason = ended["status_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("network_idle checker"), "{ended}");
    let _ = std::fs::remove_dir_all(&logs);
}
