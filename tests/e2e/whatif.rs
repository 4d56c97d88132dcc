//! What-if replays on a workload berth really ran: two users asking for more than the agent
//! holds, sessions finishing on their own. Replayed through the policy that ran, every
//! recorded placement comes back exactly (same session, same agent, same order, same
//! moment); through DRF, the comparison has its figures. A log through an agent departing
//! and returning, one lost and returning and the bus down replays to its waits and give-ups.

use std::time::Duration;

use events::payloads::QueuePolicy;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common::*;

fn batch(cores: u64) -> Value {
    json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
           "resources": {"cpu": cores, "memory": "1g"}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recorded_workload_replays_to_its_own_placements_and_compares_with_drf() {
    let h = start().await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let dir = std::env::temp_dir().join(format!("berth-outbox-{}", Uuid::new_v4().simple()));
    admit(&h, "w1", "default").await;
    // 4 cores: two of the 2-core sessions at a time; each batch runs for a second.
    let agent = h
        .simulated_agent(&nats, "w1", &dir, Duration::from_secs(1))
        .await;
    let alice = h.user("alice@whatif.test").await;
    let bob = h.user("bob@whatif.test").await;
    let mut sessions = Vec::new();
    for key in [&alice, &alice, &alice, &bob, &alice, &bob] {
        let (status, created) = h.create(key, batch(2)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        sessions.extend(ids(&created));
    }
    for id in &sessions {
        h.wait_session_within(id, Duration::from_secs(60), |s| s["status"] == "TERMINATED")
            .await;
    }
    // Every session has given its cores back in the log.
    wait_for(|| async {
        (h.count_events("SessionResourcesReleased").await == sessions.len() as i64).then_some(())
    })
    .await;
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);

    let client = h.pool.get().await.unwrap();
    // The harness's scheduler's interval (`test_config`).
    let timings = test_config().timings;
    let pacing = scheduler::whatif::Pacing {
        interval: timings.scheduler_interval,
        silent_after: timings.agent_silent_after,
    };
    let same = scheduler::whatif::replay(&client, None, Some("default"), None, None, pacing)
        .await
        .expect("the log replays");
    assert_eq!(same.len(), 1);
    let same = &same[0];
    assert_eq!((same.requests, same.recorded_policy.as_str()), (6, "fifo"));
    assert_eq!(same.simulated_policy, "fifo");
    assert_eq!(same.placements.compared, 6, "{same:#?}");
    assert_eq!(same.placements.differing, 0, "{same:#?}");
    assert!(same.placements.same_order, "{same:#?}");
    assert_eq!((same.recorded.placed, same.simulated.placed), (6, 6));
    // Placed at the moments they were, but for one race the log cannot tell apart: resources
    // released while a pass read its snapshot, committed after it, are seen by the replay at
    // that pass, one pass (milliseconds) earlier than the live scheduler saw them.
    let within_a_pass = |a: Option<f64>, b: Option<f64>| {
        (a.unwrap() - b.unwrap()).abs() <= scheduler::whatif::WAKE_LATENCY.as_seconds_f64()
    };
    for user in &same.users {
        assert_eq!(user.recorded.placed, user.simulated.placed, "{user:#?}");
        assert!(
            within_a_pass(user.recorded.wait_p50_secs, user.simulated.wait_p50_secs)
                && within_a_pass(user.recorded.wait_p99_secs, user.simulated.wait_p99_secs),
            "{user:#?}"
        );
    }
    // More was asked than the agent held: some waited for others to finish.
    assert!(same.recorded.wait_p99_secs.unwrap() >= 0.5, "{same:#?}");

    let drf = scheduler::whatif::replay(&client, Some(QueuePolicy::Drf), None, None, None, pacing)
        .await
        .expect("the log replays");
    assert_eq!(drf.len(), 1, "one group had requests");
    let drf = &drf[0];
    assert_eq!(
        (drf.recorded_policy.as_str(), drf.simulated_policy.as_str()),
        ("fifo", "drf")
    );
    let users: Vec<(&str, usize)> = drf
        .users
        .iter()
        .map(|u| (u.user.as_str(), u.sessions))
        .collect();
    assert_eq!(users, [("alice@whatif.test", 4), ("bob@whatif.test", 2)]);
    assert_eq!(drf.simulated.placed, 6, "{drf:#?}");
    let cpu = drf
        .simulated
        .utilization
        .cpu
        .expect("the agent offered cores");
    assert!(cpu > 0.0 && cpu <= 1.0, "{cpu}");
    let jain = drf.simulated.jain_index.expect("two users");
    assert!(jain > 0.0 && jain <= 1.0, "{jain}");
    // What `-o json` prints is this, serialised.
    let json = serde_json::to_value(drf).unwrap();
    assert!(
        json["users"][0]["simulated"]["wait_p99_secs"].is_number(),
        "{json:#}"
    );
    assert!(
        json["recorded"]["utilization"]["cpu"].is_number(),
        "{json:#}"
    );
    assert_eq!(json["placements"]["compared"], 6);
}

/// The advice, on a full group whose queue's order is known: the estimate for a shape names
/// the sessions ahead in that order, a smaller shape that fits now is proposed, and the
/// estimate recorded for a waiting session is compared with the start that happened.
#[tokio::test]
async fn the_advice_names_the_sessions_ahead_proposes_a_shape_that_fits_now_and_is_measured() {
    let h = start().await;
    // Backfill: a session that fits goes ahead of those that wait for more.
    let (status, answer) = h
        .call(
            &h.admin_key,
            reqwest::Method::PUT,
            "/v1/admin/resource-groups/default/scheduling",
            Some(json!({"queue_policy": "backfill"})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
    h.agent("a1", "default", 4).await;
    let alice = h.user("alice@advice.test").await;
    let shape = |cores: u64| json!({"image": "berth/shell:latest", "resources": {"cpu": cores, "memory": "1g"}});
    let create = |cores: u64| {
        let (h, alice) = (&h, &alice);
        async move {
            let (status, created) = h.create(alice, shape(cores)).await;
            assert_eq!(status, StatusCode::CREATED, "{created}");
            ids(&created)[0].clone()
        }
    };
    // 3 of the 4 cores held; two sessions of 2 cores wait, in this order.
    let holder = create(3).await;
    h.wait_session(&holder, |s| s["status"] == "SCHEDULED")
        .await;
    let first = create(2).await;
    let second = create(2).await;
    // Each waiting session's estimate was recorded at its first wait.
    let estimated = wait_for(|| async {
        let (_, listed) = h.get(&alice, "/v1/estimates").await;
        (listed["estimates"].as_array().map_or(0, Vec::len) == 2).then_some(listed)
    })
    .await;
    let of = |listed: &Value, id: &str| {
        listed["estimates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["session_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no estimate of {id}: {listed}"))
    };
    // Nothing finished here yet: the typical hold is the default hour, so the holder frees
    // an hour from its placement and both then fit.
    let first_estimate = of(&estimated, &first);
    let wait = first_estimate["estimated_wait_secs"].as_u64().unwrap();
    assert!((3500..=3600).contains(&wait), "{first_estimate}");
    assert_eq!(first_estimate["actual_wait_secs"], Value::Null);

    let (status, advice) = h.post(&alice, "/v1/advice", shape(2)).await;
    assert_eq!(status, StatusCode::OK, "{advice}");
    let ahead: Vec<&str> = advice["estimate"]["ahead"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(ahead, [first.as_str(), second.as_str()], "{advice}");
    // After them, the agent is full until the first of them ends: about two hours.
    let wait = advice["estimate"]["wait_secs"].as_u64().unwrap();
    assert!((7000..=7200).contains(&wait), "{advice}");
    let sooner = &advice["alternatives"][0];
    assert_eq!(sooner["label"], "half the resources", "{advice}");
    assert_eq!(sooner["estimate"]["wait_secs"], 0, "{advice}");
    assert_eq!(sooner["shape"]["per_kernel"]["cpu_milli"], 1000);

    // The holder ends: the first waiting session starts, and its estimate is measured.
    let (status, _) = h
        .delete(&alice, &format!("/v1/sessions/{holder}?force=true"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.wait_session(&first, |s| s["status"] == "SCHEDULED").await;
    let measured = wait_for(|| async {
        let (_, listed) = h.get(&alice, "/v1/estimates").await;
        let e = of(&listed, &first);
        (!e["actual_wait_secs"].is_null()).then_some((e, listed))
    })
    .await;
    let (measured, listed) = measured;
    let actual = measured["actual_wait_secs"].as_f64().unwrap();
    let estimated = measured["estimated_wait_secs"].as_f64().unwrap();
    assert!(actual < 60.0, "{measured}");
    assert_eq!(measured["error_secs"].as_f64().unwrap(), actual - estimated);
    assert!(
        listed["median_abs_error_secs"].as_f64().unwrap() > 3000.0,
        "{listed}"
    );
    // Another user sees none of alice's estimates.
    let bob = h.user("bob@advice.test").await;
    let (_, theirs) = h.get(&bob, "/v1/estimates").await;
    assert_eq!(theirs["estimates"], json!([]));
}

/// "Notify me when it fits": a watched shape fires once, when capacity frees so that it would
/// be placed at once, and not before; its owner is told.
#[tokio::test]
async fn a_watched_shape_fires_once_when_capacity_frees_and_not_before() {
    let h = start().await;
    h.agent("a1", "default", 4).await;
    let alice = h.user("alice@fits.test").await;
    let shape = |cores: u64| json!({"image": "berth/shell:latest", "resources": {"cpu": cores, "memory": "1g"}});
    let (_, created) = h.create(&alice, shape(3)).await;
    let holder = ids(&created)[0].clone();
    h.wait_session(&holder, |s| s["status"] == "SCHEDULED")
        .await;
    let (status, watching) = h.post(&alice, "/v1/fit-watches", shape(2)).await;
    assert_eq!(status, StatusCode::CREATED, "{watching}");
    let watch_id = watching["watch_id"].as_str().unwrap().to_owned();
    // A pass after the watch: a session that takes the last free core is placed, and the
    // watched shape still does not fit.
    let (_, created) = h.create(&alice, shape(1)).await;
    let poke = ids(&created)[0].clone();
    h.wait_session(&poke, |s| s["status"] == "SCHEDULED").await;
    assert_eq!(
        h.count_events("FitWatchFired").await,
        0,
        "fired before it fits"
    );
    let (_, open) = h.get(&alice, "/v1/fit-watches").await;
    assert_eq!(
        open["fit_watches"][0]["watch_id"],
        watch_id.as_str(),
        "{open}"
    );
    assert_eq!(open["fit_watches"][0]["label"], "2 cores, 1 GiB");

    // The holder ends: 3 cores free, the shape would be placed at once, its owner is told.
    let (status, _) = h
        .delete(&alice, &format!("/v1/sessions/{holder}?force=true"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    wait_for(|| async { (h.count_events("FitWatchFired").await == 1).then_some(()) }).await;
    let told = wait_for(|| async {
        let (_, notices) = h.get(&alice, "/v1/notifications").await;
        notices["items"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["kind"] == "shape_fits").cloned())
    })
    .await;
    assert_eq!(told["session_id"], watch_id.as_str(), "{told}");
    assert!(
        told["message"]
            .as_str()
            .unwrap()
            .contains("2 cores, 1 GiB fits"),
        "{told}"
    );
    // Once: more passes do not fire it again, and it is watched no more.
    let (_, created) = h.create(&alice, shape(1)).await;
    h.wait_session(&ids(&created)[0], |s| s["status"] == "SCHEDULED")
        .await;
    assert_eq!(h.count_events("FitWatchFired").await, 1);
    let (_, open) = h.get(&alice, "/v1/fit-watches").await;
    assert_eq!(open["fit_watches"], json!([]));
}

/// A group's log through what a real install goes through: an agent departing (SIGTERM) and
/// returning, an agent killed mid-burst (silent, then lost: what it ran ends in ERROR, what it
/// never started goes back to the queue) and returning, and the bus down for seconds while
/// sessions are asked for; waits past the group's pending timeout expire. Replayed through
/// the policy that ran, with the live scheduler's pace: the waits at p50 and p99 are within
/// 5% of what was recorded, and the same sessions are given up.
#[tokio::test(flavor = "multi_thread")]
async fn a_log_through_departures_a_loss_and_a_bus_outage_replays_to_its_waits_and_give_ups() {
    use scheduler::whatif::{self, Pacing};

    let port = free_port();
    let store = std::env::temp_dir().join(format!("berth-nats-{}", Uuid::new_v4().simple()));
    let mut server = start_server(port, &store, None).await;
    let mut config = test_config();
    config.nats_url = format!("nats://127.0.0.1:{port}");
    config.nats_authorization = None;
    // Heartbeats come every 5 s: passed over after 8 s of silence, lost after 14; the
    // scheduler's safety net every 3 s, so that missed wake-ups show in the waits.
    config.timings.agent_silent_after = Duration::from_secs(8);
    config.timings.heartbeat_timeout = Duration::from_secs(14);
    config.timings.reconcile_every = Duration::from_secs(1);
    config.timings.scheduler_interval = Duration::from_secs(3);
    let pacing = Pacing {
        interval: config.timings.scheduler_interval,
        silent_after: config.timings.agent_silent_after,
    };
    let h = start_parts(config.clone(), berth::app::Parts::ALL).await;
    h.resource_group(
        json!({"name": "replay", "queue_policy": "fifo", "pending_timeout_secs": 8}),
        true,
    )
    .await;
    let alice = h.user("alice@replay.test").await;
    let bob = h.user("bob@replay.test").await;
    let runs_for = Duration::from_secs(2);
    admit(&h, "r1", "replay").await;
    admit(&h, "r2", "replay").await;
    let start_agent = |id: &'static str| {
        let (h, url, dir) = (&h, config.nats_url.clone(), store.join(id));
        async move {
            let nats = bus::link::connect_as_url_says(&url).await.unwrap();
            h.simulated_agent_in(&nats, id, "replay", &dir, runs_for)
                .await
        }
    };
    let r1 = start_agent("r1").await;
    let r2 = start_agent("r2").await;
    // A burst of 2-core batch sessions, the users taking turns: 4 run at once on both agents.
    let burst = |n: usize| {
        let (h, alice, bob) = (&h, alice.clone(), bob.clone());
        async move {
            let mut sessions = Vec::new();
            for i in 0..n {
                let key = if i % 2 == 0 { &alice } else { &bob };
                let body = json!({"type": "batch", "image": "berth/shell:latest",
                                  "startup_command": "true", "resource_group": "replay",
                                  "resources": {"cpu": 2, "memory": "1g"}});
                let (status, created) = h.create(key, body).await;
                assert_eq!(status, StatusCode::CREATED, "{created}");
                sessions.extend(ids(&created));
            }
            sessions
        }
    };
    let ended = |sessions: Vec<String>| {
        let h = &h;
        async move {
            for id in &sessions {
                h.wait_session_within(id, Duration::from_secs(90), |s| {
                    ["TERMINATED", "ERROR", "CANCELLED"]
                        .contains(&s["status"].as_str().unwrap_or(""))
                })
                .await;
            }
        }
    };

    // Both agents: a queue that drains.
    let first = burst(10).await;
    ended(first).await;
    // One departs; a burst on the other alone; it returns meanwhile.
    r2.depart("stopped (SIGTERM): the test's maintenance").await;
    let second = burst(6).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r2 = start_agent("r2").await;
    ended(second).await;
    // One is killed: what is placed on it before it is passed over never starts, and goes
    // back to the queue when it is lost; meanwhile the other serves a queue long enough that
    // the last of it waits past the pending timeout. It comes back.
    r1.kill().await;
    let third = burst(16).await;
    wait_for(|| async { (h.count_events("AgentLost").await > 0).then_some(()) }).await;
    let r1 = start_agent("r1").await;
    ended(third).await;
    // The bus goes away while sessions are asked for, and comes back.
    server.kill();
    let fourth = burst(6).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    server = start_server(port, &store, None).await;
    ended(fourth).await;
    wait_for(|| async { (h.count_events("SchedulerWakeupsMissed").await > 0).then_some(()) }).await;
    r1.stop().await;
    r2.stop().await;

    let client = h.pool.get().await.unwrap();
    let events = whatif::db::logged_events(&client, None).await.unwrap();
    let mut workload =
        whatif::workload::workload(&events, "replay", None, None).expect("the group is in the log");
    workload.pacing = pacing;
    // The log holds what the replay must model.
    let losses: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.event, events::catalogue::Event::AgentLost(_)))
        .collect();
    assert!(
        !workload.silences.is_empty(),
        "no silence before a loss: {losses:#?}"
    );
    assert!(!workload.deaf.is_empty(), "no missed wake-ups");
    let requeued = workload
        .requests
        .iter()
        .filter(|r| !r.requeued_after.is_empty())
        .count();
    let recorded = whatif::Outcome::recorded(&workload);
    let given_up = |o: &whatif::Outcome| -> Vec<Uuid> {
        o.cancelled
            .iter()
            .zip(&workload.requests)
            .filter(|(c, _)| c.is_some())
            .map(|(_, r)| r.session_id)
            .collect()
    };
    let simulated = whatif::simulate(&workload, &workload.rules);
    let same = whatif::compare(&workload, &simulated, "fifo");
    // Times of day to the millisecond, and each request that went differently, so that a
    // failure's report shows where the replay left the log within a CI log's line limits.
    let times = |passes: &[chrono::DateTime<chrono::Utc>]| {
        passes
            .iter()
            .map(|p| p.format("%M:%S%.3f").to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let fate = |o: &whatif::Outcome, i: usize| match (&o.placements[i], &o.cancelled[i]) {
        (Some(p), _) => format!("placed {}", p.at.format("%M:%S%.3f")),
        (None, Some((at, _))) => format!("given up {}", at.format("%M:%S%.3f")),
        (None, None) => "waiting".to_owned(),
    };
    let differing: Vec<String> = workload
        .requests
        .iter()
        .enumerate()
        .filter(|(i, _)| fate(&recorded, *i) != fate(&simulated, *i))
        .map(|(i, r)| {
            format!(
                "{} asked {}: recorded {}, simulated {}",
                r.session_id,
                r.requested_at.format("%M:%S%.3f"),
                fate(&recorded, i),
                fate(&simulated, i)
            )
        })
        .collect();
    let report = format!(
        "{same:#?}\nrequeued: {requeued}\ndeaf {:?}\nrequests that went differently:\n{}\nrecorded passes:\n{}\nsimulated deciding passes:\n{}",
        workload.deaf,
        differing.join("\n"),
        times(&recorded.deciding_passes),
        times(&simulated.deciding_passes)
    );
    eprintln!(
        "replayed: wait p50 {:?} s recorded, {:?} s simulated; p99 {:?} s, {:?} s; given up {} and {}; requeued {requeued}",
        same.recorded.wait_p50_secs,
        same.simulated.wait_p50_secs,
        same.recorded.wait_p99_secs,
        same.simulated.wait_p99_secs,
        given_up(&recorded).len(),
        given_up(&simulated).len(),
    );
    assert_eq!(same.requests, 38, "{report}");
    assert!(requeued > 0, "nothing went back to the queue: {report}");
    assert!(
        !given_up(&recorded).is_empty(),
        "nothing was given up: {report}"
    );
    assert_eq!(given_up(&recorded), given_up(&simulated), "{report}");
    let within = |recorded: Option<f64>, simulated: Option<f64>| {
        let (r, s) = (recorded.unwrap(), simulated.unwrap());
        (r - s).abs() <= 0.05 * r
    };
    assert!(
        within(same.recorded.wait_p50_secs, same.simulated.wait_p50_secs)
            && within(same.recorded.wait_p99_secs, same.simulated.wait_p99_secs),
        "{report}"
    );
    assert_eq!(same.recorded.placed, same.simulated.placed, "{report}");
    drop(server);
    let _ = std::fs::remove_dir_all(&store);
}
