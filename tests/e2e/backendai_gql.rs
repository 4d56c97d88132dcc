//! Backend.AI's GraphQL subset (`POST /admin/gql`) as its client (23.09.10) calls it: the
//! exact query texts of `backend.ai ps`, `session info` and the keypair check, signed as the
//! client signs them, against sessions moved through berth's statuses by a hand-driven agent.
//! What the client's tables depend on is checked on the raw answer: each item's keys in the
//! order selected, JSON-typed fields as JSON text. And what a caller sees: their own
//! sessions, a superadmin everyone's, another user nothing of the first's.

use chrono::Utc;
use events::payloads::SessionStatus;
use gateway::backendai::auth::{client_date, Signed};
use gateway::backendai::API_VERSION;
use reqwest::StatusCode;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::commit::run_by_hand;
use crate::common::*;

/// `backend.ai ps`'s list query for a user (the CLI's default columns), as it sends it.
const PS_QUERY: &str = "query($limit:Int!, $offset:Int!, $status: String, $access_key: String, $filter: String, $order: String) {\n  compute_session_list(\n      limit:$limit, offset:$offset, status:$status, access_key:$access_key, filter:$filter, order:$order) {\n    items { name id group_name main_kernel_id image type status status_info status_changed result }\n    total_count\n  }\n}";

/// The same for an admin: the owner's access key after the name.
const ADMIN_PS_QUERY: &str = "query($limit:Int!, $offset:Int!, $status: String, $access_key: String, $filter: String, $order: String) {\n  compute_session_list(\n      limit:$limit, offset:$offset, status:$status, access_key:$access_key, filter:$filter, order:$order) {\n    items { name access_key id group_name main_kernel_id image type status status_info status_changed result }\n    total_count\n  }\n}";

const PS_FIELDS: [&str; 10] = [
    "name",
    "id",
    "group_name",
    "main_kernel_id",
    "image",
    "type",
    "status",
    "status_info",
    "status_changed",
    "result",
];

/// `backend.ai session info UUID`'s query, as it sends it (`id` twice among the
/// containers' fields).
const INFO_QUERY: &str = "query($id: UUID!) {  compute_session(id: $id) {    name id main_kernel_id image tag created_at terminated_at status status_info status_data occupying_slots idle_checks containers { id cluster_role cluster_idx cluster_hostname session_id image registry status status_info status_data status_changed agent container_id resource_opts occupied_slots preopen_ports live_stat last_stat id } dependencies { name id }  }}";

/// The keypair check every `ps` begins with.
const KEYPAIR_QUERY: &str =
    "query {  keypair {    user_id access_key secret_key is_active is_admin  }}";

/// The status list `backend.ai ps` asks for by default.
const PS_DEFAULT_STATUSES: &str =
    "PENDING,SCHEDULED,PULLING,PREPARING,RUNNING,RUNNING_DEGRADED,TERMINATING,ERROR";

/// JSON with its objects' keys in the order the text has them (serde_json's maps sort).
#[derive(Debug, Clone, PartialEq)]
enum Ordered {
    Scalar(Value),
    List(Vec<Ordered>),
    Object(Vec<(String, Ordered)>),
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(Value::Null))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(v.into()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Ordered, E> {
                Ok(Ordered::Scalar(v.into()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Ordered::List(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(Ordered::Object(entries))
            }
        }
        d.deserialize_any(V)
    }
}

impl Ordered {
    /// The keys of the object at `path` (object keys and list indexes), in order.
    fn keys_at(&self, path: &[&str]) -> Vec<String> {
        let mut at = self;
        for step in path {
            at = match at {
                Ordered::Object(entries) => {
                    &entries
                        .iter()
                        .find(|(k, _)| k == step)
                        .unwrap_or_else(|| panic!("no `{step}` in {at:?}"))
                        .1
                }
                Ordered::List(items) => &items[step.parse::<usize>().unwrap()],
                Ordered::Scalar(_) => panic!("`{step}` of a scalar"),
            };
        }
        match at {
            Ordered::Object(entries) => entries.iter().map(|(k, _)| k.clone()).collect(),
            other => panic!("not an object: {other:?}"),
        }
    }
}

/// Calls berth's Backend.AI paths as the client does, with one keypair.
struct Client<'a> {
    h: &'a Harness,
    access_key: String,
    secret_key: String,
}

/// One answer: its status, its JSON and the same with its keys in order.
struct Answer {
    status: StatusCode,
    body: Value,
    ordered: Ordered,
    content_type: String,
}

impl Client<'_> {
    async fn keypair<'a>(h: &'a Harness, email: &str) -> Client<'a> {
        let (access_key, secret_key) = h.backendai_keypair(email).await;
        Client {
            h,
            access_key,
            secret_key,
        }
    }

    /// Posts `query` with `variables` to `/admin/gql`, signed as the client signs: a Date in
    /// ISO 8601 with microseconds, the Host with its port, the JSON media type, the version.
    async fn gql(&self, query: &str, variables: Value) -> Answer {
        self.post_raw(json!({"query": query, "variables": variables}).to_string())
            .await
    }

    async fn post_raw(&self, body: String) -> Answer {
        let host = self
            .h
            .base
            .strip_prefix("http://")
            .expect("a plain-HTTP gateway")
            .to_owned();
        let date = client_date(Utc::now());
        let authorization = Signed {
            method: "POST",
            target: "/admin/gql",
            date: &date,
            host: &host,
            content_type: Some("application/json"),
            version: API_VERSION,
        }
        .authorization(&self.access_key, &self.secret_key)
        .unwrap();
        let response = self
            .h
            .http
            .post(format!("{}/admin/gql", self.h.base))
            .header("Date", &date)
            .header("X-BackendAI-Version", API_VERSION)
            .header("X-BackendAI-Domain", "default")
            .header("Content-Type", "application/json")
            .header("Authorization", authorization)
            .body(body)
            .send()
            .await
            .expect("the gateway answers");
        answer(response).await
    }
}

async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = response.text().await.unwrap();
    Answer {
        status,
        body: serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {text}")),
        ordered: serde_json::from_str(&text).unwrap(),
        content_type,
    }
}

/// The list query's variables as the CLI sends them (unset ones null).
fn ps_variables(status: &str, access_key: Option<&str>, order: Option<&str>) -> Value {
    json!({"status": status, "access_key": access_key, "filter": null, "order": order,
        "limit": 20, "offset": 0})
}

/// The ids of a list answer's items, in order.
fn item_ids(answer: &Answer) -> Vec<String> {
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(answer.body.get("errors").is_none(), "{}", answer.body);
    answer.body["data"]["compute_session_list"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The messages of a GraphQL answer's errors (answered 200, as graphene answers them).
fn errors(answer: &Answer) -> Vec<String> {
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    answer.body["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors: {}", answer.body))
        .iter()
        .map(|e| e["message"].as_str().unwrap().to_owned())
        .collect()
}

async fn create(h: &Harness, key: &str, body: Value) -> String {
    let (status, created) = h.create(key, body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    ids(&created).remove(0)
}

/// Moves a session placed on hand-driven agent `agent` through `to`, waiting until the
/// view shows the last.
async fn move_to(h: &Harness, agent: &str, id: &str, to: &[SessionStatus]) {
    let session = Uuid::parse_str(id).unwrap();
    for status in to {
        recorder::record::move_session(&h.pool, agent, session, *status, None, None)
            .await
            .unwrap();
    }
    let last = to.last().unwrap().as_str();
    h.wait_session(id, |s| s["status"] == last).await;
}

fn parse_json_text(value: &Value, what: &str) -> Value {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not JSON text: {value}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{what} is not JSON ({e}): {text}"))
}

#[tokio::test]
async fn backend_ai_s_ps_and_info_queries_answer_as_its_client_reads_them() {
    let h = start().await;
    h.agent("hand1", "default", 8).await;
    let first = "gqlfirst@berth.local";
    let first_key = h.user(first).await;
    let client = Client::keypair(&h, first).await;

    let interactive = json!({"name": "running1", "image": "berth/shell:latest", "resources": {"cpu": 1, "memory": "128m"}});
    let running = create(&h, &first_key, interactive).await;
    run_by_hand(&h, "hand1", &running).await;
    let mut body = json!({"name": "prepared1", "image": "berth/shell:latest",
        "resources": {"cpu": 1, "memory": "128m"}});
    let prepared = create(&h, &first_key, body.clone()).await;
    h.wait_session(&prepared, |s| s["status"] == "SCHEDULED")
        .await;
    move_to(
        &h,
        "hand1",
        &prepared,
        &[SessionStatus::Preparing, SessionStatus::Prepared],
    )
    .await;
    body["name"] = json!("creating1");
    let creating = create(&h, &first_key, body).await;
    h.wait_session(&creating, |s| s["status"] == "SCHEDULED")
        .await;
    move_to(
        &h,
        "hand1",
        &creating,
        &[
            SessionStatus::Preparing,
            SessionStatus::Prepared,
            SessionStatus::Creating,
        ],
    )
    .await;
    let batch = create(
        &h,
        &first_key,
        json!({"name": "failing1", "type": "batch", "image": "berth/shell:latest",
            "startup_command": "exit 3", "resources": {"cpu": 1, "memory": "128m"}}),
    )
    .await;
    run_by_hand(&h, "hand1", &batch).await;
    recorder::record::move_session(
        &h.pool,
        "hand1",
        Uuid::parse_str(&batch).unwrap(),
        SessionStatus::Terminated,
        Some("finished".into()),
        Some(3),
    )
    .await
    .unwrap();
    h.wait_session(&batch, |s| s["status"] == "TERMINATED")
        .await;

    // The keypair check `ps` begins with.
    let keypair = client.gql(KEYPAIR_QUERY, json!({})).await;
    assert_eq!(keypair.status, StatusCode::OK, "{}", keypair.body);
    assert_eq!(
        keypair.body,
        json!({"data": {"keypair": {"user_id": first, "access_key": client.access_key,
            "secret_key": null, "is_active": true, "is_admin": false}}})
    );
    assert!(keypair.content_type.starts_with("application/json"));
    assert_eq!(
        keypair.ordered.keys_at(&["data", "keypair"]),
        [
            "user_id",
            "access_key",
            "secret_key",
            "is_active",
            "is_admin"
        ]
    );

    // Root fields too come back in the order asked, though the list reads the database and
    // the keypair does not.
    let both = client
        .gql(
            "query { compute_session_list(limit: 1, offset: 0) { total_count } \
             keypair { user_id } }",
            json!({}),
        )
        .await;
    assert_eq!(
        both.ordered.keys_at(&["data"]),
        ["compute_session_list", "keypair"],
        "{}",
        both.body
    );

    // `backend.ai ps`: the live ones, newest first, the starting ones among them.
    let ps = client
        .gql(PS_QUERY, ps_variables(PS_DEFAULT_STATUSES, None, None))
        .await;
    assert_eq!(
        item_ids(&ps),
        [creating.as_str(), prepared.as_str(), running.as_str()]
    );
    assert_eq!(ps.body["data"]["compute_session_list"]["total_count"], 3);
    assert_eq!(
        ps.ordered.keys_at(&["data", "compute_session_list"]),
        ["items", "total_count"]
    );
    for i in 0..3 {
        let at = i.to_string();
        assert_eq!(
            ps.ordered
                .keys_at(&["data", "compute_session_list", "items", &at]),
            PS_FIELDS
        );
    }
    let item = &ps.body["data"]["compute_session_list"]["items"][2];
    assert_eq!(item["name"], "running1");
    assert_eq!(item["main_kernel_id"], item["id"]);
    assert_eq!(item["type"], "INTERACTIVE");
    assert_eq!(item["status"], "RUNNING");
    assert_eq!(item["group_name"], "default");
    assert_eq!(item["image"], "berth/shell:latest");
    assert_eq!(item["result"], "UNDEFINED");
    assert!(
        chrono::DateTime::parse_from_rfc3339(item["status_changed"].as_str().unwrap()).is_ok(),
        "{item}"
    );

    // PREPARING also matches PREPARED and CREATING; RUNNING_DEGRADED matches nothing.
    let preparing = client
        .gql(PS_QUERY, ps_variables("PREPARING", None, Some("+name")))
        .await;
    assert_eq!(item_ids(&preparing), [creating.as_str(), prepared.as_str()]);
    let statuses: Vec<&Value> = preparing.body["data"]["compute_session_list"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["status"])
        .collect();
    assert_eq!(statuses, [&json!("CREATING"), &json!("PREPARED")]);
    let degraded = client
        .gql(PS_QUERY, ps_variables("RUNNING_DEGRADED", None, None))
        .await;
    assert_eq!(item_ids(&degraded), Vec::<String>::new());
    assert_eq!(
        degraded.body["data"]["compute_session_list"]["total_count"],
        0
    );

    // `ps --dead`: the batch session that failed, its result from its exit code.
    let dead = client
        .gql(PS_QUERY, ps_variables("CANCELLED,TERMINATED", None, None))
        .await;
    assert_eq!(item_ids(&dead), [batch.as_str()]);
    let item = &dead.body["data"]["compute_session_list"]["items"][0];
    assert_eq!(
        (&item["type"], &item["result"]),
        (&json!("BATCH"), &json!("FAILURE"))
    );

    // Pages, in the order asked.
    let all = "PENDING,SCHEDULED,PULLING,PREPARING,RUNNING,RESTARTING,RUNNING_DEGRADED,TERMINATING,TERMINATED,ERROR,CANCELLED";
    let mut variables = ps_variables(all, None, Some("-name"));
    variables["limit"] = json!(2);
    variables["offset"] = json!(1);
    let page = client.gql(PS_QUERY, variables).await;
    assert_eq!(item_ids(&page), [prepared.as_str(), batch.as_str()]);
    assert_eq!(page.body["data"]["compute_session_list"]["total_count"], 4);

    // `session info UUID`.
    let info = client.gql(INFO_QUERY, json!({"id": running})).await;
    assert_eq!(info.status, StatusCode::OK, "{}", info.body);
    assert!(info.body.get("errors").is_none(), "{}", info.body);
    assert_eq!(
        info.ordered.keys_at(&["data", "compute_session"]),
        [
            "name",
            "id",
            "main_kernel_id",
            "image",
            "tag",
            "created_at",
            "terminated_at",
            "status",
            "status_info",
            "status_data",
            "occupying_slots",
            "idle_checks",
            "containers",
            "dependencies"
        ]
    );
    assert_eq!(
        info.ordered
            .keys_at(&["data", "compute_session", "containers", "0"]),
        [
            "id",
            "cluster_role",
            "cluster_idx",
            "cluster_hostname",
            "session_id",
            "image",
            "registry",
            "status",
            "status_info",
            "status_data",
            "status_changed",
            "agent",
            "container_id",
            "resource_opts",
            "occupied_slots",
            "preopen_ports",
            "live_stat",
            "last_stat"
        ]
    );
    let session = &info.body["data"]["compute_session"];
    assert_eq!(session["id"], running.as_str());
    assert_eq!(session["main_kernel_id"], running.as_str());
    assert_eq!(session["status"], "RUNNING");
    assert_eq!(
        parse_json_text(&session["status_data"], "status_data"),
        json!({})
    );
    assert_eq!(
        parse_json_text(&session["occupying_slots"], "occupying_slots"),
        json!({"cpu": "1", "mem": "134217728"})
    );
    assert_eq!(session["dependencies"], json!([]));
    let container = &session["containers"][0];
    assert_eq!(container["id"], running.as_str());
    assert_eq!(container["session_id"], running.as_str());
    assert_eq!(container["cluster_role"], "main");
    assert_eq!(container["agent"], "hand1");
    assert_eq!(container["container_id"], "c0");
    for field in ["status_data", "resource_opts", "occupied_slots"] {
        assert!(parse_json_text(&container[field], field).is_object());
    }
    let ended = client.gql(INFO_QUERY, json!({"id": batch})).await;
    let session = &ended.body["data"]["compute_session"];
    assert_eq!(
        parse_json_text(&session["status_data"], "status_data"),
        json!({"kernel": {"exit_code": 3}})
    );
    assert!(session["terminated_at"].is_string(), "{session}");

    // What the subset refuses, as GraphQL errors beside null data.
    let mut variables = ps_variables(PS_DEFAULT_STATUSES, None, None);
    variables["filter"] = json!("status == \"RUNNING\"");
    let refused = client.gql(PS_QUERY, variables).await;
    assert_eq!(errors(&refused), ["filter expressions are not supported"]);
    assert_eq!(refused.body["data"], Value::Null);
    let unknown = client
        .gql(PS_QUERY, ps_variables("RUNNING,SLEEPING", None, None))
        .await;
    assert!(errors(&unknown)[0].contains("SLEEPING"), "{}", unknown.body);
    let mut variables = ps_variables(PS_DEFAULT_STATUSES, None, None);
    variables["limit"] = json!(101);
    assert!(errors(&client.gql(PS_QUERY, variables).await)[0].contains("limit"));
    let bad_order = client
        .gql(
            PS_QUERY,
            ps_variables(PS_DEFAULT_STATUSES, None, Some("image")),
        )
        .await;
    assert!(
        errors(&bad_order)[0].contains("image"),
        "{}",
        bad_order.body
    );

    // Not a GraphQL request: a problem, as the client prints one.
    let garbled = client.post_raw("{\"variables\": {}}".into()).await;
    assert_eq!(garbled.status, StatusCode::BAD_REQUEST);
    assert!(garbled.content_type.starts_with("application/problem+json"));
    assert_eq!(
        garbled.body["type"],
        "https://api.backend.ai/probs/invalid-api-params"
    );
    // Unsigned: refused before anything is read.
    let unsigned = h
        .http
        .post(format!("{}/admin/gql", h.base))
        .json(&json!({"query": KEYPAIR_QUERY}))
        .send()
        .await
        .unwrap();
    let unsigned = answer(unsigned).await;
    assert_eq!(unsigned.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        unsigned.body["type"],
        "https://api.backend.ai/probs/auth-failed"
    );
}

#[tokio::test]
async fn a_user_sees_only_their_own_sessions_and_a_superadmin_everyone_s() {
    let h = start().await;
    h.agent("hand1", "default", 8).await;
    let first = "gqlowner@berth.local";
    let first_key = h.user(first).await;
    let owner = Client::keypair(&h, first).await;
    let second = "gqlother@berth.local";
    h.user(second).await;
    let other = Client::keypair(&h, second).await;
    let admin = Client::keypair(&h, launcher::access::FIRST_SUPERADMIN).await;

    let session = create(
        &h,
        &first_key,
        json!({"name": "mine1", "image": "berth/shell:latest",
            "resources": {"cpu": 1, "memory": "128m"}}),
    )
    .await;
    // The owner sees it in `session info` as soon as the create has answered.
    let info = owner.gql(INFO_QUERY, json!({"id": session})).await;
    assert_eq!(info.body["data"]["compute_session"]["name"], "mine1");
    let own = create(
        &h,
        &h.admin_key,
        json!({"name": "admins1", "image": "berth/shell:latest",
            "resources": {"cpu": 1, "memory": "128m"}}),
    )
    .await;
    h.wait_session(&session, |s| s["status"] == "SCHEDULED")
        .await;
    h.wait_session(&own, |s| s["status"] == "SCHEDULED").await;

    // Another user: nothing of it, in any of the three root fields.
    let ps = other
        .gql(PS_QUERY, ps_variables(PS_DEFAULT_STATUSES, None, None))
        .await;
    assert_eq!(item_ids(&ps), Vec::<String>::new());
    assert_eq!(ps.body["data"]["compute_session_list"]["total_count"], 0);
    let info = other.gql(INFO_QUERY, json!({"id": session})).await;
    assert_eq!(info.body, json!({"data": {"compute_session": null}}));
    let named = other
        .gql(
            PS_QUERY,
            ps_variables(PS_DEFAULT_STATUSES, Some(&owner.access_key), None),
        )
        .await;
    assert!(errors(&named)[0].contains("insufficient privilege"));
    assert_eq!(named.body["data"], Value::Null);
    let keypair = other
        .gql(
            "query($ak: String) { keypair(access_key: $ak) { user_id } }",
            json!({"ak": owner.access_key}),
        )
        .await;
    assert!(errors(&keypair)[0].contains("insufficient privilege"));
    // Naming their own access key is their own list.
    let own_named = owner
        .gql(
            PS_QUERY,
            ps_variables(PS_DEFAULT_STATUSES, Some(&owner.access_key), None),
        )
        .await;
    assert_eq!(item_ids(&own_named), [session.as_str()]);

    // A superadmin: `is_admin`, so the CLI asks for each session's access key; everyone's.
    let keypair = admin.gql(KEYPAIR_QUERY, json!({})).await;
    assert_eq!(keypair.body["data"]["keypair"]["is_admin"], true);
    let everyone = admin
        .gql(
            ADMIN_PS_QUERY,
            ps_variables(PS_DEFAULT_STATUSES, None, None),
        )
        .await;
    assert_eq!(item_ids(&everyone), [own.as_str(), session.as_str()]);
    let items = &everyone.body["data"]["compute_session_list"]["items"];
    assert_eq!(items[0]["access_key"], admin.access_key.as_str());
    assert_eq!(items[1]["access_key"], owner.access_key.as_str());
    assert_eq!(
        everyone
            .ordered
            .keys_at(&["data", "compute_session_list", "items", "1"])[..3],
        ["name", "access_key", "id"]
    );
    // `--access-key`: that keypair's holder's sessions only.
    let theirs = admin
        .gql(
            ADMIN_PS_QUERY,
            ps_variables(PS_DEFAULT_STATUSES, Some(&owner.access_key), None),
        )
        .await;
    assert_eq!(item_ids(&theirs), [session.as_str()]);
    let none = admin
        .gql(
            ADMIN_PS_QUERY,
            ps_variables(PS_DEFAULT_STATUSES, Some(&other.access_key), None),
        )
        .await;
    assert_eq!(item_ids(&none), Vec::<String>::new());
    let info = admin.gql(INFO_QUERY, json!({"id": session})).await;
    assert_eq!(info.body["data"]["compute_session"]["name"], "mine1");
    let keypair = admin
        .gql(
            "query($ak: String) { keypair(access_key: $ak) { user_id is_active } }",
            json!({"ak": owner.access_key}),
        )
        .await;
    assert_eq!(
        keypair.body,
        json!({"data": {"keypair": {"user_id": first, "is_active": true}}})
    );
}
