//! docker-compose.yml is valid: `docker compose config` (or the older `docker-compose`)
//! accepts it and it names the whole stack.

use std::path::Path;
use std::process::Command;

/// The compose command this machine has: the Docker CLI plugin, or the standalone tool.
fn compose() -> Vec<&'static str> {
    let works = |cmd: &[&str]| {
        Command::new(cmd[0])
            .args(&cmd[1..])
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    for candidate in [vec!["docker", "compose"], vec!["docker-compose"]] {
        if works(&candidate) {
            return candidate;
        }
    }
    panic!(
        "neither `docker compose` nor `docker-compose` is installed (infra/test.sh installs it)"
    );
}

#[test]
fn docker_compose_file_is_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let tool = compose();
    let output = Command::new(tool[0])
        .args(&tool[1..])
        .arg("-f")
        .arg(root.join("docker-compose.yml"))
        .args(["config", "--services"])
        .output()
        .expect("run compose");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    for service in ["postgres", "nats", "berth", "agent"] {
        assert!(
            stdout.lines().any(|l| l == service),
            "service {service} missing: {stdout}"
        );
    }
}
