//! `berth bench fleet`: many simulated agents on the bus, against the control plane run as a
//! separate `berth up` process, as an operator runs it. Measured in one run, each next to its
//! baseline: with no agent, then with all of them registered and idle (just after the
//! registrations, and again once settled), the PostgreSQL connections in use, the CPU of the
//! control-plane process and of PostgreSQL; then batch sessions created at once, placed, run
//! and ended by the agents through NATS, per second.

use std::path::Path;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use events::payloads::*;
use tokio_util::sync::CancellationToken;

use crate::sessions::shell_image;

/// Seconds of CPU (user and system) a process has used, from `/proc/<pid>/stat`.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name may hold spaces: the fields start after its closing parenthesis.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name and state.
    (ticks(11) + ticks(12)) / 100.0
}

/// Seconds of CPU every PostgreSQL process on this machine has used.
fn postgres_cpu_seconds() -> f64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .map(cpu_seconds)
        .sum()
}

/// The connections to the bench's database.
async fn connections(pool: &Pool, database: &str) -> anyhow::Result<i64> {
    let client = pool.get().await?;
    crate::db::connections_to(&client, database).await
}

/// Over `window`: the control plane's CPU and PostgreSQL's, in percent of one core.
async fn idle_cpu(control_plane: u32, window: Duration) -> (f64, f64) {
    let (c0, p0) = (cpu_seconds(control_plane), postgres_cpu_seconds());
    tokio::time::sleep(window).await;
    let (c1, p1) = (cpu_seconds(control_plane), postgres_cpu_seconds());
    let secs = window.as_secs_f64();
    ((c1 - c0) / secs * 100.0, (p1 - p0) / secs * 100.0)
}

/// What a run measures: `agents` simulated agents, `sessions` batch sessions, the window
/// each idle CPU figure is measured over, and how long after the last registration the
/// settled one begins.
pub struct Shape {
    pub agents: usize,
    pub sessions: usize,
    pub window: Duration,
    pub settle: Duration,
}

/// Runs the bench.
pub async fn fleet(
    berth_binary: &Path,
    nats_url: &str,
    url: &str,
    database: &str,
    shape: Shape,
) -> anyhow::Result<()> {
    let pool = events::store::pool(url, 4)?;
    berth::app::migrate(&pool).await?;
    let id = std::process::id();
    let subjects = bus::Subjects {
        root: format!("fleet{id}"),
        commands_stream: format!("FLEET_CMDS_{id}"),
        telemetry_stream: format!("FLEET_TEL_{id}"),
    };
    let events_stream = format!("FLEET_{id}");
    let data = std::env::temp_dir().join(format!("berth-fleet-{id}"));
    std::fs::create_dir_all(&data)?;
    let log = std::fs::File::create(data.join("up.log"))?;
    let mut up = std::process::Command::new(berth_binary)
        .arg("up")
        .env("BERTH_DATABASE_URL", url)
        .env("BERTH_NATS_URL", nats_url)
        .env("BERTH_NATS_STREAM", &events_stream)
        .env("BERTH_NATS_PREFIX", format!("fleet{id}.evt"))
        .env("BERTH_NATS_AGENT_ROOT", &subjects.root)
        .env("BERTH_NATS_COMMANDS_STREAM", &subjects.commands_stream)
        .env("BERTH_NATS_TELEMETRY_STREAM", &subjects.telemetry_stream)
        .env("BERTH_GATEWAY_LISTEN", "127.0.0.1:0")
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let result = run_fleet(&pool, up.id(), nats_url, database, &subjects, &data, shape).await;
    let _ = up.kill();
    let _ = up.wait();
    let js = async_nats::jetstream::new(bus::link::connect_as_url_says(nats_url).await?);
    for stream in [
        &events_stream,
        &subjects.commands_stream,
        &subjects.telemetry_stream,
    ] {
        let _ = js.delete_stream(stream).await;
    }
    let _ = std::fs::remove_dir_all(&data);
    result
}

async fn run_fleet(
    pool: &Pool,
    control_plane: u32,
    nats_url: &str,
    database: &str,
    subjects: &bus::Subjects,
    data: &Path,
    Shape {
        agents,
        sessions,
        window,
        settle,
    }: Shape,
) -> anyhow::Result<()> {
    // The control plane up, with no agent (settled for 3 s of a 10 s window).
    tokio::time::sleep(window * 3 / 10).await;
    let (cp_none, pg_none) = idle_cpu(control_plane, window).await;
    let conns_none = connections(pool, database).await?;

    let capacity = ResourceSlots {
        cpu_milli: 16_000,
        memory_bytes: 64 << 30,
        gpu_milli: 0,
    };
    let stop = CancellationToken::new();
    let mut running = Vec::with_capacity(agents);
    let started = Instant::now();
    for i in 0..agents {
        let agent_id = format!("sim{i:05}");
        let admission = recorder::admission::Admission {
            agent_id: agent_id.clone(),
            resource_group: "default".into(),
            max_capacity: capacity,
        };
        let seed = recorder::admission::admit(pool, &admission, "bench").await?;
        let host = agent::host::HostConfig {
            outbox: data.join(&agent_id),
            agent_id,
            resource_group: "default".into(),
            offer: agent::host::Offered::fixed(capacity, shell_image()),
            nats: agent::host::Nats::Connect {
                url: nats_url.into(),
                seed: Some(seed),
                tls: bus::link::NatsTls::default(),
            },
            subjects: subjects.clone(),
            runtime: agent::host::Runtime::Simulated {
                batch_runs_for: Duration::from_secs(1),
            },
        };
        running.push(agent::host::start(host, stop.clone()).await?);
    }
    loop {
        let client = pool.get().await?;
        if crate::db::live_agents(&client).await? as usize >= agents {
            break;
        }
        drop(client);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let registered = started.elapsed();
    let last_registration = Instant::now();
    tokio::time::sleep(window * 6 / 10).await;
    let (cp_idle, pg_idle) = idle_cpu(control_plane, window).await;
    let conns_idle = connections(pool, database).await?;
    // What the registrations leave behind falls in the first window (docs/performance.md:
    // the readiness check's query ran ten times slower, and every agent's stream was read
    // once more); the second is what an installation of this size costs while nothing
    // happens.
    tokio::time::sleep(settle.saturating_sub(last_registration.elapsed())).await;
    let (cp_settled, pg_settled) = idle_cpu(control_plane, window).await;
    println!(
        "{agents} simulated agents admitted, connected and registered through NATS in {:.1} s",
        registered.as_secs_f64()
    );
    println!("idle, no agent:            control plane {cp_none:.1}% of a core, PostgreSQL {pg_none:.1}%, {conns_none} PostgreSQL connections");
    println!("idle, {agents} agents, just registered:  control plane {cp_idle:.1}% of a core, PostgreSQL {pg_idle:.1}%, {conns_idle} PostgreSQL connections");
    println!(
        "idle, {agents} agents, settled ({} s after):  control plane {cp_settled:.1}% of a core, PostgreSQL {pg_settled:.1}%",
        settle.as_secs()
    );

    // Sessions created at once, placed and run by the agents through the bus, for an owner
    // whose policy lets them all run at once (the default policy's limits would make the
    // rate the policy's, not the platform's).
    launcher::access::set_policy(
        pool,
        ResourcePolicySet {
            name: "fleet".into(),
            max_concurrent_sessions: 1_000_000,
            max_total: ResourceSlots {
                cpu_milli: u64::MAX >> 2,
                memory_bytes: u64::MAX >> 2,
                gpu_milli: u64::MAX >> 2,
            },
            max_session_lifetime_secs: None,
            max_custom_images: None,
            max_session_priority: None,
            max_pids: None,
            max_log_bytes: None,
            max_folder_bytes: None,
        },
    )
    .await?;
    let owner = {
        let (_, key) = launcher::access::create_user(
            pool,
            "fleet@berth.local",
            Role::Superadmin,
            "fleet",
            &["default".into()],
        )
        .await?;
        let client = pool.get().await?;
        events::ledger::key_owner(&client, &key)
            .await?
            .expect("just issued")
    };
    let mut ids = Vec::with_capacity(sessions);
    let started = Instant::now();
    let per_request = 100.min(sessions.max(1));
    while ids.len() < sessions {
        let request = launcher::launch::CreateSession {
            session_type: Some(SessionType::Batch),
            image: "berth/shell:latest".into(),
            startup_command: Some("true".into()),
            resources: launcher::launch::ResourceRequest {
                cpu: Some(1.0),
                memory: Some(launcher::launch::ByteSize::Bytes(1 << 30)),
                ..Default::default()
            },
            count: Some(per_request.min(sessions - ids.len()) as u32),
            ..Default::default()
        };
        let launched = launcher::launch::launch(pool, &owner, request).await?;
        ids.extend(launched.iter().map(|l| l.session_id));
    }
    let created = started.elapsed();
    let mut placed_at = None;
    loop {
        let client = pool.get().await?;
        let pending = crate::db::count_in_status(&client, &ids, &[SessionStatus::Pending]).await?;
        let ended = crate::db::count_in_status(&client, &ids, &SessionStatus::TERMINAL).await?;
        drop(client);
        if pending == 0 && placed_at.is_none() {
            placed_at = Some(started.elapsed());
        }
        if ended as usize == ids.len() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "sessions did not end in 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ended = started.elapsed();
    let placed = placed_at.unwrap_or(ended);
    let client = pool.get().await?;
    let terminated =
        crate::db::count_in_status(&client, &ids, &[SessionStatus::Terminated]).await?;
    println!(
        "{sessions} batch sessions: created in {:.2} s; all placed after {:.2} s = {:.0} placements/s; all ended after {:.2} s = {:.0} sessions run/s ({terminated} TERMINATED)",
        created.as_secs_f64(),
        placed.as_secs_f64(),
        sessions as f64 / placed.as_secs_f64(),
        ended.as_secs_f64(),
        sessions as f64 / ended.as_secs_f64(),
    );
    stop.cancel();
    for agent in running {
        let _ = agent.finished().await;
    }
    Ok(())
}
