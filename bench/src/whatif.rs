//! `berth bench whatif`: a what-if replay of many sessions' requests (100,000 by default)
//! through FIFO and through DRF, in seconds, next to two baselines measured in the same run:
//! reading the workload out of its log's events (in memory), and one pass of the scheduling
//! core (backfill: each request tried on the agents) over every request queued at once.
//!
//! The workload is synthetic and the same on every run (a seeded generator): requests of
//! 50 users arriving at random over a window sized for the agents to be about 90% busy,
//! 1 to 8 cores each, held for about half an hour (exponential). A live FIFO scheduler's
//! history of it is made first (the simulation with no recorded passes, woken by every
//! request and release, as the live scheduler is), written as the events the log would hold,
//! and read back; the replays run on what was read.

use std::collections::HashMap;
use std::time::Instant;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use events::catalogue::Event;
use events::payloads::*;
use scheduler::core::{self, GroupRules, PendingSession, Snapshot};
use scheduler::whatif::workload::{self, Logged};
use scheduler::whatif::{self, AgentChange, AgentOffer, Outcome, Request, Workload};
use uuid::Uuid;

const GIB: u64 = 1 << 30;
const USERS: u128 = 50;
const CORES_PER_AGENT: u64 = 32;
/// Mean hold of a session, in seconds.
const MEAN_HOLD: f64 = 1800.0;
/// How busy the agents are meant to be, on average.
const LOAD: f64 = 1.0;

/// splitmix64: a small seeded generator, so every run replays the same workload.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.unit().ln()
    }
}

fn rules() -> GroupRules {
    GroupRules {
        name: "default".into(),
        queue_policy: QueuePolicy::Fifo,
        agent_selection: AgentSelection::Concentrated,
        max_attempts: 1_000_000,
        skip_after: 3,
        pending_timeout_secs: 0,
        fair_share: Default::default(),
        starve_after_secs: 0,
    }
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 16, 0, 0, 0).unwrap()
}

/// The synthetic workload, with nothing recorded yet.
fn synthetic(sessions: usize, agents: usize) -> Workload {
    let mut random = Seeded(0x6265_7274_6877_6966);
    let sizes = [1u64, 1, 2, 2, 2, 4, 4, 8];
    let mean_cores = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
    let capacity = (agents as u64 * CORES_PER_AGENT) as f64;
    let window = sessions as f64 * mean_cores * MEAN_HOLD / (LOAD * capacity);
    let mean_gap = window / sessions as f64;
    let mut at = 0.0;
    let requests = (0..sessions)
        .map(|n| {
            at += random.exponential(mean_gap);
            let cores = sizes[(random.next() % sizes.len() as u64) as usize];
            let owner = (random.next() % USERS as u64) as u128;
            let held = random.exponential(MEAN_HOLD).clamp(10.0, 8.0 * 3600.0);
            Request {
                session_id: Uuid::from_u128(n as u128 + 1),
                owner: Uuid::from_u128(1_000_000 + owner),
                user: format!("user{owner}@bench.example"),
                project: None,
                per_kernel: ResourceSlots {
                    cpu_milli: cores * 1000,
                    memory_bytes: cores * 4 * GIB,
                    gpu_milli: 0,
                },
                cluster_mode: ClusterMode::SingleNode,
                cluster_size: 1,
                wanted_agent: None,
                starts_at: None,
                priority: 0,
                reprioritized: Vec::new(),
                requested_at: t0() + TimeDelta::milliseconds((at * 1000.0) as i64),
                held_for: Some(TimeDelta::milliseconds((held * 1000.0) as i64)),
                requeued_after: Vec::new(),
                withdrawn_at: None,
                recorded: None,
                recorded_cancel: None,
                volumes: Default::default(),
            }
        })
        .collect::<Vec<_>>();
    let end = requests.last().map_or(t0(), |r| r.requested_at);
    Workload {
        rules: rules(),
        from: t0(),
        to: end + TimeDelta::hours(12),
        agents: (0..agents)
            .map(|i| AgentChange {
                at: t0(),
                agent_id: format!("agent-{i:04}"),
                joined: Some(AgentOffer {
                    capacity: ResourceSlots {
                        cpu_milli: CORES_PER_AGENT * 1000,
                        memory_bytes: CORES_PER_AGENT * 4 * GIB,
                        gpu_milli: 0,
                    },
                    network_scope: format!("agent:agent-{i:04}"),
                    volumes: Default::default(),
                }),
                wakes: true,
            })
            .collect(),
        requests,
        background: vec![],
        limits: HashMap::new(),
        passes: vec![],
        silences: Vec::new(),
        deaf: Vec::new(),
        pacing: whatif::Pacing::default(),
    }
}

/// The events a live scheduler's log would hold for `workload` run as `outcome`.
fn log_of(workload: &Workload, outcome: &Outcome) -> Vec<Logged> {
    let logged = |tx: String, at: DateTime<Utc>, event: Event| Logged { tx, at, event };
    let mut log = vec![logged(
        "group".into(),
        workload.from - TimeDelta::hours(1),
        Event::ResourceGroupCreated(ResourceGroupCreated {
            name: "default".into(),
            queue_policy: workload.rules.queue_policy,
            agent_selection: workload.rules.agent_selection,
            max_attempts: workload.rules.max_attempts,
            skip_after: workload.rules.skip_after,
            pending_timeout_secs: workload.rules.pending_timeout_secs,
        }),
    )];
    for change in &workload.agents {
        let offer = change
            .joined
            .as_ref()
            .expect("the bench's agents only join");
        log.push(logged(
            format!("agent {}", change.agent_id),
            change.at - TimeDelta::minutes(1),
            Event::AgentRegistered(AgentRegistered {
                unlabelled_images: Vec::new(),
                agent_id: change.agent_id.clone(),
                resource_group: "default".into(),
                capacity: offer.capacity,
                images: vec![],
                address: None,
                image_apps: Default::default(),
                network_scope: None,
                volumes: Default::default(),
            }),
        ));
    }
    for (request, placement) in workload.requests.iter().zip(&outcome.placements) {
        log.push(logged(
            format!("request {}", request.session_id),
            request.requested_at,
            Event::SessionRequested(Box::new(SessionRequested {
                shared_mounts: Default::default(),
                session_id: request.session_id,
                name: String::new(),
                owner: Owner {
                    user_id: request.owner,
                    email: request.user.clone(),
                    project: None,
                },
                requested_by: None,
                session_type: SessionType::Batch,
                resource_group: "default".into(),
                image: "berth/shell:latest".into(),
                environment: Default::default(),
                resources: request.per_kernel,
                shared_memory_bytes: 0,
                cluster_mode: request.cluster_mode,
                cluster_size: request.cluster_size,
                agent_id: None,
                preopen_ports: vec![],
                mounts: vec![],
                startup_command: None,
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
        ));
        let Some(placement) = placement else { continue };
        let pass = format!("pass {}", placement.at.timestamp_micros());
        let step = SchedulingStep {
            step: "select agent (concentrated)".into(),
            result: SchedulingResult::Success,
            message: String::new(),
            error_code: None,
            started_at: placement.at,
            ended_at: placement.at,
        };
        log.push(logged(
            pass.clone(),
            placement.at,
            Event::SchedulingAttempted(SchedulingAttempted {
                read: None,
                session_id: request.session_id,
                phase: core::PHASE.into(),
                result: SchedulingResult::Success,
                status_before: SessionStatus::Pending,
                status_after: SessionStatus::Scheduled,
                attempts: 1,
                message: String::new(),
                error_code: None,
                steps: vec![step],
            }),
        ));
        log.push(logged(
            pass,
            placement.at,
            Event::SessionScheduled(SessionScheduled {
                session_id: request.session_id,
                agent_id: placement.kernels[0].agent_id.clone(),
                resources: request.total(),
                kernels: placement.kernels.clone(),
            }),
        ));
        if let Some(held) = request.held_for {
            log.push(logged(
                format!("release {}", request.session_id),
                placement.at + held,
                Event::SessionResourcesReleased(SessionResourcesReleased {
                    session_id: request.session_id,
                    agent_id: placement.kernels[0].agent_id.clone(),
                    resources: request.total(),
                    kernels: placement.kernels.clone(),
                }),
            ));
        }
    }
    // The passes that recorded only waits: one wait each stands for them (the log's reader
    // takes a pass's moment from any decision of it).
    let placing: std::collections::HashSet<DateTime<Utc>> =
        outcome.placements.iter().flatten().map(|p| p.at).collect();
    for moment in outcome
        .deciding_passes
        .iter()
        .filter(|m| !placing.contains(*m))
    {
        let waiting = workload
            .requests
            .partition_point(|r| r.requested_at <= *moment)
            .saturating_sub(1);
        let result = SchedulingResult::NeedRetry;
        log.push(logged(
            format!("pass {}", moment.timestamp_micros()),
            *moment,
            Event::SchedulingAttempted(SchedulingAttempted {
                read: None,
                session_id: workload.requests[waiting].session_id,
                phase: core::PHASE.into(),
                result,
                status_before: SessionStatus::Pending,
                status_after: SessionStatus::Pending,
                attempts: 1,
                message: String::new(),
                error_code: Some("NO_CAPACITY".into()),
                steps: vec![SchedulingStep {
                    step: "select agent (concentrated)".into(),
                    result,
                    message: String::new(),
                    error_code: Some("NO_CAPACITY".into()),
                    started_at: *moment,
                    ended_at: *moment,
                }],
            }),
        ));
    }
    log.sort_by_key(|l| l.at);
    log
}

fn secs(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{s:.0} s"))
}

pub fn whatif(sessions: usize, agents: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        sessions > 0 && agents > 0,
        "--sessions and --agents above 0"
    );
    let synthetic = synthetic(sessions, agents);
    println!(
        "workload: {sessions} requests of {USERS} users on {agents} agents of {CORES_PER_AGENT} cores over {:.1} h, arriving to ask for {:.0}% of the cores on average",
        (synthetic.to - synthetic.from).num_seconds() as f64 / 3600.0,
        LOAD * 100.0
    );
    let lived = whatif::simulate(&synthetic, &synthetic.rules);
    let log = log_of(&synthetic, &lived);

    let started = Instant::now();
    let recorded = workload::workload(&log, "default", None, Some(synthetic.to))
        .ok_or_else(|| anyhow::anyhow!("the log made no group"))?;
    let read = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        recorded.requests.len() == sessions,
        "every request read back"
    );
    println!(
        "baseline: the workload read out of its log's {} events (in memory, typed): {read:.3} s",
        log.len()
    );

    // Under backfill every request is tried on the agents (FIFO would pass over all behind
    // the first that does not fit).
    let mut snapshot = Snapshot {
        group: GroupRules {
            queue_policy: QueuePolicy::Backfill,
            ..synthetic.rules.clone()
        },
        agents: synthetic
            .agents
            .iter()
            .map(|a| core::AgentView {
                agent_id: a.agent_id.clone(),
                capacity: a.joined.as_ref().unwrap().capacity,
                used: ResourceSlots::default(),
                unheard_for: None,
                network_scope: a.agent_id.clone(),
                volumes: Default::default(),
            })
            .collect(),
        silent_after: std::time::Duration::MAX,
        queue: synthetic
            .requests
            .iter()
            .map(|r| PendingSession {
                session_id: r.session_id,
                version: 0,
                owner: r.owner,
                per_kernel: r.per_kernel,
                cluster_mode: r.cluster_mode,
                cluster_size: r.cluster_size,
                wanted_agent: None,
                starts_at: None,
                queued_at: synthetic.from,
                attempts: 0,
                last_result: None,
                last_error_code: None,
                priority: 0,
                project: None,
                volumes: Default::default(),
                // As the what-if replay: no history row says where the image is.
                image: String::new(),
                image_on: Default::default(),
            })
            .collect(),
        owners: HashMap::new(),
        held: HashMap::new(),
        usage: Default::default(),
        now: synthetic.from,
        capacity_grew: true,
    };
    let started = Instant::now();
    let decided = core::plan(&mut snapshot).len();
    println!(
        "baseline: one pass of the core (backfill) over all {decided} requests queued at once: {:.3} s",
        started.elapsed().as_secs_f64()
    );

    for policy in [QueuePolicy::Fifo, QueuePolicy::Drf] {
        let mut rules = recorded.rules.clone();
        rules.queue_policy = policy;
        let started = Instant::now();
        let outcome = whatif::simulate(&recorded, &rules);
        let took = started.elapsed().as_secs_f64();
        let c = whatif::compare(&recorded, &outcome, policy.as_str());
        if policy == recorded.rules.queue_policy {
            anyhow::ensure!(
                c.placements.differing == 0 && c.placements.same_order,
                "the replay through the policy that ran differs: {:?}",
                c.placements
            );
        }
        println!(
            "replay {}: {took:.2} s ({} passes); placed {} of {}, {} differ from the recorded; wait p50 {} p99 {} (recorded {} / {}); cpu {:.1}%; Jain's index {:.3} (recorded {:.3})",
            policy.as_str(),
            outcome.passes,
            c.simulated.placed,
            c.requests,
            c.placements.differing,
            secs(c.simulated.wait_p50_secs),
            secs(c.simulated.wait_p99_secs),
            secs(c.recorded.wait_p50_secs),
            secs(c.recorded.wait_p99_secs),
            c.simulated.utilization.cpu.unwrap_or(0.0) * 100.0,
            c.simulated.jain_index.unwrap_or(0.0),
            c.recorded.jain_index.unwrap_or(0.0),
        );
    }
    Ok(())
}
