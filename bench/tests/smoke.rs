//! A smoke run of every bench at a tiny size: each ends well and prints its figures, so a
//! bench cannot rot unseen between the release runs that record them in `docs/performance.md`.
//! The sizes here say nothing about speed. Each bench runs as a user runs it, `berth-bench`
//! in a process of its own with the test run's settings (`BERTH_DATABASE_URL`, NATS), in a
//! database of its own that it drops.
//!
//! Not run here: `start-cluster`, which needs two Docker engines named by `--engines` (the
//! two-engine clusters themselves are tested in `tests/e2e/hosts.rs`), and `commit`: run
//! beside the other benches, a `docker commit` left a container paused and Docker 20.10
//! hanging on every later call about it (the commits themselves are tested in
//! `tests/e2e/commit.rs`; the bench runs alone, `berth bench commit`).

use std::process::Command;

/// `berth-bench ARGS...`: its standard output, once it ended well having printed a figure.
fn bench(args: &[&str]) -> String {
    // From the checkout's root, where a user runs it (the install's files are under `.berth`).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the bench crate is in the workspace");
    let ran = Command::new(env!("CARGO_BIN_EXE_berth-bench"))
        .args(args)
        .current_dir(root)
        .env("RUST_LOG", "warn")
        .output()
        .expect("berth-bench runs");
    let printed = String::from_utf8_lossy(&ran.stdout).into_owned();
    let said = String::from_utf8_lossy(&ran.stderr);
    let what = format!("berth bench {}", args.join(" "));
    assert!(
        ran.status.success(),
        "{what}: {}\n{printed}\n{said}",
        ran.status
    );
    assert!(
        printed
            .lines()
            .any(|l| l.chars().any(|c| c.is_ascii_digit())
                && ["/s", " ms", "%", "MiB"]
                    .iter()
                    .any(|unit| l.contains(unit))),
        "{what} printed no figure:\n{printed}\n{said}"
    );
    printed
}

#[test]
fn store() {
    bench(&["store", "--seconds", "1", "--writers", "2", "--rounds", "2"]);
}

#[test]
fn shapes() {
    bench(&[
        "shapes",
        "--seconds",
        "1",
        "--clients",
        "2",
        "--rounds",
        "1",
    ]);
}

#[test]
fn seal() {
    bench(&["seal", "--events", "3000"]);
}

#[test]
fn relay() {
    let printed = bench(&[
        "relay",
        "--rate",
        "200",
        "--seconds",
        "2",
        "--backlog",
        "500",
    ]);
    for share in ["the relay's share", "the bus's share", "windows of 100 ms"] {
        assert!(printed.contains(share), "{printed}");
    }
}

#[test]
fn events() {
    bench(&[
        "events",
        "--burst",
        "200",
        "--consumers",
        "1,2",
        "--rate",
        "100",
        "--seconds",
        "2",
    ]);
}

#[test]
fn schedule() {
    bench(&["schedule", "--agents", "5", "--sessions", "50"]);
}

#[test]
fn replay() {
    let printed = bench(&["replay", "--events", "2000"]);
    assert!(printed.contains("compared: equal"), "{printed}");
}

#[test]
fn whatif() {
    bench(&["whatif", "--sessions", "200", "--agents", "5"]);
}

#[test]
fn gateway() {
    bench(&[
        "gateway",
        "--seconds",
        "2",
        "--clients",
        "2",
        "--sessions",
        "200",
    ]);
}

#[test]
fn metrics() {
    bench(&[
        "metrics",
        "--seconds",
        "2",
        "--rounds",
        "1",
        "--clients",
        "2",
        "--sessions",
        "200",
    ]);
}

#[test]
fn tls() {
    bench(&["tls", "--creates", "5"]);
}

#[test]
fn reap() {
    bench(&[
        "reap",
        "--sessions",
        "3",
        "--watched",
        "10",
        "--window",
        "1",
    ]);
}

#[test]
fn fleet() {
    bench(&[
        "fleet",
        "--agents",
        "5",
        "--sessions",
        "10",
        "--window",
        "1",
        "--settle",
        "1",
    ]);
}

#[test]
fn wake() {
    bench(&["wake", "--sessions", "5"]);
}

#[test]
fn start() {
    let printed = bench(&["start", "--sessions", "3", "--burst", "2"]);
    // The agent lends its runtime: its spares have sandboxes, which a batch session joins
    // (the first of three at least: the bench waits for the spares before each start).
    let joined = printed
        .lines()
        .find_map(|l| l.split_once(" of 3 batch sessions ran in a spare's sandbox"))
        .and_then(|(before, _)| before.rsplit(' ').next()?.parse::<usize>().ok());
    assert!(joined.is_some_and(|n| n >= 1), "{printed}");
    // Every session reached RUNNING in the log, so every step is there, the burst's last
    // session's too.
    let steps: Vec<&str> = printed.lines().filter(|l| l.contains("steps")).collect();
    assert!(
        steps.len() == 2
            && steps[1].contains("the last session: placed")
            && steps.iter().all(|l| !l.contains("never")),
        "{printed}"
    );
}

#[test]
fn apps() {
    bench(&["apps", "--requests", "20"]);
}

#[test]
fn serve() {
    bench(&[
        "serve",
        "--requests",
        "50",
        "--seconds",
        "2",
        "--callers",
        "2",
    ]);
}

#[test]
fn data() {
    bench(&["data", "--mib", "4", "--rounds", "1"]);
}

#[test]
fn volume_write() {
    bench(&["volume-write", "--mib", "4", "--rounds", "1"]);
}

#[test]
fn console() {
    bench(&[
        "console",
        "--sessions",
        "20",
        "--users",
        "5",
        "--folders",
        "5",
        "--rounds",
        "2",
    ]);
}

#[test]
fn recovery() {
    bench(&["recovery", "--rounds", "1", "--outage", "1"]);
}

#[test]
fn backendai() {
    // The client installed once for the whole test run (the e2e tests share it).
    let client = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("backendai-client-23.9.10");
    bench(&[
        "backendai",
        "--sessions",
        "5",
        "--requests",
        "20",
        "--runs",
        "1",
        "--client-dir",
        client.to_str().unwrap(),
    ]);
}
