//! What the binary's tests share: a fresh database of their own, and `berth` run as a person
//! would run it.
#![allow(dead_code)] // each test file uses its own part

use std::process::Command;

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
    let output = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .env("BERTH_DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run berth");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// `berth` with its arguments written as one line (none of them holding a space).
pub fn berth_line(url: &str, line: &str) -> (bool, String) {
    berth(url, &line.split_whitespace().collect::<Vec<_>>())
}
