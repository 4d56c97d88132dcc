//! `berth bench commit`: a RUNNING `berth/python` session committed to a customized image,
//! from the request to its `SessionCommitEnded` (the image-commit service, the agent's
//! `docker commit` through the engine API and its reports), next to the `docker commit` CLI of
//! the same container in the same run, taking turns.

// A benchmark measures wall-clock time on purpose, outside any runtime's clock.
#![allow(clippy::disallowed_types)]

use std::time::{Duration, Instant};

use events::payloads::*;
use uuid::Uuid;

use crate::bench_sessions::{
    bench_docker_agent, bench_engine, end_session, percentile, recorder_on_bus, relay_on_bus,
    superadmin, woken_scheduler,
};
use crate::db;

const GIB: u64 = 1 << 30;
const IMAGE: &str = "berth/python:latest";

pub async fn commit(nats_url: &str, url: &str, rounds: usize) -> anyhow::Result<()> {
    let pool = events::store::pool(url, 16)?;
    crate::app::migrate(&pool).await?;
    launcher::access::bootstrap(&pool).await?;
    let engine = bench_engine(IMAGE).await?;
    let docker = engine.docker.clone();
    let agent_id = format!("commit{}", std::process::id());
    let stop = tokio_util::sync::CancellationToken::new();
    let (nats, js, topology) = relay_on_bus(nats_url, url, &pool, &stop).await?;
    let subjects = recorder_on_bus(&nats, &pool, &topology, &stop);
    let mut committer = tokio::spawn(image_commit::run(
        nats.clone(),
        pool.clone(),
        subjects.clone(),
        topology.clone(),
        Default::default(),
        stop.clone(),
    ));
    let capacity = ResourceSlots {
        cpu_milli: 8_000,
        memory_bytes: 8 * GIB,
        gpu_milli: 0,
    };
    // It runs until `stop`.
    bench_docker_agent(
        &pool,
        &agent_id,
        capacity,
        &engine,
        nats.clone(),
        subjects.clone(),
        &stop,
    )
    .await?;
    woken_scheduler(
        &pool,
        nats,
        &topology,
        scheduler::run::SchedulerConfig::new(Duration::from_secs(1)),
        &stop,
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let admin = superadmin(&pool, "committer@berth.local").await?;
    let request = launcher::launch::CreateSession {
        image: IMAGE.into(),
        resources: launcher::launch::ResourceRequest {
            cpu: Some(1.0),
            memory: Some(launcher::launch::ByteSize::Bytes(512 << 20)),
            ..Default::default()
        },
        startup_command: Some(
            "python3 -c 'open(\"/opt/state\", \"w\").write(\"x\" * 1000000)' && sleep 3600".into(),
        ),
        ..Default::default()
    };
    let session = launcher::launch::launch(&pool, &admin, request).await?[0].session_id;
    let waited = Instant::now();
    loop {
        let client = pool.get().await?;
        if db::count_in_status(&client, &[session], &[SessionStatus::Running]).await? == 1 {
            break;
        }
        anyhow::ensure!(
            waited.elapsed() < Duration::from_secs(60),
            "the session did not run"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let container = format!("berth-{}-0", session.simple());

    let mut berth_times = Vec::new();
    let mut cli_times = Vec::new();
    for round in 0..rounds {
        let commit_id = Uuid::now_v7();
        let name = format!("bench{round}");
        let image = events::images::custom_image(admin.user_id, &name);
        let metadata = events::trace::metadata("bench", None);
        let started = Instant::now();
        events::lifecycle::command(&pool, session, &metadata, |s| {
            s.request_commit(commit_id, name.clone(), image.clone())
        })
        .await?;
        loop {
            let client = pool.get().await?;
            if db::count_events(&client, &["SessionCommitEnded"]).await? > round as i64 {
                break;
            }
            if committer.is_finished() {
                anyhow::bail!(
                    "the image-commit service stopped: {:?}",
                    (&mut committer).await
                );
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(120),
                "the commit did not end"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        berth_times.push(started.elapsed().as_secs_f64() * 1000.0);
        let _ = docker.remove_image(&image, None, None).await;

        let baseline = format!("berth-bench-commit:{}-{round}", std::process::id());
        let started = Instant::now();
        let status = tokio::process::Command::new("docker")
            .args(["commit", "--pause=true", &container, &baseline])
            .stdout(std::process::Stdio::null())
            .status()
            .await?;
        anyhow::ensure!(status.success(), "docker commit failed");
        cli_times.push(started.elapsed().as_secs_f64() * 1000.0);
        let _ = docker.remove_image(&baseline, None, None).await;
    }
    let client = pool.get().await?;
    let failed = db::count_events(&client, &["SessionCommitEnded"]).await?;
    drop(client);
    end_session(&pool, session).await?;
    stop.cancel();
    berth_times.sort_by(f64::total_cmp);
    cli_times.sort_by(f64::total_cmp);
    println!(
        "commit of a RUNNING {IMAGE} session over {rounds} rounds ({failed} ended): berth (request to SessionCommitEnded) p50 {:.0} ms, max {:.0} ms; `docker commit` of the same container (baseline) p50 {:.0} ms, max {:.0} ms; berth/docker at p50 = {:.2}",
        percentile(&berth_times, 0.5),
        berth_times.last().copied().unwrap_or_default(),
        percentile(&cli_times, 0.5),
        cli_times.last().copied().unwrap_or_default(),
        percentile(&berth_times, 0.5) / percentile(&cli_times, 0.5),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = docker
        .remove_container(
            &container,
            Some(bollard::container::RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            }),
        )
        .await;
    js.delete_stream(&topology.stream).await?;
    let _ = js.delete_stream(&subjects.telemetry_stream).await;
    let _ = js.delete_stream(&subjects.commands_stream).await;
    Ok(())
}
