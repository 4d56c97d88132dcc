//! Backend.AI's own client, unchanged, drives berth: the `backend.ai` CLI and the Python SDK
//! of `backend-ai-client` 23.9.10 from PyPI (installed once under the target directory by
//! `berth::backendai_client`; an install that fails fails the test), against a control plane
//! and a Docker agent of the test's own. Each program runs in an empty working directory with
//! an empty home (the client reads a `.env` from where it runs) and nothing of the
//! environment but its endpoint and keypair.

use std::path::PathBuf;
use std::time::Duration;

use crate::common::*;
use crate::containers::{data_dir, local_agent};
use reqwest::StatusCode;
use serde_json::Value;

/// The image every session here runs.
const IMAGE: &str = "berth/shell:latest";

/// How long one run of the client may take (a blocking create waits for its session).
const PATIENCE: Duration = Duration::from_secs(120);

/// `backend.ai` of the shared install.
async fn installed() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("backendai-client-23.9.10");
    tokio::task::spawn_blocking(move || testkit::backendai_client::install(&dir))
        .await
        .unwrap()
        .expect("Backend.AI's client installs from PyPI")
}

/// The client as one user runs it.
struct Client {
    program: PathBuf,
    /// The working directory and home, empty.
    home: PathBuf,
    endpoint: String,
    access_key: String,
    secret_key: String,
}

/// What one run printed and how it exited.
struct Ran {
    code: i32,
    /// Standard output and standard error, in that order.
    out: String,
}

impl Ran {
    fn ok(self) -> Ran {
        assert_eq!(self.code, 0, "the client failed:\n{}", self.out);
        self
    }

    fn failed(self) -> Ran {
        assert_ne!(self.code, 0, "the client succeeded:\n{}", self.out);
        self
    }

    /// The session id the create command printed (`Session ID <id> is ...`).
    fn session_id(&self) -> String {
        let rest = self
            .out
            .split("Session ID ")
            .nth(1)
            .unwrap_or_else(|| panic!("no session id in:\n{}", self.out));
        rest.split_whitespace().next().unwrap().to_owned()
    }
}

impl Client {
    async fn new(h: &Harness, (access_key, secret_key): (String, String)) -> Client {
        Client {
            program: installed().await,
            home: data_dir(),
            endpoint: h.base.clone(),
            access_key,
            secret_key,
        }
    }

    fn command(&self, program: &std::path::Path) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(program);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .env("BACKEND_ENDPOINT", &self.endpoint)
            .env("BACKEND_ENDPOINT_TYPE", "api")
            .env("BACKEND_ACCESS_KEY", &self.access_key)
            .env("BACKEND_SECRET_KEY", &self.secret_key)
            .current_dir(&self.home)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        command
    }

    async fn wait(&self, mut command: tokio::process::Command, what: &str) -> Ran {
        let output = tokio::time::timeout(PATIENCE, command.output())
            .await
            .unwrap_or_else(|_| panic!("`{what}` did not end within {PATIENCE:?}"))
            .expect("the client runs");
        Ran {
            code: output.status.code().unwrap_or(-1),
            out: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    }

    /// `backend.ai ARGS...`.
    async fn run(&self, args: &[&str]) -> Ran {
        let mut command = self.command(&self.program);
        command.args(args);
        self.wait(command, &format!("backend.ai {}", args.join(" ")))
            .await
    }

    /// A Python script run by the install's interpreter (the SDK).
    async fn python(&self, script: &str) -> Ran {
        let mut command = self.command(&self.program.with_file_name("python3"));
        command.args(["-c", script]);
        self.wait(command, "python3 -c <sdk script>").await
    }
}

/// `create` arguments for a small session of `IMAGE`.
fn small<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["session", "create", "-r", "cpu=0.5", "-r", "mem=256m"];
    args.extend_from_slice(extra);
    args.push(IMAGE);
    args
}

fn ended(s: &Value) -> bool {
    matches!(
        s["status"].as_str(),
        Some("TERMINATED" | "ERROR" | "CANCELLED")
    )
}

#[tokio::test]
async fn the_cli_creates_lists_inspects_follows_renames_and_destroys_sessions() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let email = "alice@berth.test";
    let key = h.user(email).await;
    let cli = Client::new(&h, h.backendai_keypair(email).await).await;

    // Queued only: the create answers at once.
    let queued = cli
        .run(&small(&["--enqueue-only", "-t", "bai-queued"]))
        .await
        .ok();
    assert!(
        queued.out.contains("is enqueued for scheduling."),
        "{}",
        queued.out
    );
    let queued = queued.session_id();

    // With the client's own default name (`pysdk-...`), waiting until it runs.
    let ready = cli.run(&small(&[])).await.ok();
    assert!(ready.out.contains("is created and ready."), "{}", ready.out);
    let running = ready.session_id();
    let (status, detail) = h.get(&key, &format!("/v1/sessions/{running}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["status"], "RUNNING", "{detail}");
    let default_name = detail["name"].as_str().unwrap().to_owned();
    assert!(default_name.starts_with("pysdk-"), "{detail}");

    // Both are listed, in the table and as JSON.
    let table = cli.run(&["ps"]).await.ok();
    for name in ["bai-queued", default_name.as_str()] {
        assert!(table.out.contains(name), "{name} not in:\n{}", table.out);
    }
    let listed = cli.run(&["--output", "json", "ps"]).await.ok();
    let listed: Value = serde_json::from_str(&listed.out)
        .unwrap_or_else(|e| panic!("{e}: not JSON:\n{}", listed.out));
    let items = listed["items"].as_array().expect("items");
    let mine = items
        .iter()
        .find(|i| i["name"] == default_name.as_str())
        .unwrap_or_else(|| panic!("{default_name} not in {listed:#}"));
    assert_eq!(mine["status"], "RUNNING", "{listed:#}");
    assert!(
        items.iter().any(|i| i["name"] == "bai-queued"),
        "{listed:#}"
    );
    assert_eq!(listed["total_count"], 2, "{listed:#}");

    // Its detail by id.
    let info = cli.run(&["session", "info", &running]).await.ok();
    assert!(
        info.out.contains(&default_name) && info.out.contains("RUNNING"),
        "{}",
        info.out
    );

    // Renamed by the client, seen by berth's own API.
    cli.run(&["session", "rename", &default_name, "bai-renamed"])
        .await
        .ok();
    // (The detail is the read side's, which follows the log behind the cluster's horizon:
    // another test's open transaction may hold it back a moment.)
    wait_for(|| async {
        let (_, detail) = h.get(&key, &format!("/v1/sessions/{running}")).await;
        (detail["name"] == "bai-renamed").then_some(())
    })
    .await;

    // A batch session followed from its creation: the lifecycle, then the stream ends.
    let batch = cli
        .run(&small(&[
            "--enqueue-only",
            "--type",
            "batch",
            "-c",
            "sleep 1; echo hello from berth through backend.ai",
            "-t",
            "bai-batch",
        ]))
        .await
        .ok()
        .session_id();
    let events = cli.run(&["events", &batch]).await.ok();
    let names: Vec<&str> = events
        .out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for expected in [
        "session_enqueued",
        "session_scheduled",
        "kernel_started",
        "session_started",
        "kernel_terminated",
        "session_success",
        "session_terminated",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} not in:\n{}",
            events.out
        );
    }
    let position = |n: &str| names.iter().position(|x| *x == n).unwrap();
    assert!(position("session_enqueued") < position("session_started"));
    assert!(position("session_started") < position("session_terminated"));
    h.wait_session(&batch, ended).await;

    // Its output, by name, after it ended.
    let logs = cli.run(&["session", "logs", "bai-batch"]).await.ok();
    assert!(
        logs.out.contains("hello from berth through backend.ai"),
        "{}",
        logs.out
    );

    // Force-destroyed by name: terminated for berth too.
    cli.run(&["session", "rm", "-f", "bai-renamed"]).await.ok();
    let detail = h
        .wait_session(&running, |s| s["status"] == "TERMINATED")
        .await;
    assert!(
        detail["status_reason"]
            .as_str()
            .is_some_and(|r| r.contains(email)),
        "{detail}"
    );
    cli.run(&["session", "rm", "-f", &queued]).await.ok();
    h.wait_session(&queued, ended).await;
}

#[tokio::test]
async fn watch_exits_with_a_batch_session_s_exit_code_and_the_sdk_drives_a_session() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let email = "carol@berth.test";
    h.user(email).await;
    let cli = Client::new(&h, h.backendai_keypair(email).await).await;

    let failing = cli
        .run(&small(&[
            "--enqueue-only",
            "--type",
            "batch",
            "-c",
            // Long enough to be running when `watch` (a Python start-up, seconds on a loaded
            // machine) lists the live sessions: an ended one is not among them.
            "sleep 8; exit 3",
            "-t",
            "wfailing",
        ]))
        .await
        .ok()
        .session_id();
    let watched = cli.run(&["watch", "wfailing"]).await;
    assert_eq!(
        watched.code, 3,
        "watch exits with the session's code:\n{}",
        watched.out
    );
    let detail = h.wait_session(&failing, ended).await;
    assert_eq!(detail["exit_code"], 3, "{detail}");

    let script = format!(
        r#"
from ai.backend.client.session import Session
with Session() as api:
    first = api.ComputeSession.get_or_create("{IMAGE}", name="sdk-session",
        resources={{"cpu": "0.5", "mem": "256m"}})
    assert first.status == "RUNNING" and first.created, (first.status, first.created)
    again = api.ComputeSession.get_or_create("{IMAGE}", name="sdk-session",
        resources={{"cpu": "0.5", "mem": "256m"}})
    assert str(again.id) == str(first.id) and not again.created, (again.id, first.id)
    info = first.get_info()
    assert info["status"] == "RUNNING", info
    first.destroy(forced=True)
    print("SDK", first.id)
"#
    );
    let sdk = cli.python(&script).await.ok();
    let id = sdk
        .out
        .split("SDK ")
        .nth(1)
        .unwrap_or_else(|| panic!("{}", sdk.out))
        .trim()
        .to_owned();
    let detail = h.wait_session(&id, ended).await;
    assert_eq!(
        (&detail["name"], &detail["status"]),
        (&Value::from("sdk-session"), &Value::from("TERMINATED")),
        "{detail}"
    );
}

#[tokio::test]
async fn the_cli_is_refused_cleanly_by_key_by_owner_and_where_berth_has_no_such_call() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    h.user("dave@berth.test").await;
    h.user("erin@berth.test").await;
    let dave_keys = h.backendai_keypair("dave@berth.test").await;
    let dave_access = dave_keys.0.clone();
    let dave = Client::new(&h, dave_keys).await;
    let erin = Client::new(&h, h.backendai_keypair("erin@berth.test").await).await;

    let id = dave
        .run(&small(&["--enqueue-only", "-t", "dave-one"]))
        .await
        .ok()
        .session_id();

    // A wrong secret key: refused, and the client says why.
    let wrong = Client::new(&h, (dave_access.clone(), "not-the-secret".into())).await;
    let refused = wrong.run(&["ps"]).await.failed();
    assert!(
        refused.out.contains("401") && refused.out.contains("signature"),
        "{}",
        refused.out
    );

    // Another user: no such session, by name or id; naming its owner is forbidden.
    for reference in ["dave-one", id.as_str()] {
        let other = erin.run(&["session", "logs", reference]).await.failed();
        assert!(
            other.out.contains("404") && other.out.contains("No such session."),
            "{}",
            other.out
        );
    }
    let forbidden = erin
        .run(&["session", "rm", "-o", &dave_access, "dave-one"])
        .await
        .failed();
    assert!(
        forbidden.out.contains("403") && forbidden.out.contains("owner_access_key"),
        "{}",
        forbidden.out
    );
    let (_, detail) = h.get(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert!(!ended(&detail), "erin ended dave's session: {detail}");

    // A restart is not berth's: the client prints that, and fails.
    let restart = dave.run(&["session", "restart", "dave-one"]).await.failed();
    assert!(restart.out.contains("501"), "{}", restart.out);
}

/// `backend.ai run`, the client's most used command: code run by the image's language runtime
/// (query mode: `sh` in berth/shell, python3 in berth/python) prints its output, a file
/// uploaded and run by `--exec` (batch mode) prints its own and its exit code, and each run
/// (`--rm`) ends the session it made.
#[tokio::test]
async fn run_prints_what_code_and_files_print_and_ends_its_sessions() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let key = h.user("jo@berth.test").await;
    let jo = Client::new(&h, h.backendai_keypair("jo@berth.test").await).await;
    let run = |extra: &[&str]| {
        // `--rm`: the client (23.09) keeps a run's session without it, as Backend.AI does.
        let mut args = vec!["run", "--rm", "-r", "cpu=0.5", "-r", "mem=256m"];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };

    let sh = run(&["-c", "echo hi from sh; echo oops >&2; exit 3", IMAGE]);
    let sh = jo
        .run(&sh.iter().map(String::as_str).collect::<Vec<_>>())
        .await
        .ok();
    assert!(
        sh.out.contains("hi from sh")
            && sh.out.contains("oops")
            && sh.out.contains("exit code = 3"),
        "{}",
        sh.out
    );
    let py = run(&["-c", "print(6 * 7)", "berth/python:latest"]);
    let py = jo
        .run(&py.iter().map(String::as_str).collect::<Vec<_>>())
        .await
        .ok();
    assert!(
        py.out.contains("42") && py.out.contains("exit code = 0"),
        "{}",
        py.out
    );
    std::fs::write(jo.home.join("hello.sh"), "echo batch says hi; exit 4\n").unwrap();
    let batch = run(&["--exec", "sh hello.sh", IMAGE, "hello.sh"]);
    let batch = jo
        .run(&batch.iter().map(String::as_str).collect::<Vec<_>>())
        .await
        .ok();
    assert!(
        batch.out.contains("batch says hi") && batch.out.contains("exit code = 4"),
        "{}",
        batch.out
    );

    // Each run ended its session.
    let mut listed = Value::Null;
    for _ in 0..600 {
        listed = h.get(&key, "/v1/sessions").await.1;
        let sessions = listed["sessions"].as_array().cloned().unwrap_or_default();
        if sessions.len() == 3 && sessions.iter().all(ended) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the runs' sessions did not all end: {listed:#}");
}

/// `backend.ai vfolder`: a folder made, a file uploaded (the client's tus upload to the
/// `/upload` berth answers for its storage proxy), listed, a directory made, the file
/// downloaded (a token berth signed, served with ranges) to the same bytes, the folder's info;
/// another user reaches none of it.
#[tokio::test]
async fn the_cli_moves_files_in_and_out_of_a_vfolder() {
    // A one-host install: the gateway serves its agents' data directory (`host-local`).
    let mut config = test_config();
    config.agent_data_dir = data_dir();
    let h = start_with(config).await;
    let fay_key = h.user("fay@berth.test").await;
    h.user("gus@berth.test").await;
    let fay = Client::new(&h, h.backendai_keypair("fay@berth.test").await).await;
    let gus = Client::new(&h, h.backendai_keypair("gus@berth.test").await).await;

    let made = fay
        .run(&["vfolder", "create", "bai-data", "host-local"])
        .await
        .ok();
    assert!(made.out.contains("\"bai-data\" is created"), "{}", made.out);
    let numbers: String = (1..=20_000).map(|n| format!("{n}\n")).collect();
    std::fs::write(fay.home.join("numbers.txt"), &numbers).unwrap();
    fay.run(&["vfolder", "upload", "bai-data", "numbers.txt"])
        .await
        .ok();
    fay.run(&["vfolder", "mkdir", "bai-data", "results"])
        .await
        .ok();
    let listed = fay.run(&["vfolder", "ls", "bai-data"]).await.ok();
    assert!(
        listed.out.contains("numbers.txt")
            && listed.out.contains(&numbers.len().to_string())
            && listed.out.contains("results")
            && listed.out.contains("drwx"),
        "{}",
        listed.out
    );
    let out = fay.home.join("out");
    std::fs::create_dir_all(&out).unwrap();
    fay.run(&[
        "vfolder",
        "download",
        "-b",
        out.to_str().unwrap(),
        "bai-data",
        "numbers.txt",
    ])
    .await
    .ok();
    assert_eq!(
        std::fs::read_to_string(out.join("numbers.txt")).unwrap(),
        numbers
    );
    let info = fay.run(&["vfolder", "info", "bai-data"]).await.ok();
    assert!(
        info.out.contains("Virtual folder \"bai-data\""),
        "{}",
        info.out
    );
    // Listed over GraphQL, as the client asks (`vfolder_list`, `vfolder_own_list`).
    for list in ["list", "list-own"] {
        let listed = fay.run(&["vfolder", list]).await.ok();
        assert!(
            listed.out.contains("bai-data") && listed.out.contains("host-local"),
            "{list}: {}",
            listed.out
        );
    }
    // What the API says is what the client did.
    let (status, files) = h.get(&fay_key, "/v1/folders/bai-data/files").await;
    assert_eq!(status, StatusCode::OK, "{files}");
    let names: Vec<&str> = files["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names, ["numbers.txt", "results"], "{files}");

    // Gus has no such folder.
    let refused = gus.run(&["vfolder", "ls", "bai-data"]).await;
    assert!(
        refused.out.contains("404") || refused.out.contains("not"),
        "{}",
        refused.out
    );
    let gus_out = gus.home.join("out");
    std::fs::create_dir_all(&gus_out).unwrap();
    gus.run(&[
        "vfolder",
        "download",
        "-b",
        gus_out.to_str().unwrap(),
        "bai-data",
        "numbers.txt",
    ])
    .await
    .failed();
    assert!(!gus_out.join("numbers.txt").exists());

    // Files moved, renamed and removed; the folder shared with gus (who then lists it) and
    // taken back, renamed, and deleted to berth's trash.
    fay.run(&["vfolder", "mv", "bai-data", "numbers.txt", "results/n.txt"])
        .await
        .ok();
    fay.run(&[
        "vfolder",
        "rename-file",
        "bai-data",
        "results/n.txt",
        "m.txt",
    ])
    .await
    .ok();
    let (_, inside) = h
        .get(&fay_key, "/v1/folders/bai-data/files?path=results")
        .await;
    assert_eq!(inside["entries"][0]["name"], "m.txt", "{inside}");
    let shared = fay
        .run(&["vfolder", "share", "-p", "ro", "bai-data", "gus@berth.test"])
        .await
        .ok();
    assert!(shared.out.contains("gus@berth.test"), "{}", shared.out);
    let seen = gus
        .run(&["vfolder", "ls", "bai-data", "results"])
        .await
        .ok();
    assert!(seen.out.contains("m.txt"), "{}", seen.out);
    fay.run(&["vfolder", "unshare", "bai-data", "gus@berth.test"])
        .await
        .ok();
    let unshared = gus.run(&["vfolder", "ls", "bai-data"]).await;
    assert!(unshared.out.contains("404"), "{}", unshared.out);
    // The CLI's `rm` asks yes or no on a terminal: the SDK removes without asking.
    fay.python(
        "from ai.backend.client.session import Session\n\
         with Session() as s:\n    s.VFolder('bai-data').delete_files(['results'], recursive=True)",
    )
    .await
    .ok();
    let (_, left) = h.get(&fay_key, "/v1/folders/bai-data/files").await;
    assert_eq!(left["total"], 0, "{left}");
    fay.run(&["vfolder", "rename", "bai-data", "bai-kept"])
        .await
        .ok();
    fay.run(&["vfolder", "delete", "bai-kept"]).await.ok();
    let (_, folders) = h.get(&fay_key, "/v1/folders").await;
    assert_eq!(folders["folders"][0]["name"], "bai-kept", "{folders}");
    assert!(folders["folders"][0]["trashed_at"].is_string(), "{folders}");
}

/// `session upload` puts files (a directory part included) into a running session's home,
/// `session download` brings them back as the client unpacks them, and berth's own
/// `GET /v1/sessions/{id}/files` reads the same bytes; a path that is not there fails the
/// download, and another user's session is not theirs to upload to.
#[tokio::test]
async fn the_cli_uploads_into_and_downloads_from_a_running_session() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let key = h.user("hal@berth.test").await;
    h.user("ivy@berth.test").await;
    let hal = Client::new(&h, h.backendai_keypair("hal@berth.test").await).await;
    let ivy = Client::new(&h, h.backendai_keypair("ivy@berth.test").await).await;
    let ready = hal.run(&small(&["-t", "bai-files"])).await.ok();
    let id = ready.session_id();

    std::fs::create_dir_all(hal.home.join("src")).unwrap();
    std::fs::write(hal.home.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(hal.home.join("src/b.txt"), "beta\n").unwrap();
    hal.run(&["session", "upload", "bai-files", "a.txt", "src/b.txt"])
        .await
        .ok();
    let tar = h
        .http
        .get(format!("{}/v1/sessions/{id}/files?path=src/b.txt", h.base))
        .header("x-api-key", &key)
        .send()
        .await
        .unwrap();
    let status = tar.status();
    let tar = tar.bytes().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&tar));
    // One entry, `b.txt`, holding what was uploaded.
    assert_eq!(&tar[..5], b"b.txt", "{:?}", &tar[..32]);
    assert!(tar.windows(5).any(|w| w == b"beta\n"));
    // A streamed upload that says no length is refused before its bytes are read, and the
    // refusal reaches the client while it is still sending them.
    let refused = h
        .http
        .put(format!("{}/v1/sessions/{id}/files?path=big.bin", h.base))
        .header("x-api-key", &key)
        .body(streamed_body(64, 64 * 1024, b'x'))
        .send()
        .await
        .expect("the refusal of a 4 MiB upload reaches the client");
    assert_eq!(refused.status(), StatusCode::LENGTH_REQUIRED);
    let refused: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "length_required", "{refused}");

    let back = hal.home.join("back");
    std::fs::create_dir_all(&back).unwrap();
    hal.run(&[
        "session",
        "download",
        "bai-files",
        "a.txt",
        "src/b.txt",
        "--dest",
        back.to_str().unwrap(),
    ])
    .await
    .ok();
    assert_eq!(
        std::fs::read_to_string(back.join("a.txt")).unwrap(),
        "alpha\n"
    );
    assert_eq!(
        std::fs::read_to_string(back.join("b.txt")).unwrap(),
        "beta\n"
    );
    hal.run(&["session", "download", "bai-files", "no-such.txt"])
        .await
        .failed();
    std::fs::write(ivy.home.join("c.txt"), "gamma\n").unwrap();
    ivy.run(&["session", "upload", "bai-files", "c.txt"])
        .await
        .failed();
    hal.run(&["session", "rm", "-f", "bai-files"]).await.ok();
}

/// `backend.ai service`: a model endpoint made from a folder, listed, shown with its routes,
/// its URL printed, a token generated and used, scaled, refused what berth cannot honour, and
/// removed; berth's own API sees each step, for it is one endpoint.
#[tokio::test]
async fn the_cli_serves_a_model_scales_it_and_gives_a_token_for_its_url() {
    use crate::serving::{model_folder, service, within};
    let (h, (_agent, _cleanup)) = crate::files::one_host().await;
    let email = "hal@berth.test";
    let key = h.user(email).await;
    model_folder(&h, &key).await;
    let cli = Client::new(&h, h.backendai_keypair(email).await).await;
    let create = |name: &'static str, extra: &[&'static str]| {
        let mut args = vec![
            "service",
            "create",
            "berth/python:latest",
            "models",
            "1",
            "-t",
            name,
            "-r",
            "cpu=0.25",
            "-r",
            "mem=128m",
        ];
        args.extend_from_slice(extra);
        args
    };
    cli.run(&create("iris-bai", &[])).await.ok();
    let (_, listed) = h.get(&key, "/v1/services").await;
    let id = listed["services"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(listed["services"][0]["name"], "iris-bai");
    assert_eq!(listed["services"][0]["replicas"], 1);
    within(90, "a healthy replica", || async {
        (service(&h, &key, &id).await["healthy_replicas"] == 1).then_some(())
    })
    .await;

    let listed = cli.run(&["service", "list"]).await.ok();
    assert!(
        listed.out.contains("iris-bai") && listed.out.contains(&id),
        "{}",
        listed.out
    );
    let info = cli.run(&["service", "info", "iris-bai"]).await.ok();
    assert!(
        info.out.contains(&id) && info.out.contains("healthy"),
        "{}",
        info.out
    );
    let url = cli.run(&["service", "get-endpoint", "iris-bai"]).await.ok();
    assert_eq!(url.out.trim(), format!("{}/serve/{id}/", h.base));

    // Not public: the token the client generates opens it, and nothing else does.
    let token = cli
        .run(&["service", "generate-token", "iris-bai", "1h", "-q"])
        .await
        .ok();
    let token = token.out.trim().to_owned();
    let call = |bearer: &str| {
        h.http
            .post(format!("{}/serve/{id}/predict", h.base))
            .bearer_auth(bearer)
            .json(&serde_json::json!({"features": [[5.1, 3.5, 1.4, 0.2]]}))
            .send()
    };
    let answer = call(&token).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let predicted: Value = answer.json().await.unwrap();
    assert_eq!(predicted["predictions"], serde_json::json!(["setosa"]));
    assert_eq!(
        call("bst_wrong").await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );

    cli.run(&["service", "scale", "iris-bai", "2"]).await.ok();
    assert_eq!(service(&h, &key, &id).await["replicas"], 2);
    let refused = cli
        .run(&create("iris-pair", &["--cluster-size", "2"]))
        .await
        .failed();
    assert!(refused.out.contains("cluster_size"), "{}", refused.out);
    let refused = cli
        .run(&create("iris-env", &["-e", "MODEL=big"]))
        .await
        .failed();
    assert!(refused.out.contains("config.environ"), "{}", refused.out);

    cli.run(&["service", "rm", "iris-bai"]).await.ok();
    let (status, _) = h.get(&key, &format!("/v1/services/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
