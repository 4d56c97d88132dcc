//! Backend.AI's `/session` calls against a whole berth, signed as Backend.AI's client signs
//! them (HMAC-SHA256 over the method, the target, the ISO date, the host, the content type
//! and the API version): create and get-or-create, the wait for the start and its `TIMEOUT`,
//! info, logs of a real container, rename, destroy and commit, each seen by berth's own
//! `/v1`; and the refusals, all in Backend.AI's problem JSON.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use gateway::backendai::auth::{client_date, Signed};
use gateway::backendai::API_VERSION;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::common::*;
use crate::containers::local_agent;

/// An answer of Backend.AI's paths: its status, its content type and its JSON body (null
/// when empty).
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub kind: String,
    pub body: Value,
}

impl Reply {
    /// A problem of slug `slug` with `status`, as the client prints one: a `title` always.
    fn assert_problem(&self, status: StatusCode, slug: &str) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.kind, "application/problem+json", "{self:?}");
        assert_eq!(
            self.body["type"],
            format!("https://api.backend.ai/probs/{slug}"),
            "{self:?}"
        );
        assert!(self.body["title"].is_string(), "{self:?}");
    }
}

/// What a signed request says; the test changes one part to tamper with it.
struct Request<'a> {
    method: Method,
    /// What is signed as the target, and what is sent.
    signed_target: &'a str,
    sent_target: &'a str,
    signed_host: String,
    date: String,
    body: Option<Value>,
}

/// Backend.AI's client, as far as signing goes: one keypair, the gateway's address.
pub(crate) struct Client<'a> {
    h: &'a Harness,
    access_key: String,
    secret_key: String,
    /// The last date sent, in microseconds: each request gets a later one, as the real
    /// client's clock gives (a repeated signature is refused as a replay).
    last: Mutex<i64>,
}

impl<'a> Client<'a> {
    pub(crate) fn new(h: &'a Harness, (access_key, secret_key): (String, String)) -> Client<'a> {
        Client {
            h,
            access_key,
            secret_key,
            last: Mutex::new(0),
        }
    }

    fn host(&self) -> String {
        self.h
            .base
            .strip_prefix("http://")
            .expect("a plain HTTP gateway")
            .to_owned()
    }

    /// The date as the client writes it: ISO 8601 with microseconds and `+00:00`.
    fn date(&self) -> String {
        let mut last = self.last.lock().unwrap();
        let now = Utc::now().timestamp_micros().max(*last + 1);
        *last = now;
        client_date(chrono::DateTime::from_timestamp_micros(now).unwrap())
    }

    fn request<'t>(&self, method: Method, target: &'t str, body: Option<Value>) -> Request<'t> {
        Request {
            method,
            signed_target: target,
            sent_target: target,
            signed_host: self.host(),
            date: self.date(),
            body,
        }
    }

    pub(crate) async fn call(&self, method: Method, target: &str, body: Option<Value>) -> Reply {
        self.send(&self.request(method, target, body)).await
    }

    pub(crate) async fn get(&self, target: &str) -> Reply {
        self.call(Method::GET, target, None).await
    }

    /// Sends `r` signed with this client's secret (or with what `r` changed).
    async fn send(&self, r: &Request<'_>) -> Reply {
        let content_type = if r.body.is_some() {
            "application/json"
        } else {
            "text/plain"
        };
        let authorization = Signed {
            method: r.method.as_str(),
            target: r.signed_target,
            date: &r.date,
            host: &r.signed_host,
            content_type: Some(content_type),
            version: API_VERSION,
        }
        .authorization(&self.access_key, &self.secret_key)
        .unwrap();
        let mut request = self
            .h
            .http
            .request(
                r.method.clone(),
                format!("{}{}", self.h.base, r.sent_target),
            )
            .header("User-Agent", "Backend.AI Client for Python 23.09.10")
            .header("X-BackendAI-Domain", "default")
            .header("X-BackendAI-Version", API_VERSION)
            .header("Date", &r.date)
            .header("Content-Type", content_type)
            .header("Authorization", authorization);
        request = match &r.body {
            Some(body) => request.body(body.to_string()),
            None => request.body(""),
        };
        let response = request.send().await.expect("the gateway answers");
        let status = response.status();
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = response.text().await.unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {text}"))
        };
        Reply { status, kind, body }
    }

    /// `POST /session` with `body` over the fields the client sends for a bare
    /// `backend.ai session create IMAGE` (a null for each one left unset).
    pub(crate) async fn create(&self, body: Value) -> Reply {
        let mut full = json!({
            "tag": null, "name": null,
            "config": {"mounts": [], "environ": null, "resources": {}, "resource_opts": {},
                       "scalingGroup": null, "mount_map": {}, "preopen_ports": null},
            "dependencies": null, "callback_url": null, "architecture": "x86_64",
            "clusterSize": 1, "clusterMode": "single-node", "starts_at": null,
            "bootstrap_script": null, "owner_access_key": null, "domain": "default",
            "group": "default", "type": "interactive", "enqueueOnly": false,
            "maxWaitSeconds": 0, "reuseIfExists": true, "startupCommand": null,
            "image": "berth/shell:latest"
        });
        for (key, value) in body.as_object().unwrap() {
            if key == "config" {
                for (k, v) in value.as_object().unwrap() {
                    full["config"][k] = v.clone();
                }
            } else {
                full[key] = value.clone();
            }
        }
        self.call(Method::POST, "/session", Some(full)).await
    }
}

fn session_id(reply: &Reply) -> String {
    assert_eq!(reply.status, StatusCode::CREATED, "{reply:?}");
    let id = reply.body["sessionId"].as_str().expect("a session id");
    Uuid::parse_str(id).expect("a UUID").to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn backend_ai_s_calls_create_and_drive_a_real_container_seen_by_berth_s_api() {
    let h = start().await;
    let _agent = local_agent(&h).await;
    let alice = h.user("alice@example.com").await;
    let bai = Client::new(&h, h.backendai_keypair("alice@example.com").await);

    // Created with the client's default name shape (a hyphen), answered once it runs.
    let created = bai
        .create(json!({
            "name": "pysdk-abc123",
            "startupCommand": "echo hello-from-backend-ai && sleep 600",
            "config": {"resources": {"cpu": "1", "mem": "256m"},
                       "resource_opts": {"shmem": "32m"}, "environ": {"GREETING": "hi"}},
        }))
        .await;
    let id = session_id(&created);
    assert_eq!(created.body["status"], "RUNNING", "{created:?}");
    assert_eq!(created.body["created"], true);
    assert_eq!(created.body["sessionName"], "pysdk-abc123");
    let ports = created.body["servicePorts"].as_array().unwrap();
    assert!(
        ports
            .iter()
            .any(|p| p["name"] == "ttyd" && p["protocol"].is_string() && p["ports"].is_array()),
        "{created:?}"
    );

    // berth's own API shows it, by id and by its name.
    let (status, detail) = h.get(&alice, &format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["name"], "pysdk-abc123");
    assert_eq!(detail["status"], "RUNNING");
    assert_eq!(detail["resources"]["cpu_milli"], 1000, "{detail}");
    assert_eq!(detail["resources"]["memory_bytes"], 256 << 20);
    assert_eq!(detail["shared_memory_bytes"], 32 << 20);
    assert_eq!(detail["request"]["environment"]["GREETING"], "hi");
    let (_, listed) = h.get(&alice, "/v1/sessions?name=pysdk-abc123").await;
    assert_eq!(listed["total"], 1, "{listed}");
    assert_eq!(listed["sessions"][0]["session_id"], id.as_str());

    // Info by name and by UUID.
    for reference in ["pysdk-abc123", id.as_str()] {
        let info = bai.get(&format!("/session/{reference}")).await;
        assert_eq!(info.status, StatusCode::OK, "{info:?}");
        assert_eq!(info.body["sessionId"], id.as_str());
        assert_eq!(info.body["sessionName"], "pysdk-abc123");
        assert_eq!(info.body["status"], "RUNNING");
        assert_eq!(info.body["type"], "interactive");
        assert_eq!(info.body["image"], "berth/shell:latest");
        assert_eq!(
            info.body["occupyingSlots"],
            json!({"cpu": "1", "mem": (256u64 << 20).to_string()})
        );
        assert!(info.body["creationTime"].is_string() && info.body["age"].is_i64());
        assert!(info.body["terminationTime"].is_null());
    }

    // The logs are the container's own output.
    let logs = wait_for(|| async {
        let reply = bai.get("/session/pysdk-abc123/logs").await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        let text = reply.body["result"]["logs"].as_str().unwrap().to_owned();
        text.contains("hello-from-backend-ai").then_some(text)
    })
    .await;
    assert!(logs.contains("hello-from-backend-ai"));

    let history = bai.get("/session/pysdk-abc123/status-history").await;
    assert_eq!(history.status, StatusCode::OK, "{history:?}");
    for status in ["PENDING", "SCHEDULED", "RUNNING"] {
        assert!(history.body["result"][status].is_string(), "{history:?}");
    }

    // Renamed, by Backend.AI's rule, and berth's API sees the new name.
    let renamed = bai
        .call(
            Method::POST,
            "/session/pysdk-abc123/rename?name=pysdk-renamed.1",
            None,
        )
        .await;
    assert_eq!(renamed.status, StatusCode::NO_CONTENT, "{renamed:?}");
    h.wait_session(&id, |s| s["name"] == "pysdk-renamed.1")
        .await;
    let (_, listed) = h.get(&alice, "/v1/sessions?name=pysdk-renamed.1").await;
    assert_eq!(listed["sessions"][0]["session_id"], id.as_str(), "{listed}");
    bai.get("/session/pysdk-abc123")
        .await
        .assert_problem(StatusCode::NOT_FOUND, "object-not-found");
    let bad = bai
        .call(
            Method::POST,
            "/session/pysdk-renamed.1/rename?name=-x-",
            None,
        )
        .await;
    bad.assert_problem(StatusCode::BAD_REQUEST, "invalid-api-params");
    assert!(bad.body["data"]["name"].is_string(), "{bad:?}");

    // Destroyed by force: berth's API shows it TERMINATED.
    let destroyed = bai
        .call(Method::DELETE, "/session/pysdk-renamed.1?forced=true", None)
        .await;
    assert_eq!(destroyed.status, StatusCode::OK, "{destroyed:?}");
    assert_eq!(destroyed.body, json!({"stats": {}}));
    h.wait_session(&id, |s| s["status"] == "TERMINATED").await;

    // An ended session's logs are still read by its name; its info by its UUID.
    let ended_logs = bai.get("/session/pysdk-renamed.1/logs").await;
    assert_eq!(ended_logs.status, StatusCode::OK, "{ended_logs:?}");
    assert!(ended_logs.body["result"]["logs"]
        .as_str()
        .unwrap()
        .contains("hello-from-backend-ai"));
    let info = bai.get(&format!("/session/{id}")).await;
    assert_eq!(info.body["status"], "TERMINATED", "{info:?}");
    assert!(info.body["terminationTime"].is_string(), "{info:?}");
    assert!(info.body["statusData"]["kernel"].is_object(), "{info:?}");
    bai.get("/session/pysdk-renamed.1")
        .await
        .assert_problem(StatusCode::NOT_FOUND, "object-not-found");
}

#[tokio::test(flavor = "multi_thread")]
async fn get_or_create_waits_for_the_start_times_out_and_names_what_berth_cannot_honour() {
    let h = start().await;
    let nats = bus::link::connect_as_url_says(&nats_url()).await.unwrap();
    let outbox = std::env::temp_dir().join(format!("berth-outbox-{}", Uuid::new_v4().simple()));
    admit(&h, "sim1", "default").await;
    let agent = h
        .simulated_agent(&nats, "sim1", &outbox, Duration::from_secs(1))
        .await;
    let alice = h.user("alice@example.com").await;
    let alice_keys = h.backendai_keypair("alice@example.com").await;
    let alice_access_key = alice_keys.0.clone();
    let bai = Client::new(&h, alice_keys);

    // Enqueued only: answered PENDING at once.
    let queued = bai
        .create(json!({"name": "bai-queued", "enqueueOnly": true}))
        .await;
    let queued_id = session_id(&queued);
    assert_eq!(queued.body["status"], "PENDING", "{queued:?}");
    assert_eq!(queued.body["created"], true);
    assert_eq!(queued.body["servicePorts"], json!([]));

    // Get-or-create: the same name and image is the same session, waited for.
    let again = bai.create(json!({"name": "bai-queued"})).await;
    assert_eq!(session_id(&again), queued_id, "{again:?}");
    assert_eq!(again.body["created"], false, "{again:?}");
    h.wait_session(&queued_id, |s| s["status"] == "RUNNING")
        .await;
    // Another image, or no reuse, is refused with the existing session's id.
    for body in [
        json!({"name": "bai-queued", "image": "berth/python:latest"}),
        json!({"name": "bai-queued", "reuseIfExists": false}),
    ] {
        let refused = bai.create(body).await;
        refused.assert_problem(StatusCode::BAD_REQUEST, "session-already-exists");
        assert_eq!(
            refused.body["data"]["existingSessionId"],
            queued_id.as_str(),
            "{refused:?}"
        );
    }

    // The legacy path creates the same way.
    let legacy = bai
        .call(
            Method::POST,
            "/session/_/create",
            Some(json!({"name": "bai-legacy", "image": "berth/shell:latest", "enqueueOnly": true})),
        )
        .await;
    let legacy_id = session_id(&legacy);
    assert_eq!(legacy.body["status"], "PENDING", "{legacy:?}");
    let destroyed = bai
        .call(
            Method::DELETE,
            &format!("/session/{legacy_id}?forced=true"),
            None,
        )
        .await;
    assert_eq!(destroyed.status, StatusCode::OK, "{destroyed:?}");
    h.wait_session(&legacy_id, |s| {
        matches!(s["status"].as_str(), Some("CANCELLED" | "TERMINATED"))
    })
    .await;

    // Without a name one is drawn; the answer waits until the session runs.
    let unnamed = bai.create(json!({})).await;
    let unnamed_id = session_id(&unnamed);
    assert_eq!(unnamed.body["status"], "RUNNING", "{unnamed:?}");
    let drawn = unnamed.body["sessionName"].as_str().unwrap().to_owned();
    assert!(drawn.len() >= 4, "{unnamed:?}");
    let (_, detail) = h.get(&alice, &format!("/v1/sessions/{unnamed_id}")).await;
    assert_eq!(detail["name"], drawn.as_str(), "{detail}");

    // Commit starts through berth's image-commit path (a simulated agent then fails it).
    let commits = h.count_events("SessionCommitRequested").await;
    let committed = bai
        .call(Method::POST, &format!("/session/{drawn}/commit"), None)
        .await;
    assert_eq!(committed.status, StatusCode::CREATED, "{committed:?}");
    assert!(
        committed.body["image"]
            .as_str()
            .is_some_and(|i| i.starts_with("berth-custom/")),
        "{committed:?}"
    );
    assert_eq!(h.count_events("SessionCommitRequested").await, commits + 1);

    // The agent's 4 cores: 2 are held; a session of 3 waits, and the answer says TIMEOUT
    // after the wait asked for. berth's API shows it still waiting.
    let waiting = bai
        .create(json!({"name": "bai-wait", "maxWaitSeconds": 1,
                       "config": {"resources": {"cpu": "3", "mem": "1g"}}}))
        .await;
    let waiting_id = session_id(&waiting);
    assert_eq!(waiting.body["status"], "TIMEOUT", "{waiting:?}");
    assert_eq!(waiting.body["created"], true);
    let (_, detail) = h.get(&alice, &format!("/v1/sessions/{waiting_id}")).await;
    assert_eq!(detail["status"], "PENDING", "{detail}");
    let info = bai.get("/session/bai-wait").await;
    assert_eq!(info.body["status"], "PENDING", "{info:?}");
    assert!(info.body["statusData"]["scheduler"].is_object(), "{info:?}");

    // What berth cannot honour is refused by the client's own field names.
    for (body, field) in [
        (
            json!({"config": {"mount_map": {"data": "/opt/data"}}}),
            "config.mount_map",
        ),
        (json!({"dependencies": [queued_id.clone()]}), "dependencies"),
        (
            json!({"callback_url": "http://127.0.0.1:1/x"}),
            "callback_url",
        ),
        (
            json!({"bootstrap_script": "ZWNobyBoaQ=="}),
            "bootstrap_script",
        ),
        (json!({"domain": "research"}), "domain"),
        (
            json!({"config": {"resources": {"mem": "lots"}}}),
            "config.resources.mem",
        ),
        (
            json!({"config": {"environ": {"1A": "x"}}}),
            "config.environ.1A",
        ),
        (json!({"name": "no"}), "name"),
    ] {
        let refused = bai.create(body.clone()).await;
        refused.assert_problem(StatusCode::BAD_REQUEST, "invalid-api-params");
        assert!(
            refused.body["data"][field].is_string(),
            "{body} should name {field}: {refused:?}"
        );
    }
    let placed = bai.create(json!({"config": {"agentList": ["sim1"]}})).await;
    placed.assert_problem(StatusCode::FORBIDDEN, "insufficient-privilege");
    assert!(placed.body["data"]["config.agentList"].is_string());

    // An admin creates for Alice by naming her access key; she owns it.
    let (_, me) = h.get(&h.admin_key, "/v1/whoami").await;
    let admin = Client::new(&h, h.backendai_keypair(me["email"].as_str().unwrap()).await);
    let for_alice = admin
        .create(json!({"name": "bai-for-alice", "enqueueOnly": true,
                       "owner_access_key": alice_access_key,
                       "config": {"agentList": ["sim1"]}}))
        .await;
    let for_alice_id = session_id(&for_alice);
    let (status, detail) = h.get(&alice, &format!("/v1/sessions/{for_alice_id}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["owner"]["email"], "alice@example.com");
    assert_eq!(detail["request"]["wanted_agent"], "sim1", "{detail}");
    let info = admin
        .get(&format!(
            "/session/bai-for-alice?owner_access_key={alice_access_key}"
        ))
        .await;
    assert_eq!(info.body["sessionId"], for_alice_id.as_str(), "{info:?}");

    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_are_backend_ai_s_problems_and_berth_s_own_paths_keep_berth_s_shape() {
    let h = start().await;
    h.agent("hand1", "default", 8).await;
    h.user("alice@example.com").await;
    h.user("bob@example.com").await;
    let alice_keys = h.backendai_keypair("alice@example.com").await;
    let alice_access_key = alice_keys.0.clone();
    let alice = Client::new(&h, alice_keys);
    let bob = Client::new(&h, h.backendai_keypair("bob@example.com").await);
    let id = session_id(
        &alice
            .create(json!({"name": "alice-one", "enqueueOnly": true}))
            .await,
    );
    assert_eq!(
        alice.get("/session/alice-one/logs").await.status,
        StatusCode::OK
    );

    // A wrong secret, a tampered path or host, a replay: 401. A date 16 minutes off: 400.
    let wrong = Client {
        secret_key: "0".repeat(40),
        ..Client::new(&h, (alice.access_key.clone(), String::new()))
    };
    wrong
        .get("/session/alice-one")
        .await
        .assert_problem(StatusCode::UNAUTHORIZED, "auth-failed");
    let tampered_path = Request {
        sent_target: "/session/alice-two/logs",
        ..alice.request(Method::GET, "/session/alice-one/logs", None)
    };
    alice
        .send(&tampered_path)
        .await
        .assert_problem(StatusCode::UNAUTHORIZED, "auth-failed");
    let tampered_host = Request {
        signed_host: "127.0.0.1:1".into(),
        ..alice.request(Method::GET, "/session/alice-one/logs", None)
    };
    alice
        .send(&tampered_host)
        .await
        .assert_problem(StatusCode::UNAUTHORIZED, "auth-failed");
    let once = alice.request(Method::GET, "/session/alice-one/logs", None);
    assert_eq!(alice.send(&once).await.status, StatusCode::OK);
    alice
        .send(&once)
        .await
        .assert_problem(StatusCode::UNAUTHORIZED, "auth-failed");
    let stale = Request {
        date: client_date(Utc::now() - TimeDelta::minutes(16)),
        ..alice.request(Method::GET, "/session/alice-one/logs", None)
    };
    alice
        .send(&stale)
        .await
        .assert_problem(StatusCode::BAD_REQUEST, "invalid-auth-params");

    // Bob cannot see Alice's session by name or id, nor act for her.
    for target in ["/session/alice-one".to_owned(), format!("/session/{id}")] {
        let reply = bob.get(&target).await;
        reply.assert_problem(StatusCode::NOT_FOUND, "object-not-found");
        assert_eq!(reply.body["title"], "No such session.");
    }
    bob.get(&format!(
        "/session/alice-one?owner_access_key={alice_access_key}"
    ))
    .await
    .assert_problem(StatusCode::FORBIDDEN, "insufficient-privilege");
    bob.call(
        Method::DELETE,
        &format!("/session/{id}?forced=true&owner_access_key={alice_access_key}"),
        None,
    )
    .await
    .assert_problem(StatusCode::FORBIDDEN, "insufficient-privilege");
    bob.call(Method::DELETE, &format!("/session/{id}?forced=true"), None)
        .await
        .assert_problem(StatusCode::NOT_FOUND, "object-not-found");
    let (_, detail) = h.get(&h.admin_key, &format!("/v1/sessions/{id}")).await;
    assert_ne!(detail["status"], "CANCELLED", "{detail}");

    // Code runs only in a RUNNING session (this one waits); a restart is not berth's, nor is
    // a Backend.AI path it does not serve.
    let execute = alice
        .call(
            Method::POST,
            "/session/alice-one",
            Some(json!({"mode": "query", "code": "print(1)", "runId": null})),
        )
        .await;
    execute.assert_problem(StatusCode::CONFLICT, "generic-bad-request");
    assert!(
        execute.body.to_string().contains("RUNNING"),
        "{:?}",
        execute.body
    );
    alice
        .call(Method::PATCH, "/session/alice-one", None)
        .await
        .assert_problem(StatusCode::NOT_IMPLEMENTED, "not-implemented");
    alice
        .get("/template/session")
        .await
        .assert_problem(StatusCode::NOT_IMPLEMENTED, "not-implemented");
    // An unsigned call is refused in Backend.AI's words too.
    let unsigned = h
        .http
        .get(format!("{}/session/alice-one", h.base))
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), StatusCode::UNAUTHORIZED);
    let body: Value = unsigned.json().await.unwrap();
    assert!(body["title"].is_string(), "{body}");

    // berth's own paths keep berth's shape.
    let (status, body) = h.get(&h.admin_key, "/v1/nosuch").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body["error"]["code"].is_string() && body.get("title").is_none(),
        "{body}"
    );

    // A non-forced destroy of a waiting session cancels it.
    let destroyed = alice.call(Method::DELETE, "/session/alice-one", None).await;
    assert_eq!(destroyed.status, StatusCode::OK, "{destroyed:?}");
    let ended = h
        .wait_session(&id, |s| {
            matches!(
                s["status"].as_str(),
                Some("CANCELLED" | "TERMINATING" | "TERMINATED")
            )
        })
        .await;
    assert!(ended["status_reason"].is_string(), "{ended}");
}
