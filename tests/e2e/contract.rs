//! The API against its own document: schemathesis (PyPI) reads the live `/openapi.json` and
//! sends what it describes, valid and invalid, with every check on but one (see below). No
//! answer may be a 5xx, no schema-valid request may be refused as invalid (422), no invalid
//! one accepted, and every answer must match its documented schema. Its stateful phase
//! follows the document's links from a created session to its detail, rename, termination,
//! history and logs. The superadmins' endpoints (`/v1/admin/`) are run second, on their own:
//! their fuzzing revokes agents and changes policies under the first run's sessions.
//! `infra/test.sh` installs schemathesis into
//! `.berth/venv`; `BERTH_SCHEMATHESIS` names another.

use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Command;

use crate::common::*;

/// The schemathesis release the checks were written against.
const RELEASE: &str = "4.32.5";

fn schemathesis() -> PathBuf {
    if let Ok(path) = std::env::var("BERTH_SCHEMATHESIS") {
        return PathBuf::from(path);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let installed = root.join(".berth/venv/bin/schemathesis");
    assert!(
        installed.exists(),
        "schemathesis is not installed: run infra/test.sh, or \
         `python3 -m venv .berth/venv && .berth/venv/bin/pip install schemathesis=={RELEASE}`"
    );
    installed
}

/// Runs schemathesis against the live document, on the operations `selection` picks (a
/// schemathesis filter), and fails the test with what it found; what it printed.
async fn schemathesis_on(h: &Harness, selection: [&str; 2]) -> String {
    let hooks = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("e2e/contract_hooks.py");
    let mut run = Command::new(schemathesis());
    run.arg("run")
        .arg(format!("{}/openapi.json", h.base))
        .args(selection)
        .args(["--checks", "all", "--max-examples", "20", "--seed", "1"])
        // DELETE terminates a session; the session, its history and its logs stay readable
        // afterwards (as in Backend.AI), which this check takes for a resource not deleted.
        .args(["--exclude-checks", "use_after_free"])
        .args(["--request-timeout", "10", "--no-color"])
        .args(["--header", &format!("X-API-Key: {}", h.admin_key)])
        .env("SCHEMATHESIS_HOOKS", hooks)
        // Its cache of failures stays out of the tree and out of the next run.
        .env("SCHEMATHESIS_REPORT_DIR", std::env::temp_dir())
        .current_dir(std::env::temp_dir())
        .kill_on_drop(true);
    // A guard against a hang, not a measure: under the whole suite's load on two cores a run
    // has taken past three minutes (the runner's own limit for this test is `.config/nextest.toml`'s).
    let output = tokio::time::timeout(Duration::from_secs(300), run.output())
        .await
        .expect("schemathesis ends within 5 minutes")
        .expect("schemathesis runs");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "schemathesis found:\n{printed}");
    // Its own summary (phases, checks, what it found), for `--no-capture` readers.
    let summary: Vec<&str> = printed.lines().rev().take(40).collect();
    println!(
        "{}",
        summary.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
    printed
}

/// How many operations a run says it tested.
fn tested(printed: &str) -> usize {
    printed
        .lines()
        .find_map(|line| line.trim().strip_prefix("Tested: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count of operations tested:\n{printed}"))
}

#[tokio::test]
async fn the_api_keeps_every_promise_its_document_makes() {
    let h = start().await;
    // An agent, so that a create can be taken (and not only refused for want of one).
    h.agent("a1", "default", 8).await;
    // The users' API first, then the superadmins' (`/v1/admin/`), whose fuzzing revokes the
    // agent, sets one-second idle checks and changes the default policy: run before, it would
    // leave the users' API nothing to run sessions on.
    let users = schemathesis_on(&h, ["--exclude-path-regex", "^/v1/admin/"]).await;
    let created = h.count_events("SessionRequested").await;
    assert!(created > 0, "no create was taken:\n{users}");
    let admin = schemathesis_on(&h, ["--include-path-regex", "^/v1/admin/"]).await;
    // It must have exercised the whole API, not stopped at the document: every operation
    // tested, and creates that got through to the log (the stateful phase follows them).
    let document: serde_json::Value = h
        .http
        .get(format!("{}/openapi.json", h.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // schemathesis leaves out the operation that serves the document it reads.
    let operations: usize = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(path, _)| *path != "/openapi.json")
        .map(|(_, methods)| methods.as_object().unwrap().len())
        .sum();
    assert_eq!(
        tested(&users) + tested(&admin),
        operations,
        "not every one of the {operations} operations was tested:\n{users}\n{admin}"
    );
    assert!(
        h.count_events("AgentAdmitted").await > 0,
        "no admission was taken:\n{admin}"
    );
    h.assert_running();
}
