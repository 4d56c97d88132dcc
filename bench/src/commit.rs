//! `berth bench commit`: a RUNNING `berth/python` session committed to a customized image,
//! from the request to its `SessionCommitEnded` (the image-commit service, the agent's
//! commit through the Engine API and its reports), next to the Engine API's bare commit of
//! the same container (the like-for-like baseline: what the agent itself calls) and the
//! `docker commit` CLI (which also pays a process spawn), in the same run, taking turns.
//! Only commits that ended done are timed; those that failed are counted and said.

use std::time::{Duration, Instant};

use events::payloads::*;
use uuid::Uuid;

use crate::db;
use crate::sessions::{
    bench_docker_agent, bench_engine, end_session, percentile, recorder_on_bus, relay_on_bus,
    superadmin, woken_scheduler,
};

const GIB: u64 = 1 << 30;
const IMAGE: &str = "berth/python:latest";

pub async fn commit(nats_url: &str, url: &str, rounds: usize) -> anyhow::Result<()> {
    let pool = events::store::pool(url, 16)?;
    berth::app::migrate(&pool).await?;
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
    let mut api_times = Vec::new();
    let mut cli_times = Vec::new();
    let mut failures: Vec<String> = Vec::new();
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
        let outcome = loop {
            let client = pool.get().await?;
            if let Some(outcome) = db::commit_outcome(&client, commit_id).await? {
                break outcome;
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
        };
        let took = started.elapsed().as_secs_f64() * 1000.0;
        match outcome {
            // A commit that failed fast is no fast commit: not timed.
            CommitOutcome::Done { .. } => berth_times.push(took),
            CommitOutcome::Failed { reason } => failures.push(reason),
        }
        let _ = docker.remove_image(&image, None, None).await;

        // What the agent calls, bare: the Engine API's commit, pausing the container.
        let baseline = format!("berth-bench-commit-api:{}-{round}", std::process::id());
        let (repo, tag) = baseline.split_once(':').expect("a tag");
        let options = bollard::image::CommitContainerOptions {
            container: container.clone(),
            repo: repo.to_owned(),
            tag: tag.to_owned(),
            pause: true,
            ..Default::default()
        };
        let started = Instant::now();
        docker
            .commit_container(options, bollard::container::Config::<String>::default())
            .await?;
        api_times.push(started.elapsed().as_secs_f64() * 1000.0);
        let _ = docker.remove_image(&baseline, None, None).await;

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
    end_session(&pool, session).await?;
    stop.cancel();
    let done = berth_times.len();
    println!(
        "commit of a RUNNING {IMAGE} session over {rounds} rounds: {done} ended done, {} failed{}",
        failures.len(),
        failures
            .first()
            .map(|why| format!(" (the first: {why})"))
            .unwrap_or_default()
    );
    if done == 0 {
        anyhow::bail!("no commit ended done: nothing to compare");
    }
    berth_times.sort_by(f64::total_cmp);
    api_times.sort_by(f64::total_cmp);
    cli_times.sort_by(f64::total_cmp);
    let p50 = |v: &[f64]| percentile(v, 0.5);
    let max = |v: &[f64]| v.last().copied().unwrap_or_default();
    println!(
        "  berth (request to SessionCommitEnded, the {done} done) p50 {:.0} ms, max {:.0} ms; bare Engine API commit of the same container p50 {:.0} ms, max {:.0} ms; berth/bare API at p50 = {:.2}",
        p50(&berth_times),
        max(&berth_times),
        p50(&api_times),
        max(&api_times),
        p50(&berth_times) / p50(&api_times),
    );
    println!(
        "  `docker commit` CLI (a process spawn more) p50 {:.0} ms, max {:.0} ms; berth/docker commit at p50 = {:.2}",
        p50(&cli_times),
        max(&cli_times),
        p50(&berth_times) / p50(&cli_times),
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
