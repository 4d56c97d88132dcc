//! Queue policies and priorities end to end, agents driven by the test: DRF serves a user
//! with two sessions before another's older backlog where FIFO does not; under fair share a
//! user who ran much last week (past sessions in the log) waits behind one who ran nothing,
//! and the factor the API prints is the one computed here by hand from the events read back;
//! priorities reorder a queue, an admin raises a queued session, and a low-priority session
//! passed over past the starvation bound goes first. Each ends with the ledger equal to the
//! log's fold.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use events::catalogue::{stream_id, Event, Metadata};
use events::payloads::*;
use events::store::{EventStore, ExpectedVersion};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common::*;

fn one_core(count: u32) -> Value {
    json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "1g"},
           "count": count})
}

/// The default group never gives up on a session nor expires one here: the tests count
/// placements only.
async fn patient_default_group(h: &Harness) {
    let (status, answer) = h
        .post(
            &h.admin_key,
            "/v1/admin/resource-groups",
            json!({"name": "default", "max_attempts": 1000, "skip_after": 1000,
                   "pending_timeout_secs": 0}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
}

/// Sets the default group's scheduling through the admin API.
async fn set_scheduling(h: &Harness, body: Value) {
    let (status, answer) = h
        .call(
            &h.admin_key,
            Method::PUT,
            "/v1/admin/resource-groups/default/scheduling",
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{answer}");
}

/// Each of `ids`' status in the ledger.
async fn statuses(h: &Harness, ids: &[String]) -> HashMap<String, String> {
    let ids: Vec<Uuid> = ids.iter().map(|i| i.parse().unwrap()).collect();
    let client = h.pool.get().await.unwrap();
    client
        .query(
            "SELECT session_id::text, status FROM ledger.sessions WHERE session_id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The ones of `ids` placed (agents driven by the test leave them SCHEDULED).
async fn placed(h: &Harness, ids: &[String]) -> Vec<String> {
    let now = statuses(h, ids).await;
    ids.iter()
        .filter(|id| now.get(*id).is_some_and(|s| s == "SCHEDULED"))
        .cloned()
        .collect()
}

/// Waits until exactly `n` of `ids` have left the queue, and returns them.
async fn wait_placed(h: &Harness, ids: &[String], n: usize) -> Vec<String> {
    wait_for(|| async {
        let placed = placed(h, ids).await;
        assert!(placed.len() <= n, "more placed than room: {placed:?}");
        (placed.len() == n).then_some(placed)
    })
    .await
}

/// Waits until a pass has seen each of `ids` (it has a history row).
async fn wait_seen(h: &Harness, ids: &[String]) {
    for id in ids {
        wait_for(|| async { (!h.history(id).await.is_empty()).then_some(()) }).await;
    }
}

async fn force_end(h: &Harness, id: &str) {
    let (status, answer) = h
        .delete(&h.admin_key, &format!("/v1/sessions/{id}?force=true"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
}

/// The message of the "order the queue" step in the history row that placed `id` (waiting
/// for the history's projection to show it).
async fn order_step(h: &Harness, id: &str) -> String {
    let placing = wait_for(|| async {
        h.history(id)
            .await
            .into_iter()
            .find(|row| row["result"] == "SUCCESS")
    })
    .await;
    let step = placing["sub_steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"].as_str().unwrap().starts_with("order the queue ("))
        .unwrap_or_else(|| panic!("no order step: {placing}"));
    step["message"].as_str().unwrap().to_owned()
}

async fn assert_ledger_is_the_logs_fold(h: &Harness) {
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

/// Alice fills the 4-core agent and queues 20 more; Bob then queues 2. Three of Alice's
/// sessions end: returns which of the queued were placed then (three), Alice's and Bob's.
async fn two_users_on_a_full_group(policy: &str) -> (Vec<String>, Vec<String>, Vec<String>) {
    let h = start().await;
    h.agent("a1", "default", 4).await;
    patient_default_group(&h).await;
    set_scheduling(&h, json!({"queue_policy": policy})).await;
    let alice = h.user("alice@lab.org").await;
    let bob = h.user("bob@lab.org").await;
    let (status, running) = h.create(&alice, one_core(4)).await;
    assert_eq!(status, 201, "{running}");
    let running = ids(&running);
    wait_placed(&h, &running, 4).await;
    let (_, backlog) = h.create(&alice, one_core(20)).await;
    let backlog = ids(&backlog);
    let (status, bobs) = h.create(&bob, one_core(2)).await;
    assert_eq!(status, 201, "{bobs}");
    let bobs = ids(&bobs);
    wait_seen(&h, &bobs).await;
    for id in &running[..3] {
        force_end(&h, id).await;
    }
    let queued: Vec<String> = backlog.iter().chain(&bobs).cloned().collect();
    let now_placed = wait_placed(&h, &queued, 3).await;
    let alices = now_placed
        .iter()
        .filter(|id| backlog.contains(id))
        .cloned()
        .collect();
    let bobs_placed: Vec<String> = now_placed
        .iter()
        .filter(|id| bobs.contains(id))
        .cloned()
        .collect();
    if let Some(id) = bobs_placed.first() {
        let why = order_step(&h, id).await;
        assert!(why.contains("owner's dominant share"), "{why}");
    }
    h.assert_running();
    assert_ledger_is_the_logs_fold(&h).await;
    (now_placed, alices, bobs_placed)
}

#[tokio::test]
async fn with_drf_a_second_users_sessions_start_before_the_first_users_backlog() {
    let (placed, alices, bobs) = two_users_on_a_full_group("drf").await;
    assert_eq!(bobs.len(), 2, "both of Bob's are placed: {placed:?}");
    assert_eq!(alices.len(), 1, "and one of Alice's 20");
}

#[tokio::test]
async fn with_fifo_the_first_users_backlog_goes_first() {
    let (placed, alices, bobs) = two_users_on_a_full_group("fifo").await;
    assert_eq!(alices.len(), 3, "{placed:?}");
    assert!(bobs.is_empty(), "Bob waits behind Alice's backlog");
}

/// What one session held from its start to its end, as the log records it.
struct Ran {
    cores: f64,
    gib: f64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
}

/// Records, through the ledger, a session of `owner` that ran `cores` on `agent` from
/// `from` to `to` (the container's start and end, as an agent reports them late).
async fn ran_in_the_past(
    h: &Harness,
    owner: (Uuid, &str),
    agent: &str,
    cores: u64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Uuid {
    let session_id = Uuid::now_v7();
    let resources = ResourceSlots {
        cpu_milli: cores * 1000,
        memory_bytes: GIB,
        gpu_milli: 0,
    };
    let moved = |from: SessionStatus, to: SessionStatus, at: Option<DateTime<Utc>>| {
        Event::SessionStatusChanged(SessionStatusChanged {
            session_id,
            from,
            to,
            reason: None,
            exit_code: None,
            occurred_at: at,
        })
    };
    let kernels = vec![KernelPlacement {
        agent_id: agent.into(),
        resources,
    }];
    let events = [
        Event::SessionRequested(Box::new(SessionRequested {
            shared_mounts: Default::default(),
            session_id,
            name: format!("past{}", session_id.simple()),
            owner: Owner {
                user_id: owner.0,
                email: owner.1.into(),
                project: None,
            },
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
            startup_command: Some("train".into()),
            starts_at: None,
            batch_timeout_secs: None,
            omp_num_threads: cores as u32,
            max_lifetime_secs: None,
            network_idle_timeout_secs: None,
            apps: vec![],
            priority: SessionPriority::DEFAULT,
            pids_limit: None,
            log_limit_bytes: None,
            volumes: Default::default(),
        })),
        Event::SessionScheduled(SessionScheduled {
            session_id,
            agent_id: agent.into(),
            resources,
            kernels: kernels.clone(),
        }),
        moved(SessionStatus::Pending, SessionStatus::Scheduled, None),
        moved(SessionStatus::Scheduled, SessionStatus::Running, Some(from)),
        moved(SessionStatus::Running, SessionStatus::Terminated, Some(to)),
        Event::SessionResourcesReleased(SessionResourcesReleased {
            session_id,
            agent_id: agent.into(),
            resources,
            kernels,
        }),
    ];
    let mut client = h.pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    events::ledger::record(
        &tx,
        &stream_id("session", session_id),
        ExpectedVersion::NoStream,
        &events,
        &Metadata::default(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    session_id
}

/// What session `id` held and when it ran, read back from its stream in the log.
async fn read_back(h: &Harness, id: Uuid) -> Ran {
    let recorded = EventStore::new(h.pool.clone())
        .read_stream(&stream_id("session", id))
        .await
        .unwrap();
    let mut ran = Ran {
        cores: 0.0,
        gib: 0.0,
        from: DateTime::UNIX_EPOCH,
        to: DateTime::UNIX_EPOCH,
    };
    for r in &recorded {
        match &r.event {
            Event::SessionScheduled(e) => {
                ran.cores = e.resources.cpu_milli as f64 / 1000.0;
                ran.gib = e.resources.memory_bytes as f64 / GIB as f64;
            }
            Event::SessionStatusChanged(e) if e.to == SessionStatus::Running => {
                ran.from = e.occurred_at.unwrap_or(r.recorded_at);
            }
            Event::SessionStatusChanged(e) if e.to == SessionStatus::Terminated => {
                ran.to = e.occurred_at.unwrap_or(r.recorded_at);
            }
            _ => {}
        }
    }
    ran
}

#[tokio::test]
async fn under_fair_share_who_ran_much_last_week_waits_behind_who_did_not() {
    let h = start().await;
    h.agent("a1", "default", 1).await;
    patient_default_group(&h).await;
    set_scheduling(&h, json!({"queue_policy": "fair-share"})).await;
    let alice = h.user("alice@lab.org").await;
    let bob = h.user("bob@lab.org").await;
    let users = |email: &'static str| {
        let pool = h.pool.clone();
        async move {
            let client = pool.get().await.unwrap();
            client
                .query_one(
                    "SELECT user_id FROM ledger.users WHERE email = $1",
                    &[&email],
                )
                .await
                .unwrap()
                .get::<_, Uuid>(0)
        }
    };
    let alice_id = users("alice@lab.org").await;
    // Last week Alice ran one core for ten hours, then two hours the day before yesterday.
    let now = h.database_time_in(0).await;
    let week = chrono::Duration::days(7);
    let past = [
        ran_in_the_past(
            &h,
            (alice_id, "alice@lab.org"),
            "a1",
            1,
            now - week - chrono::Duration::hours(10),
            now - week,
        )
        .await,
        ran_in_the_past(
            &h,
            (alice_id, "alice@lab.org"),
            "a1",
            1,
            now - chrono::Duration::hours(50),
            now - chrono::Duration::hours(48),
        )
        .await,
    ];
    // The agent is full; Alice queues first, Bob after her.
    let (_, filler) = h.create(&h.admin_key, one_core(1)).await;
    let filler = ids(&filler);
    wait_placed(&h, &filler, 1).await;
    let (status, alices) = h.create(&alice, one_core(1)).await;
    assert_eq!(status, 201, "{alices}");
    let alices = ids(&alices);
    let (_, bobs) = h.create(&bob, one_core(1)).await;
    let bobs = ids(&bobs);
    wait_seen(&h, &bobs).await;

    // The factors the API prints, against a hand computation from the log.
    let (status, shares) = h
        .get(&h.admin_key, "/v1/admin/resource-groups/default/shares")
        .await;
    assert_eq!(status, StatusCode::OK, "{shares}");
    let at: DateTime<Utc> = serde_json::from_value(shares["computed_at"].clone()).unwrap();
    let half_life = 7.0 * 86_400.0;
    let mut by_hand = 0.0;
    for id in past {
        let ran = read_back(&h, id).await;
        // Weighed: 1 per core, 0.25 per GiB; each moment halved every half-life:
        // w * H / ln 2 * (2^(-age at end / H) - 2^(-age at start / H)).
        let weight = ran.cores * 1.0 + ran.gib * 0.25;
        let age = |t: DateTime<Utc>| (at - t).num_milliseconds() as f64 / 1000.0;
        by_hand += weight * half_life / std::f64::consts::LN_2
            * ((-age(ran.to) / half_life).exp2() - (-age(ran.from) / half_life).exp2());
    }
    // Ten hours a week ago count about half; two hours two days ago about 0.82 each.
    assert!(
        (28_000.0..31_000.0).contains(&by_hand),
        "hand computation: {by_hand}"
    );
    let user = |email: &str| {
        shares["users"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["email"] == email)
            .unwrap_or_else(|| panic!("no {email}: {shares}"))
            .clone()
    };
    let (a, b) = (user("alice@lab.org"), user("bob@lab.org"));
    let printed = a["decayed_usage"].as_f64().unwrap();
    assert!(
        (printed - by_hand).abs() < 1e-6 * by_hand,
        "{printed} against {by_hand} by hand"
    );
    // Two users, Alice all of the use: 2^(-1 * 2) = 0.25; Bob ran nothing: 1.
    assert!(
        (a["fair_share_factor"].as_f64().unwrap() - 0.25).abs() < 1e-12,
        "{a}"
    );
    assert_eq!(b["fair_share_factor"].as_f64().unwrap(), 1.0, "{b}");
    assert_eq!(
        (a["queued"].clone(), b["queued"].clone()),
        (json!(1), json!(1))
    );

    // One core frees: Bob's goes, though Alice asked first.
    force_end(&h, &filler[0]).await;
    let queued: Vec<String> = alices.iter().chain(&bobs).cloned().collect();
    assert_eq!(wait_placed(&h, &queued, 1).await, bobs);
    let why = order_step(&h, &bobs[0]).await;
    assert!(
        why.contains("factor 1.000 = owner 1.000 × project 1.000"),
        "{why}"
    );
    h.assert_running();
    assert_ledger_is_the_logs_fold(&h).await;
}

#[tokio::test]
async fn priorities_reorder_the_queue_and_a_starving_session_goes_first_within_its_bound() {
    let h = start().await;
    h.agent("a1", "default", 1).await;
    patient_default_group(&h).await;
    let alice = h.user("alice@lab.org").await;
    let bob = h.user("bob@lab.org").await;
    let (_, filler) = h.create(&h.admin_key, one_core(1)).await;
    let filler = ids(&filler);
    wait_placed(&h, &filler, 1).await;
    let with_priority = |priority: i32| {
        json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "1g"},
               "priority": priority})
    };
    let (status, low) = h.create(&alice, with_priority(0)).await;
    assert_eq!(status, 201, "{low}");
    let low = ids(&low).remove(0);
    let (_, high) = h.create(&bob, with_priority(50)).await;
    let high = ids(&high).remove(0);
    let (_, raised) = h.create(&alice, with_priority(10)).await;
    let raised = ids(&raised).remove(0);
    // Above the bound of the user's policy (100 unless it names less), or out of bounds.
    let (status, refused) = h.create(&alice, with_priority(101)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert!(refused.to_string().contains("priority"), "{refused}");

    // An admin raises the last one; the queue view orders by priority.
    let path = |id: &str| format!("/v1/admin/sessions/{id}/priority");
    let (status, answer) = h
        .call(
            &h.admin_key,
            Method::PUT,
            &path(&raised),
            Some(json!({"priority": 90})),
        )
        .await;
    assert_eq!(
        (status, answer["priority"].clone()),
        (StatusCode::OK, json!(90))
    );
    // The session's own detail shows the priority it has now, and that it asked for at first.
    h.wait_session(&raised, |s| s["priority"] == 90).await;
    let low_detail = h.wait_session(&low, |_| true).await;
    assert_eq!(low_detail["priority"], 0, "{low_detail}");
    let (status, answer) = h
        .call(
            &h.admin_key,
            Method::PUT,
            &path(&raised),
            Some(json!({"priority": 101})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["error"]["field"], "priority", "{answer}");
    let (status, answer) = h
        .call(
            &h.admin_key,
            Method::PUT,
            &path(&filler[0]),
            Some(json!({"priority": 5})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "placed already: {answer}");
    let (status, answer) = h
        .call(
            &alice,
            Method::PUT,
            &path(&low),
            Some(json!({"priority": 100})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    let (_, queue) = h.get(&h.admin_key, "/v1/queue").await;
    let order: Vec<&str> = queue["resource_groups"][0]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(order, [&raised, &high, &low], "{queue}");

    // Room for one: the raised one goes, before the older ones.
    let queued = vec![low.clone(), high.clone(), raised.clone()];
    force_end(&h, &filler[0]).await;
    assert_eq!(
        wait_placed(&h, &queued, 1).await,
        std::slice::from_ref(&raised)
    );
    let why = order_step(&h, &raised).await;
    assert!(why.contains("priority 90"), "{why}");

    // With a bound of 2 s on being passed over, the low one, waiting longer, goes before
    // the high one.
    set_scheduling(&h, json!({"queue_policy": "fifo", "starve_after_secs": 2})).await;
    let low_since: DateTime<Utc> = {
        let client = h.pool.get().await.unwrap();
        let id: Uuid = low.parse().unwrap();
        client
            .query_one(
                "SELECT status_since FROM ledger.sessions WHERE session_id = $1",
                &[&id],
            )
            .await
            .unwrap()
            .get(0)
    };
    wait_for(|| async {
        (h.database_time_in(0).await > low_since + chrono::Duration::seconds(3)).then_some(())
    })
    .await;
    force_end(&h, &raised).await;
    let both = vec![low.clone(), high.clone()];
    assert_eq!(wait_placed(&h, &both, 1).await, std::slice::from_ref(&low));
    let why = order_step(&h, &low).await;
    assert!(why.contains("past the group's bound of 2 s"), "{why}");
    h.assert_running();
    assert_ledger_is_the_logs_fold(&h).await;
}
