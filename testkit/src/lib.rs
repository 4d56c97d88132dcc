//! What berth's tests and benchmarks share and the `berth` that operators run must not link:
//! dependencies of one's own to take away and give back and a certificate authority
//! ([`scratch`], for the fault-injection and TLS tests, `berth bench recovery` and `berth bench
//! tls`), Backend.AI's official client installed for the test and the bench that drive
//! berth with it ([`backendai_client`]), and berth's runtime for their agents
//! ([`berth_runtime`]). `berth/tests`, `tests/e2e` and `berth-bench` depend
//! on it; `berth` itself does not, so rcgen is not built into the product.

pub mod backendai_client;
pub mod scratch;

/// berth's runtime, as `berth agent` lends it: `BERTH_AGENT_RUNTIME` where set (`infra/up.sh`
/// sets it), else made once under the target directory by `infra/runtime.sh`, under a lock,
/// since tests run in processes of their own; its directory, or why not.
pub fn berth_runtime() -> Result<std::path::PathBuf, String> {
    static MADE: std::sync::OnceLock<Result<std::path::PathBuf, String>> =
        std::sync::OnceLock::new();
    MADE.get_or_init(|| {
        if let Some(dir) = std::env::var_os("BERTH_AGENT_RUNTIME") {
            return Ok(dir.into());
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let dir = target.join("berth-runtime");
        let made = std::process::Command::new("flock")
            .arg(target.join("berth-runtime.lock"))
            .arg(root.join("infra/runtime.sh"))
            .arg(&dir)
            .status()
            .map_err(|e| format!("flock infra/runtime.sh: {e}"))?;
        if !made.success() {
            return Err(format!("infra/runtime.sh {} failed", dir.display()));
        }
        Ok(dir)
    })
    .clone()
}
