//! What the binary's tests share: a fresh database of their own, and `berth` run as a person
//! would run it.
#![allow(dead_code)] // each test file uses its own part

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use deadpool_postgres::Pool;
use events::store;
use uuid::Uuid;

pub fn base_url() -> String {
    std::env::var("BERTH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://berth@127.0.0.1:55432/berth".into())
}

/// A new, migrated database beside the configured one: its pool and URL.
pub async fn fresh_database() -> (Pool, String) {
    let base = base_url();
    let (prefix, _) = base.rsplit_once('/').unwrap();
    let url = format!("{prefix}/test_{}", Uuid::new_v4().simple());
    store::ensure_database(&url).await.unwrap();
    let pool = store::pool(&url, 4).unwrap();
    store::migrate(&pool, &[]).await.unwrap();
    (pool, url)
}

/// Runs `berth ARGS` against the database at `url`: whether it succeeded, and what it printed.
pub fn berth(url: &str, args: &[&str]) -> (bool, String) {
    berth_with(args, &[("BERTH_DATABASE_URL".into(), url.into())])
}

/// Runs `berth ARGS` with `env` and no input, waiting at most 60 s (a hang fails the test
/// with the command's name): whether it succeeded, and what it printed.
pub fn berth_with(args: &[&str], env: &[(String, String)]) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run berth");
    // Read the pipes while waiting, so a command that prints a lot never blocks on them.
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let (out, err) = (read(Box::new(stdout)), read(Box::new(stderr)));
    let mut polls = 0;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        polls += 1;
        if polls > 3_000 {
            let _ = child.kill();
            panic!("`berth {}` did not end within 60 s", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = out.join().unwrap() + &err.join().unwrap();
    (status.success(), text)
}

/// `berth` with its arguments written as one line (none of them holding a space).
pub fn berth_line(url: &str, line: &str) -> (bool, String) {
    berth(url, &line.split_whitespace().collect::<Vec<_>>())
}
