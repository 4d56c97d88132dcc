//! `berth bench store`: appends (single and batched) and reading the whole log, each next to
//! raw PostgreSQL (pgbench inserting the same columns, a `COPY` of the same rows). The
//! appends run in rounds, raw and berth in turn, and the median round's ratio is the figure:
//! on a shared VM the raw rate alone moves by a third from one minute to the next.

use std::process::Command as Process;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use events::catalogue::{Event, Metadata};
use events::payloads::{AgentRegistered, ResourceSlots};
use events::store::{self, EventStore, ExpectedVersion, LogPosition, ProposedEvent};
use tokio_util::sync::CancellationToken;

use crate::db;

/// The event every store benchmark writes: an agent registration, about 200 bytes of JSON.
pub fn sample_event() -> Event {
    Event::AgentRegistered(AgentRegistered {
        unlabelled_images: Vec::new(),
        agent_id: "agent-0042.rack7.example".into(),
        resource_group: "default".into(),
        capacity: ResourceSlots {
            cpu_milli: 64_000,
            memory_bytes: 256 << 30,
            gpu_milli: 8_000,
        },
        images: vec!["berth/python:3.11".into(), "berth/shell:latest".into()],
        address: Some("10.0.7.42:6001".into()),
        image_apps: Default::default(),
        network_scope: None,
        volumes: Default::default(),
    })
}

/// How `store_bench` runs.
pub struct StoreShape {
    /// How long each append phase runs.
    pub phase: Duration,
    pub writers: usize,
    /// Whether the audit sealer runs beside berth's appends (as it does beside a platform's).
    pub sealer: bool,
    /// Rounds of each kind of append (at least one).
    pub rounds: usize,
}

pub async fn store_bench(url: &str, shape: StoreShape) -> anyhow::Result<()> {
    let StoreShape {
        phase,
        writers,
        sealer,
        rounds,
    } = shape;
    let pool = store::pool(url, writers + 8)?;
    berth::app::migrate(&pool).await?;
    db::create_raw_events(&pool).await?;
    let store = EventStore::new(pool.clone());
    let payload = sample_event().to_payload().to_string();
    println!(
        "berth bench store: {writers} writers, {}s per phase, {rounds} rounds of each kind, payload {} bytes, sealer {}",
        phase.as_secs(),
        payload.len(),
        if sealer { "running" } else { "off" }
    );

    let batch_script = db::pgbench_batch_insert();
    for (what, script, per_append) in [
        ("single-event appends", db::PGBENCH_SINGLE_INSERT, 1),
        (
            "batched appends (100 per transaction)",
            batch_script.as_str(),
            100,
        ),
    ] {
        let mut measured = Vec::with_capacity(rounds);
        for round in 0..rounds {
            let raw = || pgbench(url, script, &payload, writers, phase);
            // Raw first in even rounds, berth first in odd ones: a drift of the VM's speed
            // over the rounds falls on both sides alike.
            let (berth, raw) = if round % 2 == 0 {
                let raw = raw()? * per_append as f64;
                (
                    append_phase(&store, writers, per_append, phase, sealer).await?,
                    raw,
                )
            } else {
                let berth = append_phase(&store, writers, per_append, phase, sealer).await?;
                (berth, raw()? * per_append as f64)
            };
            if rounds > 1 {
                println!(
                    "  round {}: berth {berth:.0} events/s, raw {raw:.0} events/s, ratio {:.0}%",
                    round + 1,
                    100.0 * berth / raw
                );
            }
            measured.push((berth, raw));
        }
        report_rounds(what, &measured);
    }

    let (berth_read, rows) = read_phase(&store).await?;
    let raw_read = copy_phase(url).await?;
    report(
        &format!("read whole log in global order ({rows} events)"),
        "events/s",
        berth_read,
        raw_read,
    );
    Ok(())
}

/// `berth bench seal`: `events` events appended (the relay bench's backlog), then sealed by
/// the sealer alone, then verified; each timed next to a raw `COPY` of the same rows in the
/// same order, run just before it.
pub async fn seal_bench(url: &str, events: u64) -> anyhow::Result<()> {
    let pool = store::pool(url, 16)?;
    berth::app::migrate(&pool).await?;
    let store = EventStore::new(pool.clone());
    crate::relay::write_backlog(&store, events).await?;
    let logged = db::log_length(&pool.get().await?).await?;
    println!(
        "berth bench seal: {logged} events of {} bytes",
        sample_event().to_payload().to_string().len()
    );

    let raw = copy_phase(url).await?;
    let started = Instant::now();
    let sealed = events::audit::seal_all(&pool).await?;
    let sealing = sealed as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(sealed == logged, "sealed {sealed} of {logged} events");
    report(
        &format!("sealing ({sealed} events)"),
        "events/s",
        sealing,
        raw,
    );

    let raw = copy_phase(url).await?;
    let started = Instant::now();
    let verified = events::audit::verify(&pool).await?;
    let verifying = verified.sealed as f64 / started.elapsed().as_secs_f64();
    anyhow::ensure!(
        verified.first_break.is_none() && verified.sealed as u64 == logged,
        "the chain did not verify whole: {verified:?}"
    );
    report(
        &format!("verifying ({} links)", verified.sealed),
        "events/s",
        verifying,
        raw,
    );
    Ok(())
}

fn report(what: &str, unit: &str, berth: f64, raw: f64) {
    println!(
        "{what}: berth {berth:.0} {unit}, raw PostgreSQL {raw:.0} {unit}, ratio {:.0}%",
        100.0 * berth / raw
    );
}

/// The rounds of one kind of append summed up: the round whose ratio is the median, its
/// rates beside it, and every round's ratio.
fn report_rounds(what: &str, rounds: &[(f64, f64)]) {
    let (berth, raw) = median_round(rounds);
    if rounds.len() == 1 {
        return report(what, "events/s", berth, raw);
    }
    let ratios: Vec<String> = rounds
        .iter()
        .map(|(b, r)| format!("{:.0}%", 100.0 * b / r))
        .collect();
    println!(
        "{what}: berth {berth:.0} events/s, raw PostgreSQL {raw:.0} events/s, ratio {:.0}% (the median of {} rounds: {})",
        100.0 * berth / raw,
        rounds.len(),
        ratios.join(", ")
    );
}

/// The round (berth's rate, raw's rate) whose ratio is the median (the lower middle one of
/// an even count).
fn median_round(rounds: &[(f64, f64)]) -> (f64, f64) {
    let mut sorted = rounds.to_vec();
    sorted.sort_by(|a, b| (a.0 / a.1).total_cmp(&(b.0 / b.1)));
    sorted[(sorted.len() - 1) / 2]
}

/// Runs pgbench with `script` (which binds `:payload` and `:metadata`) and returns its
/// transactions per second.
pub(crate) fn pgbench(
    url: &str,
    script: &str,
    payload: &str,
    clients: usize,
    phase: Duration,
) -> anyhow::Result<f64> {
    let path = std::env::temp_dir().join(format!("berth-bench-{}.sql", std::process::id()));
    std::fs::write(&path, script)?;
    let output = Process::new("pgbench")
        .args([
            "-n",
            "-M",
            "prepared",
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-T",
        ])
        .arg(phase.as_secs().to_string())
        .arg("-D")
        .arg(format!("payload={payload}"))
        .arg("-D")
        .arg(r#"metadata={"actor":"bench"}"#)
        .arg("-f")
        .arg(&path)
        .arg(url)
        .output()
        .context("run pgbench (Debian's postgresql-client)")?;
    let _ = std::fs::remove_file(&path);
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "pgbench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    text.lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .context("pgbench printed no tps")
}

/// `writers` tasks append `per_append` events at a time to streams of their own, with the
/// exact expected version, for `phase`. Returns events per second.
async fn append_phase(
    store: &EventStore,
    writers: usize,
    per_append: usize,
    phase: Duration,
    sealer: bool,
) -> anyhow::Result<f64> {
    let total = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let stop_sealer = CancellationToken::new();
    let sealer_task = sealer.then(|| {
        let pool = store.pool().clone();
        let stop = stop_sealer.clone();
        // Paced as the platform's sealer is, resting a fifth of a second when it is idle.
        tokio::spawn(async move {
            events::audit::keep_sealing(&pool, Duration::from_millis(200), &stop).await
        })
    });
    let event = sample_event();
    let sealed = || async {
        let head = events::audit::head(store.pool()).await?;
        anyhow::Ok(head.map_or(0, |h| h.audit_seq))
    };
    let sealed_before = sealed().await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, total, done, event) =
            (store.clone(), total.clone(), done.clone(), event.clone());
        tasks.push(tokio::spawn(async move {
            let mut versions: Vec<Option<u64>> = vec![None; 64];
            let mut round = 0usize;
            let run = uuid::Uuid::new_v4().simple().to_string();
            while !done.load(Ordering::Relaxed) {
                let slot = round % versions.len();
                let stream = format!("agent-{run}-{w}-{slot}");
                let batch: Vec<ProposedEvent> = (0..per_append)
                    .map(|_| {
                        ProposedEvent::new(
                            &event,
                            Metadata {
                                actor: Some("bench".into()),
                                ..Metadata::default()
                            },
                        )
                    })
                    .collect();
                let expected =
                    versions[slot].map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact);
                // As the services append (`ledger::record`): events built from the typed
                // catalogue are held to the store's limits, not decoded again.
                store::check_limits(&stream, &batch)?;
                let client = store.pool().get().await?;
                let appended = store::append_with(&client, &stream, expected, &batch).await?;
                versions[slot] = Some(appended.stream_version);
                total.fetch_add(per_append as u64, Ordering::Relaxed);
                round += 1;
            }
            Ok::<_, events::StoreError>(())
        }));
    }
    tokio::time::sleep(phase).await;
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop_sealer.cancel();
    if let Some(task) = sealer_task {
        task.await??;
        // Whether the sealer keeps up: what it sealed over the phase, and what it left.
        let sealed_after = sealed().await?;
        let sealed_rate = (sealed_after - sealed_before) as f64 / elapsed;
        let unsealed = db::log_length(&store.pool().get().await?).await? as i64 - sealed_after;
        println!(
            "  sealer beside {per_append}-event appends: {sealed_rate:.0} events/s sealed, {unsealed} left unsealed at the end"
        );
    }
    Ok(total.load(Ordering::Relaxed) as f64 / elapsed)
}

/// Reads the whole log in global order into typed events. Returns (events/s, events).
async fn read_phase(store: &EventStore) -> anyhow::Result<(f64, u64)> {
    let client = store.pool().get().await?;
    let started = Instant::now();
    let rows = store::read_through(&client, LogPosition::START, 20_000, |_| Ok(())).await?;
    Ok((rows as f64 / started.elapsed().as_secs_f64(), rows))
}

/// COPY of the same rows, in the same order, out of PostgreSQL as text. Returns rows/s.
async fn copy_phase(url: &str) -> anyhow::Result<f64> {
    let client = db::connect(url).await?;
    let started = Instant::now();
    let rows = db::copy_events_out(&client).await?;
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::median_round;

    #[test]
    fn the_median_round_is_chosen_by_its_ratio_not_its_rates() {
        // Ratios 50%, 40%, 60%: the median is the first round, though its rates are neither
        // side's median.
        let rounds = [(5_000.0, 10_000.0), (8_000.0, 20_000.0), (3_000.0, 5_000.0)];
        assert_eq!(median_round(&rounds), (5_000.0, 10_000.0));
        // An even count takes the lower middle one.
        assert_eq!(median_round(&rounds[1..]), (8_000.0, 20_000.0));
        assert_eq!(median_round(&rounds[..1]), (5_000.0, 10_000.0));
    }
}
