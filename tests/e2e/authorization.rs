//! The one authorization rule on every surface: a table of every role (a user, an admin, a
//! superadmin) against every action (see, act, create as) on the sessions of every kind of
//! owner (themselves, a member of the admin's project, someone outside it, a superadmin), asked
//! over berth's REST API, the console, Backend.AI's REST paths and its GraphQL. Each surface
//! must give the same answer the pure rule (`domain::authorization`) gives.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::backendai_sessions::Client;
use crate::common::*;

/// Who is who in the table: `alice` shares the project `research` with the admin `ada`; `bob`
/// does not; `root` is the first superadmin.
struct Cast {
    alice: Person,
    bob: Person,
    ada: Person,
    root: Person,
}

struct Person {
    email: String,
    key: String,
    keypair: (String, String),
    /// A session this person owns.
    session: String,
}

async fn person(h: &Harness, email: &str, role: &str, projects: &[&str]) -> String {
    let (status, answer) = h
        .post(
            &h.admin_key,
            "/v1/admin/users",
            json!({"email": email, "role": role, "projects": projects}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "make {email}: {answer}");
    answer["api_key"].as_str().unwrap().to_owned()
}

async fn session_of(h: &Harness, key: &str) -> String {
    let (status, created) = h
        .create(
            key,
            json!({"image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "128m"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    ids(&created)[0].clone()
}

async fn cast(h: &Harness) -> Cast {
    // A simulated agent, so that creates are placed (none of the table needs a container).
    h.agent("authz1", "default", 64).await;
    let (status, answer) = h
        .post(
            &h.admin_key,
            "/v1/admin/projects",
            json!({"name": "research"}),
        )
        .await;
    assert!(status.is_success(), "{answer}");
    let alice = person(h, "alice@example.com", "user", &["default", "research"]).await;
    let bob = person(h, "bob@example.com", "user", &["default"]).await;
    // The admin is in `research` only, so only alice is in their reach; `default` is granted
    // the group `default`, which ada's own sessions are not needed for.
    let ada = person(h, "ada@example.com", "admin", &["research"]).await;
    let root_email = launcher::access::FIRST_SUPERADMIN.to_owned();
    let mut people = Vec::new();
    for (email, key) in [
        ("alice@example.com".to_owned(), alice),
        ("bob@example.com".to_owned(), bob),
        ("ada@example.com".to_owned(), ada),
        (root_email, h.admin_key.clone()),
    ] {
        let keypair = h.backendai_keypair(&email).await;
        // ada's sessions would need a group open to `research`; the table needs none of hers.
        let session = if email.starts_with("ada") {
            String::new()
        } else {
            session_of(h, &key).await
        };
        people.push(Person {
            email,
            key,
            keypair,
            session,
        });
    }
    let mut people = people.into_iter();
    let mut next = || people.next().unwrap();
    Cast {
        alice: next(),
        bob: next(),
        ada: next(),
        root: next(),
    }
}

/// What every surface answers `actor` asking to see `subject`'s session: true when it shows it.
async fn sees_everywhere(h: &Harness, actor: &Person, subject: &Person) -> [bool; 4] {
    let id = &subject.session;
    let (status, _) = h.get(&actor.key, &format!("/v1/sessions/{id}")).await;
    let rest = status == StatusCode::OK;
    assert!(rest || status == StatusCode::NOT_FOUND, "{status}");

    let logs = console_get(h, &actor.key, &format!("/console/sessions/{id}/logs")).await;
    let console = logs == StatusCode::OK;
    assert!(console || logs == StatusCode::NOT_FOUND, "console {logs}");

    let client = Client::new(h, actor.keypair.clone());
    let reply = client.get(&format!("/session/{id}")).await;
    let backendai = reply.status == StatusCode::OK;
    assert!(
        backendai || reply.status == StatusCode::NOT_FOUND,
        "{reply:?}"
    );

    let query = json!({"query": "query($id: UUID!) { compute_session(id: $id) { id } }",
                       "variables": {"id": id}});
    let reply = client.call(Method::POST, "/admin/gql", Some(query)).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let graphql = !reply.body["data"]["compute_session"].is_null();
    [rest, console, backendai, graphql]
}

/// `GET path` of the console, signed in with `key`: the status.
async fn console_get(h: &Harness, key: &str, path: &str) -> StatusCode {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in = http
        .post(format!("{}/console/sign-in", h.base))
        .header("origin", &h.base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("key={key}"))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    http.get(format!("{}{path}", h.base))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .status()
}

/// What the REST API and Backend.AI's create answer `actor` creating a session as `subject`:
/// true when it is created.
async fn creates_as_everywhere(h: &Harness, actor: &Person, subject: &Person) -> [bool; 2] {
    let body = json!({"image": "berth/shell:latest", "owner_email": subject.email,
                      "resources": {"cpu": 1, "memory": "128m"}});
    let (status, answer) = h.create(&actor.key, body).await;
    let rest = status == StatusCode::CREATED;
    if !rest {
        assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
        assert_eq!(answer["error"]["field"], "owner_email", "{answer}");
    }
    let client = Client::new(h, actor.keypair.clone());
    let reply = client
        .create(
            json!({"owner_access_key": subject.keypair.0, "enqueueOnly": true,
                       "config": {"resources": {"cpu": 1, "mem": "128m"}}}),
        )
        .await;
    let backendai = reply.status.is_success();
    if !backendai {
        assert!(
            reply.status == StatusCode::FORBIDDEN || reply.status == StatusCode::BAD_REQUEST,
            "{reply:?}"
        );
    }
    [rest, backendai]
}

/// What the REST API and Backend.AI's rename answer `actor` acting on `subject`'s session.
async fn acts_everywhere(h: &Harness, actor: &Person, subject: &Person, round: usize) -> [bool; 2] {
    let id = &subject.session;
    let path = format!("/v1/sessions/{id}");
    let body = json!({"name": format!("renamedrest{round}")});
    let (status, answer) = h.call(&actor.key, Method::PATCH, &path, Some(body)).await;
    let rest = status == StatusCode::OK;
    assert!(rest || status == StatusCode::NOT_FOUND, "{status} {answer}");
    let client = Client::new(h, actor.keypair.clone());
    let reply = client
        .call(
            Method::POST,
            &format!("/session/{id}/rename?name=renamedbai{round}"),
            None,
        )
        .await;
    let backendai = reply.status.is_success();
    assert!(
        backendai || reply.status == StatusCode::NOT_FOUND,
        "{reply:?}"
    );
    [rest, backendai]
}

#[tokio::test]
async fn every_surface_gives_the_one_rules_answer_for_every_role_action_and_owner() {
    let h = start().await;
    let c = cast(&h).await;
    // (actor, subject, allowed), as `domain::authorization` decides it.
    let table: [(&Person, &Person, bool); 9] = [
        (&c.alice, &c.alice, true),
        (&c.alice, &c.bob, false),
        (&c.alice, &c.root, false),
        (&c.ada, &c.alice, true),
        (&c.ada, &c.bob, false),
        (&c.ada, &c.root, false),
        (&c.root, &c.alice, true),
        (&c.root, &c.bob, true),
        (&c.root, &c.root, true),
    ];
    for (round, (actor, subject, allowed)) in table.into_iter().enumerate() {
        let who = format!("{} with {}'s sessions", actor.email, subject.email);
        let seen = sees_everywhere(&h, actor, subject).await;
        assert_eq!(
            seen, [allowed; 4],
            "see, {who} (REST, console, Backend.AI, GraphQL)"
        );
        let created = creates_as_everywhere(&h, actor, subject).await;
        assert_eq!(created, [allowed; 2], "create as, {who} (REST, Backend.AI)");
        let acted = acts_everywhere(&h, actor, subject, round).await;
        assert_eq!(acted, [allowed; 2], "act on, {who} (REST, Backend.AI)");
    }
    // An admin naming a superadmin is told why; a user is told only admins may.
    let body = json!({"image": "berth/shell:latest", "owner_email": c.root.email,
                      "resources": {"cpu": 1, "memory": "128m"}});
    let (_, answer) = h.create(&c.ada.key, body.clone()).await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("never"), "{answer}");
    let (_, answer) = h.create(&c.alice.key, body).await;
    let message: &Value = &answer["error"]["message"];
    assert!(
        message.as_str().unwrap().contains("only admins"),
        "{answer}"
    );
}
