//! The reads a console's pages need, for every client: list rows with what each session holds
//! and how long it ran; the resource groups, agents and images a launch may choose from (the
//! same rule the launcher holds a create to); a user's recent launches, renamed, pinned and
//! launched again; and, for superadmins, each group's queue in the scheduler's own order with
//! the reason each session waits. Agents are driven by hand (and one is a real Docker agent,
//! reporting the images its engine holds).

use crate::commit::run_by_hand;
use crate::common::*;
use crate::containers::{data_dir, fresh_agent_id, spawn_agent};
use bus::protocol::{Fact, Offer, Report};
use events::payloads::*;
use launcher::launch::CreateSession;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

/// Registers hand-driven agent `id` in `group`, offering 8 cores and `images`; registering
/// again changes what it offers, as an agent whose host's images changed does.
async fn offer(h: &Harness, id: &str, group: &str, images: &[&str]) {
    let offer = Offer {
        unlabelled_images: Vec::new(),
        resource_group: group.into(),
        capacity: ResourceSlots {
            cpu_milli: 8_000,
            memory_bytes: 64 * GIB,
            gpu_milli: 0,
        },
        images: images.iter().map(|i| i.to_string()).collect(),
        address: None,
        image_apps: Default::default(),
        network_scope: None,
        volumes: Default::default(),
    };
    recorder::record::register(&h.pool, id, &offer)
        .await
        .unwrap();
}

/// Admits agent `id` into `group` and registers it there ([`offer`]).
async fn join(h: &Harness, id: &str, group: &str, images: &[&str]) {
    admit(h, id, group).await;
    offer(h, id, group, images).await;
}

async fn group(h: &Harness, name: &str, granted: bool) {
    let group = json!({
        "name": name,
        "queue_policy": "fifo",
        "agent_selection": "concentrated",
        "max_attempts": 1_000,
        "skip_after": 1_000,
        "pending_timeout_secs": 3_600,
    });
    h.resource_group(group, granted).await;
}

/// Moves session `id`, placed on hand-driven agent `agent`, through `to` in order.
async fn move_through(h: &Harness, agent: &str, id: &str, to: &[SessionStatus]) {
    for status in to {
        recorder::record::move_session(
            &h.pool,
            agent,
            Uuid::parse_str(id).unwrap(),
            *status,
            None,
            None,
        )
        .await
        .unwrap();
    }
}

fn row<'a>(page: &'a Value, id: &str) -> &'a Value {
    page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == id)
        .unwrap_or_else(|| panic!("{id} is not listed: {page}"))
}

fn names(list: &Value, key: &str, field: &str) -> Vec<String> {
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("no `{key}` in {list}"))
        .iter()
        .map(|i| i[field].as_str().unwrap().to_owned())
        .collect()
}

fn refused(answer: &(StatusCode, Value)) -> (StatusCode, Option<&str>) {
    (answer.0, answer.1["error"]["field"].as_str())
}

#[tokio::test]
async fn list_rows_carry_what_each_session_holds_and_how_long_it_ran() {
    let h = start().await;
    h.agent("hand1", "default", 8).await;
    let (status, created) = h
        .create(
            &h.admin_key,
            json!({"name": "pair1", "image": "berth/shell:latest", "cluster_size": 2,
                   "resources": {"cpu": 1.5, "memory": "1g"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = ids(&created)[0].clone();
    h.wait_session(&id, |s| s["status"] == "SCHEDULED").await;
    let (_, page) = h.get(&h.admin_key, "/v1/sessions").await;
    let listed = row(&page, &id);
    // Both kernels' shares, as people read them.
    assert_eq!(
        listed["allocated"],
        json!({"cpu": 3.0, "memory_bytes": 2 * GIB, "gpu": 0.0}),
        "{listed}"
    );
    assert_eq!(listed["cluster_size"], 2);
    assert_eq!(listed["elapsed_secs"], Value::Null, "it has not run yet");

    move_through(
        &h,
        "hand1",
        &id,
        &[
            SessionStatus::Preparing,
            SessionStatus::Prepared,
            SessionStatus::Creating,
            SessionStatus::Running,
        ],
    )
    .await;
    h.wait_session(&id, |s| s["status"] == "RUNNING").await;
    let (_, page) = h.get(&h.admin_key, "/v1/sessions?state=running").await;
    let running = row(&page, &id)["elapsed_secs"].as_f64().unwrap();
    assert!(running >= 0.0, "{page}");
    let (_, page) = h.get(&h.admin_key, "/v1/sessions?state=running").await;
    let later = row(&page, &id)["elapsed_secs"].as_f64().unwrap();
    assert!(
        later >= running,
        "it grows while it runs: {running} then {later}"
    );

    let (status, _) = h.delete(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    move_through(&h, "hand1", &id, &[SessionStatus::Terminated]).await;
    let detail = h.wait_session(&id, |s| s["status"] == "TERMINATED").await;
    // Once it ended, its elapsed time is fixed: the detail's, read after as before.
    for _ in 0..2 {
        let (_, page) = h.get(&h.admin_key, "/v1/sessions?state=finished").await;
        let ended = row(&page, &id);
        assert_eq!(ended["elapsed_secs"], detail["elapsed_secs"], "{ended}");
        assert!(ended["elapsed_secs"].as_f64().unwrap() >= later);
    }
}

#[tokio::test]
async fn a_launch_chooses_among_the_groups_agents_and_images_open_to_the_caller() {
    let h = start().await;
    group(&h, "shared", true).await;
    group(&h, "private", false).await;
    join(&h, "d1", "default", &["berth/shell:latest"]).await;
    join(&h, "d2", "default", &["berth/shell:latest"]).await;
    join(
        &h,
        "s1",
        "shared",
        &["berth/shell:latest", "berth/python:3.12"],
    )
    .await;
    join(&h, "p1", "private", &["private/only:1"]).await;
    recorder::record::depart(&h.pool, "d2", "stopped")
        .await
        .unwrap();
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;

    // The groups open to Alice (her project's), and every group to a superadmin.
    let (status, groups) = h.get(&alice, "/v1/resource-groups").await;
    assert_eq!(status, StatusCode::OK, "{groups}");
    let open = names(&groups, "resource_groups", "name");
    assert_eq!(open, ["default", "shared"]);
    let (_, all) = h.get(&h.admin_key, "/v1/resource-groups").await;
    assert_eq!(
        names(&all, "resource_groups", "name"),
        ["default", "private", "shared"]
    );
    let default = &groups["resource_groups"][0];
    assert_eq!(
        default["agents"], 1,
        "the departed agent is not counted: {default}"
    );
    assert_eq!(default["capacity"]["cpu"], 8.0);
    assert_eq!(default["queue_policy"], "fifo");
    // The launcher holds a create to the same rule: a group listed takes it, the other not.
    for name in names(&all, "resource_groups", "name") {
        let image = if name == "private" {
            "private/only:1"
        } else {
            "berth/shell:latest"
        };
        let answer = h
            .create(
                &alice,
                json!({"image": image, "resource_group": name,
                       "resources": {"cpu": 0.5, "memory": "64m"}}),
            )
            .await;
        let listed = open.contains(&name);
        assert_eq!(
            answer.0 == StatusCode::CREATED,
            listed,
            "{name}: {answer:?}"
        );
        if !listed {
            assert_eq!(
                refused(&answer),
                (StatusCode::FORBIDDEN, Some("resource_group"))
            );
        }
    }

    // Her agents: live ones of her groups, with what each has free, and no liveness.
    let (status, agents) = h.get(&alice, "/v1/agents").await;
    assert_eq!(status, StatusCode::OK, "{agents}");
    assert_eq!(names(&agents, "agents", "agent_id"), ["d1", "s1"]);
    for agent in agents["agents"].as_array().unwrap() {
        assert_eq!(
            (
                &agent["lost"],
                &agent["heartbeat_age_secs"],
                &agent["sessions"]
            ),
            (&Value::Null, &Value::Null, &Value::Null),
            "{agent}"
        );
    }
    let d1 = wait_for(|| async {
        let (_, agents) = h.get(&alice, "/v1/agents?resource_group=default").await;
        let d1 = agents["agents"][0].clone();
        (d1["free"]["cpu"] == 7.5).then_some(d1)
    })
    .await;
    assert_eq!(d1["used"]["cpu"], 0.5, "{d1}");
    assert_eq!(d1["capacity"]["cpu"], 8.0, "{d1}");
    // She may pick any of them by hand.
    for agent in names(&agents, "agents", "agent_id") {
        let group = if agent == "d1" { "default" } else { "shared" };
        let (status, body) = h
            .create(
                &alice,
                json!({"image": "berth/shell:latest", "resource_group": group, "agent": agent,
                       "resources": {"cpu": 0.5, "memory": "64m"}}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{agent}: {body}");
    }
    for (query, expected) in [
        (
            "?resource_group=private",
            (StatusCode::FORBIDDEN, Some("resource_group")),
        ),
        (
            "?resource_group=nowhere",
            (StatusCode::NOT_FOUND, Some("resource_group")),
        ),
        (
            "?group=default",
            (StatusCode::UNPROCESSABLE_ENTITY, Some("group")),
        ),
    ] {
        let answer = h.get(&alice, &format!("/v1/agents{query}")).await;
        assert_eq!(refused(&answer), expected, "{query}: {answer:?}");
    }
    // A superadmin sees every agent, the departed one too, with liveness and sessions.
    let (_, every) = h.get(&h.admin_key, "/v1/agents").await;
    assert_eq!(
        names(&every, "agents", "agent_id"),
        ["d1", "d2", "p1", "s1"]
    );
    let find = |id: &str| {
        every["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent_id"] == id)
            .cloned()
            .unwrap()
    };
    assert!(
        find("d2")["lost"].as_str().unwrap().contains("stopped"),
        "{every}"
    );
    assert!(find("d1")["heartbeat_age_secs"].as_f64().unwrap() >= 0.0);
    let placed = wait_for(|| async {
        let (_, every) = h.get(&h.admin_key, "/v1/agents").await;
        let d1 = every["agents"][0].clone();
        (d1["sessions"] == 2).then_some(d1)
    })
    .await;
    assert_eq!(placed["agent_id"], "d1");

    // The catalogue: her groups' images, by repository and tag, naming who offers each.
    let (status, catalogue) = h.get(&alice, "/v1/environments").await;
    assert_eq!(status, StatusCode::OK, "{catalogue}");
    assert_eq!(
        catalogue["environments"],
        json!([
            {"name": "berth/python", "customized": false, "versions": [
                {"tag": "3.12", "image": "berth/python:3.12", "resource_groups": ["shared"]}]},
            {"name": "berth/shell", "customized": false, "versions": [
                {"tag": "latest", "image": "berth/shell:latest",
                 "resource_groups": ["default", "shared"]}]},
        ])
    );
    let (_, only) = h
        .get(&alice, "/v1/environments?resource_group=default")
        .await;
    assert_eq!(names(&only, "environments", "name"), ["berth/shell"]);

    // Her customized image is hers alone: committed from her session, offered by its agent.
    let interactive = json!({"image": "berth/shell:latest", "agent": "d1",
                             "resources": {"cpu": 0.5, "memory": "64m"}});
    let (_, created) = h.create(&alice, interactive).await;
    let mine_from = ids(&created)[0].clone();
    run_by_hand(&h, "d1", &mine_from).await;
    let (status, started) = h
        .post(
            &alice,
            &format!("/v1/sessions/{mine_from}/commit"),
            json!({"name": "mine1"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let done = Report {
        report_id: Uuid::now_v7(),
        session_id: Uuid::parse_str(&mine_from).unwrap(),
        fact: Fact::CommitEnded {
            commit_id: Uuid::parse_str(started["commit_id"].as_str().unwrap()).unwrap(),
            outcome: CommitOutcome::Done {
                image_id: "sha256:mine".into(),
                size_bytes: 1,
                pushed: false,
            },
        },
        traceparent: None,
    };
    recorder::record::report(&h.pool, &Default::default(), "d1", &done)
        .await
        .unwrap();
    let mine = started["image"].as_str().unwrap().to_owned();
    let (_, bob_is) = h.get(&bob, "/v1/whoami").await;
    let bobs = events::images::custom_image(
        Uuid::parse_str(bob_is["user_id"].as_str().unwrap()).unwrap(),
        "theirs1",
    );
    offer(&h, "d1", "default", &["berth/shell:latest", &mine, &bobs]).await;
    let (_, catalogue) = h.get(&alice, "/v1/environments").await;
    let last = catalogue["environments"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    assert_eq!(last["customized"], true, "{catalogue}");
    assert_eq!(
        last["versions"],
        json!([{"tag": "mine1", "image": mine, "resource_groups": ["default"]}])
    );
    assert!(!catalogue.to_string().contains(&bobs), "{catalogue}");
    let (_, theirs) = h.get(&bob, "/v1/environments").await;
    assert!(!theirs.to_string().contains("berth-custom"), "{theirs}");
    // What the catalogue lists, the launcher takes.
    let (status, body) = h
        .create(
            &alice,
            json!({"image": mine, "resources": {"cpu": 0.5, "memory": "64m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

fn offers(catalogue: &Value, image: &str) -> bool {
    catalogue["environments"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["versions"].as_array().unwrap())
        .any(|v| v["image"] == image)
}

/// A real agent reports the images its Docker engine holds, and the catalogue lists the
/// session images among them: never a server's (which inherits berth/shell's session label
/// but carries `ai.berth.server`), unless an admin shows it; an image an admin hides is
/// neither listed nor launched.
#[tokio::test]
async fn a_docker_agent_offers_its_engines_session_images_and_an_admin_shows_or_hides_any() {
    let h = start().await;
    let id = fresh_agent_id();
    let server = format!("berth-test/server:{}", id.to_lowercase());
    let _server = LabelledImage::build(&server, "ai.berth.server=test");
    let _agent = spawn_agent(&h, &id, &data_dir(), 2_000, None).await;
    let (status, catalogue) = h.get(&h.admin_key, "/v1/environments").await;
    assert_eq!(status, StatusCode::OK, "{catalogue}");
    let shell = catalogue["environments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "berth/shell")
        .unwrap_or_else(|| panic!("no berth/shell in {catalogue}"));
    assert!(
        shell["versions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["tag"] == "latest" && v["resource_groups"] == json!(["default"])),
        "{shell}"
    );
    assert!(
        !offers(&catalogue, &server),
        "a server offered: {catalogue}"
    );

    // The admin sees why: held, no session labels, listed as they say, not offered.
    let (status, held) = h.get(&h.admin_key, "/v1/admin/images").await;
    assert_eq!(status, StatusCode::OK, "{held}");
    let row = |held: &Value, image: &str| {
        held["images"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["image"] == image)
            .cloned()
            .unwrap_or_else(|| panic!("{image} not in {held}"))
    };
    let found = row(&held, &server);
    assert_eq!(
        (
            &found["session_image"],
            &found["listing"],
            &found["offered"]
        ),
        (&json!(false), &json!("labels"), &json!(false)),
        "{found}"
    );
    assert_eq!(row(&held, "berth/shell:latest")["session_image"], true);
    let alice = h.user("alice@example.com").await;
    let (status, refused) = h.get(&alice, "/v1/admin/images").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");

    // Shown, it is offered; hidden, berth/shell is neither offered nor launched.
    let h = &h;
    let list = |image: &str, listing: &str| {
        let body = json!({"image": image, "listing": listing});
        async move { h.put(&h.admin_key, "/v1/admin/images/listing", body).await }
    };
    assert_eq!(list(&server, "shown").await.0, StatusCode::NO_CONTENT);
    let (_, catalogue) = h.get(&alice, "/v1/environments").await;
    assert!(offers(&catalogue, &server), "{catalogue}");
    assert_eq!(
        list("berth/shell:latest", "hidden").await.0,
        StatusCode::NO_CONTENT
    );
    let (_, catalogue) = h.get(&alice, "/v1/environments").await;
    assert!(!offers(&catalogue, "berth/shell:latest"), "{catalogue}");
    let shape = json!({"cpu": 0.25, "memory": "64m"});
    let (status, body) = h
        .create(
            &alice,
            json!({"image": "berth/shell:latest", "resources": shape}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["field"], "image", "{body}");
    assert_eq!(
        list("berth/shell:latest", "labels").await.0,
        StatusCode::NO_CONTENT
    );
    let (_, catalogue) = h.get(&alice, "/v1/environments").await;
    assert!(offers(&catalogue, "berth/shell:latest"), "{catalogue}");
    let (status, body) = h
        .put(
            &h.admin_key,
            "/v1/admin/images/listing",
            json!({"image": "a b", "listing": "shown"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["field"], "image", "{body}");
    assert_eq!(h.count_events("ImageListingSet").await, 3);
}

#[tokio::test]
async fn recent_launches_are_the_five_newest_and_the_pinned_ones_kept_whole() {
    let h = start().await;
    h.agent("a1", "default", 64).await;
    let alice = h.user("alice@example.com").await;
    let bob = h.user("bob@example.com").await;
    let request = |n: u32| {
        json!({"image": "berth/shell:latest", "environment": {"N": n.to_string()},
               "resources": {"cpu": 0.25, "memory": "64m"}, "count": 1 + n % 2})
    };
    let mut launches = Vec::new();
    for n in 1..=7 {
        let (status, created) = h.create(&alice, request(n)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let launch = created["sessions"][0]["launch_id"]
            .as_str()
            .unwrap()
            .to_owned();
        for session in created["sessions"].as_array().unwrap() {
            assert_eq!(session["launch_id"], launch.as_str());
        }
        launches.push((launch, ids(&created)));
    }
    // A create refused keeps nothing.
    let before = h.count_events("LaunchRecorded").await;
    let (status, _) = h.create(&alice, json!({"image": "  "})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(h.count_events("LaunchRecorded").await, before);

    // The five newest, newest first, each the request as sent and the sessions it made.
    let (status, recent) = h.get(&alice, "/v1/launches").await;
    assert_eq!(status, StatusCode::OK, "{recent}");
    let listed = recent["launches"].as_array().unwrap();
    assert_eq!(listed.len(), 5, "{recent}");
    for (item, n) in listed.iter().zip((3..=7).rev()) {
        let (launch, sessions) = &launches[n as usize - 1];
        assert_eq!(item["launch_id"], launch.as_str());
        assert_eq!(item["sessions"], json!(sessions));
        // As sent: what was left out is absent, not null (the document calls none nullable).
        assert!(!item["request"].to_string().contains("null"), "{item}");
        assert_eq!(
            serde_json::from_value::<CreateSession>(item["request"].clone()).unwrap(),
            serde_json::from_value::<CreateSession>(request(n)).unwrap(),
        );
        assert_eq!(
            (&item["label"], &item["pinned"]),
            (&Value::Null, &json!(false))
        );
    }
    let (_, none) = h.get(&bob, "/v1/launches").await;
    assert_eq!(none["launches"], json!([]), "Bob has none of Alice's");

    // Named and pinned, the oldest stays when newer launches push it out of the five.
    let oldest = launches[2].0.clone();
    let path = format!("/v1/launches/{oldest}");
    let (status, changed) = h
        .call(
            &alice,
            Method::PATCH,
            &path,
            Some(json!({"label": "nightly run", "pinned": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(
        (&changed["label"], &changed["pinned"]),
        (&json!("nightly run"), &json!(true))
    );
    for n in 8..=9 {
        let (status, _) = h.create(&alice, request(n)).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (_, recent) = h.get(&alice, "/v1/launches").await;
    let listed = recent["launches"].as_array().unwrap();
    assert_eq!(listed.len(), 6, "{recent}");
    assert_eq!(listed[5]["launch_id"], oldest.as_str());
    assert_eq!(listed[5]["label"], "nightly run");
    // Launched again through its kept request.
    let (status, again) = h.create(&alice, listed[5]["request"].clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    let (_, recent) = h.get(&alice, "/v1/launches").await;
    assert_eq!(
        recent["launches"][0]["launch_id"],
        again["sessions"][0]["launch_id"]
    );

    // The same change again records nothing; an empty name takes it away; unpinned, it goes.
    let pins = h.count_events("LaunchPinned").await;
    let (status, _) = h
        .call(&alice, Method::PATCH, &path, Some(json!({"pinned": true})))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h.count_events("LaunchPinned").await, pins);
    let (_, unnamed) = h
        .call(&alice, Method::PATCH, &path, Some(json!({"label": ""})))
        .await;
    assert_eq!(unnamed["label"], Value::Null, "{unnamed}");
    let (_, unpinned) = h
        .call(&alice, Method::PATCH, &path, Some(json!({"pinned": false})))
        .await;
    assert_eq!(unpinned["pinned"], false);
    let (_, recent) = h.get(&alice, "/v1/launches").await;
    assert!(!recent.to_string().contains(&oldest), "{recent}");
    assert_eq!(h.count_events("LaunchRenamed").await, 2);
    assert_eq!(h.count_events("LaunchPinned").await, 2);

    // Bad input names its field and changes nothing.
    for (who, path, body, expected) in [
        (
            &alice,
            path.clone(),
            json!({"label": "x".repeat(65)}),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("label")),
        ),
        (
            &alice,
            path.clone(),
            json!({"label": "a\u{1}b"}),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("label")),
        ),
        (
            &alice,
            path.clone(),
            json!({"pinned": "yes"}),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("pinned")),
        ),
        (
            &alice,
            path.clone(),
            json!({"colour": 1}),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("colour")),
        ),
        (
            &bob,
            path.clone(),
            json!({"pinned": true}),
            (StatusCode::NOT_FOUND, Some("id")),
        ),
        (
            &alice,
            format!("/v1/launches/{}", Uuid::now_v7()),
            json!({}),
            (StatusCode::NOT_FOUND, Some("id")),
        ),
        (
            &alice,
            "/v1/launches/not-an-id".into(),
            json!({}),
            (StatusCode::NOT_FOUND, Some("id")),
        ),
    ] {
        let answer = h.call(who, Method::PATCH, &path, Some(body.clone())).await;
        assert_eq!(refused(&answer), expected, "{path} {body}: {answer:?}");
    }
    assert_eq!(h.count_events("LaunchRenamed").await, 2);
    assert_eq!(h.count_events("LaunchPinned").await, 2);

    // The ledger's launches, folded again from the log, are the live ones.
    let replay = events::ledger::replay(&h.pool).await.unwrap();
    assert!(replay.equal(), "{:?}", replay.differences);
}

#[tokio::test]
async fn the_queue_lists_each_groups_pending_sessions_in_the_schedulers_order_and_why() {
    let h = start().await;
    group(&h, "tiny", true).await;
    join(&h, "t1", "tiny", &["berth/shell:latest"]).await;
    let sized = |cpu: f64| {
        json!({"image": "berth/shell:latest", "resource_group": "tiny",
               "resources": {"cpu": cpu, "memory": "1g"}})
    };
    // The first takes the whole agent; the others wait behind it.
    let (_, created) = h.create(&h.admin_key, sized(8.0)).await;
    let first = ids(&created)[0].clone();
    h.wait_session(&first, |s| s["status"] == "SCHEDULED").await;
    let mut waiting = Vec::new();
    for cpu in [8.0, 2.0, 0.5] {
        let (status, created) = h.create(&h.admin_key, sized(cpu)).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        waiting.push(ids(&created)[0].clone());
    }

    let alice = h.user("alice@example.com").await;
    let answer = h.get(&alice, "/v1/queue").await;
    assert_eq!(refused(&answer), (StatusCode::FORBIDDEN, Some("X-API-Key")));

    // In the scheduler's own order, each with its latest history row as the reason; read
    // until a pass did not change a reason between the two reads.
    let tiny = wait_for(|| async {
        let (status, queue) = h.get(&h.admin_key, "/v1/queue").await;
        assert_eq!(status, StatusCode::OK, "{queue}");
        assert_eq!(
            names(&queue, "resource_groups", "resource_group"),
            ["default", "tiny"]
        );
        assert_eq!(queue["resource_groups"][0]["sessions"], json!([]));
        let tiny = queue["resource_groups"][1].clone();
        for session in tiny["sessions"].as_array()? {
            let id = session["session_id"].as_str().unwrap();
            let latest = h.history(id).await.last().cloned()?;
            let reason = &session["reason"];
            for field in ["phase", "result", "error_code", "message"] {
                if reason[field] != latest[field] {
                    return None;
                }
            }
        }
        Some(tiny)
    })
    .await;
    let sessions = tiny["sessions"].as_array().unwrap();
    assert_eq!(names(&tiny, "sessions", "session_id"), waiting);
    let positions: Vec<i64> = sessions
        .iter()
        .map(|s| s["position"].as_i64().unwrap())
        .collect();
    assert_eq!(positions, [1, 2, 3]);
    let client = h.pool.get().await.unwrap();
    let scheduler_order: Vec<String> =
        scheduler::db::queue(&client, "tiny", QueuePolicy::Fifo, 100)
            .await
            .unwrap()
            .sessions
            .iter()
            .map(|s| s.session_id.to_string())
            .collect();
    assert_eq!(
        scheduler_order, waiting,
        "the order the scheduler tries them in"
    );
    assert_eq!(
        (&sessions[1]["requested"], &sessions[1]["cluster_size"]),
        (
            &json!({"cpu": 2.0, "memory_bytes": GIB, "gpu": 0.0}),
            &json!(1)
        )
    );
    assert_eq!(sessions[1]["reason"]["error_code"], "BEHIND_HEAD", "{tiny}");
    assert_eq!(tiny["queue_policy"], "fifo");

    // The agent freed, the head is placed and the others move up.
    let (status, _) = h
        .delete(&h.admin_key, &format!("/v1/sessions/{first}"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    move_through(&h, "t1", &first, &[SessionStatus::Terminated]).await;
    h.wait_session(&waiting[0], |s| s["status"] == "SCHEDULED")
        .await;
    let (_, queue) = h.get(&h.admin_key, "/v1/queue?resource_group=tiny").await;
    let tiny = &queue["resource_groups"];
    assert_eq!(tiny.as_array().unwrap().len(), 1, "{queue}");
    assert_eq!(
        names(&tiny[0], "sessions", "session_id"),
        waiting[1..].to_vec()
    );
    assert_eq!(tiny[0]["sessions"][0]["position"], 1);
    let answer = h
        .get(&h.admin_key, "/v1/queue?resource_group=nowhere")
        .await;
    assert_eq!(
        refused(&answer),
        (StatusCode::NOT_FOUND, Some("resource_group"))
    );
}
