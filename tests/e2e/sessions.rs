//! Sessions through the gateway, against real PostgreSQL and NATS: the launcher, the
//! scheduler, the sessions projection and the relay run in this process on a fresh database;
//! agents are real event producers driven by the test.

use std::time::Duration;

use crate::common::*;
use events::payloads::*;
use events::projection;
use futures::StreamExt;
use gateway::projection::SessionsView;
use reqwest::StatusCode;
use scheduler::run::{Scheduler, SchedulerConfig};
use serde_json::{json, Value};
use uuid::Uuid;

#[tokio::test]
async fn create_goes_pending_then_scheduled_on_the_right_agent() {
    let h = start().await;
    h.agent("small1", "default", 4).await;
    h.agent("large1", "default", 16).await;

    let (status, created) = h
        .create(
            &h.admin_key,
            json!({"name": "first1", "image": "berth/shell:latest",
        "resources": {"cpu": 2, "memory": "2g"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["sessions"][0]["status"], "PENDING");
    let id = &ids(&created)[0];
    // Read your writes: the session is there at once, though its view lags the log a little.
    for path in [
        format!("/v1/sessions/{id}"),
        format!("/v1/sessions/{id}/history"),
    ] {
        let (status, body) = h.get(&h.admin_key, &path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
    // Concentrated (the default group's choice) packs onto the agent left fullest.
    let detail = h.wait_session(id, |s| s["status"] == "SCHEDULED").await;
    assert_eq!(detail["agent_id"], "small1");
    assert_eq!(detail["name"], "first1");
    assert_eq!(detail["owner"]["email"], launcher::access::FIRST_SUPERADMIN);
    let history = h.history(id).await;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["result"], "SUCCESS");
    assert_eq!(
        (
            history[0]["from_status"].as_str(),
            history[0]["to_status"].as_str()
        ),
        (Some("PENDING"), Some("SCHEDULED"))
    );
    let steps = history[0]["sub_steps"].as_array().unwrap();
    assert!(steps
        .iter()
        .any(|s| s["step"] == "select agent (concentrated)"
            && s["message"].as_str().unwrap().contains("small1")));

    // An agent chosen by hand wins over the strategy.
    let mut body = shell(1.0);
    body["agent"] = json!("large1");
    let (_, created) = h.create(&h.admin_key, body).await;
    let detail = h
        .wait_session(&ids(&created)[0], |s| s["status"] == "SCHEDULED")
        .await;
    assert_eq!(detail["agent_id"], "large1");

    // The agent moves it on; terminating releases it exactly once.
    recorder::record::move_session(
        &h.pool,
        "small1",
        Uuid::parse_str(id).unwrap(),
        SessionStatus::Preparing,
        None,
        None,
    )
    .await
    .unwrap();
    let (status, _) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    recorder::record::move_session(
        &h.pool,
        "small1",
        Uuid::parse_str(id).unwrap(),
        SessionStatus::Terminated,
        Some("stopped".into()),
        None,
    )
    .await
    .unwrap();
    let detail = h.wait_session(id, |s| s["status"] == "TERMINATED").await;
    assert_eq!(
        detail["status_reason"],
        "terminated by admin@berth.local (stopped)"
    );
    assert_eq!(h.count_events("SessionResourcesReleased").await, 1);
    let client = h.pool.get().await.unwrap();
    let used: i64 = client
        .query_one(
            "SELECT used_cpu_milli FROM ledger.agents WHERE agent_id = 'small1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(used, 0);
}

#[tokio::test]
async fn a_request_that_can_never_fit_ends_cancelled_and_its_history_says_why() {
    let h = start().await;
    let tiny = json!({
        "name": "tiny",
        "queue_policy": "fifo",
        "agent_selection": "dispersed",
        "max_attempts": 2,
        "skip_after": 1,
        "pending_timeout_secs": 600,
    });
    h.resource_group(tiny, true).await;
    h.agent("t1", "tiny", 2).await;
    h.agent("t2", "tiny", 2).await;
    // 3 cores: within the group's 4 in all, but no single agent holds them.
    let mut body = shell(3.0);
    body["resource_group"] = json!("tiny");
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = &ids(&created)[0];
    let detail = h.wait_session(id, |s| s["status"] == "CANCELLED").await;
    let reason = detail["status_reason"].as_str().unwrap();
    assert!(reason.contains("gave up after 2 attempts"), "{reason}");
    assert!(reason.contains("can never fit"), "{reason}");
    let history = h.history(id).await;
    let results: Vec<&str> = history
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["FAILURE", "GIVE_UP"], "{history:?}");
    assert_eq!(history[0]["error_code"], "NEVER_FITS");
    assert!(history[0]["message"]
        .as_str()
        .unwrap()
        .contains("largest agent of `tiny` has cpu 2 cores"));
    assert_eq!(history[1]["to_status"], "CANCELLED");
    // The history's own filters.
    let (_, filtered) = h
        .get(
            &h.admin_key,
            &format!("/v1/sessions/{id}/history?result=GIVE_UP"),
        )
        .await;
    assert_eq!(filtered["history"].as_array().unwrap().len(), 1);
    let (_, filtered) = h
        .get(
            &h.admin_key,
            &format!("/v1/sessions/{id}/history?message=never%20fit&sort=-created_at"),
        )
        .await;
    assert_eq!(filtered["history"].as_array().unwrap().len(), 2);
    let (status, bad) = h
        .get(
            &h.admin_key,
            &format!("/v1/sessions/{id}/history?result=MAYBE"),
        )
        .await;
    assert_eq!(
        (status, bad["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("result"))
    );
}

#[tokio::test]
async fn users_see_and_act_on_only_their_own_sessions() {
    let h = start().await;
    h.agent("a1", "default", 8).await;
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;
    let (status, created) = h
        .create(
            &alice,
            json!({"name": "secret1", "image": "berth/shell:latest",
        "resources": {"cpu": 1, "memory": "1g"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = &ids(&created)[0];
    h.wait_session(id, |s| s["status"] == "SCHEDULED").await;

    for (method, path) in [
        (reqwest::Method::GET, format!("/v1/sessions/{id}")),
        (reqwest::Method::GET, format!("/v1/sessions/{id}/history")),
        (reqwest::Method::GET, format!("/v1/sessions/{id}/logs")),
        (
            reqwest::Method::GET,
            format!("/v1/sessions/{id}/logs?follow=true"),
        ),
        (reqwest::Method::DELETE, format!("/v1/sessions/{id}")),
    ] {
        let (status, body) = h.call(&bob, method.clone(), &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
        assert!(
            !body.to_string().contains("secret1"),
            "the name does not leak"
        );
    }
    let (status, _) = h
        .call(
            &bob,
            reqwest::Method::PATCH,
            &format!("/v1/sessions/{id}"),
            Some(json!({"name": "mine1"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = h.get(&bob, "/v1/sessions").await;
    assert_eq!(list["total"], 0);
    let (status, _) = h.get(&bob, "/v1/sessions?owner=alice@example.com").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = h.get("berth_not_a_key", "/v1/sessions").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Alice sees hers; the superadmin sees all and filters by owner.
    let (_, list) = h.get(&alice, "/v1/sessions?state=running").await;
    assert_eq!(list["sessions"][0]["name"], "secret1");
    let (_, list) = h
        .get(&h.admin_key, "/v1/sessions?owner=alice@example.com")
        .await;
    assert_eq!(list["total"], 1);
    // A user may not create for others; an admin may, by email.
    let mut body = shell(1.0);
    body["owner_email"] = json!("alice@example.com");
    let (status, err) = h.create(&bob, body.clone()).await;
    assert_eq!(
        (status, err["error"]["field"].as_str()),
        (StatusCode::FORBIDDEN, Some("owner_email"))
    );
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED);
    let theirs = h
        .wait_session(&ids(&created)[0], |s| s["status"] == "SCHEDULED")
        .await;
    assert_eq!(theirs["owner"]["email"], "alice@example.com");

    // The detail is in memory (the cache is live) before the rename.
    let before = h.cached_detail(id).await;
    assert_eq!(before["name"], "secret1");
    // Alice renames and terminates her own; the name rule holds for renames; a name is
    // unique among her live sessions.
    let (status, _) = h
        .call(
            &alice,
            reqwest::Method::PATCH,
            &format!("/v1/sessions/{id}"),
            Some(json!({"name": "bad name"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, renamed) = h
        .call(
            &alice,
            reqwest::Method::PATCH,
            &format!("/v1/sessions/{id}"),
            Some(json!({"name": "public1"})),
        )
        .await;
    assert_eq!(
        (status, renamed["name"].as_str()),
        (StatusCode::OK, Some("public1"))
    );
    // The detail kept in memory before the rename is evicted by its event: the cache's TTL
    // (15 s here) outlasts this wait, so only eviction can show the new name.
    h.wait_session_within(id, Duration::from_secs(10), |s| s["name"] == "public1")
        .await;
    let (status, err) = h.create(&alice, json!({"name": "public1", "image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "1g"}})).await;
    assert_eq!(
        (status, err["error"]["field"].as_str()),
        (StatusCode::CONFLICT, Some("name"))
    );
    let (status, ended) = h
        .delete(&alice, &format!("/v1/sessions/{id}?force=true"))
        .await;
    assert_eq!(
        (status, ended["status"].as_str()),
        (StatusCode::ACCEPTED, Some("TERMINATED"))
    );
    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "an ended session cannot end again"
    );
}

#[tokio::test]
async fn sessions_beyond_capacity_queue_and_start_as_capacity_frees() {
    let h = start().await;
    h.agent("a1", "default", 2).await;
    let mut body = shell(1.0);
    body["count"] = json!(5);
    body["name"] = json!("job");
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let all = ids(&created);
    assert_eq!(all.len(), 5);
    assert_eq!(created["sessions"][4]["name"], "job5");
    let placed = |want: usize| {
        let h = &h;
        async move {
            wait_for(|| async {
                let (_, list) = h
                    .get(&h.admin_key, "/v1/sessions?sort=created_at&limit=10")
                    .await;
                let sessions = list["sessions"].as_array().cloned().unwrap_or_default();
                let n = sessions.iter().filter(|s| s["agent_id"] == "a1").count();
                (n == want).then_some(sessions)
            })
            .await
        }
    };
    let sessions = placed(2).await;
    assert_eq!(sessions[0]["status"], "SCHEDULED");
    assert_eq!(sessions[2]["status"], "PENDING");
    // The first waiting one says why: the figures of the shortage.
    let waiting = sessions[2]["session_id"].as_str().unwrap().to_owned();
    let history = wait_for(|| async {
        let hs = h.history(&waiting).await;
        (!hs.is_empty()).then_some(hs)
    })
    .await;
    assert_eq!(history[0]["result"], "NEED_RETRY");
    assert_eq!(history[0]["error_code"], "NO_CAPACITY");
    assert!(history[0]["message"]
        .as_str()
        .unwrap()
        .contains("most free on one agent is cpu 0 cores"));
    // Those behind it are skipped without counting attempts.
    let behind = h.history(sessions[3]["session_id"].as_str().unwrap()).await;
    assert_eq!(behind[0]["result"], "SKIPPED");
    assert_eq!(behind[0]["attempts"], 0);

    // Ending the running ones frees capacity; the queue moves on until all five have run.
    let mut ended = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while ended < 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {ended} of 5 sessions were placed and ended within 60 s"
        );
        let (_, list) = h.get(&h.admin_key, "/v1/sessions?status=SCHEDULED").await;
        for s in list["sessions"].as_array().unwrap() {
            let id = s["session_id"].as_str().unwrap();
            let (status, _) = h
                .delete(&h.admin_key, &format!("/v1/sessions/{id}?force=true"))
                .await;
            // The list may lag an end just recorded: a second end is refused with 409.
            match status {
                StatusCode::ACCEPTED => ended += 1,
                StatusCode::CONFLICT => {}
                other => panic!("terminate answered {other}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for id in &all {
        let s = h.wait_session(id, |s| s["status"] == "TERMINATED").await;
        assert_eq!(s["agent_id"], "a1");
    }
    assert_eq!(h.count_events("SessionScheduled").await, 5);
    assert_eq!(h.count_events("SessionResourcesReleased").await, 5);
    // The read model folds again from the log into exactly the live tables.
    let rebuild = projection::rebuild(&h.pool, &SessionsView, false)
        .await
        .unwrap();
    assert!(rebuild.equal(), "{:?}", rebuild.differences);
    assert!(rebuild.events > 20);
    // So does the write side: five placements and five releases leave a1 holding nothing.
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    assert!(replay.events >= rebuild.events);
}

/// Three agents of four cores, and 40 one-core sessions recorded straight through the
/// launcher: more than the scheduler can place.
async fn forty_sessions_for_twelve_cores() -> Harness {
    let h = start().await;
    forty_sessions_on(&h, &["a1", "a2", "a3"]).await;
    h
}

/// Agents of four cores named `agents`, and forty one-core sessions asked for at once.
async fn forty_sessions_on(h: &Harness, agents: &[&str]) {
    for a in agents {
        h.agent(a, "default", 4).await;
    }
    let admin = {
        let client = h.pool.get().await.unwrap();
        events::ledger::key_owner(&client, &h.admin_key)
            .await
            .unwrap()
            .unwrap()
    };
    let mut request: launcher::launch::CreateSession = serde_json::from_value(shell(1.0)).unwrap();
    request.count = Some(40);
    launcher::launch::launch(&h.pool, &admin, request)
        .await
        .unwrap();
}

/// Sessions placed, per agent, by the `SessionScheduled` events in the log.
async fn placed_per_agent(h: &Harness) -> Vec<(String, i64)> {
    h.pool
        .get()
        .await
        .unwrap()
        .query(
            "SELECT k->>'agent_id', sum((k->'resources'->>'cpu_milli')::bigint)::bigint
             FROM events, jsonb_array_elements(payload->'kernels') k
             WHERE event_type = 'SessionScheduled' GROUP BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get::<_, Option<i64>>(1).unwrap_or(0)))
        .collect()
}

/// The backstop itself: a placement on an agent that cannot hold it is refused by the
/// ledger's conditional reserve, whoever records it, and nothing of it is written. Fails when
/// the reserve (and the table's CHECK behind it) is removed.
#[tokio::test]
async fn a_placement_an_agent_cannot_hold_is_refused_whole_by_the_ledger() {
    let h = start().await;
    h.agent("a1", "default", 4).await;
    let mut body = shell(1.0);
    body["count"] = json!(5);
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    // Four fit; the fifth waits.
    let ids = ids(&created);
    wait_for(|| async {
        let (_, list) = h.get(&h.admin_key, "/v1/sessions?status=SCHEDULED").await;
        (list["total"] == 4).then_some(())
    })
    .await;
    let mut waiting = None;
    for id in &ids {
        let (_, s) = h.get(&h.admin_key, &format!("/v1/sessions/{id}")).await;
        if s["status"] == "PENDING" {
            waiting = Some(uuid::Uuid::parse_str(id).unwrap());
        }
    }
    let waiting = waiting.expect("one session waits");
    let stream = events::catalogue::stream_id("session", waiting);
    let store = events::EventStore::new(h.pool.clone());
    let before = store.read_stream(&stream).await.unwrap().len();

    // A placement decided on a stale view: a1 has no core free any more.
    let one_core = ResourceSlots {
        cpu_milli: 1000,
        memory_bytes: GIB,
        gpu_milli: 0,
    };
    let placement = events::Event::SessionScheduled(SessionScheduled {
        session_id: waiting,
        agent_id: "a1".into(),
        resources: one_core,
        kernels: vec![KernelPlacement {
            agent_id: "a1".into(),
            resources: one_core,
        }],
    });
    let refused = events::ledger::record_now(
        &h.pool,
        &stream,
        events::ExpectedVersion::Any,
        &[placement],
        &events::Metadata::default(),
    )
    .await;
    assert!(
        matches!(refused, Err(events::ledger::LedgerError::AgentFull(ref a)) if a == "a1"),
        "{refused:?}"
    );
    assert_eq!(
        store.read_stream(&stream).await.unwrap().len(),
        before,
        "nothing appended"
    );
    let used: i64 = h
        .pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT used_cpu_milli FROM ledger.agents WHERE agent_id = 'a1'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(used, 4000, "nothing reserved");
}

/// Schedulers that do not take turns (no advisory lock) race for the same queue and the same
/// free cores: a pass that lost the race is refused whole (the session streams' versions,
/// then the ledger's reserve), and no agent is over-committed.
#[tokio::test(flavor = "multi_thread")]
async fn schedulers_that_ignore_the_lock_are_held_back_by_the_ledgers_reserve() {
    let h = forty_sessions_for_twelve_cores().await;
    let start_line = std::sync::Arc::new(tokio::sync::Barrier::new(4));
    let racers: Vec<_> = (0..4)
        .map(|_| {
            let (pool, start_line) = (h.pool.clone(), start_line.clone());
            tokio::spawn(async move {
                // Passes are run by hand here: the interval is never waited.
                let config = SchedulerConfig {
                    exclusive: false,
                    ..SchedulerConfig::new(Duration::from_secs(1))
                };
                let mut s = Scheduler::new(pool, config);
                start_line.wait().await;
                let mut refused = 0;
                for _ in 0..20 {
                    match s.pass().await {
                        Ok(_) => {}
                        Err(scheduler::run::SchedulerError::Ledger(e)) if e.is_conflict() => {
                            refused += 1
                        }
                        Err(e) => panic!("a pass failed otherwise than by the reserve: {e:?}"),
                    }
                }
                refused
            })
        })
        .collect();
    let mut refused = 0;
    for r in racers {
        refused += r.await.unwrap();
    }
    let over: i64 = h
        .pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT count(*) FROM ledger.agents WHERE used_cpu_milli > cpu_milli",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        over, 0,
        "the ledger over-committed ({refused} passes refused)"
    );
    let placed = placed_per_agent(&h).await;
    assert_eq!(
        placed.iter().map(|(_, c)| c).sum::<i64>(),
        12_000,
        "{placed:?}"
    );
    for (agent, cpu) in &placed {
        assert!(*cpu <= 4_000, "{agent} got {cpu} milli-cores in the log");
    }
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

/// A pass of more decisions than one statement takes is recorded in transactions side by
/// side, cut along the agents: every session is placed by the one pass, in more than one
/// transaction, no agent reserved on by two of them, none over-committed, and the ledger
/// still the log's fold. Fails if the parts are cut otherwise (an agent in two) or a part's
/// decisions are lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_pass_is_recorded_in_parts_that_share_no_agent() {
    let parts = berth::app::Parts {
        scheduler: false,
        ..berth::app::Parts::ALL
    };
    let h = start_parts(test_config(), parts).await;
    forty_sessions_on(&h, &["a1", "a2", "a3", "a4", "a5", "a6"]).await;
    let config = SchedulerConfig {
        record_batch: 4,
        record_parts: 2,
        ..SchedulerConfig::new(Duration::from_secs(1))
    };
    let pass = Scheduler::new(h.pool.clone(), config).pass().await.unwrap();
    assert_eq!(pass.placed, 24, "{pass:?}");

    let client = h.pool.get().await.unwrap();
    let rows = client
        .query(
            "SELECT tx_id::text, k->>'agent_id', count(*)
             FROM events, jsonb_array_elements(payload->'kernels') k
             WHERE event_type = 'SessionScheduled' GROUP BY 1, 2",
            &[],
        )
        .await
        .unwrap();
    let mut tx_of_agent = std::collections::HashMap::new();
    let mut txs = std::collections::HashSet::new();
    let mut placed = 0;
    for row in &rows {
        let (tx, agent, count): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(
            tx_of_agent.insert(agent.clone(), tx.clone()),
            None,
            "{agent} reserved on by two transactions: {rows:?}"
        );
        txs.insert(tx);
        placed += count;
    }
    assert_eq!(placed, 24);
    assert!(
        txs.len() >= 2,
        "one transaction recorded the pass: {rows:?}"
    );
    let over: i64 = client
        .query_one(
            "SELECT count(*) FROM ledger.agents WHERE used_cpu_milli <> cpu_milli",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(over, 0, "every agent full, none over");
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

#[tokio::test]
async fn two_schedulers_at_once_never_overcommit_an_agent() {
    let h = forty_sessions_for_twelve_cores().await;
    // Two more schedulers race the harness's own, pass after pass.
    let racers: Vec<_> = (0..2)
        .map(|_| {
            let pool = h.pool.clone();
            tokio::spawn(async move {
                let config = SchedulerConfig::new(Duration::from_secs(1));
                let mut s = Scheduler::new(pool, config);
                for _ in 0..20 {
                    s.pass().await.unwrap();
                }
            })
        })
        .collect();
    for r in racers {
        r.await.unwrap();
    }
    let client = h.pool.get().await.unwrap();
    let over: i64 = client
        .query_one(
            "SELECT count(*) FROM ledger.agents WHERE used_cpu_milli > cpu_milli",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(over, 0);
    // The log agrees: per agent, what was placed never exceeds what it has.
    let per_agent = client
        .query(
            "SELECT k->>'agent_id', sum((k->'resources'->>'cpu_milli')::bigint)::bigint
             FROM events, jsonb_array_elements(payload->'kernels') k
             WHERE event_type = 'SessionScheduled' GROUP BY 1",
            &[],
        )
        .await
        .unwrap();
    let total: i64 = per_agent
        .iter()
        .map(|r| r.get::<_, Option<i64>>(1).unwrap_or(0))
        .sum();
    assert_eq!(total, 12_000, "every core placed once");
    for row in per_agent {
        assert!(
            row.get::<_, Option<i64>>(1).unwrap_or(0) <= 4_000,
            "{:?}",
            row.get::<_, String>(0)
        );
    }
    // The ledger the racers decided on is exactly the fold of what they recorded.
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
    // A ledger changed behind the log's back is caught, table by table.
    client
        .batch_execute(
            "UPDATE ledger.agents SET used_cpu_milli = used_cpu_milli - 1000 WHERE agent_id = 'a1';
             DELETE FROM ledger.kernels WHERE ctid = (SELECT ctid FROM ledger.kernels LIMIT 1);",
        )
        .await
        .unwrap();
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert_eq!(
        replay.differences,
        vec![("agents".to_string(), 1, 1), ("kernels".to_string(), 0, 1)]
    );
}

#[tokio::test]
async fn every_bad_input_is_a_4xx_naming_the_field_and_writes_nothing() {
    let h = start().await;
    h.agent("a1", "default", 8).await;
    let before = h.count_events("SessionRequested").await;
    let base = || json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "1g"}});
    let with = |path: &[&str], value: Value| {
        let mut b = base();
        let mut at = &mut b;
        for key in &path[..path.len() - 1] {
            at = &mut at[*key];
        }
        at[path[path.len() - 1]] = value;
        b
    };
    // (An image or resources left out get the group's defaults: see
    // `a_launch_that_names_nothing_gets_its_groups_defaults`.)
    let cases: Vec<(&str, Value, &str)> = vec![
        ("blank image", with(&["image"], json!("   ")), "image"),
        (
            "cpu of the wrong type",
            with(&["resources", "cpu"], json!("two")),
            "resources.cpu",
        ),
        ("name of 3", with(&["name"], json!("abc")), "name"),
        ("name of 65", with(&["name"], json!("a".repeat(65))), "name"),
        (
            "name with a space",
            with(&["name"], json!("my session")),
            "name",
        ),
        ("unicode name", with(&["name"], json!("séance1")), "name"),
        (
            "port 1023",
            with(&["preopen_ports"], json!([8080, 1023])),
            "preopen_ports[1]",
        ),
        (
            "port 65536",
            with(&["preopen_ports"], json!([65536])),
            "preopen_ports[0]",
        ),
        (
            "shared memory above memory",
            with(&["resources", "shared_memory"], json!("2g")),
            "resources.shared_memory",
        ),
        (
            "negative cpu",
            with(&["resources", "cpu"], json!(-1)),
            "resources.cpu",
        ),
        (
            "absurd cpu",
            with(&["resources", "cpu"], json!(1e12)),
            "resources.cpu",
        ),
        (
            "negative memory",
            with(&["resources", "memory"], json!(-5)),
            "resources.memory",
        ),
        (
            "absurd memory",
            with(&["resources", "memory"], json!("100t")),
            "resources.memory",
        ),
        (
            "unknown image",
            with(&["image"], json!("nowhere/nothing:1")),
            "image",
        ),
        (
            "unknown resource group",
            with(&["resource_group"], json!("moon")),
            "resource_group",
        ),
        ("unknown field", with(&["colour"], json!("red")), "colour"),
        (
            "bad env name",
            with(&["environment"], json!({"2X": "y"})),
            "environment.2X",
        ),
        (
            "start time on interactive",
            with(&["starts_at"], json!("2030-01-01T00:00:00Z")),
            "starts_at",
        ),
        (
            "batch without command",
            with(&["type"], json!("batch")),
            "startup_command",
        ),
        (
            "cluster of 0",
            with(&["cluster_size"], json!(0)),
            "cluster_size",
        ),
        ("count of 0", with(&["count"], json!(0)), "count"),
        ("unknown type", with(&["type"], json!("quantum")), "type"),
        ("unknown preset", with(&["preset"], json!("huge")), "preset"),
        ("unknown agent", with(&["agent"], json!("ghost")), "agent"),
        (
            "more than the group has",
            with(&["resources", "cpu"], json!(9)),
            "resources.cpu",
        ),
        (
            "gpu nobody has",
            with(&["resources", "gpu"], json!(1)),
            "resources.gpu",
        ),
    ];
    for (what, body, field) in cases {
        let (status, err) = h.create(&h.admin_key, body).await;
        assert!(status.is_client_error(), "{what}: {status} {err}");
        assert_eq!(err["error"]["field"], field, "{what}: {err}");
        assert!(
            !err["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{what}"
        );
    }
    // Bodies that are not even the right shape.
    let raw = |body: &'static str| {
        h.http
            .post(format!("{}/v1/sessions", h.base))
            .header("x-api-key", &h.admin_key)
            .body(body)
            .send()
    };
    let response = raw("{not json").await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let err: Value = response.json().await.unwrap();
    assert_eq!(err["error"]["field"], "body");
    let response = raw("[1, 2]").await.unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let huge = json!({"image": "berth/shell:latest", "environment": {"BIG": "x".repeat(100_000)}});
    let (status, err) = h.create(&h.admin_key, huge).await;
    assert_eq!(
        (status, err["error"]["field"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("body"))
    );
    let (status, err) = h.get(&h.admin_key, "/v1/sessions?limit=lots").await;
    assert_eq!(
        (status, err["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("limit"))
    );
    let (status, _) = h.get(&h.admin_key, "/v1/sessions/not-a-uuid").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    assert_eq!(
        h.count_events("SessionRequested").await,
        before,
        "no event was written"
    );
}

#[tokio::test]
async fn the_event_stream_carries_a_users_own_session_events_and_the_api_is_documented() {
    let h = start().await;
    h.agent("a1", "default", 8).await;
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;
    let open = |key: String| {
        let http = h.http.clone();
        let url = format!("{}/v1/events", h.base);
        async move {
            let response = http.get(url).header("x-api-key", key).send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            response.bytes_stream()
        }
    };
    // The stream is live once its response has started: no wait is needed.
    let mut alices = open(alice.clone()).await;
    let mut bobs = open(bob.clone()).await;
    let (_, created) = h.create(&alice, json!({"name": "watched1", "image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "1g"}})).await;
    let id = ids(&created)[0].replace('-', "");
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !seen.contains("SessionScheduled") {
        let chunk = tokio::time::timeout_at(deadline, alices.next())
            .await
            .expect("events arrive")
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("event: SessionRequested"), "{seen}");
    assert!(seen.contains(&id), "{seen}");
    // Bob's stream carries nothing of Alice's, and it does carry Bob's own: his session's
    // events arrive on it after every event of Alice's was published.
    let (_, mine) = h.create(&bob, json!({"name": "bobs1", "image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "1g"}})).await;
    let bobs_id = ids(&mine)[0].replace('-', "");
    let mut bob_saw = String::new();
    while !bob_saw.contains(&bobs_id) {
        let chunk = tokio::time::timeout_at(deadline, bobs.next())
            .await
            .expect("Bob's own events arrive")
            .expect("the stream goes on")
            .expect("the stream does not fail");
        bob_saw.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!bob_saw.contains(&id), "Bob saw Alice's session: {bob_saw}");

    let (status, doc) = h.get(&alice, "/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/v1/sessions/{id}/history"]["get"].is_object());
    let (status, summary) = h.get(&alice, "/v1/resources").await;
    assert_eq!(status, StatusCode::OK, "{summary}");
    assert_eq!(summary["group"]["total"]["cpu"], 8.0);
    let summary = wait_for(|| async {
        let (_, s) = h.get(&alice, "/v1/resources").await;
        (s["my_usage"]["sessions"] == 1).then_some(s)
    })
    .await;
    assert_eq!(summary["my_usage"]["resources"]["cpu"], 1.0);
    // Alice's session and Bob's hold a core each.
    let free = wait_for(|| async {
        let (_, s) = h.get(&alice, "/v1/resources").await;
        (s["group"]["free"]["cpu"] == 6.0).then_some(s)
    })
    .await;
    assert_eq!(free["group"]["used"]["cpu"], 2.0);
    let (_, presets) = h.get(&alice, "/v1/presets").await;
    assert_eq!(presets["presets"].as_array().unwrap().len(), 2);
    // Each answer is its type in `gateway::model`, to the field.
    serde_json::from_value::<gateway::model::ResourceSummary>(free).unwrap();
    serde_json::from_value::<gateway::model::Presets>(presets).unwrap();
    let (_, me) = h.get(&alice, "/v1/whoami").await;
    let me: gateway::model::Whoami = serde_json::from_value(me).unwrap();
    assert_eq!(me.email, "alice@example.com");
}

#[tokio::test]
async fn nothing_stays_stuck_overdue_placements_requeue_and_lost_agents_give_their_sessions_up() {
    use scheduler::reconcile::{reconcile_once, Deadlines};
    let h = start().await;
    h.agent("quiet1", "default", 4).await;
    let (_, created) = h.create(&h.admin_key, shell(1.0)).await;
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| s["status"] == "SCHEDULED").await;
    // A deadline of zero: whatever is SCHEDULED when the reconciler looks is overdue, so no
    // wait is needed.
    let deadlines = Deadlines {
        scheduled: Duration::ZERO,
        heartbeat: Duration::from_secs(3600),
        max_requeues: 1,
        ..Deadlines::default()
    };
    // The agent never picks it up: past the deadline it goes back to the queue, released.
    let done = reconcile_once(&h.pool, &deadlines, true).await.unwrap();
    assert_eq!(done.sessions_moved, 1);
    let history = wait_for(|| async {
        let hs = h.history(&id).await;
        hs.iter().any(|r| r["phase"] == "reconcile").then_some(hs)
    })
    .await;
    let requeue = history.iter().find(|r| r["phase"] == "reconcile").unwrap();
    assert_eq!(
        (requeue["result"].as_str(), requeue["to_status"].as_str()),
        (Some("EXPIRED"), Some("PENDING"))
    );
    assert!(requeue["message"]
        .as_str()
        .unwrap()
        .contains("retry 1 of 1"));
    // It is placed again, stalls again, and this time ends in ERROR with the reason.
    h.wait_session(&id, |s| s["status"] == "SCHEDULED").await;
    reconcile_once(&h.pool, &deadlines, true).await.unwrap();
    let ended = h.wait_session(&id, |s| s["status"] == "ERROR").await;
    assert!(
        ended["status_reason"]
            .as_str()
            .unwrap()
            .contains("gave up after 1 retries"),
        "{ended}"
    );
    assert_eq!(h.count_events("SessionScheduled").await, 2);
    assert_eq!(
        h.count_events("SessionResourcesReleased").await,
        2,
        "one release per placement"
    );
    // Each release's stop names the placement it ends: the releases before it in the log.
    let client = h.pool.get().await.unwrap();
    let stream = events::catalogue::stream_id("session", Uuid::parse_str(&id).unwrap());
    let releases: Vec<i64> = client
        .query(
            "SELECT stream_version FROM events WHERE stream_id = $1
               AND event_type = 'SessionResourcesReleased' ORDER BY stream_version",
            &[&stream],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for (placement, version) in releases.iter().enumerate() {
        let before = recorder::dispatch::releases_before(&client, &stream, *version as u64)
            .await
            .unwrap();
        assert_eq!(before as usize, placement);
    }
    assert_eq!(releases.len(), 2);

    // An agent that stops heartbeating is marked lost: what ran on it ends in ERROR, what
    // never ran goes back to the queue.
    h.agent("quiet2", "default", 4).await;
    let mut body = shell(1.0);
    body["agent"] = json!("quiet2");
    let (_, created) = h.create(&h.admin_key, body.clone()).await;
    let never_ran = ids(&created)[0].clone();
    let (_, created) = h.create(&h.admin_key, body).await;
    let on_lost = ids(&created)[0].clone();
    for (id, through) in [
        (&never_ran, &[SessionStatus::Preparing][..]),
        (
            &on_lost,
            &[
                SessionStatus::Preparing,
                SessionStatus::Prepared,
                SessionStatus::Creating,
                SessionStatus::Running,
            ][..],
        ),
    ] {
        h.wait_session(id, |s| s["status"] == "SCHEDULED").await;
        for to in through {
            recorder::record::move_session(
                &h.pool,
                "quiet2",
                Uuid::parse_str(id).unwrap(),
                *to,
                None,
                None,
            )
            .await
            .unwrap();
        }
    }
    let silent = Deadlines {
        heartbeat: Duration::ZERO,
        ..Deadlines::default()
    };
    // Agents are called lost only while a recorder is listening (its watch is kept).
    wait_for(|| async {
        let client = h.pool.get().await.unwrap();
        client
            .query_opt("SELECT 1 FROM recorder.liveness_watch", &[])
            .await
            .unwrap()
    })
    .await;
    let done = reconcile_once(&h.pool, &silent, true).await.unwrap();
    assert!(done.agents_lost >= 1);
    let ended = h.wait_session(&on_lost, |s| s["status"] == "ERROR").await;
    assert!(
        ended["status_reason"]
            .as_str()
            .unwrap()
            .contains("agent `quiet2` lost"),
        "{ended}"
    );
    // (Back in the queue, it waits for the agent it asked for by hand, which is lost.)
    let history = wait_for(|| async {
        let hs = h.history(&never_ran).await;
        hs.iter().any(|r| r["phase"] == "reconcile").then_some(hs)
    })
    .await;
    let back = history.iter().find(|r| r["phase"] == "reconcile").unwrap();
    assert_eq!(
        (back["from_status"].as_str(), back["to_status"].as_str()),
        (Some("PREPARING"), Some("PENDING"))
    );
    assert!(
        back["message"]
            .as_str()
            .unwrap()
            .contains("its container never ran (it was PREPARING): back to the queue"),
        "{back}"
    );
    // Its late report is refused: it is placed on quiet2 no more.
    let late = recorder::record::move_session(
        &h.pool,
        "quiet2",
        Uuid::parse_str(&never_ran).unwrap(),
        SessionStatus::Error,
        Some("a late report".into()),
        None,
    )
    .await;
    assert!(
        matches!(late, Err(recorder::record::RecordError::NotMine { .. })),
        "{late:?}"
    );
    let client = h.pool.get().await.unwrap();
    let used: i64 = client
        .query_one(
            "SELECT used_cpu_milli FROM ledger.agents WHERE agent_id = 'quiet2'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(used, 0, "released");
    // Requeues, errors and lost agents fold again into exactly the live ledger.
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

/// Read-your-writes: every sub-resource of a session answers for it as soon as its caller is
/// told it was created, before the views have caught up, as the detail does.
#[tokio::test(flavor = "multi_thread")]
async fn every_sub_resource_answers_for_a_session_just_created() {
    let h = start().await;
    h.agent("ryw1", "default", 64).await;
    let interactive =
        json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "128m"}});
    for round in 0..10 {
        let (status, created) = h
            .post(&h.admin_key, "/v1/sessions", interactive.clone())
            .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let id = created["sessions"][0]["session_id"]
            .as_str()
            .unwrap()
            .to_owned();
        for path in [
            format!("/v1/sessions/{id}/apps"),
            format!("/v1/sessions/{id}/history"),
            format!("/v1/sessions/{id}/logs"),
            format!("/v1/sessions/{id}/idle"),
            format!("/v1/sessions/{id}"),
        ] {
            let (status, body) = h.get(&h.admin_key, &path).await;
            assert_eq!(status, StatusCode::OK, "round {round}, {path}: {body}");
        }
    }
}

/// A launch that names no environment and no resources gets its group's defaults: an
/// install's first group launches berth's shell image with the smallest preset that fits;
/// an operator sets others (a preset that exists, in a group that exists), what the request
/// does say still wins, and an environment left unset falls back to the group's most used.
#[tokio::test]
async fn a_launch_that_names_nothing_gets_its_groups_defaults() {
    let h = start().await;
    h.agent("def1", "default", 8).await;
    let alice = h.user("alice@example.com").await;
    let launched = |body: serde_json::Value| {
        let (h, alice) = (&h, &alice);
        async move {
            let (status, created) = h.create(alice, body).await;
            assert_eq!(status, StatusCode::CREATED, "{created}");
            let id = ids(&created)[0].clone();
            let (_, detail) = h.get(alice, &format!("/v1/sessions/{id}")).await;
            detail
        }
    };
    let first = launched(json!({})).await;
    assert_eq!(first["image"], "berth/shell:latest", "{first}");
    // The bootstrap's `small` preset: a core and a GiB.
    assert_eq!(first["resources"]["cpu_milli"], 1000, "{first}");
    assert_eq!(first["resources"]["memory_bytes"], 1u64 << 30, "{first}");

    let set = |body: serde_json::Value, group: &'static str| {
        let h = &h;
        async move {
            h.put(
                &h.admin_key,
                &format!("/v1/admin/resource-groups/{group}/defaults"),
                body,
            )
            .await
        }
    };
    let (status, err) = set(json!({"preset": "huge"}), "default").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert_eq!(err["error"]["field"], "preset", "{err}");
    let (status, err) = set(json!({"preset": "medium"}), "nowhere").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert_eq!(err["error"]["field"], "name", "{err}");
    let (status, _) = set(json!({"preset": "medium"}), "default").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    // The image left unset: the group's most used (the shell, launched once already).
    let second = launched(json!({"resources": {"cpu": 3}})).await;
    assert_eq!(second["image"], "berth/shell:latest", "{second}");
    assert_eq!(
        second["resources"]["cpu_milli"], 3000,
        "what the request says wins over the preset: {second}"
    );
    assert_eq!(
        second["resources"]["memory_bytes"],
        4u64 << 30,
        "medium's memory"
    );
    // Both cleared: the most used environment, the smallest preset that fits.
    let (status, _) = set(json!({}), "default").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let third = launched(json!({"type": "batch", "startup_command": "true"})).await;
    assert_eq!(third["image"], "berth/shell:latest", "{third}");
    assert_eq!(third["resources"]["memory_bytes"], 1u64 << 30, "{third}");
    assert_eq!(h.count_events("ResourceGroupDefaultsSet").await, 3);
}
