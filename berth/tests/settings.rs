//! Settings, as an operator meets them: a value that does not parse stops the process at
//! start, naming the variable and the value (never a silent default); a command's `--help`
//! lists the variables it reads, with their defaults; `berth config` prints every one in
//! force, secrets masked.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs berth with `env` added to a clean environment (no BERTH_* of the caller's), bounded:
/// a process that goes on running past the bound was not refused, and is killed.
fn berth(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_berth"));
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, _) in std::env::vars() {
        if name.starts_with("BERTH_") {
            command.env_remove(name);
        }
    }
    // Where the profiles file would be: nowhere, so no profile of this machine plays in.
    command
        .env("HOME", "/nonexistent")
        .env_remove("XDG_CONFIG_HOME");
    command.envs(env.iter().copied());
    let mut child = command.spawn().expect("run berth");
    // At most 30 s (600 looks 50 ms apart).
    for look in 0.. {
        if child.try_wait().expect("wait for berth").is_some() {
            break;
        }
        if look == 600 {
            child.kill().expect("kill berth");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("read berth");
    (
        status.code(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[test]
fn each_kind_of_bad_value_stops_the_process_naming_the_variable() {
    // One per kind of setting: a port range, a whole number of seconds and of milliseconds,
    // an IP address, a socket address, a URL, a count above zero.
    let cases: [(&[&str], &str, &str); 9] = [
        (&["up"], "BERTH_PROXY_PORTS", "10200:10299"),
        (&["up"], "BERTH_HEARTBEAT_TIMEOUT_SECS", "30s"),
        (&["scheduler"], "BERTH_SCHEDULER_INTERVAL_MS", "fast"),
        (&["gateway"], "BERTH_PROXY_ADDRESS", "proxy.example"),
        (&["gateway"], "BERTH_GATEWAY_LISTEN", "localhost"),
        (&["gateway"], "BERTH_CREATE_QUEUE", "0"),
        (&["agent", "--simulate"], "BERTH_AGENT_ADDRESS", "10.0.0"),
        (&["agent", "--simulate"], "BERTH_AGENT_LEAVE_SECS", "-3"),
        (&["session", "ls"], "BERTH_GATEWAY_URL", "gateway:8480"),
    ];
    for (args, variable, value) in cases {
        let (code, _, stderr) = berth(args, &[(variable, value)]);
        assert_eq!(
            code,
            Some(2),
            "berth {args:?} with {variable}={value}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("{variable}={value}")),
            "berth {args:?} with {variable}={value} should name it: {stderr}"
        );
    }
}

#[test]
fn a_bad_flag_value_is_named_by_its_flag() {
    let (code, _, stderr) = berth(&["up", "--proxy-ports", "10200:10299"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--proxy-ports"), "{stderr}");
}

#[test]
fn help_lists_the_variables_a_command_reads_with_their_defaults() {
    let (code, stdout, stderr) = berth(&["up", "--help"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    for (variable, default) in [
        ("BERTH_DATABASE_URL", None),
        ("BERTH_NATS_URL", None),
        ("BERTH_GATEWAY_LISTEN", Some("127.0.0.1:8480")),
        ("BERTH_PROXY_PORTS", Some("10200-10299")),
        ("BERTH_HEARTBEAT_TIMEOUT_SECS", Some("30")),
        ("BERTH_STOP_WITHIN_SECS", Some("15")),
    ] {
        let line = stdout
            .lines()
            .position(|l| l.contains(&format!("[env: {variable}")))
            .unwrap_or_else(|| panic!("{variable} is not in `berth up --help`:\n{stdout}"));
        if let Some(default) = default {
            // clap writes the default beside the variable, on the same line or the next.
            let around = stdout.lines().skip(line).take(2).collect::<String>();
            assert!(
                around.contains(&format!("[default: {default}]")),
                "{variable}'s default {default} is not shown: {around}"
            );
        }
    }
    // Each command lists what it reads, and only that; `berth config` lists every setting.
    for (args, listed, not_listed) in [
        (
            &["up"][..],
            &["BERTH_WEBHOOK_CA", "BERTH_BACKENDAI_MASTER_KEY"][..],
            &["BERTH_API_KEY", "BERTH_AGENT_DATA", "BERTH_MOCK_GPUS"][..],
        ),
        (
            &["session", "ls"],
            &[
                "BERTH_GATEWAY_URL",
                "BERTH_API_KEY",
                "BERTH_PROFILE",
                "BERTH_LOG_FORMAT",
            ],
            &[
                "BERTH_DATABASE_URL",
                "BERTH_NATS_URL",
                "BERTH_HEARTBEAT_TIMEOUT_SECS",
            ],
        ),
        (
            &["agent"],
            &[
                "BERTH_NATS_URL",
                "BERTH_AGENT_DATA",
                "BERTH_AGENT_LEAVE_SECS",
            ],
            &[
                "BERTH_DATABASE_URL",
                "BERTH_API_KEY",
                "BERTH_SCHEDULER_INTERVAL_MS",
            ],
        ),
        (
            &["config"],
            &["BERTH_DATABASE_URL", "BERTH_API_KEY", "BERTH_MOCK_GPUS"],
            &[],
        ),
    ] {
        let args = [args, &["--help"]].concat();
        let (code, stdout, stderr) = berth(&args, &[]);
        assert_eq!(code, Some(0), "{stderr}");
        for variable in listed {
            assert!(
                stdout.contains(&format!("[env: {variable}")),
                "{variable} is not in `berth {args:?}`:\n{stdout}"
            );
        }
        for variable in not_listed {
            assert!(
                !stdout.contains(&format!("[env: {variable}")),
                "{variable} is in `berth {args:?}`:\n{stdout}"
            );
        }
    }
}

#[test]
fn a_command_still_takes_a_setting_its_help_does_not_list() {
    // The client's settings are not in `berth up --help`, the server's not in `berth session
    // ... --help`; each is still read from its flag or variable, wherever it is written.
    let (code, stdout, stderr) = berth(
        &[
            "config",
            "--api-key",
            "bk_hidden",
            "--database-url",
            "postgres://db/x",
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("BERTH_API_KEY=bk_h****\t# flag"),
        "{stdout}"
    );
    let (code, _, stderr) = berth(&["--nats-url", "nats://x:1", "config"], &[]);
    assert_eq!(code, Some(0), "a setting before the command: {stderr}");
    let (code, _, stderr) = berth(&["session", "ls", "--heartbeat-timeout-secs", "soon"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--heartbeat-timeout-secs"), "{stderr}");
}

#[test]
fn config_prints_the_settings_in_force_with_secrets_masked() {
    let (code, stdout, stderr) = berth(
        &["config", "--heartbeat-timeout-secs", "45"],
        &[
            ("BERTH_NATS_URL", "nats://berth:hunter2@nats.lab:4222"),
            ("BERTH_API_KEY", "bk_0123456789abcdef"),
            ("BERTH_PROXY_PORTS", ""),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let line = |variable: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{variable}=")))
            .unwrap_or_else(|| panic!("{variable} missing from `berth config`:\n{stdout}"))
            .to_owned()
    };
    assert_eq!(
        line("BERTH_NATS_URL"),
        "BERTH_NATS_URL=nats://berth:****@nats.lab:4222\t# environment"
    );
    assert_eq!(
        line("BERTH_API_KEY"),
        "BERTH_API_KEY=bk_0****\t# environment"
    );
    assert_eq!(
        line("BERTH_HEARTBEAT_TIMEOUT_SECS"),
        "BERTH_HEARTBEAT_TIMEOUT_SECS=45\t# flag"
    );
    assert_eq!(
        line("BERTH_PROXY_PORTS"),
        "BERTH_PROXY_PORTS=10200-10299\t# default",
        "an empty variable is unset"
    );
    assert!(
        !stdout.contains("hunter2") && !stdout.contains("0123456789"),
        "{stdout}"
    );
}

#[test]
fn an_agent_refuses_to_offer_gpus_its_discovery_does_not_find() {
    // One mock GPU declared, two offered: refused before the engine or NATS is reached.
    let data = std::env::temp_dir().join(format!("berth-gpu-refusal-{}", std::process::id()));
    let data_dir = data.to_str().unwrap();
    let (code, _, stderr) = berth(
        &["agent", "--gpu", "2", "--data-dir", data_dir],
        &[
            ("BERTH_MOCK_GPUS", "1"),
            ("BERTH_MOCK_GPU_MODEL", "Mock A100"),
        ],
    );
    let _ = std::fs::remove_dir_all(&data);
    assert!(matches!(code, Some(c) if c != 0), "{code:?}: {stderr}");
    assert!(
        stderr.contains("--gpu: offers 2 GPUs, but this host's discovery found 1: Mock A100"),
        "{stderr}"
    );
}
