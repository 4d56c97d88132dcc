//! The operator commands, run as a person would run them, against real PostgreSQL.

mod common;

use common::*;
use events::catalogue::{Event, Metadata};
use events::payloads::AgentLost;
use events::store::{EventStore, ExpectedVersion, LogPosition, ProposedEvent};

async fn fresh_store() -> (EventStore, String) {
    let (pool, url) = fresh_database().await;
    let store = EventStore::new(pool);
    let mut last = LogPosition::START;
    for i in 0..10 {
        let stream = format!("agent-cli{}", i % 3);
        let event = Event::AgentLost(AgentLost {
            agent_id: stream.clone(),
            reason: format!("r{i}"),
            last_heard: None,
        });
        last = store
            .append(
                &stream,
                ExpectedVersion::Any,
                &[ProposedEvent::new(&event, Metadata::default())],
            )
            .await
            .unwrap()
            .position;
    }
    behind_the_horizon(&store, last).await;
    (store, url)
}

/// Waits until the log's readers see `position`. They read behind the PostgreSQL cluster's
/// horizon, which a transaction still open in another test's database holds back, for tens
/// of seconds under a full parallel run; a command run before that would rightly print
/// nothing of it yet.
async fn behind_the_horizon(store: &EventStore, position: LogPosition) {
    for _ in 0..600 {
        let read = store.read_all(LogPosition::START, 10_000).await.unwrap();
        if read.last().is_some_and(|e| e.position >= position) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{position:?} never came behind the log's horizon");
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_verify_names_the_tampered_event() {
    let (store, url) = fresh_store().await;
    let (ok, text) = berth(&url, &["audit", "verify"]);
    assert!(ok, "{text}");
    assert!(text.contains("ok: 10 sealed events"), "{text}");

    store
        .pool()
        .get()
        .await
        .unwrap()
        // With the owner's rights: the service role may not change the log.
        .batch_execute(
            "BEGIN; SET LOCAL ROLE NONE;
             UPDATE events SET payload = jsonb_set(payload, '{reason}', '\"forged\"')
             WHERE stream_id = 'agent-cli1' AND stream_version = 2; COMMIT;",
        )
        .await
        .unwrap();
    let (ok, text) = berth(&url, &["audit", "verify"]);
    assert!(!ok, "a broken chain exits non-zero: {text}");
    assert!(text.contains("BROKEN"), "{text}");
    assert!(text.contains("stream agent-cli1 version 2"), "{text}");
    assert!(text.contains("altered"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_rebuilds_a_projection_equal_to_the_live_one() {
    let (store, url) = fresh_store().await;
    events::projection::install(store.pool(), &events::projection::StreamIndex)
        .await
        .unwrap();
    events::projection::catch_up(store.pool(), &events::projection::StreamIndex)
        .await
        .unwrap();
    let (ok, text) = berth(&url, &["replay", "streams"]);
    assert!(ok, "{text}");
    assert!(text.contains("rebuilt from 10 events"), "{text}");
    assert!(text.contains("equal"), "{text}");

    let (ok, text) = berth(&url, &["replay", "nope"]);
    assert!(!ok);
    assert!(text.contains("unknown projection"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_stream_shows_the_state_as_of_a_time() {
    let (_store, url) = fresh_store().await;
    let (ok, text) = berth_line(&url, "audit stream agent-cli0 --as-of 2000-01-01T00:00:00Z");
    assert!(ok, "{text}");
    assert!(
        !text.contains("AgentLost"),
        "no event was recorded by then: {text}"
    );
    let (ok, text) = berth(&url, &["audit", "stream", "agent-cli0"]);
    assert!(ok, "{text}");
    assert_eq!(
        text.matches("\"event_type\":\"AgentLost\"").count(),
        4,
        "{text}"
    );
}

/// A cut between two events: the events up to it, and the state they fold into then.
#[tokio::test(flavor = "multi_thread")]
async fn audit_stream_as_of_a_time_between_events_folds_only_those_before() {
    let (store, url) = fresh_store().await;
    let registered = Event::AgentRegistered(events::payloads::AgentRegistered {
        unlabelled_images: Vec::new(),
        agent_id: "cut".into(),
        resource_group: "default".into(),
        capacity: events::payloads::ResourceSlots::default(),
        images: vec![],
        address: None,
        image_apps: Default::default(),
        network_scope: None,
        volumes: vec![],
    });
    let lost = |reason: &str| {
        Event::AgentLost(AgentLost {
            agent_id: "cut".into(),
            reason: reason.into(),
            last_heard: None,
        })
    };
    for event in [registered, lost("first"), lost("second")] {
        store
            .append(
                "agent-cut",
                ExpectedVersion::Any,
                &[ProposedEvent::new(&event, Metadata::default())],
            )
            .await
            .unwrap();
    }
    let recorded = store.read_stream("agent-cut").await.unwrap();
    let cut = recorded[1].recorded_at;
    assert!(
        cut < recorded[2].recorded_at,
        "the events were recorded apart"
    );
    let (ok, text) = berth(
        &url,
        &["audit", "stream", "agent-cut", "--as-of", &cut.to_rfc3339()],
    );
    assert!(ok, "{text}");
    assert_eq!(text.matches("\"event_type\":").count(), 2, "{text}");
    assert!(
        text.contains("\"lost\": \"first\""),
        "the state as of the cut: {text}"
    );
    assert!(!text.contains("second"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_init_prints_the_first_key_once_and_admin_commands_create_what_they_say() {
    let (store, url) = fresh_store().await;
    let (ok, text) = berth(&url, &["admin", "init"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("created superadmin admin@berth.local"),
        "{text}"
    );
    let key = text
        .split_whitespace()
        .find(|w| w.starts_with("berth_"))
        .expect("a key is printed")
        .to_owned();
    let (ok, text) = berth(&url, &["admin", "init"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("already initialised") && !text.contains("berth_"),
        "{text}"
    );
    // Past `init`, admin commands go through the gateway with a key, and say so without one.
    let (ok, text) = berth(&url, &["admin", "create-project", "vision"]);
    assert!(!ok && text.contains("set BERTH_API_KEY"), "{text}");

    let admin = AdminGateway::with_key(&url, &key);
    let (ok, text) = admin.admin(&["create-project", "vision"]);
    assert!(ok, "{text}");
    let (ok, text) =
        admin.admin_line("create-user --email ada@example.com --role admin --project vision");
    assert!(ok, "{text}");
    assert!(text.contains("API key (shown only now): berth_"), "{text}");
    let (ok, text) = admin.admin_line("create-group gpu --queue backfill --selection dispersed");
    assert!(ok, "{text}");
    let (ok, text) = admin.admin(&["grant-group", "gpu", "vision"]);
    assert!(ok, "{text}");
    let (ok, text) =
        admin.admin_line("set-policy small --max-sessions 2 --max-cpu 4 --max-memory-gib 8");
    assert!(ok, "{text}");
    let (ok, text) = admin.admin_line("save-preset tiny --cpu 0.5 --memory-gib 0.5");
    assert!(ok, "{text}");
    let (ok, text) = admin.admin(&["create-user", "--email", "bad email", "--project", "vision"]);
    assert!(!ok && text.contains("email"), "{text}");
    let (ok, text) = admin.admin(&["grant-group", "gpu", "nowhere"]);
    assert!(
        !ok && text.contains("project `nowhere` does not exist"),
        "{text}"
    );

    let client = store.pool().get().await.unwrap();
    let owner = events::ledger::key_owner(&client, &key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(owner.email, "admin@berth.local");
    let role: String = client
        .query_one(
            "SELECT role FROM ledger.users WHERE email = 'ada@example.com'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(role, "admin");
    let granted: i64 = client
        .query_one(
            "SELECT count(*) FROM ledger.group_projects WHERE resource_group = 'gpu'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(granted, 1);
    let events: i64 = client
        .query_one("SELECT count(*) FROM events WHERE category IN ('user', 'project', 'group', 'policy', 'preset')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(events >= 12, "every change is an event: {events}");
    // Users, keys, projects, groups, policies and presets fold again into the live ledger.
    let (ok, text) = berth(&url, &["replay", "ledger"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("equal: the folded tables match the live ones"),
        "{text}"
    );
    client
        .batch_execute(
            "UPDATE ledger.users SET role = 'superadmin' WHERE email = 'ada@example.com'",
        )
        .await
        .unwrap();
    let (ok, text) = berth(&url, &["replay", "ledger"]);
    assert!(!ok, "a changed ledger fails the replay: {text}");
    assert!(
        text.contains("DIFFERENT users: 1 rows only live, 1 rows only folded"),
        "{text}"
    );
}

/// Runs `berth ARGS` through `admin`'s gateway with `input` on its standard input: whether
/// it succeeded, and what it printed.
fn berth_reading(admin: &AdminGateway, args: &[&str], input: &str) -> (bool, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .envs(admin.env())
        .env_remove("BERTH_NEW_PASSWORD")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run berth");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

#[tokio::test(flavor = "multi_thread")]
async fn admin_set_password_takes_it_from_the_environment_or_standard_input_never_a_flag() {
    let (pool, url) = fresh_database().await;
    first_superadmin(&pool, &url).await;
    let admin = AdminGateway::start(&url);
    let (ok, text) = admin.admin_line("create-user --email ada@example.com");
    assert!(ok, "{text}");
    let set = ["admin", "set-password", "--email", "ada@example.com"];
    let signs_in = |password: &'static str| {
        let pool = pool.clone();
        async move {
            let client = pool.get().await.unwrap();
            events::ledger::password_owner(&client, "ada@example.com", password)
                .await
                .unwrap()
                .map(|owner| owner.email)
        }
    };

    let mut env = admin.env();
    env.push((
        "BERTH_NEW_PASSWORD".to_owned(),
        "from the environment".to_owned(),
    ));
    let (ok, text) = berth_with(&set, &env);
    assert!(ok, "{text}");
    assert!(text.contains("password of ada@example.com set"), "{text}");
    assert!(
        !text.contains("from the environment"),
        "never echoed: {text}"
    );
    assert_eq!(
        signs_in("from the environment").await.as_deref(),
        Some("ada@example.com")
    );

    let (ok, text) = berth_reading(&admin, &set, "from standard input\r\nsecond line\n");
    assert!(ok, "{text}");
    assert_eq!(
        signs_in("from standard input").await.as_deref(),
        Some("ada@example.com"),
        "the first line, without its line ending"
    );
    assert_eq!(signs_in("from the environment").await, None);

    let (ok, text) = berth_reading(&admin, &set, "");
    assert!(!ok && text.contains("no password"), "{text}");
    let (ok, text) = berth_reading(&admin, &set, "short\n");
    assert!(
        !ok && text.contains("password: must be at least 8"),
        "{text}"
    );
    let (ok, text) = berth_reading(
        &admin,
        &["admin", "set-password", "--email", "nobody@example.com"],
        "long enough\n",
    );
    assert!(
        !ok && text.contains("no user has the email `nobody@example.com`"),
        "{text}"
    );
    let (ok, text) = admin.admin(&[
        "set-password",
        "--email",
        "ada@example.com",
        "--password",
        "in the process list",
    ]);
    assert!(!ok && text.contains("--password"), "no such flag: {text}");
    assert_eq!(
        signs_in("from standard input").await.as_deref(),
        Some("ada@example.com"),
        "nothing refused changed it"
    );
    let (ok, text) = berth(&url, &["replay", "ledger"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("equal: the folded tables match the live ones"),
        "{text}"
    );
}

/// `berth replay workload` over a log recorded by hand: one agent of 2 cores, two 2-core
/// requests of two users, the second placed when the first gave its cores back.
#[tokio::test(flavor = "multi_thread")]
async fn replay_workload_compares_a_policy_with_what_happened_as_a_table_and_as_json() {
    use events::payloads::*;
    let (pool, url) = fresh_database().await;
    let store = EventStore::new(pool);
    let slots = ResourceSlots {
        cpu_milli: 2000,
        memory_bytes: 1 << 30,
        gpu_milli: 0,
    };
    let append = |stream: String, events: Vec<Event>| {
        let store = &store;
        async move {
            let proposed: Vec<ProposedEvent> = events
                .iter()
                .map(|e| ProposedEvent::new(e, Metadata::default()))
                .collect();
            store
                .append(&stream, ExpectedVersion::Any, &proposed)
                .await
                .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    append(
        "resource_group-default".into(),
        vec![Event::ResourceGroupCreated(ResourceGroupCreated {
            name: "default".into(),
            queue_policy: QueuePolicy::Fifo,
            agent_selection: AgentSelection::Concentrated,
            max_attempts: 10,
            skip_after: 3,
            pending_timeout_secs: 0,
        })],
    )
    .await;
    append(
        "agent-w1".into(),
        vec![Event::AgentRegistered(AgentRegistered {
            unlabelled_images: Vec::new(),
            agent_id: "w1".into(),
            resource_group: "default".into(),
            capacity: slots,
            images: vec![],
            address: None,
            image_apps: Default::default(),
            network_scope: None,
            volumes: vec![],
        })],
    )
    .await;
    let ids = [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()];
    for (id, who) in ids.iter().zip(["alice", "bob"]) {
        let request = SessionRequested {
            shared_mounts: Default::default(),
            session_id: *id,
            name: format!("{who}s"),
            owner: Owner {
                user_id: uuid::Uuid::new_v4(),
                email: format!("{who}@whatif.test"),
                project: None,
            },
            requested_by: None,
            session_type: SessionType::Batch,
            resource_group: "default".into(),
            image: "berth/shell:latest".into(),
            environment: Default::default(),
            resources: slots,
            shared_memory_bytes: 0,
            cluster_mode: ClusterMode::SingleNode,
            cluster_size: 1,
            agent_id: None,
            preopen_ports: vec![],
            mounts: vec![],
            startup_command: Some("true".into()),
            starts_at: None,
            batch_timeout_secs: None,
            omp_num_threads: 1,
            max_lifetime_secs: None,
            network_idle_timeout_secs: None,
            apps: vec![],
            priority: events::payloads::SessionPriority::DEFAULT,
            pids_limit: None,
            log_limit_bytes: None,
            volumes: Default::default(),
        };
        append(
            format!("session-{id}"),
            vec![Event::SessionRequested(Box::new(request))],
        )
        .await;
    }
    let attempt = |id: uuid::Uuid, result: SchedulingResult| {
        let now = chrono::Utc::now();
        Event::SchedulingAttempted(SchedulingAttempted {
            read: None,
            session_id: id,
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
                started_at: now,
                ended_at: now,
            }],
        })
    };
    let placed = |id: uuid::Uuid| {
        Event::SessionScheduled(SessionScheduled {
            session_id: id,
            agent_id: "w1".into(),
            resources: slots,
            kernels: vec![],
        })
    };
    let released = |id: uuid::Uuid| {
        Event::SessionResourcesReleased(SessionResourcesReleased {
            session_id: id,
            agent_id: "w1".into(),
            resources: slots,
            kernels: vec![],
        })
    };
    let [first, second] = ids;
    append(
        format!("session-{first}"),
        vec![attempt(first, SchedulingResult::Success), placed(first)],
    )
    .await;
    append(
        format!("session-{second}"),
        vec![attempt(second, SchedulingResult::NeedRetry)],
    )
    .await;
    append(format!("session-{first}"), vec![released(first)]).await;
    append(
        format!("session-{second}"),
        vec![attempt(second, SchedulingResult::Success), placed(second)],
    )
    .await;
    append(format!("session-{second}"), vec![released(second)]).await;

    let (ok, text) = berth(&url, &["replay", "workload", "-o", "json"]);
    assert!(ok, "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let group = &json["groups"][0];
    assert_eq!(group["group"], "default", "{json:#}");
    assert_eq!(group["recorded_policy"], "fifo");
    assert_eq!(group["simulated_policy"], "fifo");
    assert_eq!(group["placements"]["compared"], 2, "{json:#}");
    assert_eq!(group["placements"]["differing"], 0, "{json:#}");
    assert_eq!(group["placements"]["same_order"], true, "{json:#}");
    assert_eq!(group["recorded"]["placed"], 2);
    assert_eq!(
        group["users"][1]["recorded"]["wait_p99_secs"],
        group["users"][1]["simulated"]["wait_p99_secs"],
        "{json:#}"
    );
    assert!(
        group["users"][1]["recorded"]["wait_p99_secs"]
            .as_f64()
            .unwrap()
            > 0.0
    );

    let (ok, text) = berth(&url, &["replay", "workload", "--policy", "drf"]);
    assert!(ok, "{text}");
    for expected in [
        "recorded under fifo, replayed through drf",
        "alice@whatif.test",
        "bob@whatif.test",
        "utilization cpu",
        "jain's index",
        "placements: 2 compared",
    ] {
        assert!(text.contains(expected), "no `{expected}` in:\n{text}");
    }

    let (ok, text) = berth(&url, &["replay", "workload", "--policy", "nope"]);
    assert!(!ok);
    assert!(text.contains("unknown --policy `nope`"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_read_from_the_cli_goes_on_after_what_it_printed() {
    let (store, url) = fresh_store().await;
    let (ok, text) = berth(&url, &["admin", "init"]);
    assert!(ok, "{text}");
    let admin = AdminGateway::start(&url);
    let run = |args: &[&str]| berth_with(args, &admin.env());
    let (ok, text) = run(&[
        "subscription",
        "create",
        "audit",
        "--category",
        "agent",
        "--from-start",
    ]);
    assert!(ok, "{text}");
    assert!(text.contains("audit  resumes after 0:0"), "{text}");

    // The ten agent events of the fresh store, printed once and acknowledged.
    let read = || {
        let (ok, text) = run(&["events", "--subscription", "audit", "-o", "json"]);
        assert!(ok, "{text}");
        text.lines()
            .filter(|line| line.starts_with('{'))
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .collect::<Vec<_>>()
    };
    let first = read();
    assert_eq!(first.len(), 10, "{first:?}");
    assert!(first
        .iter()
        .all(|e| e["stream_id"].as_str().unwrap().starts_with("agent-")));
    let lost = Event::AgentLost(AgentLost {
        agent_id: "agent-late".into(),
        reason: "later".into(),
        last_heard: None,
    });
    let late = store
        .append(
            "agent-late",
            ExpectedVersion::Any,
            &[ProposedEvent::new(&lost, Metadata::default())],
        )
        .await
        .unwrap();
    behind_the_horizon(&store, late.position).await;
    // Only what came since.
    let second = read();
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0]["stream_id"], "agent-late");
    let (ok, text) = run(&["subscription", "ls"]);
    assert!(ok, "{text}");
    let position = second[0]["position"].as_str().unwrap();
    assert!(text.contains("audit") && text.contains(position), "{text}");

    let (ok, text) = run(&["subscription", "rm", "audit"]);
    assert!(ok && text.contains("audit deleted"), "{text}");
    let (ok, text) = run(&["events", "--subscription", "audit"]);
    assert!(
        !ok && text.contains("no subscription named `audit`"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_commands_reach_the_serving_api_and_name_what_they_refuse() {
    let (_store, url) = fresh_store().await;
    let (ok, text) = berth(&url, &["admin", "init"]);
    assert!(ok, "{text}");
    let admin = AdminGateway::start(&url);
    let run = |args: &[&str]| berth_with(args, &admin.env());
    let (ok, text) = run(&["service", "ls"]);
    assert!(ok, "{text}");
    assert!(text.contains("NAME") && text.contains("HEALTHY"), "{text}");
    let (ok, text) = run(&["service", "create", "iris", "--model-folder", "models"]);
    assert!(!ok, "{text}");
    assert!(text.contains("berth: model_folder: "), "{text}");
    let (ok, text) = run(&["service", "create", "Iris", "--model-folder", "models"]);
    assert!(!ok && text.contains("berth: name: "), "{text}");
    let (ok, text) = run(&["service", "info", "iris"]);
    assert!(
        !ok && text.contains("no endpoint of yours is named `iris`"),
        "{text}"
    );
    let (ok, text) = run(&[
        "service",
        "autoscale",
        "iris",
        "--max",
        "3",
        "--rule",
        "requests_per_second:gt:five:1:30",
    ]);
    assert!(
        !ok && text.contains("threshold `five` is not a number"),
        "{text}"
    );
}
