//! Hand-made workloads: the policy that ran reproduces its schedule, another policy changes
//! it, and the figures of a tiny case are the ones worked out by hand.

use chrono::TimeZone;
use events::catalogue::Event;

use super::figures::{jain, percentile};
use super::workload::{workload, Logged};
use super::*;
use crate::fair_share::FairShareSettings;

const GIB: u64 = 1 << 30;

fn cpu(cores: u64) -> ResourceSlots {
    ResourceSlots {
        cpu_milli: cores * 1000,
        memory_bytes: GIB,
        gpu_milli: 0,
    }
}

fn t(secs: f64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 21, 12, 0, 0).unwrap()
        + TimeDelta::milliseconds((secs * 1000.0) as i64)
}

fn rules(policy: QueuePolicy) -> GroupRules {
    GroupRules {
        name: "default".into(),
        queue_policy: policy,
        agent_selection: AgentSelection::Concentrated,
        max_attempts: 100,
        skip_after: 50,
        pending_timeout_secs: 0,
        fair_share: FairShareSettings::default(),
        starve_after_secs: 0,
    }
}

fn user(n: u128) -> Uuid {
    Uuid::from_u128(1000 + n)
}

fn request(n: u128, owner: u128, cores: u64, at: f64, held: f64) -> Request {
    Request {
        session_id: Uuid::from_u128(n),
        owner: user(owner),
        user: format!("user{owner}@example.com"),
        project: None,
        per_kernel: cpu(cores),
        cluster_mode: ClusterMode::SingleNode,
        cluster_size: 1,
        wanted_agent: None,
        starts_at: None,
        priority: 0,
        reprioritized: Vec::new(),
        requested_at: t(at),
        held_for: Some(TimeDelta::milliseconds((held * 1000.0) as i64)),
        requeued_after: Vec::new(),
        withdrawn_at: None,
        recorded: None,
        recorded_cancel: None,
        volumes: Default::default(),
    }
}

fn placed(at: f64, agent: &str, cores: u64) -> Option<Placement> {
    Some(Placement {
        at: t(at),
        kernels: vec![KernelPlacement {
            agent_id: agent.into(),
            resources: cpu(cores),
        }],
    })
}

fn joined(id: &str, cores: u64) -> AgentChange {
    AgentChange {
        at: t(0.0),
        agent_id: id.into(),
        joined: Some(AgentOffer {
            capacity: ResourceSlots {
                cpu_milli: cores * 1000,
                memory_bytes: 64 * GIB,
                gpu_milli: 0,
            },
            network_scope: format!("agent:{id}"),
            volumes: Default::default(),
        }),
        wakes: true,
    }
}

/// One agent of 4 cores; A (user 1) and B (user 2) fit at once, C (user 1) waits for A's
/// end. As the live FIFO scheduler placed them, each a tenth of a second after its request.
fn fifo_day() -> Workload {
    let mut a = request(1, 1, 2, 0.0, 100.0);
    a.recorded = placed(0.1, "a1", 2);
    let mut b = request(2, 2, 2, 1.0, 100.0);
    b.recorded = placed(1.1, "a1", 2);
    let mut c = request(3, 1, 2, 2.0, 50.0);
    c.recorded = placed(100.1, "a1", 2);
    Workload {
        rules: rules(QueuePolicy::Fifo),
        from: t(0.0),
        to: t(200.0),
        agents: vec![joined("a1", 4)],
        requests: vec![a, b, c],
        background: vec![],
        limits: HashMap::new(),
        passes: vec![t(0.1), t(1.1), t(2.1), t(100.1)],
        silences: Vec::new(),
        deaf: Vec::new(),
        pacing: Pacing::default(),
    }
}

#[test]
fn the_policy_that_ran_reproduces_its_schedule_exactly() {
    let day = fifo_day();
    let outcome = simulate(&day, &day.rules);
    assert_eq!(outcome.placements, Outcome::recorded(&day).placements);
    let comparison = compare(&day, &outcome, "fifo");
    assert_eq!(comparison.placements.differing, 0);
    assert!(comparison.placements.same_order);
    assert_eq!(
        comparison.recorded.wait_p99_secs,
        comparison.simulated.wait_p99_secs
    );
}

#[test]
fn the_figures_of_a_tiny_day_are_those_worked_out_by_hand() {
    let day = fifo_day();
    let c = compare(&day, &simulate(&day, &day.rules), "fifo");
    assert_eq!(c.requests, 3);
    let one = &c.users[0];
    assert_eq!((one.user.as_str(), one.sessions), ("user1@example.com", 2));
    // User 1 waited 0.1 s (A) and 98.1 s (C): the nearest-rank p50 is the smaller.
    assert_eq!(one.recorded.wait_p50_secs, Some(0.1));
    assert_eq!(one.recorded.wait_p99_secs, Some(98.1));
    // Slowdowns: A (0.1 + 100) / 100, C (98.1 + 50) / 50; their mean.
    let mean = ((100.1 / 100.0) + (148.1 / 50.0)) / 2.0;
    assert!((one.recorded.mean_slowdown.unwrap() - mean).abs() < 1e-9);
    // 2 cores for 100 s twice and for 50 s once, of 4 cores for 200 s.
    let cpu = c.recorded.utilization.cpu.unwrap();
    assert!((cpu - 500.0 / 800.0).abs() < 1e-9, "{cpu}");
    assert_eq!(c.recorded.utilization.gpu, None);
    // User 2 waited 0.1 s for 100 s of run: slowdown 1.001.
    let two = 100.1 / 100.0;
    let expected = jain(&[mean, two]).unwrap();
    assert!((c.recorded.jain_index.unwrap() - expected).abs() < 1e-9);
    assert!(expected < 1.0);
    assert_eq!((c.recorded.placed, c.recorded.not_placed), (3, 0));
}

#[test]
fn jains_index_of_equal_values_is_one_and_of_one_taking_all_is_one_over_n() {
    assert_eq!(jain(&[3.0, 3.0, 3.0]), Some(1.0));
    assert_eq!(jain(&[0.0, 0.0]), Some(1.0));
    assert_eq!(jain(&[5.0, 0.0, 0.0, 0.0]), Some(0.25));
    assert_eq!(jain(&[]), None);
    assert_eq!(percentile(&[4.0, 1.0, 3.0, 2.0], 50.0), Some(2.0));
    assert_eq!(percentile(&[4.0, 1.0, 3.0, 2.0], 99.0), Some(4.0));
}

/// One agent of 4 cores, two whole-agent requests: A's first placement ended with it back in
/// the queue after 5 s (its agent lost before it started), its second held for 10 s.
fn requeued_day() -> Workload {
    let mut day = fifo_day();
    day.passes.clear();
    let mut a = request(1, 1, 4, 0.0, 10.0);
    a.requeued_after = vec![Requeued {
        held: TimeDelta::seconds(5),
        result: SchedulingResult::NeedRetry,
        error_code: Some("AGENT_LOST".into()),
    }];
    day.requests = vec![a, request(2, 2, 4, 1.0, 10.0)];
    day
}

#[test]
fn a_placement_that_ended_in_a_requeue_sends_the_session_back_and_it_holds_again() {
    let day = requeued_day();
    let outcome = simulate(&day, &day.rules);
    // A is placed at once, back in the queue at 5 s ahead of B (FIFO), placed again and
    // holding for its second placement's 10 s; B starts when that ends. The wait measured is
    // to A's first placement.
    assert_eq!(outcome.placements[0], placed(0.0, "a1", 4));
    assert_eq!(outcome.placements[1], placed(15.0, "a1", 4));
    assert_eq!(day.requests[0].held_in_all(), Some(TimeDelta::seconds(15)));
}

#[test]
fn wake_ups_missed_reach_the_scheduler_when_its_connection_is_back_or_at_its_interval() {
    let mut day = fifo_day();
    day.passes.clear();
    day.requests.truncate(1);
    day.requests[0].requested_at = t(1.0);
    day.deaf = vec![(t(0.5), t(4.0))];
    day.pacing.interval = Duration::from_secs(10);
    let outcome = simulate(&day, &day.rules);
    // Asked for while the scheduler heard nothing: placed when its connection came back.
    assert_eq!(outcome.placements[0], placed(4.0, "a1", 2));
    // A shorter interval places it at the live scheduler's next look, an interval after its
    // pass when the agent registered.
    day.pacing.interval = Duration::from_secs(2);
    let outcome = simulate(&day, &day.rules);
    assert_eq!(outcome.placements[0], placed(2.0, "a1", 2));
    // A window begins at the last wake-up heard (its recording time): that one was heard.
    day.deaf = vec![(t(1.0), t(4.0))];
    day.pacing.interval = Duration::from_secs(10);
    let outcome = simulate(&day, &day.rules);
    assert_eq!(outcome.placements[0], placed(1.0, "a1", 2));
}

/// A wait past the group's pending timeout is given up by the live pass at the deadline, which
/// comes a little after it: the replay gives it up in that recorded pass, not at the deadline
/// itself, and what is placed in the same pass is placed when it really was.
#[test]
fn a_wait_past_its_timeout_is_given_up_in_the_recorded_pass_at_its_deadline() {
    let mut day = fifo_day();
    day.rules.pending_timeout_secs = 5;
    // A holds the agent's 4 cores to 7.02 s; B waits for them and expires at 1 + 5 + 1 s;
    // C, asked at 3 s, is placed by the same pass that gave B up, which saw A's release.
    let mut a = request(1, 1, 4, 0.0, 6.92);
    a.recorded = placed(0.1, "a1", 4);
    let mut b = request(2, 2, 4, 1.0, 10.0);
    b.recorded_cancel = Some(t(7.03));
    let mut c = request(3, 1, 4, 3.0, 10.0);
    c.recorded = placed(7.03, "a1", 4);
    day.requests = vec![a, b, c];
    day.passes = vec![t(0.1), t(7.03)];
    let outcome = simulate(&day, &day.rules);
    assert_eq!(
        outcome.cancelled[1].as_ref().map(|(at, _)| *at),
        Some(t(7.03))
    );
    assert_eq!(outcome.placements, Outcome::recorded(&day).placements);
    // With no pass of the live scheduler's in the log after it, the deadline's own pass gives
    // B up, and C waits for the release's wake-up.
    day.passes.pop();
    let outcome = simulate(&day, &day.rules);
    assert_eq!(
        outcome.cancelled[1].as_ref().map(|(at, _)| *at),
        Some(t(7.0))
    );
    assert_eq!(outcome.placements[2], placed(7.02, "a1", 4));
}

#[test]
fn an_agent_lost_for_its_silence_is_passed_over_from_its_silence_on() {
    let mut day = fifo_day();
    day.passes.clear();
    day.requests.truncate(1);
    day.requests[0].requested_at = t(30.0);
    let mut gone = joined("a1", 4);
    (gone.at, gone.joined) = (t(40.0), None);
    let mut back = joined("a1", 4);
    back.at = t(50.0);
    day.agents.extend([gone, back]);
    // Last heard at 15 s, passed over from 25 s: the request waits for its return.
    day.silences = vec![Silence {
        agent_id: "a1".into(),
        heard: t(15.0),
        lost: t(40.0),
    }];
    let outcome = simulate(&day, &day.rules);
    assert_eq!(outcome.placements[0], placed(50.0, "a1", 2));
    // Unknown silence: placed at once.
    day.silences.clear();
    let outcome = simulate(&day, &day.rules);
    assert_eq!(outcome.placements[0], placed(30.0, "a1", 2));
}

#[test]
fn without_recorded_passes_the_wake_ups_drive_the_schedule() {
    let mut day = fifo_day();
    day.passes.clear();
    let outcome = simulate(&day, &day.rules);
    // Each placed the moment it could be: at its request, or when A's resources came back.
    assert_eq!(outcome.placements[0], placed(0.0, "a1", 2));
    assert_eq!(outcome.placements[1], placed(1.0, "a1", 2));
    assert_eq!(outcome.placements[2], placed(100.0, "a1", 2));
}

#[test]
fn another_policy_changes_the_schedule_and_the_comparison_says_where() {
    // A 2-core session runs; a 4-core head waits for the whole agent; a 2-core one behind it
    // waits too under FIFO, but backfill places it at once.
    let mut running = request(1, 1, 2, 0.0, 100.0);
    running.recorded = placed(0.0, "a1", 2);
    let mut head = request(2, 2, 4, 1.0, 10.0);
    head.recorded = placed(100.0, "a1", 4);
    let mut small = request(3, 1, 2, 2.0, 10.0);
    small.recorded = placed(110.0, "a1", 2);
    let day = Workload {
        rules: rules(QueuePolicy::Fifo),
        from: t(0.0),
        to: t(300.0),
        agents: vec![joined("a1", 4)],
        requests: vec![running, head, small],
        background: vec![],
        limits: HashMap::new(),
        passes: vec![t(0.0), t(1.0), t(2.0), t(100.0), t(110.0)],
        silences: Vec::new(),
        deaf: Vec::new(),
        pacing: Pacing::default(),
    };
    let fifo = simulate(&day, &day.rules);
    assert_eq!(fifo.placements, Outcome::recorded(&day).placements);

    let backfill = simulate(&day, &rules(QueuePolicy::Backfill));
    assert_eq!(backfill.placements[2], placed(2.0, "a1", 2));
    // The head now waits for both 2-core sessions to end.
    assert_eq!(backfill.placements[1], placed(100.0, "a1", 4));
    let c = compare(&day, &backfill, "backfill");
    assert_eq!(
        (c.recorded_policy.as_str(), c.simulated_policy.as_str()),
        ("fifo", "backfill")
    );
    assert_eq!(c.placements.compared, 3);
    assert_eq!(c.placements.differing, 0, "same agents");
    assert!(!c.placements.same_order);
    let one = &c.users[0];
    assert_eq!(one.simulated.wait_p99_secs, Some(0.0));
    assert_eq!(one.recorded.wait_p99_secs, Some(108.0));
}

#[test]
fn a_withdrawn_request_leaves_the_queue_when_it_really_left() {
    let mut day = fifo_day();
    day.requests[2].recorded = None;
    day.requests[2].held_for = Some(TimeDelta::zero());
    day.requests[2].withdrawn_at = Some(t(50.0));
    day.passes.pop();
    let outcome = simulate(&day, &day.rules);
    assert_eq!(outcome.placements[2], None);
    let c = compare(&day, &outcome, "fifo");
    assert_eq!((c.simulated.placed, c.simulated.not_placed), (2, 1));
    // Its wait counts until it was withdrawn.
    assert_eq!(c.users[0].simulated.wait_p99_secs, Some(48.0));
}

#[test]
fn drf_and_fair_share_flow_only_through_the_rules_and_place_everything_that_fits() {
    let day = fifo_day();
    for policy in [QueuePolicy::Drf, QueuePolicy::FairShare, QueuePolicy::Lifo] {
        let outcome = simulate(&day, &rules(policy));
        assert!(
            outcome.placements.iter().all(Option::is_some),
            "{policy:?}: {outcome:?}"
        );
    }
}

fn logged(tx: &str, at: f64, event: Event) -> Logged {
    Logged {
        tx: tx.into(),
        at: t(at),
        event,
    }
}

fn requested(n: u128, owner: u128, at: f64) -> Logged {
    let r = request(n, owner, 2, at, 0.0);
    logged(
        &format!("r{n}"),
        at,
        Event::SessionRequested(Box::new(SessionRequested {
            shared_mounts: Default::default(),
            session_id: r.session_id,
            name: format!("s{n}"),
            owner: Owner {
                user_id: r.owner,
                email: r.user,
                project: None,
            },
            requested_by: None,
            session_type: SessionType::Batch,
            resource_group: "default".into(),
            image: "python".into(),
            environment: Default::default(),
            resources: r.per_kernel,
            shared_memory_bytes: 0,
            cluster_mode: ClusterMode::SingleNode,
            cluster_size: 1,
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
    )
}

/// A pass's events for session `n`: placed on `a1` (`placed`), or waiting.
fn decided(tx: &str, now: f64, recorded: f64, n: u128, placed: bool) -> Vec<Logged> {
    let result = if placed {
        SchedulingResult::Success
    } else {
        SchedulingResult::NeedRetry
    };
    let mut events = vec![logged(
        tx,
        recorded,
        Event::SchedulingAttempted(SchedulingAttempted {
            read: None,
            session_id: Uuid::from_u128(n),
            phase: "schedule".into(),
            result,
            status_before: SessionStatus::Pending,
            status_after: SessionStatus::Pending,
            attempts: 1,
            message: String::new(),
            error_code: None,
            steps: vec![SchedulingStep {
                step: "select agent (concentrated)".into(),
                result,
                message: String::new(),
                error_code: None,
                started_at: t(now),
                ended_at: t(now),
            }],
        }),
    )];
    if placed {
        events.push(logged(
            tx,
            recorded,
            Event::SessionScheduled(SessionScheduled {
                session_id: Uuid::from_u128(n),
                agent_id: "a1".into(),
                resources: cpu(2),
                kernels: vec![KernelPlacement {
                    agent_id: "a1".into(),
                    resources: cpu(2),
                }],
            }),
        ));
    }
    events
}

fn released(n: u128, at: f64) -> Logged {
    logged(
        &format!("x{n}"),
        at,
        Event::SessionResourcesReleased(SessionResourcesReleased {
            session_id: Uuid::from_u128(n),
            agent_id: "a1".into(),
            resources: cpu(2),
            kernels: vec![],
        }),
    )
}

/// The log's start: group `default` (FIFO, no pending timeout) and its agent `a1` of 4 cores.
fn a_group_with_one_agent() -> Vec<Logged> {
    vec![
        logged(
            "g",
            -10.0,
            Event::ResourceGroupCreated(ResourceGroupCreated {
                name: "default".into(),
                queue_policy: QueuePolicy::Fifo,
                agent_selection: AgentSelection::Concentrated,
                max_attempts: 10,
                skip_after: 3,
                pending_timeout_secs: 0,
            }),
        ),
        logged(
            "ag",
            -5.0,
            Event::AgentRegistered(AgentRegistered {
                unlabelled_images: Vec::new(),
                agent_id: "a1".into(),
                resource_group: "default".into(),
                capacity: joined("a1", 4).joined.unwrap().capacity,
                images: vec![],
                address: None,
                image_apps: Default::default(),
                network_scope: None,
                volumes: Default::default(),
            }),
        ),
    ]
}

/// [`a_group_with_one_agent`], then sessions 1 and 2 (2 cores each) asked for and placed on
/// it, and session 3 asked for and left waiting, each by a pass of its own (`passes`, the
/// transactions that recorded them).
fn two_placed_and_one_waiting(passes: [&str; 3]) -> Vec<Logged> {
    let mut log = a_group_with_one_agent();
    log.push(requested(1, 1, 0.0));
    log.extend(decided(passes[0], 0.05, 0.1, 1, true));
    log.push(requested(2, 2, 1.0));
    log.extend(decided(passes[1], 1.05, 1.1, 2, true));
    log.push(requested(3, 1, 2.0));
    log.extend(decided(passes[2], 2.05, 2.1, 3, false));
    log
}

#[test]
fn a_workload_read_from_the_log_replays_to_its_own_placements() {
    let mut log = two_placed_and_one_waiting(["p1", "p2", "p3"]);
    log.push(released(1, 100.0));
    log.extend(decided("p4", 100.05, 100.1, 3, true));
    log.push(requested(4, 2, 150.0));
    log.push(logged(
        "w",
        160.0,
        Event::SessionStatusChanged(SessionStatusChanged {
            session_id: Uuid::from_u128(4),
            from: SessionStatus::Pending,
            to: SessionStatus::Cancelled,
            reason: Some("user".into()),
            exit_code: None,
            occurred_at: None,
        }),
    ));
    log.extend(decided("p5", 150.05, 150.1, 4, false));
    // Request 5 is given up on by the scheduler: not withdrawn.
    log.push(requested(5, 1, 170.0));
    let mut gave_up = decided("p6", 170.05, 170.1, 5, false);
    if let Event::SchedulingAttempted(a) = &mut gave_up[0].event {
        a.result = SchedulingResult::GiveUp;
        a.status_after = SessionStatus::Cancelled;
    }
    log.extend(gave_up);
    log.push(logged(
        "p6",
        170.1,
        Event::SessionStatusChanged(SessionStatusChanged {
            session_id: Uuid::from_u128(5),
            from: SessionStatus::Pending,
            to: SessionStatus::Cancelled,
            reason: Some("gave up".into()),
            exit_code: None,
            occurred_at: None,
        }),
    ));
    log.push(released(2, 200.0));

    let mut day = workload(&log, "default", Some(t(0.0)), None).expect("the group exists");
    assert_eq!(day.requests[4].recorded_cancel, Some(t(170.05)));
    assert_eq!(day.requests[4].withdrawn_at, None);
    // The rest replays without it (this log's rules would not have given up so soon).
    day.requests.truncate(4);
    day.passes.pop();
    assert_eq!(day.rules.skip_after, 3);
    assert_eq!(day.to, t(200.0));
    assert_eq!(
        day.passes,
        vec![t(0.05), t(1.05), t(2.05), t(100.05), t(150.05)]
    );
    assert_eq!(day.agents.len(), 1);
    assert_eq!(day.agents[0].at, t(0.0), "there at the window's start");
    assert_eq!(day.requests.len(), 4);
    assert_eq!(day.requests[0].recorded, placed(0.05, "a1", 2));
    assert_eq!(
        day.requests[0].held_for,
        Some(TimeDelta::milliseconds(99_950))
    );
    assert_eq!(day.requests[2].recorded, placed(100.05, "a1", 2));
    assert_eq!(
        day.requests[2].held_for, None,
        "never released: held to the end"
    );
    assert_eq!(day.requests[3].withdrawn_at, Some(t(160.0)));
    assert_eq!(day.requests[3].recorded, None);

    let outcome = simulate(&day, &day.rules);
    assert_eq!(outcome.placements, Outcome::recorded(&day).placements);
    // Request 4 waited for the agent while it was full, then was withdrawn, in both.
    assert_eq!(outcome.placements[3], None);

    // A window that starts later keeps what earlier sessions held as background.
    let late = workload(&log, "default", Some(t(50.0)), None).unwrap();
    assert_eq!(late.requests.len(), 2);
    assert_eq!(
        late.background.len(),
        3,
        "requests 1 and 2 held into the window, 3 was placed in it as recorded"
    );
    assert!(workload(&log, "other", None, None).is_none());
}

#[test]
fn what_sessions_before_the_window_held_is_held_as_recorded() {
    // A session requested before the window holds 2 of the 4 cores until 30 s in; a 4-core
    // request at 10 s waits for it, whatever the policy.
    let mut day = fifo_day();
    day.requests = vec![request(9, 2, 4, 10.0, 20.0)];
    day.passes.clear();
    day.background = vec![Hold {
        owner: user(1),
        project: None,
        kernels: placed(-10.0, "a1", 2).unwrap().kernels,
        from: t(-10.0),
        until: Some(t(30.0)),
    }];
    for policy in [QueuePolicy::Fifo, QueuePolicy::Drf] {
        let outcome = simulate(&day, &rules(policy));
        assert_eq!(outcome.placements[0], placed(30.0, "a1", 4), "{policy:?}");
    }
    // Its 2 cores for the window's first 30 s count as used: 60 + 80 core-seconds of 800.
    let c = compare(&day, &simulate(&day, &day.rules), "fifo");
    let cpu = c.simulated.utilization.cpu.unwrap();
    assert!((cpu - 140.0 / 800.0).abs() < 1e-9, "{cpu}");
}

#[test]
fn a_requests_priority_is_the_last_change_made_by_the_pass_that_reads_it() {
    let mut r = request(1, 1, 2, 0.0, 10.0);
    r.priority = 10;
    r.reprioritized = vec![(t(5.0), 50), (t(8.0), 0)];
    assert_eq!(r.priority_at(t(1.0)), 10);
    assert_eq!(r.priority_at(t(5.0)), 50);
    assert_eq!(r.priority_at(t(7.9)), 50);
    assert_eq!(r.priority_at(t(9.0)), 0);
}

/// A release recorded before a pass began but still committing when the pass read its agents
/// (the pass's view of the log has its transaction in progress) holds, for the replay, until
/// just after that pass: what waited for it is placed a pass later, as the live scheduler did.
#[test]
fn a_release_its_pass_did_not_see_holds_until_after_that_pass() {
    let read = |events: &mut [Logged], view: Option<LogView>| {
        if let Event::SchedulingAttempted(a) = &mut events[0].event {
            a.read = view;
        }
    };
    let mut log = two_placed_and_one_waiting(["10", "11", "12"]);
    let mut release = released(1, 100.0);
    release.tx = "14".into();
    log.push(release);
    let mut unseeing = decided("15", 100.01, 100.1, 3, false);
    let in_progress = vec![14];
    read(
        &mut unseeing,
        Some(LogView {
            xmax: 16,
            in_progress,
        }),
    );
    log.extend(unseeing);
    let mut seeing = decided("16", 100.2, 100.3, 3, true);
    read(
        &mut seeing,
        Some(LogView {
            xmax: 17,
            in_progress: vec![],
        }),
    );
    log.extend(seeing);

    let day = workload(&log, "default", Some(t(0.0)), None).expect("the group exists");
    assert_eq!(
        day.requests[0].held_for,
        Some(t(100.01) + TimeDelta::microseconds(1) - t(0.05))
    );
    let outcome = simulate(&day, &day.rules);
    assert_eq!(outcome.placements, Outcome::recorded(&day).placements);
    assert_eq!(outcome.placements[2], placed(100.2, "a1", 2));
    // Told by its recorded time alone, the release is seen by the pass that did not see it.
    for e in &mut log {
        if let Event::SchedulingAttempted(a) = &mut e.event {
            a.read = None;
        }
    }
    let day = workload(&log, "default", Some(t(0.0)), None).expect("the group exists");
    let outcome = simulate(&day, &day.rules);
    assert_eq!(outcome.placements[2], placed(100.01, "a1", 2));
}
