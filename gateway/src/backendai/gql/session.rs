//! A session and its kernels as Backend.AI's GraphQL types `ComputeSession` and
//! `ComputeContainer` show them, built from one row of the sessions view
//! ([`GqlSession`]): every field of the 23.09 client's catalogue, snake_case, its JSON-typed
//! fields (`status_data`, `resource_opts`, `occupying_slots`, `service_ports`, ...) as
//! JSON-encoded strings, which the client's formatters `json.loads` (an object crashes them).
//!
//! Where berth and Backend.AI differ: berth numbers a session's kernels, so the main kernel's
//! id is the session's (Backend.AI's old convention) and another kernel's is UUIDv5 of the
//! session's id and its index ([`kernel_id`]); a kernel has its session's status; berth has
//! one domain (`default`); a session outside any project is in group `default`, as the
//! client asked for it; `service_ports` is an object by app name, which the client's
//! formatter reads (Backend.AI's list crashes it).

use std::sync::Arc;

use async_graphql::{InputValueError, InputValueResult, Object, Scalar, ScalarType, Value};
use chrono::{SecondsFormat, Utc};
use events::payloads::{KernelPlacement, PublishedPort, ResourceSlots, SessionStatus};
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use crate::backendai::stream::kernel_id;

use crate::db::backendai_gql::GqlSession;

/// A time as graphene writes one: ISO 8601 with microseconds and `+00:00`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime(pub chrono::DateTime<Utc>);

#[Scalar(name = "DateTime")]
impl ScalarType for DateTime {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(text) => chrono::DateTime::parse_from_rfc3339(text)
                .map(|t| DateTime(t.with_timezone(&Utc)))
                .map_err(|e| InputValueError::custom(format!("not an ISO 8601 time: {e}"))),
            _ => Err(InputValueError::expected_type(value)),
        }
    }

    fn to_value(&self) -> Value {
        Value::String(self.0.to_rfc3339_opts(SecondsFormat::Micros, false))
    }
}

/// Thousandths as a decimal (`1500` is `1.5`, `1000` is `1`), as Backend.AI writes slot
/// amounts.
fn decimal_milli(milli: u64) -> String {
    let (whole, fraction) = (milli / 1000, milli % 1000);
    if fraction == 0 {
        whole.to_string()
    } else {
        let digits = format!("{fraction:03}");
        format!("{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// Resource slots as Backend.AI names them (`cpu`, `mem`, `cuda.shares`), each amount a
/// decimal string, `count` kernels' worth: the JSON text its client reads.
pub fn slots_json(per_kernel: ResourceSlots, count: u64) -> String {
    let mut slots = serde_json::Map::new();
    slots.insert(
        "cpu".into(),
        decimal_milli(per_kernel.cpu_milli * count).into(),
    );
    slots.insert(
        "mem".into(),
        (per_kernel.memory_bytes * count).to_string().into(),
    );
    if per_kernel.gpu_milli > 0 {
        slots.insert(
            "cuda.shares".into(),
            decimal_milli(per_kernel.gpu_milli * count).into(),
        );
    }
    serde_json::Value::Object(slots).to_string()
}

/// The registry of an image reference, as Docker reads one (Docker Hub's `docker.io` when
/// its first component names no host).
pub fn registry_of(image: &str) -> String {
    domain::images::registry_of(image).to_owned()
}

/// `UNDEFINED`, `SUCCESS` or `FAILURE`: how a batch session ended (by its exit code; one that
/// failed without one is a failure); any other session's is undefined.
pub fn result_of(session_type: &str, status: &str, exit_code: Option<i32>) -> &'static str {
    if session_type != "batch" {
        return "UNDEFINED";
    }
    match (exit_code, SessionStatus::parse(status)) {
        (Some(0), _) => "SUCCESS",
        (Some(_), _) | (None, Some(SessionStatus::Error)) => "FAILURE",
        _ => "UNDEFINED",
    }
}

/// `status_data` as Backend.AI fills it: a waiting session's latest scheduling attempt
/// (`scheduler`: retries, when and why), an ended one's exit code (`kernel`) and, when it
/// ended in error, why (`error`); `{}` otherwise.
pub fn status_data(row: &GqlSession) -> serde_json::Value {
    let status = SessionStatus::parse(&row.status);
    if status == Some(SessionStatus::Pending) {
        return match &row.last_try {
            Some(t) => json!({"scheduler": {
                "retries": t.attempts,
                "last_try": t.at.to_rfc3339_opts(SecondsFormat::Micros, false),
                "msg": t.message,
            }}),
            None => json!({}),
        };
    }
    if !status.is_some_and(SessionStatus::is_terminal) {
        return json!({});
    }
    let mut data = json!({"kernel": {"exit_code": row.exit_code}});
    if status == Some(SessionStatus::Error) {
        data["error"] = json!({"src": "other", "name": "SessionError",
            "repr": row.status_reason});
    }
    data
}

/// A started kernel's container as the view keeps it.
#[derive(Debug, Clone, Default, Deserialize)]
struct Started {
    kernel: u32,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    container_id: Option<String>,
    #[serde(default)]
    hostname: Option<String>,
    #[serde(default)]
    ports: Vec<PublishedPort>,
}

/// An app of the session as the request recorded it.
#[derive(Debug, Clone, Deserialize)]
struct App {
    name: String,
    protocol: serde_json::Value,
    #[serde(default)]
    ports: Vec<u16>,
}

/// What a row's JSON columns hold, read once per session.
#[derive(Debug, Clone)]
struct Parsed {
    per_kernel: ResourceSlots,
    placements: Vec<KernelPlacement>,
    started: Vec<Started>,
    apps: Vec<App>,
    preopen_ports: Vec<i32>,
    mounts: Vec<String>,
    startup_command: Option<String>,
    starts_at: Option<chrono::DateTime<Utc>>,
}

fn parsed(row: &GqlSession) -> Parsed {
    let request = |key: &str| row.request.get(key).cloned().unwrap_or_default();
    Parsed {
        per_kernel: serde_json::from_value(row.resources.clone()).unwrap_or_default(),
        placements: serde_json::from_value(row.kernels.clone()).unwrap_or_default(),
        started: serde_json::from_value(row.containers.clone()).unwrap_or_default(),
        apps: serde_json::from_value(request("apps")).unwrap_or_default(),
        preopen_ports: serde_json::from_value(request("preopen_ports")).unwrap_or_default(),
        mounts: serde_json::from_value(request("mounts")).unwrap_or_default(),
        startup_command: serde_json::from_value(request("startup_command")).unwrap_or_default(),
        starts_at: serde_json::from_value(request("starts_at")).unwrap_or_default(),
    }
}

struct Inner {
    row: GqlSession,
    parsed: Parsed,
    /// The owner's access key as the caller should see it.
    access_key: Option<String>,
}

/// Backend.AI's `ComputeSession`.
#[derive(Clone)]
pub struct ComputeSession(Arc<Inner>);

impl ComputeSession {
    /// The session of `row`, whose owner's access key is `access_key`.
    pub fn new(row: GqlSession, access_key: Option<String>) -> ComputeSession {
        let parsed = parsed(&row);
        ComputeSession(Arc::new(Inner {
            row,
            parsed,
            access_key,
        }))
    }

    fn row(&self) -> &GqlSession {
        &self.0.row
    }

    fn size(&self) -> u32 {
        self.row().cluster_size.max(1) as u32
    }

    /// Kernel `k`'s resources: its placement's, else what each kernel asked for.
    fn kernel_slots(&self, k: u32) -> ResourceSlots {
        if self.waiting() {
            return self.0.parsed.per_kernel;
        }
        self.0
            .parsed
            .placements
            .get(k as usize)
            .map_or(self.0.parsed.per_kernel, |p| p.resources)
    }

    fn started(&self, k: u32) -> Option<&Started> {
        self.0.parsed.started.iter().find(|s| s.kernel == k)
    }

    fn hostname(&self, k: u32) -> String {
        self.started(k)
            .and_then(|s| s.hostname.clone())
            .unwrap_or_else(|| default_hostname(k))
    }
}

/// A kernel's host name in its cluster, as berth's agents name them (`main1`, `sub1`, ...).
fn default_hostname(k: u32) -> String {
    if k == 0 {
        "main1".into()
    } else {
        format!("sub{k}")
    }
}

#[Object(serial, rename_fields = "snake_case", rename_args = "snake_case")]
impl ComputeSession {
    async fn id(&self) -> Uuid {
        self.row().session_id
    }

    /// The same as `id` (Backend.AI's alternative name).
    async fn session_id(&self) -> Uuid {
        self.row().session_id
    }

    async fn main_kernel_id(&self) -> Uuid {
        kernel_id(self.row().session_id, 0)
    }

    /// berth keeps no tags.
    async fn tag(&self) -> Option<String> {
        None
    }

    async fn name(&self) -> &str {
        &self.row().name
    }

    /// `INTERACTIVE`, `BATCH`, `INFERENCE` or `SYSTEM`.
    #[graphql(name = "type")]
    async fn session_type(&self) -> String {
        self.row().session_type.to_ascii_uppercase()
    }

    async fn main_kernel_role(&self) -> &str {
        "MAIN"
    }

    async fn image(&self) -> &str {
        &self.row().image
    }

    async fn registry(&self) -> String {
        registry_of(&self.row().image)
    }

    async fn cluster_template(&self) -> Option<String> {
        None
    }

    async fn cluster_mode(&self) -> &str {
        &self.row().cluster_mode
    }

    async fn cluster_size(&self) -> i32 {
        self.row().cluster_size
    }

    async fn domain_name(&self) -> &str {
        "default"
    }

    /// The session's project, `default` when it has none.
    async fn group_name(&self) -> &str {
        self.row().project.as_deref().unwrap_or("default")
    }

    /// berth's projects have names only.
    async fn group_id(&self) -> Option<Uuid> {
        None
    }

    /// The agents its kernels are placed on, each once (none while it waits).
    async fn agent_ids(&self) -> Vec<String> {
        let mut agents: Vec<String> = Vec::new();
        if self.waiting() {
            return agents;
        }
        for p in &self.0.parsed.placements {
            if !agents.contains(&p.agent_id) {
                agents.push(p.agent_id.clone());
            }
        }
        agents
    }

    async fn user_email(&self) -> &str {
        &self.row().owner_email
    }

    async fn user_id(&self) -> Uuid {
        self.row().owner
    }

    /// The owner's access key: the caller's own for their sessions, else one the owner
    /// holds (null when they hold none).
    async fn access_key(&self) -> Option<&str> {
        self.0.access_key.as_deref()
    }

    async fn created_user_email(&self) -> Option<&str> {
        match self.row().requested_by {
            Some(_) => self.row().requested_by_email.as_deref(),
            None => Some(&self.row().owner_email),
        }
    }

    async fn created_user_id(&self) -> Uuid {
        self.row().requested_by.unwrap_or(self.row().owner)
    }

    async fn status(&self) -> &str {
        &self.row().status
    }

    async fn status_info(&self) -> Option<&str> {
        self.row().status_reason.as_deref()
    }

    /// JSON text.
    async fn status_data(&self) -> String {
        status_data(self.row()).to_string()
    }

    async fn status_changed(&self) -> DateTime {
        DateTime(self.row().status_changed_at)
    }

    async fn created_at(&self) -> DateTime {
        DateTime(self.row().created_at)
    }

    async fn terminated_at(&self) -> Option<DateTime> {
        self.row().ended_at.map(DateTime)
    }

    async fn starts_at(&self) -> Option<DateTime> {
        self.0.parsed.starts_at.map(DateTime)
    }

    async fn scheduled_at(&self) -> Option<DateTime> {
        self.row().scheduled_at.map(DateTime)
    }

    async fn startup_command(&self) -> Option<&str> {
        self.0.parsed.startup_command.as_deref()
    }

    /// `UNDEFINED`, `SUCCESS` or `FAILURE` ([`result_of`]).
    async fn result(&self) -> &'static str {
        let row = self.row();
        result_of(&row.session_type, &row.status, row.exit_code)
    }

    /// JSON text: each kernel's options by its host name (`{"main1": {"shmem": bytes}}`).
    async fn resource_opts(&self) -> String {
        let shmem = self.row().shared_memory_bytes;
        let opts: serde_json::Map<String, serde_json::Value> = (0..self.size())
            .map(|k| (self.hostname(k), json!({ "shmem": shmem })))
            .collect();
        serde_json::Value::Object(opts).to_string()
    }

    async fn scaling_group(&self) -> &str {
        &self.row().resource_group
    }

    /// JSON text: the session's apps by name, each with its protocol, its container ports and
    /// the host ports the main kernel publishes them on (null until it does). An object, not
    /// Backend.AI's list: the client's formatter for this field reads an object (a list
    /// crashes `ps --format service_ports`, against Backend.AI too).
    async fn service_ports(&self) -> String {
        let published = self.started(0).map(|s| s.ports.as_slice()).unwrap_or(&[]);
        let apps: serde_json::Map<String, serde_json::Value> = self
            .0
            .parsed
            .apps
            .iter()
            .map(|app| {
                let host_ports: Vec<Option<u16>> = app
                    .ports
                    .iter()
                    .map(|p| published.iter().find(|q| q.container == *p).map(|q| q.host))
                    .collect();
                let ports = json!({"protocol": app.protocol,
                    "container_ports": app.ports, "host_ports": host_ports});
                (app.name.clone(), ports)
            })
            .collect();
        serde_json::Value::Object(apps).to_string()
    }

    async fn mounts(&self) -> &[String] {
        &self.0.parsed.mounts
    }

    /// JSON text: what all its kernels hold (`{}` while it holds nothing yet).
    async fn occupying_slots(&self) -> String {
        self.occupied()
    }

    /// The same as `occupying_slots` (Backend.AI's older name).
    async fn occupied_slots(&self) -> String {
        self.occupied()
    }

    async fn containers(&self) -> Vec<ComputeContainer> {
        (0..self.size())
            .map(|kernel| ComputeContainer {
                session: self.clone(),
                kernel,
            })
            .collect()
    }

    /// berth has no session dependencies.
    async fn dependencies(&self) -> Vec<ComputeSession> {
        Vec::new()
    }

    /// berth keeps no abuse reports.
    async fn abusing_reports(&self) -> Vec<String> {
        Vec::new()
    }

    /// JSON text, or null: berth's idle checks are its idle-reaper's, not shown here.
    async fn idle_checks(&self) -> Option<String> {
        None
    }
}

impl ComputeSession {
    /// Whether it waits to be placed (again: a session whose agent went away before it
    /// ran waits with its old placement still in the view).
    fn waiting(&self) -> bool {
        self.row().scheduled_at.is_none() || self.row().status == SessionStatus::Pending.as_str()
    }

    fn occupied(&self) -> String {
        if self.waiting() {
            return "{}".into();
        }
        let mut total = ResourceSlots::default();
        for k in 0..self.size() {
            let s = self.kernel_slots(k);
            total.cpu_milli += s.cpu_milli;
            total.memory_bytes += s.memory_bytes;
            total.gpu_milli += s.gpu_milli;
        }
        slots_json(total, 1)
    }
}

/// Backend.AI's `ComputeContainer`: kernel `kernel` of a session.
pub struct ComputeContainer {
    session: ComputeSession,
    kernel: u32,
}

#[Object(serial, rename_fields = "snake_case", rename_args = "snake_case")]
impl ComputeContainer {
    async fn id(&self) -> Uuid {
        kernel_id(self.session.row().session_id, self.kernel)
    }

    /// The same as `id`.
    async fn kernel_id(&self) -> Uuid {
        kernel_id(self.session.row().session_id, self.kernel)
    }

    /// `main` or `sub`.
    async fn cluster_role(&self) -> &str {
        if self.kernel == 0 {
            "main"
        } else {
            "sub"
        }
    }

    /// 1 for the main kernel, and 1, 2, ... for the others, as their host names count.
    async fn cluster_idx(&self) -> i32 {
        self.kernel.max(1) as i32
    }

    async fn cluster_hostname(&self) -> String {
        self.session.hostname(self.kernel)
    }

    /// `cluster_role` (Backend.AI's older name).
    async fn role(&self) -> &str {
        if self.kernel == 0 {
            "main"
        } else {
            "sub"
        }
    }

    /// `cluster_idx` (Backend.AI's older name).
    async fn idx(&self) -> i32 {
        self.kernel.max(1) as i32
    }

    /// `cluster_hostname` (Backend.AI's older name).
    async fn hostname(&self) -> String {
        self.session.hostname(self.kernel)
    }

    async fn session_id(&self) -> Uuid {
        self.session.row().session_id
    }

    async fn image(&self) -> &str {
        &self.session.row().image
    }

    async fn registry(&self) -> String {
        registry_of(&self.session.row().image)
    }

    /// The session's status: berth keeps none per kernel.
    async fn status(&self) -> &str {
        &self.session.row().status
    }

    async fn status_info(&self) -> Option<&str> {
        self.session.row().status_reason.as_deref()
    }

    /// JSON text.
    async fn status_data(&self) -> String {
        status_data(self.session.row()).to_string()
    }

    async fn status_changed(&self) -> DateTime {
        DateTime(self.session.row().status_changed_at)
    }

    async fn created_at(&self) -> DateTime {
        DateTime(self.session.row().created_at)
    }

    async fn terminated_at(&self) -> Option<DateTime> {
        self.session.row().ended_at.map(DateTime)
    }

    async fn scheduled_at(&self) -> Option<DateTime> {
        self.session.row().scheduled_at.map(DateTime)
    }

    /// The agent it is placed on (none while it waits).
    async fn agent(&self) -> Option<String> {
        if self.session.waiting() {
            return None;
        }
        let placements = &self.session.0.parsed.placements;
        placements
            .get(self.kernel as usize)
            .map(|p| p.agent_id.clone())
            .or_else(|| {
                self.session
                    .started(self.kernel)
                    .and_then(|s| s.agent_id.clone())
            })
    }

    async fn container_id(&self) -> Option<String> {
        self.session
            .started(self.kernel)
            .and_then(|s| s.container_id.clone())
    }

    /// JSON text: `{"shmem": bytes}`.
    async fn resource_opts(&self) -> String {
        json!({ "shmem": self.session.row().shared_memory_bytes }).to_string()
    }

    /// JSON text: what this kernel holds, or asks for until it is placed.
    async fn occupied_slots(&self) -> String {
        slots_json(self.session.kernel_slots(self.kernel), 1)
    }

    async fn preopen_ports(&self) -> &[i32] {
        &self.session.0.parsed.preopen_ports
    }

    /// JSON text, or null: berth samples usage per session, not per kernel.
    async fn live_stat(&self) -> Option<String> {
        None
    }

    /// JSON text, or null.
    async fn last_stat(&self) -> Option<String> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_main_kernel_has_the_session_s_id_and_the_others_stable_ones() {
        let session = Uuid::parse_str("0190b4e2-8f3a-7c11-9a2b-3c4d5e6f7a8b").unwrap();
        assert_eq!(kernel_id(session, 0), session);
        let sub1 = kernel_id(session, 1);
        assert_eq!(sub1, kernel_id(session, 1));
        assert_eq!(sub1.get_version_num(), 5);
        assert_ne!(sub1, kernel_id(session, 2));
        assert_ne!(
            sub1,
            kernel_id(
                Uuid::parse_str("0190b4e2-8f3a-7c11-9a2b-3c4d5e6f7a8c").unwrap(),
                1
            )
        );
    }

    #[test]
    fn slots_are_backend_ai_s_names_with_decimal_strings() {
        let slots = ResourceSlots {
            cpu_milli: 1500,
            memory_bytes: 512 << 20,
            gpu_milli: 0,
        };
        let text = slots_json(slots, 2);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value, json!({"cpu": "3", "mem": "1073741824"}));
        let half = ResourceSlots {
            cpu_milli: 250,
            memory_bytes: 1,
            gpu_milli: 500,
        };
        let value: serde_json::Value = serde_json::from_str(&slots_json(half, 1)).unwrap();
        assert_eq!(
            value,
            json!({"cpu": "0.25", "mem": "1", "cuda.shares": "0.5"})
        );
        assert_eq!(decimal_milli(1005), "1.005");
        assert_eq!(decimal_milli(0), "0");
    }

    #[test]
    fn a_batch_session_s_result_is_its_exit_code_s() {
        assert_eq!(result_of("batch", "TERMINATED", Some(0)), "SUCCESS");
        assert_eq!(result_of("batch", "TERMINATED", Some(3)), "FAILURE");
        assert_eq!(result_of("batch", "ERROR", None), "FAILURE");
        assert_eq!(result_of("batch", "RUNNING", None), "UNDEFINED");
        assert_eq!(result_of("batch", "CANCELLED", None), "UNDEFINED");
        assert_eq!(result_of("interactive", "TERMINATED", Some(1)), "UNDEFINED");
    }

    #[test]
    fn times_are_written_as_graphene_writes_them() {
        let t = chrono::DateTime::parse_from_rfc3339("2026-11-22T08:04:25.809865Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            DateTime(t).to_value(),
            Value::String("2026-11-22T08:04:25.809865+00:00".into())
        );
        assert_eq!(
            <DateTime as ScalarType>::parse(DateTime(t).to_value()).unwrap(),
            DateTime(t)
        );
    }
}
