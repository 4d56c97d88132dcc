//! docker-compose.yml is valid: `docker compose config` (or the older `docker-compose`)
//! accepts it, it names the whole stack, every long-running service restarts unless
//! stopped, and berth's health is its `/readyz`.

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
    let file = std::fs::read_to_string(root.join("docker-compose.yml")).unwrap();
    // A service's block: the lines under its name, indented deeper (blank lines and
    // comments included).
    let block = |service: &str| -> String {
        let header = format!("  {service}:");
        let mut lines = file.lines().skip_while(|l| *l != header);
        assert!(lines.next().is_some(), "no block for {service}");
        lines
            .take_while(|l| l.is_empty() || l.starts_with("   ") || l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for service in ["postgres", "nats", "berth", "agent"] {
        let block = block(service);
        assert!(
            block.contains("restart: unless-stopped"),
            "{service} does not restart: {block}"
        );
    }
    for service in ["postgres", "nats", "berth"] {
        assert!(
            block(service).contains("healthcheck:"),
            "{service} has no health check"
        );
    }
    assert!(
        block("berth").contains("/readyz"),
        "berth's health check is not /readyz"
    );
}
