//! Backend.AI's official client (`backend-ai-client` from PyPI, CLI `backend.ai`), installed
//! unchanged in a Python virtual environment of its own, for the test that drives berth with
//! it and for `berth bench backendai`.
//!
//! The version is pinned to the one berth's compatibility paths are written against
//! (23.9.10, the newest for Python 3.11), with `yarl` below 1.17.1: from that release on, the
//! URL object the client reads its host from is a tuple inside, and every signed call
//! crashes. One install is kept per directory and shared: a lock file makes concurrent
//! callers wait for the first, and a marker written last tells a whole install from an
//! interrupted one, which is made again.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// What is installed, as pip reads it.
pub const REQUIREMENTS: [&str; 2] = ["backend-ai-client==23.9.10", "yarl<1.17.1"];

/// The file that says an install is whole.
const COMPLETE: &str = ".berth-complete";

/// The `backend.ai` program (an absolute path) of the install in `dir`, made there first when it is not whole
/// (python3's `venv` and pip; PyPI must be reachable). Runs blocking programs: call it from
/// `spawn_blocking` in async code.
pub fn install(dir: &Path) -> anyhow::Result<PathBuf> {
    // Absolute, so that the program runs from any working directory.
    let dir = &std::path::absolute(dir).with_context(|| format!("{}", dir.display()))?;
    let program = dir.join("bin").join("backend.ai");
    if dir.join(COMPLETE).exists() {
        return Ok(program);
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    }
    // Under `flock`, so that of several callers one installs and the others wait and reuse.
    let script = format!(
        r#"set -e
[ -e "$1/{COMPLETE}" ] && exit 0
rm -rf "$1"
python3 -m venv "$1"
"$1/bin/pip" install --disable-pip-version-check -q {}
touch "$1/{COMPLETE}""#,
        REQUIREMENTS.map(|r| format!("'{r}'")).join(" ")
    );
    let lock = dir.with_extension("lock");
    let output = std::process::Command::new("flock")
        .arg(&lock)
        .args(["sh", "-c", &script, "install"])
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .context("run flock and python3 (util-linux, python3-venv)")?;
    anyhow::ensure!(
        output.status.success(),
        "installing {} into {} failed ({}): {}{}",
        REQUIREMENTS.join(" "),
        dir.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(program)
}
