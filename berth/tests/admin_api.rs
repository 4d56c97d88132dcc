//! Administration over the API: `berth admin`, run with no database URL in its environment,
//! performs every admin action the README lists through a running gateway with a
//! superadmin's key, each result checked through the API; any other key gets a 403 on every
//! admin endpoint, and bad input a 4xx naming the field. A NATS server whose authorization
//! berth keeps (`BERTH_NATS_AUTHORIZATION_DIR`) follows admissions made through the gateway.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use uuid::Uuid;

/// Runs `berth admin ARGS` against `gateway` with `key`, without any database URL, with
/// `input` on standard input: whether it succeeded, and what it printed.
fn admin(gateway: &str, key: &str, args: &[&str], input: &str) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .arg("admin")
        .args(args)
        .env_remove("BERTH_DATABASE_URL")
        .env_remove("BERTH_NEW_PASSWORD")
        .env("BERTH_GATEWAY_URL", gateway)
        .env("BERTH_API_KEY", key)
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

/// `berth admin ARGS` that must succeed; what it printed.
fn ok(gateway: &str, key: &str, args: &[&str]) -> String {
    let (ok, text) = admin(gateway, key, args, "");
    assert!(ok, "berth admin {}: {text}", args.join(" "));
    text
}

/// `berth admin ls KIND --output json`, as JSON.
fn ls(gateway: &str, key: &str, kind: &str) -> Value {
    let text = ok(gateway, key, &["ls", kind, "--output", "json"]);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("ls {kind}: {e}: {text}"))
}

/// The `berth_...` key a command printed.
fn key_in(text: &str) -> String {
    text.split_whitespace()
        .find(|w| w.starts_with("berth_"))
        .unwrap_or_else(|| panic!("no key in {text}"))
        .to_owned()
}

/// The master key the test's gateway derives Backend.AI secret keys with.
const MASTER_KEY: &str = "the admin test's master key, 32 bytes or more";

/// A `GET path` signed with a Backend.AI keypair as Backend.AI's client signs it: its status
/// and body.
async fn signed_get(api: &Api, access_key: &str, secret_key: &str, path: &str) -> (u16, Value) {
    use gateway::backendai::auth::{client_date, Signed};
    let host = api.base.trim_start_matches("http://").to_owned();
    let date = client_date(chrono::Utc::now());
    let authorization = Signed {
        method: "GET",
        target: path,
        date: &date,
        host: &host,
        content_type: Some("text/plain"),
        version: gateway::backendai::API_VERSION,
    }
    .authorization(access_key, secret_key)
    .unwrap();
    let response = api
        .http
        .get(format!("{}{path}", api.base))
        .header("host", &host)
        .header("date", &date)
        .header("content-type", "text/plain")
        .header("x-backendai-version", gateway::backendai::API_VERSION)
        .header("authorization", authorization)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    async fn call(&self, key: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-api-key", key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, key: &str, path: &str) -> Value {
        let (status, body) = self.call(key, "GET", path, None).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }
}

/// Every admin endpoint, with a body it would take from a superadmin.
fn admin_endpoints() -> Vec<(&'static str, &'static str, Option<Value>)> {
    vec![
        ("GET", "/v1/admin/users", None),
        (
            "POST",
            "/v1/admin/users",
            Some(json!({"email": "eve@example.com"})),
        ),
        (
            "PUT",
            "/v1/admin/passwords",
            Some(json!({"email": "ada@example.com", "password": "long enough"})),
        ),
        ("GET", "/v1/admin/api-keys", None),
        (
            "POST",
            "/v1/admin/api-keys",
            Some(json!({"email": "ada@example.com"})),
        ),
        ("GET", "/v1/admin/projects", None),
        ("POST", "/v1/admin/projects", Some(json!({"name": "evil"}))),
        (
            "POST",
            "/v1/admin/projects/default/members",
            Some(json!({"email": "ada@example.com"})),
        ),
        ("GET", "/v1/admin/resource-groups", None),
        (
            "POST",
            "/v1/admin/resource-groups",
            Some(json!({"name": "evil"})),
        ),
        (
            "POST",
            "/v1/admin/resource-groups/default/grants",
            Some(json!({"project": "default"})),
        ),
        (
            "PUT",
            "/v1/admin/resource-groups/default/scheduling",
            Some(json!({"queue_policy": "lifo"})),
        ),
        ("GET", "/v1/admin/resource-groups/default/shares", None),
        (
            "PUT",
            "/v1/admin/sessions/01a21714-a2df-7185-8cd6-1451ad2c5f82/priority",
            Some(json!({"priority": 100})),
        ),
        ("GET", "/v1/admin/policies", None),
        (
            "PUT",
            "/v1/admin/policies/default",
            Some(
                json!({"max_concurrent_sessions": 1000, "max_total": {"cpu": 1000, "memory_bytes": 1}}),
            ),
        ),
        (
            "PUT",
            "/v1/admin/presets/evil",
            Some(json!({"resources": {"cpu": 1, "memory_bytes": 1073741824}})),
        ),
        ("GET", "/v1/admin/idle-checks", None),
        (
            "PUT",
            "/v1/admin/idle-checks",
            Some(json!({"resource_group": "default", "checks": {}})),
        ),
        ("GET", "/v1/admin/idle-preview", None),
        ("GET", "/v1/admin/agents", None),
        (
            "POST",
            "/v1/admin/agents",
            Some(json!({"agent_id": "evil"})),
        ),
        ("POST", "/v1/admin/agents/evil/revoke", Some(json!({}))),
        ("GET", "/v1/admin/backendai-keypairs", None),
        (
            "POST",
            "/v1/admin/backendai-keypairs",
            Some(json!({"email": "ada@example.com"})),
        ),
        (
            "POST",
            "/v1/admin/backendai-keypairs/AKIAEXAMPLEKEY000001/revoke",
            None,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn berth_admin_without_a_database_does_everything_through_the_gateway() {
    let (pool, url) = fresh_database().await;
    // The one step that needs the database: the first superadmin (`berth up` makes it too).
    let root = init_install(&url);
    let id = Uuid::new_v4().simple().to_string();
    let listen = format!("127.0.0.1:{}", free_port());
    let gateway = format!("http://{listen}");
    let mut env = bus_env("adm", &id);
    env.extend(
        [
            ("BERTH_DATABASE_URL", url.clone()),
            ("BERTH_GATEWAY_LISTEN", listen.clone()),
            ("BERTH_BACKENDAI_MASTER_KEY", MASTER_KEY.to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let dir = tempdir("berth-admin-api");
    let mut up = BerthProcess::start(&["up"], &env, &dir.join("up.log"));
    events::tls::use_ring();
    let api = Api {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
        base: gateway.clone(),
    };
    for _ in 0..600 {
        assert!(
            up.still_running(),
            "berth up exited: {}",
            std::fs::read_to_string(dir.join("up.log")).unwrap_or_default()
        );
        let answered = api
            .http
            .get(format!("{gateway}/v1/whoami"))
            .header("x-api-key", &root)
            .send()
            .await;
        if answered.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (g, k) = (gateway.as_str(), root.as_str());

    // Projects and members.
    ok(
        g,
        k,
        &["create-project", "vision", "--description", "seeing things"],
    );
    let text = ok(
        g,
        k,
        &[
            "create-user",
            "--email",
            "ada@example.com",
            "--role",
            "admin",
            "--project",
            "vision",
        ],
    );
    let ada = key_in(&text);
    let text = ok(g, k, &["create-user", "--email", "bob@example.com"]);
    let bob = key_in(&text);
    ok(g, k, &["add-member", "vision", "bob@example.com"]);
    let projects = api.get(k, "/v1/admin/projects").await;
    let vision = projects["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "vision")
        .unwrap()
        .clone();
    assert_eq!(vision["description"], "seeing things");
    assert_eq!(
        vision["members"],
        json!(["ada@example.com", "bob@example.com"])
    );
    assert_eq!(ls(g, k, "projects"), projects);

    // Users, roles and keys.
    let users = api.get(k, "/v1/admin/users").await;
    let user = |email: &str| {
        users["users"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["email"] == email)
            .cloned()
            .unwrap()
    };
    assert_eq!(user("ada@example.com")["role"], "admin");
    assert_eq!(user("ada@example.com")["projects"], json!(["vision"]));
    assert_eq!(user("bob@example.com")["role"], "user");
    assert_eq!(
        user("bob@example.com")["projects"],
        json!(["default", "vision"])
    );
    assert_eq!(ls(g, k, "users"), users);
    let another = key_in(&ok(g, k, &["issue-key", "--email", "bob@example.com"]));
    let whoami = api.get(&another, "/v1/whoami").await;
    assert_eq!(whoami["email"], "bob@example.com", "{whoami}");
    let keys = api.get(k, "/v1/admin/api-keys").await;
    let bobs: Vec<&Value> = keys["api_keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|key| key["email"] == "bob@example.com")
        .collect();
    assert_eq!(bobs.len(), 2, "{keys}");
    assert!(bobs
        .iter()
        .any(|key| another.starts_with(key["key_prefix"].as_str().unwrap())));
    assert!(
        !keys.to_string().contains(&another),
        "a listed key is only its prefix"
    );
    assert_eq!(ls(g, k, "keys"), keys);

    // Backend.AI keypairs: issued as the export lines Backend.AI's client reads, listed without
    // their secret, honoured on a signed request until revoked.
    let text = ok(g, k, &["issue-key", "--backendai", "bob@example.com"]);
    assert!(text.contains("shown only now"), "{text}");
    let exported = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("export {name}=")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_owned()
    };
    let (access_key, secret_key) = (
        exported("BACKEND_ACCESS_KEY"),
        exported("BACKEND_SECRET_KEY"),
    );
    assert!(
        access_key.starts_with("AKIA") && access_key.len() == 20,
        "{access_key}"
    );
    assert_eq!(
        secret_key,
        gateway::handles::derive_secret(MASTER_KEY.as_bytes(), &access_key),
        "the secret is the gateway's derivation"
    );
    let announcement = "/manager/announcement";
    let (status, answer) = signed_get(&api, &access_key, &secret_key, announcement).await;
    assert_eq!(
        (status, &answer["enabled"]),
        (200, &json!(false)),
        "{answer}"
    );
    let keypairs = api.get(k, "/v1/admin/backendai-keypairs").await;
    assert_eq!(
        keypairs["keypairs"],
        json!([{"access_key": access_key, "user_id": user("bob@example.com")["user_id"],
                "email": "bob@example.com", "active": true}]),
        "{keypairs}"
    );
    assert!(!keypairs.to_string().contains(&secret_key));
    assert_eq!(ls(g, k, "keypairs"), keypairs);
    let table = ok(g, k, &["ls", "keypairs"]);
    assert!(
        table.contains(&access_key) && table.contains("active"),
        "{table}"
    );
    let text = ok(g, k, &["revoke-key", "--backendai", &access_key]);
    assert!(text.contains("revoked"), "{text}");
    let (status, answer) = signed_get(&api, &access_key, &secret_key, announcement).await;
    assert_eq!(status, 401, "a revoked keypair signs nothing: {answer}");
    assert_eq!(
        answer["type"], "https://api.backend.ai/probs/auth-failed",
        "{answer}"
    );
    let keypairs = api.get(k, "/v1/admin/backendai-keypairs").await;
    assert_eq!(keypairs["keypairs"][0]["active"], false, "{keypairs}");
    // Revoking it again changes nothing; a key never issued is refused by name.
    ok(g, k, &["revoke-key", "--backendai", &access_key]);
    let (done, text) = admin(
        g,
        k,
        &["revoke-key", "--backendai", "AKIANOSUCHKEY0000000"],
        "",
    );
    assert!(!done && text.contains("access_key"), "{text}");
    let (done, text) = admin(
        g,
        k,
        &["issue-key", "--backendai", "nobody@example.com"],
        "",
    );
    assert!(!done && text.contains("email"), "{text}");

    // A password, from standard input.
    let (done, text) = admin(
        g,
        k,
        &["set-password", "--email", "bob@example.com"],
        "bobs password\n",
    );
    assert!(done, "{text}");
    let client = pool.get().await.unwrap();
    let owner = events::ledger::password_owner(&client, "bob@example.com", "bobs password")
        .await
        .unwrap();
    assert_eq!(owner.map(|o| o.email).as_deref(), Some("bob@example.com"));
    assert_eq!(
        api.get(k, "/v1/admin/users").await["users"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["email"] == "bob@example.com")
            .unwrap()["has_password"],
        true
    );

    // Resource groups and grants.
    ok(
        g,
        k,
        &[
            "create-group",
            "gpu",
            "--queue",
            "backfill",
            "--selection",
            "dispersed",
            "--max-attempts",
            "7",
            "--skip-after",
            "2",
            "--pending-timeout",
            "60",
        ],
    );
    ok(g, k, &["grant-group", "gpu", "vision"]);
    ok(
        g,
        k,
        &[
            "set-scheduling",
            "gpu",
            "--queue",
            "fair-share",
            "--half-life",
            "86400",
            "--weight-gpu",
            "8",
            "--starve-after",
            "600",
        ],
    );
    let (refused, text) = admin(g, k, &["set-scheduling", "gpu", "--queue", "sjf"], "");
    assert!(!refused && text.contains("queue_policy"), "{text}");
    // Created again, the group keeps what its scheduling set, but for the policy.
    ok(
        g,
        k,
        &[
            "create-group",
            "gpu",
            "--queue",
            "backfill",
            "--selection",
            "dispersed",
            "--max-attempts",
            "7",
            "--skip-after",
            "2",
            "--pending-timeout",
            "60",
        ],
    );
    let groups = api.get(k, "/v1/admin/resource-groups").await;
    let gpu = groups["resource_groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "gpu")
        .unwrap()
        .clone();
    assert_eq!(
        gpu,
        json!({"name": "gpu", "queue_policy": "backfill", "agent_selection": "dispersed", "max_attempts": 7, "skip_after": 2, "pending_timeout_secs": 60, "projects": ["vision"],
               "half_life_secs": 86400, "lookback_secs": 2592000, "starve_after_secs": 600,
               "weights": {"cpu_per_core": 1.0, "memory_per_gib": 0.25, "gpu_per_device": 8.0}})
    );
    let shares = ok(g, k, &["shares", "gpu", "--output", "json"]);
    let shares: Value = serde_json::from_str(&shares).unwrap();
    assert_eq!(
        (
            &shares["queue_policy"],
            &shares["half_life_secs"],
            &shares["users"]
        ),
        (&json!("backfill"), &json!(86400), &json!([])),
        "{shares}"
    );
    let (found, text) = admin(g, k, &["shares", "nosuch"], "");
    assert!(!found && text.contains("name"), "{text}");
    assert_eq!(ls(g, k, "groups"), groups);
    let open = api.get(&bob, "/v1/resource-groups").await;
    assert!(
        open["resource_groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "gpu"),
        "{open}"
    );

    // Policies and presets.
    ok(
        g,
        k,
        &[
            "set-policy",
            "small",
            "--max-sessions",
            "2",
            "--max-cpu",
            "4",
            "--max-memory-gib",
            "8",
            "--max-gpu",
            "1",
            "--max-lifetime",
            "3600",
            "--max-custom-images",
            "3",
            "--max-session-priority",
            "40",
            "--max-pids",
            "512",
            "--max-log-bytes",
            "65536",
            "--max-folder-gib",
            "1",
        ],
    );
    let policies = api.get(k, "/v1/admin/policies").await;
    let small = policies["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "small")
        .unwrap()
        .clone();
    assert_eq!(
        small,
        json!({"name": "small", "max_concurrent_sessions": 2, "max_total": {"cpu": 4.0, "memory_bytes": 8u64 << 30, "gpu": 1.0}, "max_session_lifetime_secs": 3600, "max_custom_images": 3, "max_session_priority": 40, "max_pids": 512, "max_log_bytes": 65536, "max_folder_bytes": 1073741824, "users": 0})
    );
    assert_eq!(ls(g, k, "policies"), policies);
    ok(
        g,
        k,
        &[
            "save-preset",
            "tiny",
            "--cpu",
            "0.5",
            "--memory-gib",
            "0.5",
            "--shm-mib",
            "32",
        ],
    );
    let presets = api.get(k, "/v1/presets").await;
    let tiny = presets["presets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "tiny")
        .unwrap()
        .clone();
    assert_eq!(
        tiny,
        json!({"name": "tiny", "resources": {"cpu": 0.5, "memory_bytes": 1u64 << 29, "gpu": 0.0}, "shared_memory_bytes": 32u64 << 20})
    );
    assert_eq!(ls(g, k, "presets"), presets);

    // Idle checks, and what the idle-reaper would reap.
    ok(
        g,
        k,
        &[
            "idle",
            "set",
            "--group",
            "gpu",
            "--max-lifetime",
            "28800",
            "--network-idle",
            "1800",
            "--window",
            "600",
            "--cpu",
            "5",
            "--combine",
            "any",
        ],
    );
    ok(
        g,
        k,
        &["idle", "set", "--policy", "small", "--max-lifetime", "600"],
    );
    let idle = api.get(k, "/v1/admin/idle-checks").await;
    assert_eq!(
        idle["idle_checks"],
        json!([
            {"scope": {"resource_group": "gpu"}, "checks": {"max_lifetime_secs": 28800, "network_idle_timeout_secs": 1800,
                "utilization": {"grace_period_secs": 0, "window_secs": 600, "thresholds": {"cpu_percent": 5.0}, "combine": "any"}}},
            {"scope": {"resource_policy": "small"}, "checks": {"max_lifetime_secs": 600}},
        ]),
        "{idle}"
    );
    assert_eq!(ls(g, k, "idle"), idle);
    let text = ok(g, k, &["idle", "preview"]);
    assert!(text.contains("nothing would be reaped now"), "{text}");

    // Agents: admitted (the credential once), listed, revoked; the NATS server's
    // authorization follows, where berth keeps it.
    let credential = dir.join("gpu1.cred");
    let text = ok(
        g,
        k,
        &[
            "agent",
            "admit",
            "gpu1",
            "--group",
            "gpu",
            "--max-cpu",
            "16",
            "--max-memory-gib",
            "64",
            "--max-gpu",
            "2",
            "--credential-out",
            credential.to_str().unwrap(),
        ],
    );
    assert!(text.contains("agent gpu1 admitted to gpu"), "{text}");
    let seed = std::fs::read_to_string(&credential).unwrap();
    assert!(seed.trim().starts_with("SU"), "an nkey user seed: {seed}");
    let text = ok(g, k, &["agent", "admit", "cpu1"]);
    assert!(text.contains("credential (shown only now"), "{text}");
    let agents = api.get(k, "/v1/admin/agents").await;
    let gpu1 = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent_id"] == "gpu1")
        .unwrap()
        .clone();
    assert_eq!(gpu1["resource_group"], "gpu");
    assert_eq!(
        gpu1["max_capacity"],
        json!({"cpu": 16.0, "memory_bytes": 64u64 << 30, "gpu": 2.0})
    );
    assert_eq!(gpu1["revoked"], Value::Null);
    assert_eq!(gpu1["capacity"], Value::Null, "never registered");
    let public_key = gpu1["public_key"].as_str().unwrap().to_owned();
    assert!(public_key.starts_with('U'), "{gpu1}");
    assert_eq!(ls(g, k, "agents"), agents);
    let table = ok(g, k, &["ls", "agents"]);
    assert!(table.lines().next().unwrap().starts_with("ID"), "{table}");
    assert!(
        table.contains("gpu1") && table.contains("admitted"),
        "{table}"
    );
    let nats = std::env::var("BERTH_NATS_URL").unwrap_or_default();
    if reqwest::Url::parse(&nats).is_ok_and(|u| !u.username().is_empty()) {
        let text = ok(g, k, &["nats-authorization"]);
        assert!(text.contains(&public_key), "{text}");
    }
    let fragment =
        nats_authorization().map(|dir| dir.join("users.d").join(format!("adm{id}.conf")));
    if let Some(fragment) = &fragment {
        for _ in 0..600 {
            if std::fs::read_to_string(fragment).is_ok_and(|f| f.contains(&public_key)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let text = std::fs::read_to_string(fragment).unwrap_or_default();
        assert!(
            text.contains(&public_key),
            "the admission reached the NATS authorization: {text}"
        );
    }
    let text = ok(
        g,
        k,
        &["agent", "revoke", "gpu1", "--reason", "moved racks"],
    );
    assert!(text.contains("agent gpu1 revoked"), "{text}");
    let agents = api.get(k, "/v1/admin/agents").await;
    let gpu1 = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent_id"] == "gpu1")
        .unwrap()
        .clone();
    assert_eq!(gpu1["revoked"], "moved racks", "{gpu1}");
    assert_eq!(gpu1["public_key"], Value::Null, "{gpu1}");
    if let Some(fragment) = &fragment {
        for _ in 0..600 {
            if std::fs::read_to_string(fragment).is_ok_and(|f| !f.contains(&public_key)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let text = std::fs::read_to_string(fragment).unwrap_or_default();
        assert!(
            !text.contains(&public_key),
            "the revocation reached the NATS authorization: {text}"
        );
    } else {
        missing_prerequisite(
            "BERTH_NATS_AUTHORIZATION_DIR is unset: berth keeps no server's authorization here",
        );
    }

    // Each change is an event, as when the CLI wrote them itself.
    for (event, at_least) in [
        ("ProjectCreated", 2),
        ("UserCreated", 3),
        ("ApiKeyIssued", 4),
        ("UserJoinedProject", 4),
        ("UserPasswordSet", 1),
        ("ResourceGroupCreated", 2),
        ("ResourceGroupGranted", 2),
        ("ResourcePolicySet", 2),
        ("PresetSaved", 3),
        ("IdleChecksSet", 2),
        ("AgentAdmitted", 2),
        ("AgentRevoked", 1),
        ("BackendAiKeypairIssued", 1),
        ("BackendAiKeypairRevoked", 1),
    ] {
        assert!(count_events(&pool, event).await >= at_least, "{event}");
    }

    // Bad input is refused naming the field.
    let (done, text) = admin(g, k, &["create-user", "--email", "ada@example.com"], "");
    assert!(!done && text.contains("email"), "a second Ada: {text}");
    let (done, text) = admin(g, k, &["grant-group", "gpu", "nowhere"], "");
    assert!(!done && text.contains("project"), "{text}");
    let (done, text) = admin(g, k, &["create-group", "gpu", "--queue", "sjf"], "");
    assert!(!done && text.contains("queue_policy"), "{text}");
    let (done, text) = admin(g, k, &["agent", "revoke", "nobody"], "");
    assert!(!done && text.contains("not admitted"), "{text}");
    for (method, path, body, field) in [
        (
            "POST",
            "/v1/admin/users",
            json!({"email": "not an email"}),
            "email",
        ),
        (
            "POST",
            "/v1/admin/users",
            json!({"email": "c@example.com", "role": "king"}),
            "role",
        ),
        (
            "POST",
            "/v1/admin/users",
            json!({"email": "c@example.com", "resource_policy": "none"}),
            "resource_policy",
        ),
        (
            "PUT",
            "/v1/admin/passwords",
            json!({"email": "bob@example.com", "password": "short"}),
            "password",
        ),
        (
            "PUT",
            "/v1/admin/presets/big",
            json!({"resources": {"cpu": 0, "memory_bytes": 1}}),
            "resources.cpu",
        ),
        (
            "PUT",
            "/v1/admin/presets/big",
            json!({"resources": {"cpu": 1, "memory_bytes": 1}, "shared_memory_bytes": 2}),
            "shared_memory_bytes",
        ),
        (
            "PUT",
            "/v1/admin/idle-checks",
            json!({"resource_group": "gpu", "checks": {"max_lifetime_secs": 0}}),
            "checks.max_lifetime_secs",
        ),
        (
            "PUT",
            "/v1/admin/idle-checks",
            json!({"resource_group": "gpu", "resource_policy": "small", "checks": {}}),
            "resource_group",
        ),
        (
            "PUT",
            "/v1/admin/idle-checks",
            json!({"resource_policy": "small", "checks": {"utilization": {"grace_period_secs": 0, "window_secs": 60, "thresholds": {}}}}),
            "checks.utilization",
        ),
        (
            "POST",
            "/v1/admin/backendai-keypairs",
            json!({"email": "not an email"}),
            "email",
        ),
        (
            "POST",
            "/v1/admin/backendai-keypairs",
            json!({"email": "nobody@example.com"}),
            "email",
        ),
        (
            "POST",
            "/v1/admin/backendai-keypairs/AKIA-X/revoke",
            json!({}),
            "access_key",
        ),
        (
            "POST",
            "/v1/admin/agents",
            json!({"agent_id": "a.b"}),
            "agent_id",
        ),
        (
            "POST",
            "/v1/admin/agents",
            json!({"agent_id": "ok", "resource_group": "nowhere"}),
            "resource_group",
        ),
        (
            "PUT",
            "/v1/admin/resource-groups/default/scheduling",
            json!({"queue_policy": "drf", "half_life_secs": 0}),
            "half_life_secs",
        ),
        (
            "PUT",
            "/v1/admin/resource-groups/default/scheduling",
            json!({"queue_policy": "drf", "weights": {"cpu_per_core": -1.0, "memory_per_gib": 0.0, "gpu_per_device": 0.0}}),
            "weights.cpu_per_core",
        ),
        (
            "PUT",
            "/v1/admin/resource-groups/nowhere/scheduling",
            json!({"queue_policy": "drf"}),
            "name",
        ),
        (
            "PUT",
            "/v1/admin/sessions/01a21714-a2df-7185-8cd6-1451ad2c5f82/priority",
            json!({"priority": 101}),
            "priority",
        ),
        (
            "PUT",
            "/v1/admin/policies/default",
            json!({"max_concurrent_sessions": 1, "max_total": {"cpu": 1, "memory_bytes": 1}, "max_session_priority": 101}),
            "max_session_priority",
        ),
    ] {
        let (status, answer) = api.call(k, method, path, Some(body.clone())).await;
        assert!(
            (400..500).contains(&status),
            "{method} {path} {body}: {status} {answer}"
        );
        assert_eq!(
            answer["error"]["field"], field,
            "{method} {path} {body}: {answer}"
        );
    }

    // Nobody but a superadmin administers: an admin's and a user's key get a 403 on each.
    for key in [&ada, &bob] {
        for (method, path, body) in admin_endpoints() {
            let (status, answer) = api.call(key, method, path, body).await;
            assert_eq!(status, 403, "{method} {path}: {answer}");
            assert_eq!(answer["error"]["field"], "X-API-Key", "{answer}");
        }
        let (done, text) = admin(g, key, &["ls", "users"], "");
        assert!(!done && text.contains("only superadmins"), "{text}");
    }
    assert_eq!(
        count_events(&pool, "AgentAdmitted").await,
        2,
        "nothing a 403 answered was recorded"
    );
    up.kill();
}
