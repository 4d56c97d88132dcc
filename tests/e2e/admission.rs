//! Admission and NATS permissions, against a nats-server of the test's own started with the
//! authorization `berth admin nats-authorization` makes: an admitted agent runs a session
//! with its credential alone, and cannot publish on another agent's subjects, read or pull
//! another agent's commands, publish events, or register beyond its admission. Every
//! permission violation the server reports to the agent is one the test expected.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth::app::Parts;
use bus::protocol::{Answer, Offer, Request};
use events::payloads::*;
use reqwest::StatusCode;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::common::*;

/// The permission violations the server reported to a client, in order.
type Violations = Arc<Mutex<Vec<String>>>;

async fn connect_agent(
    url: &str,
    id: &str,
    seed: String,
    violations: &Violations,
) -> async_nats::Client {
    let seen = violations.clone();
    let options = async_nats::ConnectOptions::with_nkey(seed)
        .custom_inbox_prefix(bus::permissions::inbox_prefix(id))
        .event_callback(move |event| {
            let seen = seen.clone();
            async move {
                if let async_nats::Event::ServerError(e) = event {
                    seen.lock().unwrap().push(e.to_string());
                }
            }
        });
    // Another test's admission may have the shared server reloading at this instant.
    bus::link::connect_with(options, url.parse().unwrap())
        .await
        .expect("the agent connects with its credential")
}

/// Waits for the next violation, which must name `subject`.
async fn expect_violation(violations: &Violations, before: usize, subject: &str) {
    wait_for(|| async {
        let seen = violations.lock().unwrap();
        (seen.len() > before).then_some(())
    })
    .await;
    let seen = violations.lock().unwrap();
    assert_eq!(seen.len(), before + 1, "{seen:?}");
    assert!(
        seen[before]
            .to_lowercase()
            .contains("permissions violation")
            && seen[before].contains(subject),
        "{seen:?}"
    );
}

fn offer(group: &str, cpu: u64) -> Offer {
    Offer {
        unlabelled_images: Vec::new(),
        resource_group: group.into(),
        capacity: ResourceSlots {
            cpu_milli: cpu * 1000,
            memory_bytes: 4 * GIB,
            gpu_milli: 0,
        },
        images: vec!["berth/shell:latest".into()],
        address: None,
        image_apps: Default::default(),
        network_scope: None,
        volumes: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_admitted_agent_reaches_only_its_own_subjects_on_a_server_with_authorization() {
    let port = free_port();
    let password = Uuid::new_v4().simple().to_string();
    let mut config = test_config();
    config.nats_url = format!("nats://control:{password}@127.0.0.1:{port}");
    config.nats_authorization = None;
    // Admit the agents before the server starts: its authorization is made from them.
    events::store::ensure_database(&config.database_url)
        .await
        .unwrap();
    let pool = events::store::pool(&config.database_url, 4).unwrap();
    berth::app::migrate(&pool).await.unwrap();
    let seed1 = admit_with(&pool, "a1", 4).await;
    let seed2 = admit_with(&pool, "a2", 4).await;
    let keys = recorder::admission::admitted_keys(&pool).await.unwrap();
    assert_eq!(keys.len(), 2);
    let authorization =
        bus::permissions::authorization(&config.agent_bus, "control", &password, &keys);
    let store = std::env::temp_dir().join(format!("berth-nats-{}", Uuid::new_v4().simple()));
    let _server = start_server(port, &store, Some(&authorization)).await;
    let h = start_parts(config.clone(), Parts::ALL).await;
    let url = format!("nats://127.0.0.1:{port}");

    // Without a credential, nobody gets in; with a2's key, nobody can claim to be a1 (the
    // subject, not the payload, names the agent).
    assert!(
        async_nats::connect(&url).await.is_err(),
        "an anonymous client is refused"
    );

    // a1, with its credential alone, runs a session end to end (simulated containers).
    let violations: Violations = Default::default();
    let a1 = connect_agent(&url, "a1", seed1, &violations).await;
    let dir = std::env::temp_dir().join(format!("berth-a1-{}", Uuid::new_v4().simple()));
    let link = bus::Link::new(a1.clone(), "a1", config.agent_bus.clone(), &dir).unwrap();
    let agent = h
        .simulated_agent(&a1, "a1", &dir, Duration::from_millis(300))
        .await;
    let body = json!({"type": "batch", "image": "berth/shell:latest", "startup_command": "true",
                      "resources": {"cpu": 1, "memory": "256m"}, "agent": "a1"});
    let (status, created) = h.create(&h.admin_key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    let detail = h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    assert_eq!(detail["exit_code"], 0, "{detail}");
    // Its telemetry goes through too.
    let sample = bus::protocol::UsageSample {
        session_id: Uuid::parse_str(&id).unwrap(),
        sampled_at: chrono::Utc::now(),
        cpu_seconds: 1.0,
        cpu_percent: None,
        memory_bytes: 1,
        rx_bytes: 0,
        tx_bytes: 0,
        gpu_percent: None,
        gpu_memory_percent: None,
    };
    link.send_usage(&sample)
        .await
        .expect("a1 may send its telemetry");
    assert!(
        violations.lock().unwrap().is_empty(),
        "{:?}",
        violations.lock().unwrap()
    );

    // a1 cannot speak as a2: the request is refused by the server and nobody answers.
    let before = violations.lock().unwrap().len();
    let as_a2 = config.agent_bus.requests_of("a2");
    let register = serde_json::to_vec(&Request::Register(offer("default", 1))).unwrap();
    let sent = tokio::time::timeout(
        Duration::from_secs(2),
        a1.request(as_a2.clone(), register.clone().into()),
    )
    .await;
    assert!(!matches!(sent, Ok(Ok(_))), "{sent:?}");
    expect_violation(&violations, before, &as_a2).await;

    // a1 cannot read a2's commands, nor pull a2's consumer.
    let before = violations.lock().unwrap().len();
    let theirs = config.agent_bus.commands_of("a2");
    let _sub = a1.subscribe(theirs.clone()).await.unwrap();
    expect_violation(&violations, before, &theirs).await;
    let before = violations.lock().unwrap().len();
    let js = async_nats::jetstream::new(a1.clone());
    let pulled: Result<async_nats::jetstream::consumer::PullConsumer, _> = js
        .get_consumer_from_stream(
            config.agent_bus.consumer_of("a2"),
            config.agent_bus.commands_stream.clone(),
        )
        .await;
    assert!(pulled.is_err(), "a1 read a2's consumer");
    let info = format!(
        "$JS.API.CONSUMER.INFO.{}.agent-a2",
        config.agent_bus.commands_stream
    );
    expect_violation(&violations, before, &info).await;

    // a1 cannot publish events: the event stream is unchanged.
    let control = berth::app::connect_nats(&config).await.unwrap();
    let control_js = async_nats::jetstream::new(control);
    let count = |js: async_nats::jetstream::Context, name: String| async move {
        js.get_stream(name)
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .messages
    };
    let events_before = count(control_js.clone(), config.topology.stream.clone()).await;
    let before = violations.lock().unwrap().len();
    let forged = format!(
        "{}.session.{}",
        config.topology.prefix,
        Uuid::new_v4().simple()
    );
    a1.publish(forged.clone(), "{}".into()).await.unwrap();
    a1.flush().await.unwrap();
    expect_violation(&violations, before, &forged).await;
    assert_eq!(
        count(control_js, config.topology.stream.clone()).await,
        events_before
    );

    // a1 cannot register beyond its admission: another group, or more than it may offer.
    for (group, cpu) in [("gpu", 1), ("default", 5)] {
        let asked = Request::Register(offer(group, cpu));
        let answer = link.ask(&asked, &CancellationToken::new()).await.unwrap();
        assert!(
            matches!(answer, Answer::Denied { .. }),
            "{group} {cpu}: {answer:?}"
        );
    }
    let agents: i64 = h
        .pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT count(*) FROM events WHERE event_type = 'AgentRegistered'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(agents, 1, "only a1's own registration is recorded");

    // a2's credential works for a2 (its consumer exists once it registers).
    let a2_violations: Violations = Default::default();
    let a2 = connect_agent(&url, "a2", seed2, &a2_violations).await;
    let a2_dir = dir.join("a2");
    let link2 = bus::Link::new(a2, "a2", config.agent_bus.clone(), &a2_dir).unwrap();
    let answer = link2
        .ask(
            &Request::Register(offer("default", 2)),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(answer, Answer::Done);
    link2.commands().await.expect("a2 reads its own consumer");
    assert!(a2_violations.lock().unwrap().is_empty());

    agent.stop().await;
    assert_eq!(
        violations.lock().unwrap().len(),
        4,
        "no violation the test did not expect"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

async fn admit_with(pool: &deadpool_postgres::Pool, id: &str, cpu: u64) -> String {
    let admission = recorder::admission::Admission {
        agent_id: id.into(),
        resource_group: "default".into(),
        max_capacity: ResourceSlots {
            cpu_milli: cpu * 1000,
            memory_bytes: 8 * GIB,
            gpu_milli: 0,
        },
    };
    recorder::admission::admit(pool, &admission, "test")
        .await
        .unwrap()
}

/// The shared server `infra/services.sh` runs has authorization on, and the control plane
/// keeps it in step: nobody gets in anonymously; an agent gets in with its credential once
/// admitted, confined to its own subjects; once revoked, it is shut out. Skipped (said so)
/// where berth does not keep the server's authorization (`BERTH_NATS_AUTHORIZATION_DIR`
/// unset: servers of one's own).
#[tokio::test(flavor = "multi_thread")]
async fn the_shared_server_lets_an_agent_in_once_admitted_and_shuts_it_out_once_revoked() {
    let config = test_config();
    if config.nats_authorization.is_none() {
        berth_tests::missing_prerequisite(
            "BERTH_NATS_AUTHORIZATION_DIR is unset; berth keeps no server's authorization here",
        );
        return;
    }
    let h = start_with(config.clone()).await;
    let url = bus::link::without_user(&config.nats_url).unwrap();
    assert!(
        async_nats::connect(&url).await.is_err(),
        "an anonymous client is refused"
    );

    let id = format!("a{}", &Uuid::new_v4().simple().to_string()[..8]);
    let seed = admit(&h, &id, "default").await;
    // A refusal that lasts: another test's admission may have the server reloading.
    let attempt = |seed: String| {
        let url = url.clone();
        async move {
            let options = async_nats::ConnectOptions::with_nkey(seed);
            bus::link::connect_with(options, url.parse().unwrap()).await
        }
    };
    wait_for(|| async { attempt(seed.clone()).await.ok() }).await;

    // In, it reaches its own subjects and no one else's.
    let violations: Violations = Default::default();
    let agent = connect_agent(&url, &id, seed.clone(), &violations).await;
    let own = config.agent_bus.requests_of(&id);
    agent.publish(own, "{}".into()).await.unwrap();
    let events = config.topology.all_subjects();
    let _sub = agent.subscribe(events.clone()).await.unwrap();
    expect_violation(&violations, 0, &events).await;
    agent.flush().await.unwrap();
    assert_eq!(
        violations.lock().unwrap().len(),
        1,
        "publishing on its own subject is allowed: {:?}",
        violations.lock().unwrap()
    );

    recorder::admission::revoke(&h.pool, &id, "the test is over", "test")
        .await
        .unwrap();
    wait_for(|| async { attempt(seed.clone()).await.err() }).await;
}
