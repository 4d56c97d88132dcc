//! `berth bench replay`: folding a whole log again, over a log of a million events, next to
//! a raw `COPY` of the same rows out of PostgreSQL (how fast the log can be read at all) and
//! next to applying events one statement at a time (how the live projection runner does it).
//!
//! The log is sessions' whole lives, recorded through the ledger as the services record them:
//! requested, a scheduling attempt, placed, PREPARING to RUNNING with a started kernel, and for
//! nine in ten, TERMINATING, TERMINATED with an exit code and the resources released; the
//! tenth stays RUNNING and holds its agent's share.

use std::time::Instant;

use chrono::Utc;
use deadpool_postgres::Pool;
use events::catalogue::Event;
use events::payloads::*;
use events::projection::{self, Projection, StreamIndex};
use events::store::ExpectedVersion;
use gateway::projection::SessionsView;
use uuid::Uuid;

use crate::db;

const GIB: u64 = 1 << 30;
/// Sessions recorded per transaction while the log is written.
const PER_TRANSACTION: usize = 200;
/// Transactions recording at once.
const WRITERS: usize = 4;

pub async fn replay(url: &str, events: u64) -> anyhow::Result<()> {
    let pool = events::store::pool(url, 16)?;
    berth::app::migrate(&pool).await?;
    let capacity = ResourceSlots {
        cpu_milli: 1_000_000,
        memory_bytes: 4_096 * GIB,
        gpu_milli: 0,
    };
    let agents = crate::sessions::register_agents(&pool, 100, capacity).await?;
    let owners = owners(&pool).await?;
    // Nine in ten sessions end (12 events), the tenth stays RUNNING (9).
    let sessions = (events * 10).div_ceil(117) as usize;
    let started = Instant::now();
    record_sessions(&pool, &agents, &owners, sessions).await?;
    let took = started.elapsed().as_secs_f64();
    let logged = count_log(&pool).await?;
    println!(
        "log: {logged} events ({sessions} sessions' lives) recorded through the ledger in {took:.1} s = {:.0} events/s",
        logged as f64 / took
    );
    wait_for_horizon(&pool).await?;
    // A quiet log: vacuumed and analysed, so that autovacuum's first pass over a million new
    // rows does not land inside one of the timed reads.
    let owner = db::connect(url).await?;
    db::vacuum_analyze(&owner).await?;

    // The baseline, taken before and after the ledger's replay: the faster of the two.
    let raw_copy = || async {
        let started = Instant::now();
        let rows = db::copy_events_out(&owner).await?;
        anyhow::Ok(rows as f64 / started.elapsed().as_secs_f64())
    };
    let raw_before = raw_copy().await?;
    let started = Instant::now();
    let ledger = events::ledger::replay(&pool).await?;
    let took = started.elapsed().as_secs_f64();
    let raw_after = raw_copy().await?;
    let raw = raw_before.max(raw_after);
    println!(
        "raw PostgreSQL: COPY of the whole log out, in order: {raw:.0} rows/s (the faster of {raw_before:.0} before the ledger replay and {raw_after:.0} after it)"
    );
    anyhow::ensure!(
        ledger.equal(),
        "the ledger differs from its fold: {:?}",
        ledger.differences
    );
    report(
        &format!(
            "ledger replay ({} tables folded and compared: equal)",
            ledger.tables
        ),
        ledger.events,
        took,
        raw,
    );

    rebuild_figures(&pool, &StreamIndex, raw).await?;
    rebuild_figures(&pool, &SessionsView, raw).await?;

    // The live runner's rate (not a baseline of the figures above: a different workload of a
    // different size): what folding costs a statement an event, as the live runner applies
    // new events to tables that already hold the log. Another tenth of the log is recorded
    // and each live projection catches up.
    record_sessions(&pool, &agents, &owners, (sessions / 10).max(1)).await?;
    wait_for_horizon(&pool).await?;
    catch_up_figures(&pool, &StreamIndex).await?;
    catch_up_figures(&pool, &SessionsView).await?;
    Ok(())
}

/// The live runner's way: every new event applied with its own statements.
async fn catch_up_figures<P: Projection>(pool: &Pool, projection: &P) -> anyhow::Result<()> {
    let started = Instant::now();
    let caught = projection::catch_up(pool, projection).await?;
    let took = started.elapsed().as_secs_f64();
    println!(
        "live runner rate, projection {}: {caught} new events applied incrementally, statements per event, to tables already holding the log, in {took:.2} s = {:.0} events/s (a different workload from the rebuilds above, not their baseline)",
        projection.name(),
        caught as f64 / took
    );
    Ok(())
}

fn report(what: &str, events: u64, seconds: f64, raw: f64) {
    let rate = events as f64 / seconds;
    println!(
        "{what}: {events} events in {seconds:.2} s = {rate:.0} events/s ({:.0}% of the raw COPY)",
        100.0 * rate / raw
    );
}

/// A first install (the whole log folded in memory and written with `COPY`), then a rebuild
/// compared with it.
async fn rebuild_figures<P: Projection>(
    pool: &Pool,
    projection: &P,
    raw: f64,
) -> anyhow::Result<()> {
    let name = projection.name();
    let logged = count_log(pool).await?;
    let started = Instant::now();
    projection::install(pool, projection).await?;
    report(
        &format!("projection {name}: first install, the log folded into empty tables"),
        logged,
        started.elapsed().as_secs_f64(),
        raw,
    );
    let started = Instant::now();
    let rebuilt = projection::rebuild(pool, projection, false).await?;
    let took = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        rebuilt.equal(),
        "projection {name} differs from its rebuild: {:?}",
        rebuilt.differences
    );
    report(
        &format!("projection {name}: rebuild, compared with the live tables (equal)"),
        rebuilt.events,
        took,
        raw,
    );
    Ok(())
}

async fn count_log(pool: &Pool) -> anyhow::Result<u64> {
    db::log_length(&pool.get().await?).await
}

/// Waits until every event is behind the horizon, so every reader sees the whole log.
async fn wait_for_horizon(pool: &Pool) -> anyhow::Result<()> {
    let client = pool.get().await?;
    while !db::log_behind_horizon(&client).await? {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn owners(pool: &Pool) -> anyhow::Result<Vec<Owner>> {
    launcher::access::bootstrap(pool).await?;
    let mut owners = Vec::new();
    for u in 0..10 {
        let email = format!("replay{u}@berth.local");
        let (user_id, _) =
            launcher::access::create_user(pool, &email, Role::User, "default", &["default".into()])
                .await?;
        owners.push(Owner {
            user_id,
            email,
            project: Some("default".into()),
        });
    }
    Ok(owners)
}

/// Records `sessions` sessions' lives, [`PER_TRANSACTION`] to a transaction, [`WRITERS`]
/// transactions at once.
async fn record_sessions(
    pool: &Pool,
    agents: &[String],
    owners: &[Owner],
    sessions: usize,
) -> anyhow::Result<()> {
    let chunks: Vec<usize> = (0..sessions)
        .step_by(PER_TRANSACTION)
        .map(|start| PER_TRANSACTION.min(sessions - start))
        .collect();
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..WRITERS {
        let pool = pool.clone();
        let agents = agents.to_vec();
        let owners = owners.to_vec();
        let mine: Vec<usize> = chunks
            .iter()
            .skip(writer)
            .step_by(WRITERS)
            .copied()
            .collect();
        writers.spawn(async move {
            let metadata = events::trace::metadata("bench", None);
            let mut n = 0usize;
            for chunk in mine {
                let mut client = pool.get().await?;
                let tx = client.transaction().await?;
                for _ in 0..chunk {
                    let agent = &agents[n % agents.len()];
                    let owner = &owners[n % owners.len()];
                    let session_id = Uuid::new_v4();
                    let life = life_of(session_id, agent, owner, !n.is_multiple_of(10));
                    events::ledger::record(
                        &tx,
                        // The stream id the services write, which the ledger's usage
                        // intervals read back (a hyphenated one left `started_at` null).
                        &events::catalogue::stream_id("session", session_id),
                        ExpectedVersion::NoStream,
                        &life,
                        &metadata,
                    )
                    .await?;
                    n += 1;
                }
                tx.commit().await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = writers.join_next().await {
        done??;
    }
    Ok(())
}

/// A session's events from its request to its end (`ends`) or to RUNNING.
fn life_of(session_id: Uuid, agent: &str, owner: &Owner, ends: bool) -> Vec<Event> {
    use SessionStatus::*;
    let resources = ResourceSlots {
        cpu_milli: 1_000,
        memory_bytes: 2 * GIB,
        gpu_milli: 0,
    };
    let kernels = vec![KernelPlacement {
        agent_id: agent.to_owned(),
        resources,
    }];
    let now = Utc::now();
    let moved = |from, to, exit_code| {
        Event::SessionStatusChanged(SessionStatusChanged {
            session_id,
            from,
            to,
            reason: None,
            exit_code,
            occurred_at: None,
        })
    };
    let mut life = vec![
        Event::SessionRequested(Box::new(SessionRequested {
            shared_mounts: Default::default(),
            session_id,
            name: format!("s{}", &session_id.simple().to_string()[..12]),
            owner: owner.clone(),
            requested_by: None,
            session_type: SessionType::Batch,
            resource_group: "default".into(),
            image: "berth/shell:latest".into(),
            environment: Default::default(),
            resources,
            shared_memory_bytes: 64 << 20,
            cluster_mode: ClusterMode::SingleNode,
            cluster_size: 1,
            agent_id: None,
            preopen_ports: vec![],
            mounts: vec![],
            startup_command: Some("python -c 'print(42)'".into()),
            starts_at: None,
            batch_timeout_secs: None,
            omp_num_threads: 1,
            max_lifetime_secs: None,
            network_idle_timeout_secs: None,
            apps: vec![],
            priority: SessionPriority::DEFAULT,
            pids_limit: None,
            log_limit_bytes: None,
            volumes: Default::default(),
        })),
        Event::SchedulingAttempted(SchedulingAttempted {
            read: None,
            session_id,
            phase: "schedule".into(),
            result: SchedulingResult::Success,
            status_before: Pending,
            status_after: Scheduled,
            attempts: 1,
            message: format!("placed on {agent}"),
            error_code: None,
            steps: vec![SchedulingStep {
                step: "select_agent".into(),
                result: SchedulingResult::Success,
                message: format!("{agent} has the most room"),
                error_code: None,
                started_at: now,
                ended_at: now,
            }],
        }),
        Event::SessionScheduled(SessionScheduled {
            session_id,
            agent_id: agent.to_owned(),
            resources,
            kernels: kernels.clone(),
        }),
        moved(Pending, Scheduled, None),
        moved(Scheduled, Preparing, None),
        moved(Preparing, Prepared, None),
        moved(Prepared, Creating, None),
        Event::KernelStarted(KernelStarted {
            session_id,
            kernel: 0,
            agent_id: agent.to_owned(),
            container_id: session_id.simple().to_string(),
            ports: vec![],
            hostname: Some("main1".into()),
            address: None,
            started_at: None,
        }),
        moved(Creating, Running, None),
    ];
    if ends {
        life.extend([
            moved(Running, Terminating, None),
            moved(Terminating, Terminated, Some(0)),
            Event::SessionResourcesReleased(SessionResourcesReleased {
                session_id,
                agent_id: agent.to_owned(),
                resources,
                kernels,
            }),
        ]);
    }
    life
}
