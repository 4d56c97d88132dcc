//! `berth bench reap`: the idle-reaper's figures.
//!
//! - Delay: sessions whose lifetime runs out at known moments; the time from that moment to
//!   the reaper's `SessionIdleReaped`, by the log's clock. Baseline in the same run: the bench
//!   itself terminating sessions at the moment they fall due (a timer in process and the same
//!   lifecycle command), the least any reaper can take.
//! - CPU: the process's CPU while the reaper watches `watched` sessions, next to the same
//!   process while it watches none; and the checkers' own cost, `Watchlist::due` over that
//!   many RUNNING sessions each holding a whole window of usage.

use std::time::{Duration, Instant};

use chrono::Utc;
use deadpool_postgres::Pool;
use events::idleness::*;
use events::payloads::*;
use uuid::Uuid;

use crate::db;
use crate::fleet::cpu_seconds;
use crate::sessions::{admit_for_bench, percentile, relay_on_bus, small_shell, superadmin};

/// Lifetime of the sessions of the delay phase.
const LIFETIME_SECS: u64 = 2;

pub async fn reap(
    nats_url: &str,
    url: &str,
    sessions: usize,
    watched: usize,
    window: Duration,
) -> anyhow::Result<()> {
    let pool = events::store::pool(url, 16)?;
    berth::app::migrate(&pool).await?;
    launcher::access::bootstrap(&pool).await?;
    let offer = bus::protocol::Offer {
        unlabelled_images: Vec::new(),
        resource_group: "default".into(),
        capacity: ResourceSlots {
            cpu_milli: 100_000_000,
            memory_bytes: 1 << 55,
            gpu_milli: 0,
        },
        images: vec!["berth/shell:latest".into()],
        address: None,
        image_apps: Default::default(),
        network_scope: None,
        volumes: Default::default(),
    };
    // Registered so the launcher takes the sessions; no scheduler runs, so they stay queued
    // (the lifetime counts from creation, whatever the status).
    admit_for_bench(&pool, "reap1").await?;
    recorder::record::register(&pool, "reap1", &offer).await?;
    let admin = superadmin(&pool, "reaper@berth.local").await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let (nats, js, topology) = relay_on_bus(nats_url, url, &pool, &stop).await?;
    let id = std::process::id();
    let subjects = bus::Subjects {
        root: format!("benchreap{id}"),
        commands_stream: format!("BENCH_REAP_CMDS_{id}"),
        telemetry_stream: format!("BENCH_REAP_TEL_{id}"),
    };

    // Baseline: the bench terminates each session itself the moment it falls due.
    let baseline = {
        let mut due = Vec::with_capacity(sessions);
        for _ in 0..sessions {
            let launched = launcher::launch::launch(&pool, &admin, small_shell(1)).await?;
            due.push(launched[0].session_id);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for &session in &due {
            let created = db::requested_at(&pool, session).await?;
            let at = created + chrono::Duration::seconds(LIFETIME_SECS as i64);
            let wait = (at - Utc::now()).to_std().unwrap_or_default();
            tokio::time::sleep(wait).await;
            let metadata = events::trace::metadata("bench", None);
            events::lifecycle::command(&pool, session, &metadata, |s| {
                s.terminate(false, "due".into())
            })
            .await?;
        }
        delays(&pool, &due, "SessionTerminationRequested").await?
    };

    launcher::access::set_idle_checks(
        &pool,
        IdleScope::ResourceGroup("default".into()),
        IdleChecks {
            max_lifetime_secs: Some(LIFETIME_SECS),
            ..Default::default()
        },
    )
    .await?;
    let reaper = tokio::spawn(idle_reaper::run(
        nats.clone(),
        pool.clone(),
        subjects.clone(),
        topology.clone(),
        Default::default(),
        stop.clone(),
    ));
    let mut reaped = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let launched = launcher::launch::launch(&pool, &admin, small_shell(1)).await?;
        reaped.push(launched[0].session_id);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let waited = Instant::now();
    let client = pool.get().await?;
    while db::count_events(&client, &["SessionIdleReaped"]).await? < sessions as i64 {
        anyhow::ensure!(
            waited.elapsed() < Duration::from_secs(60),
            "the reaper did not reap every session within a minute"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(client);
    let measured = delays(&pool, &reaped, "SessionIdleReaped").await?;
    println!(
        "reapable to reaped over {sessions} sessions (log clock, tick 250 ms): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; baseline (terminated by the bench when due) p50 {:.0} ms, p99 {:.0} ms",
        percentile(&measured, 0.5),
        percentile(&measured, 0.99),
        measured.last().copied().unwrap_or_default(),
        percentile(&baseline, 0.5),
        percentile(&baseline, 0.99),
    );

    // CPU: an hour's lifetime and a utilization check, none due; first no session watched.
    launcher::access::set_idle_checks(
        &pool,
        IdleScope::ResourceGroup("default".into()),
        IdleChecks {
            max_lifetime_secs: Some(3600),
            network_idle_timeout_secs: Some(3600),
            utilization: Some(UtilizationCheck {
                grace_period_secs: 600,
                window_secs: 600,
                thresholds: Thresholds {
                    cpu_percent: Some(5.0),
                    memory_percent: Some(5.0),
                    ..Default::default()
                },
                combine: Combine::All,
            }),
        },
    )
    .await?;
    // Settled for 2 s of a 10 s window.
    tokio::time::sleep(window / 5).await;
    let idle_cpu = process_cpu(window).await;
    for _ in 0..watched.div_ceil(100) {
        launcher::launch::launch(&pool, &admin, small_shell(100)).await?;
    }
    // The window opens once the reaper has folded every session in (its folding is not the
    // watching measured), and a second more for the rest of their events to settle.
    let waited = Instant::now();
    let client = pool.get().await?;
    while db::reaper_watching(&client).await? < watched as i64 {
        anyhow::ensure!(
            waited.elapsed() < Duration::from_secs(120),
            "the reaper did not fold {watched} sessions in within two minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(client);
    tokio::time::sleep(window / 10).await;
    let watching_cpu = process_cpu(window).await;
    println!(
        "the process's CPU while the reaper watches {watched} queued sessions: {:.2}% of a core; watching none (baseline): {:.2}%",
        watching_cpu * 100.0,
        idle_cpu * 100.0
    );
    stop.cancel();
    let _ = reaper.await;

    let (per_pass, per_second) = checkers_cost(watched);
    println!(
        "the checkers over {watched} RUNNING sessions, each with 120 readings (a 600 s window at 5 s): {:.2} ms a pass, {:.2}% of a core at 4 passes a second",
        per_pass * 1000.0,
        per_second * 100.0
    );
    js.delete_stream(&topology.stream).await?;
    let _ = js.delete_stream(&subjects.telemetry_stream).await;
    let _ = js.delete_stream(&subjects.commands_stream).await;
    Ok(())
}

/// Milliseconds from each session's due moment (creation plus the lifetime) to its first
/// `event_type` event, sorted.
async fn delays(pool: &Pool, sessions: &[Uuid], event_type: &str) -> anyhow::Result<Vec<f64>> {
    let mut took = Vec::with_capacity(sessions.len());
    for &session in sessions {
        let seconds = db::requested_to(pool, session, event_type).await?;
        took.push((seconds - LIFETIME_SECS as f64) * 1000.0);
    }
    took.sort_by(f64::total_cmp);
    Ok(took)
}

/// This process's CPU over `window`, as a share of one core.
async fn process_cpu(window: Duration) -> f64 {
    let before = cpu_seconds(std::process::id());
    tokio::time::sleep(window).await;
    (cpu_seconds(std::process::id()) - before) / window.as_secs_f64()
}

/// `Watchlist::due` over `sessions` RUNNING sessions with a whole window of readings: the
/// seconds one pass takes, and the share of a core four passes a second take.
fn checkers_cost(sessions: usize) -> (f64, f64) {
    let now = Utc::now();
    let mut list = idle_reaper::watch::Watchlist::default();
    list.checks.insert(
        IdleScope::ResourceGroup("default".into()),
        IdleChecks {
            max_lifetime_secs: Some(3600),
            network_idle_timeout_secs: Some(3600),
            utilization: Some(UtilizationCheck {
                grace_period_secs: 60,
                window_secs: 600,
                thresholds: Thresholds {
                    cpu_percent: Some(5.0),
                    memory_percent: Some(5.0),
                    ..Default::default()
                },
                combine: Combine::All,
            }),
        },
    );
    for _ in 0..sessions {
        let session_id = Uuid::now_v7();
        let mut w = Watched {
            session_id,
            owner: Uuid::nil(),
            session_type: SessionType::Interactive,
            resource_group: "default".into(),
            resources: ResourceSlots {
                cpu_milli: 1000,
                memory_bytes: 1 << 30,
                gpu_milli: 0,
            },
            created_at: now - chrono::Duration::seconds(700),
            lifetime_cap_secs: None,
            network_idle_cap_secs: None,
            agent_id: Some("a1".into()),
            running_since: Some(now - chrono::Duration::seconds(650)),
            exempt: false,
            usage: Default::default(),
            last_traffic_at: None,
            observed_since: None,
        };
        for i in (0..120).rev() {
            w.observe(
                UsagePoint {
                    at: now - chrono::Duration::seconds(i * 5),
                    cpu_percent: Some(50.0),
                    memory_bytes: Some(1 << 29),
                    gpu_percent: None,
                    gpu_memory_percent: None,
                    network_bytes: Some(i as u64),
                },
                600,
            );
        }
        list.sessions.insert(session_id, w);
    }
    let passes = 40;
    let started = Instant::now();
    for _ in 0..passes {
        assert!(list.due(now).is_empty(), "busy sessions are kept");
    }
    let per_pass = started.elapsed().as_secs_f64() / passes as f64;
    (per_pass, per_pass * 4.0)
}
