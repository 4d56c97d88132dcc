//! Sessions committed to customized images: the image holds what the container wrote but
//! not its folders or scratch, starts new sessions for its owner alone, and is removed by
//! them; a commit holds off a terminate (force fails it), and the policy's limit is checked
//! before any work.

use std::time::Duration;

use crate::common::*;
use crate::containers::{data_dir, fresh_agent_id, logs, spawn_agent};
use bus::protocol::{Fact, Report, StartedKernel};
use events::payloads::*;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

async fn create(h: &Harness, key: &str, body: Value) -> String {
    let (status, created) = h.create(key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    ids(&created)[0].clone()
}

#[tokio::test]
async fn a_committed_session_starts_new_sessions_for_its_owner_alone_without_its_folders() {
    let h = start().await;
    // Images read again every second, so the committed image is offered soon after.
    let _agent = spawn_agent(
        &h,
        &fresh_agent_id(),
        &data_dir(),
        8_000,
        Some(Duration::from_secs(1)),
    )
    .await;
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;
    let (status, _) = h
        .post(&alice, "/v1/folders", json!({"name": "data1"}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let writes = "mkdir -p /opt/kept && echo before > /opt/kept/file \
                  && echo folder > /home/work/data1/file && echo scratch > /home/work/scratch \
                  && echo ready && sleep 600";
    let id = create(
        &h,
        &alice,
        json!({"image": "berth/shell:latest", "mounts": ["data1"], "startup_command": writes,
               "resources": {"cpu": 1, "memory": "128m"}}),
    )
    .await;
    h.wait_session(&id, |s| s["status"] == "RUNNING").await;
    wait_for(|| async { logs(&h, &id).await.contains("ready").then_some(()) }).await;

    let response = h
        .http
        .get(format!("{}/v1/events", h.base))
        .header("x-api-key", &alice)
        .send()
        .await
        .unwrap();
    let mut events = response.bytes_stream();
    let (status, bad) = h
        .post(
            &alice,
            &format!("/v1/sessions/{id}/commit"),
            json!({"name": "no"}),
        )
        .await;
    assert_eq!(
        (status, bad["error"]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("name"))
    );
    let (status, started) = h
        .post(
            &alice,
            &format!("/v1/sessions/{id}/commit"),
            json!({"name": "kept-env"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let image = started["image"].as_str().unwrap().to_owned();

    // Progress on the event stream: started, layer written, done.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut seen = String::new();
    while !seen.contains("event: SessionCommitEnded") {
        let chunk = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("the commit did not end: {seen}"))
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    for step in ["\"started\"", "\"layer_written\"", "\"done\""] {
        assert!(seen.contains(step), "{step} in {seen}");
    }
    let (_, listed) = h.get(&alice, "/v1/images").await;
    assert_eq!(listed["items"][0]["image"], image.as_str(), "{listed}");
    assert_eq!(listed["items"][0]["name"], "kept-env");
    let (_, none) = h.get(&bob, "/v1/images").await;
    assert_eq!(none["items"], json!([]), "Bob sees none of Alice's images");

    // A new session from the image has the file written before the commit, and neither the
    // folder's file nor the scratch.
    let check = "cat /opt/kept/file; cat /home/work/data1/file || echo no-folder; \
                 cat /home/work/scratch || echo no-scratch";
    let from_image = json!({"type": "batch", "image": image, "startup_command": check,
                            "resources": {"cpu": 1, "memory": "128m"}});
    let next = wait_for(|| async {
        let (status, created) = h.create(&alice, from_image.clone()).await;
        (status == StatusCode::CREATED).then(|| ids(&created)[0].clone())
    })
    .await;
    let ended = h.wait_session(&next, |s| s["status"] == "TERMINATED").await;
    let output = logs(&h, &next).await;
    assert!(output.contains("before"), "{output} {ended}");
    assert!(output.contains("no-folder"), "{output}");
    assert!(!output.lines().any(|l| l == "folder"), "{output}");
    assert!(output.contains("no-scratch"), "{output}");

    // Bob may not use it; once Alice removes it, nobody may.
    let (status, err) = h.create(&bob, from_image.clone()).await;
    assert_eq!(
        (status, err["error"]["field"].as_str()),
        (StatusCode::NOT_FOUND, Some("image")),
        "{err}"
    );
    let (status, _) = h.delete(&bob, "/v1/images/kept-env").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = h.delete(&alice, "/v1/images/kept-env").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = h.create(&alice, from_image).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = h.delete(&alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // The agent removes the image from its host.
    wait_for(|| async {
        let docker = agent::docker::connect().await.ok()?;
        docker.inspect_image(&image).await.is_err().then_some(())
    })
    .await;
    // The ledger's images, folded again from the log, are the live ones.
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

/// Moves a session placed on hand-driven agent `agent` to RUNNING.
pub(crate) async fn run_by_hand(h: &Harness, agent: &str, id: &str) {
    h.wait_session(id, |s| s["status"] == "SCHEDULED").await;
    let session = Uuid::parse_str(id).unwrap();
    for to in [
        SessionStatus::Preparing,
        SessionStatus::Prepared,
        SessionStatus::Creating,
    ] {
        recorder::record::move_session(&h.pool, agent, session, to, None, None)
            .await
            .unwrap();
    }
    let kernel = StartedKernel {
        kernel: 0,
        container_id: "c0".into(),
        ports: Vec::new(),
        hostname: None,
        address: None,
        started_at: None,
    };
    recorder::record::kernels_started(&h.pool, agent, session, &[kernel], &Default::default())
        .await
        .unwrap();
    h.wait_session(id, |s| s["status"] == "RUNNING").await;
}

#[tokio::test]
async fn a_commit_holds_off_a_terminate_force_fails_it_and_the_limit_is_checked_first() {
    let h = start().await;
    h.agent("hand1", "default", 8).await;
    let interactive =
        json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "128m"}});
    let first = create(&h, &h.admin_key, interactive.clone()).await;
    run_by_hand(&h, "hand1", &first).await;
    let commit = |id: String, name: &'static str| {
        let h = &h;
        async move {
            h.post(
                &h.admin_key,
                &format!("/v1/sessions/{id}/commit"),
                json!({"name": name}),
            )
            .await
        }
    };

    // Nobody takes the agent's command: the commit stays under way.
    let (status, started) = commit(first.clone(), "stays").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let (status, again) = commit(first.clone(), "twice").await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "one commit at a time: {again}"
    );
    let (status, refused) = h
        .delete(&h.admin_key, &format!("/v1/sessions/{first}"))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("committed"),
        "{refused}"
    );
    let (status, _) = h
        .delete(&h.admin_key, &format!("/v1/sessions/{first}?force=true"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let ended = h
        .wait_session(&first, |s| s["status"] == "TERMINATED")
        .await;
    let client = h.pool.get().await.unwrap();
    let outcome: Value = client
        .query_one(
            "SELECT payload->'outcome' FROM events WHERE event_type = 'SessionCommitEnded'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(outcome["result"], "failed", "{outcome} {ended}");
    // The agent's late end is refused, so it removes what it made.
    let late = Report {
        report_id: Uuid::now_v7(),
        session_id: Uuid::parse_str(&first).unwrap(),
        fact: Fact::CommitEnded {
            commit_id: Uuid::parse_str(started["commit_id"].as_str().unwrap()).unwrap(),
            outcome: CommitOutcome::Done {
                image_id: "sha256:late".into(),
                size_bytes: 1,
                pushed: false,
            },
        },
        traceparent: None,
    };
    let answer = recorder::record::report(&h.pool, &Default::default(), "hand1", &late)
        .await
        .unwrap();
    assert!(
        matches!(answer, bus::protocol::Answer::Refused { .. }),
        "{answer:?}"
    );
    let (_, images) = h.get(&h.admin_key, "/v1/images").await;
    assert_eq!(images["items"], json!([]));

    // The policy allows one image: a done commit keeps one, and the next is refused before
    // anything is recorded.
    allow_images(&h, Some(1)).await;
    let second = create(&h, &h.admin_key, interactive.clone()).await;
    run_by_hand(&h, "hand1", &second).await;
    let (status, started) = commit(second.clone(), "kept1").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let done = Report {
        report_id: Uuid::now_v7(),
        session_id: Uuid::parse_str(&second).unwrap(),
        fact: Fact::CommitEnded {
            commit_id: Uuid::parse_str(started["commit_id"].as_str().unwrap()).unwrap(),
            outcome: CommitOutcome::Done {
                image_id: "sha256:kept".into(),
                size_bytes: 1,
                pushed: false,
            },
        },
        traceparent: None,
    };
    let answer = recorder::record::report(&h.pool, &Default::default(), "hand1", &done)
        .await
        .unwrap();
    assert!(
        matches!(answer, bus::protocol::Answer::Recorded { .. }),
        "{answer:?}"
    );
    let (_, images) = h.get(&h.admin_key, "/v1/images").await;
    assert_eq!(images["items"].as_array().unwrap().len(), 1, "{images}");
    let requested = h.count_events("SessionCommitRequested").await;
    let (status, refused) = commit(second.clone(), "kept2").await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden")),
        "{refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("allows 1"),
        "{refused}"
    );
    assert_eq!(
        h.count_events("SessionCommitRequested").await,
        requested,
        "no work began"
    );
    let (status, taken) = commit(second.clone(), "kept1").await;
    assert_eq!(status, StatusCode::CONFLICT, "{taken}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_never_finished_fails_at_its_deadline_even_across_a_restart() {
    let mut config = test_config();
    config.timings.commit_deadline = Duration::from_secs(3);
    let h = start_parts(
        config.clone(),
        berth::app::Parts {
            image_commit: false,
            ..berth::app::Parts::ALL
        },
    )
    .await;
    let service = berth::app::start(&config, berth::app::Parts::IMAGE_COMMIT)
        .await
        .unwrap();
    h.agent("hand2", "default", 8).await;
    let id = create(
        &h,
        &h.admin_key,
        json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "128m"}}),
    )
    .await;
    run_by_hand(&h, "hand2", &id).await;
    let (status, _) = h
        .post(
            &h.admin_key,
            &format!("/v1/sessions/{id}/commit"),
            json!({"name": "never"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // The service has the commit in progress, then stops and starts again before its
    // deadline: it fails it all the same, once.
    wait_for(|| async {
        let client = h.pool.get().await.unwrap();
        let n: i64 = client
            .query_one("SELECT count(*) FROM image_commit.pending", &[])
            .await
            .unwrap()
            .get(0);
        (n == 1).then_some(())
    })
    .await;
    service.stop().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let service = berth::app::start(&config, berth::app::Parts::IMAGE_COMMIT)
        .await
        .unwrap();
    let reason = wait_for(|| async {
        let client = h.pool.get().await.unwrap();
        let row = client
            .query_opt(
                "SELECT payload->'outcome'->>'reason' FROM events
                 WHERE event_type = 'SessionCommitEnded'",
                &[],
            )
            .await
            .unwrap();
        row.map(|r| r.get::<_, String>(0))
    })
    .await;
    assert!(reason.contains("no end within 3 s"), "{reason}");
    let (status, body) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(h.count_events("SessionCommitEnded").await, 1);
    service.stop().await.unwrap();
}

/// The default policy, allowing `most` customized images per user (`None`: any number), set
/// as a superadmin sets it (`PUT /v1/admin/policies/default`).
async fn allow_images(h: &Harness, most: Option<u32>) {
    let limits = json!({
        "max_concurrent_sessions": 100,
        "max_total": {"cpu": 1000, "memory_bytes": 1u64 << 45, "gpu": 1000},
        "max_custom_images": most,
    });
    let (status, answer) = h
        .put(&h.admin_key, "/v1/admin/policies/default", limits)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "set the policy: {answer}");
}

/// The limit and the names hold under concurrency: two commits of one user racing under a
/// limit of one, past the gateway's own check, and exactly one proceeds; a name a commit under
/// way holds is refused to another (409), never overwritten; it is free again once that
/// commit ended without an image.
#[tokio::test(flavor = "multi_thread")]
async fn two_commits_racing_under_a_limit_of_one_and_a_name_held_by_a_commit_under_way() {
    let h = start().await;
    h.agent("hand2", "default", 8).await;
    allow_images(&h, Some(1)).await;
    let interactive =
        json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "128m"}});
    let mut sessions = Vec::new();
    for _ in 0..3 {
        let id = create(&h, &h.admin_key, interactive.clone()).await;
        run_by_hand(&h, "hand2", &id).await;
        sessions.push(id);
    }
    let commit = |id: &str, name: &str| {
        let (h, path, body) = (
            &h,
            format!("/v1/sessions/{id}/commit"),
            json!({"name": name}),
        );
        async move { h.post(&h.admin_key, &path, body).await }
    };

    let ((a, a_body), (b, b_body)) =
        tokio::join!(commit(&sessions[0], "race1"), commit(&sessions[1], "race2"));
    let mut statuses = [a, b];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::ACCEPTED, StatusCode::FORBIDDEN],
        "{a_body} {b_body}"
    );
    assert_eq!(h.count_events("SessionCommitRequested").await, 1);

    // Without a limit, the name the commit under way holds is still its own.
    allow_images(&h, None).await;
    let (taken, winner) = if a == StatusCode::ACCEPTED {
        ("race1", &sessions[0])
    } else {
        ("race2", &sessions[1])
    };
    let (status, refused) = commit(&sessions[2], taken).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["field"], "name", "{refused}");

    // The commit fails (its session forced to end): the name is free again.
    let (status, _) = h
        .delete(&h.admin_key, &format!("/v1/sessions/{winner}?force=true"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    h.wait_session(winner, |s| s["status"] == "TERMINATED")
        .await;
    let (status, started) = commit(&sessions[2], taken).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}
