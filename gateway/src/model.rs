//! The bodies the API answers with, as Rust types: the handlers serialise them, the CLI
//! (`berth session ...`) reads them back, and tests hold the documents PostgreSQL builds (the
//! session detail) to them, and the OpenAPI document describes them (utoipa). One definition
//! of each answer, for the server, its document and its clients.

use chrono::{DateTime, Utc};
use events::payloads::{KernelPlacement, PublishedPort, ResourceSlots, SchedulingStep};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// Who owns a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnerRef {
    pub user_id: Uuid,
    pub email: String,
}

/// A session as a list shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSummary {
    pub session_id: Uuid,
    pub name: String,
    pub owner: OwnerRef,
    #[serde(rename = "type")]
    pub session_type: String,
    pub status: String,
    pub status_reason: Option<String>,
    pub image: String,
    pub resource_group: String,
    pub agent_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub status_changed_at: DateTime<Utc>,
    /// What the session's kernels ask for in all (what they hold while placed): the seeds'
    /// "allocated resources".
    pub allocated: Amounts,
    pub cluster_size: u32,
    /// Seconds from its start (RUNNING) to its end, or to now while it runs; null for a
    /// session that never ran.
    pub elapsed_secs: Option<f64>,
}

/// `GET /v1/sessions`: a page of sessions and how many match in all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionPage {
    pub sessions: Vec<SessionSummary>,
    pub total: i64,
    pub limit: i64,
    pub offset: i64,
}

/// One kernel's container, as its agent started it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Container {
    pub kernel: u32,
    pub agent_id: String,
    pub container_id: String,
    pub hostname: Option<String>,
    pub ports: Vec<PublishedPort>,
    /// The host address its ports are published on (berth's proxy connects there).
    #[serde(default)]
    pub address: Option<String>,
}

/// What the session asked for beyond its resources.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestDetail {
    pub environment: std::collections::BTreeMap<String, String>,
    pub mounts: Vec<String>,
    pub preopen_ports: Vec<u16>,
    pub startup_command: Option<String>,
    pub starts_at: Option<DateTime<Utc>>,
    pub batch_timeout_secs: Option<u64>,
    pub omp_num_threads: u32,
    pub max_lifetime_secs: Option<u64>,
    pub wanted_agent: Option<String>,
    /// The session's apps: the terminal, its image's apps, its preopen ports.
    #[serde(default)]
    pub apps: Vec<domain::apps::SessionApp>,
}

/// The latest sample of what the session uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    pub cpu_seconds: f64,
    pub cpu_percent: Option<f64>,
    pub memory_bytes: i64,
    pub network_rx_bytes: i64,
    pub network_tx_bytes: i64,
    /// Mean utilization of the GPUs the main kernel holds, in percent (none without GPUs, or
    /// where they are not measured).
    #[serde(default)]
    pub gpu_percent: Option<f64>,
    /// How much of those GPUs' memory is used, in percent.
    #[serde(default)]
    pub gpu_memory_percent: Option<f64>,
    pub sampled_at: DateTime<Utc>,
}

/// `GET /v1/sessions/{id}`: everything about one session. PostgreSQL builds this document in
/// one statement (`db::sessions::detail`); a test holds it to this type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionDetail {
    pub session_id: Uuid,
    pub name: String,
    pub owner: OwnerRef,
    #[serde(rename = "type")]
    pub session_type: String,
    pub status: String,
    pub status_reason: Option<String>,
    pub image: String,
    pub resource_group: String,
    pub agent_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub status_changed_at: DateTime<Utc>,
    pub requested_by: Option<Uuid>,
    pub project: Option<String>,
    /// Per kernel.
    pub resources: ResourceSlots,
    pub shared_memory_bytes: i64,
    pub cluster_mode: String,
    pub cluster_size: u32,
    /// Where each kernel was placed.
    pub kernels: Vec<KernelPlacement>,
    pub containers: Vec<Container>,
    pub request: RequestDetail,
    pub reserved_at: DateTime<Utc>,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub elapsed_secs: Option<f64>,
    pub exit_code: Option<i32>,
    pub scheduling_attempts: u32,
    /// Its place among priorities in its group's queue (0 to 100, higher first); an admin may
    /// change it while it waits.
    pub priority: i32,
    pub termination_requested: bool,
    pub usage: Option<Usage>,
}

/// One row of a session's scheduling history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryEntry {
    pub id: Uuid,
    /// `schedule`, `reconcile`, `prepare`, `pull`, `create`, `start`, `restart`, `terminate`
    /// or `cleanup`.
    pub phase: String,
    pub result: String,
    pub from_status: String,
    pub to_status: String,
    pub attempts: i32,
    pub message: String,
    pub error_code: Option<String>,
    pub sub_steps: Vec<SchedulingStep>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `GET /v1/sessions/{id}/history`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct History {
    pub session_id: Uuid,
    pub history: Vec<HistoryEntry>,
}

/// One kernel's kept output: the most recent bytes its session's log cap keeps (the
/// policy's `max_log_bytes`), or the range asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelLog {
    pub kernel: i32,
    pub content: String,
    /// Whether the kernel has ended and all its output is kept.
    pub complete: bool,
    pub updated_at: DateTime<Utc>,
    /// Where `content` starts in the kernel's output, in bytes.
    pub offset: i64,
    /// How many bytes the kernel has printed in all (the next byte's offset).
    pub total_bytes: i64,
    /// The oldest byte still kept, never more than the cap before `total_bytes`: what came
    /// before is gone.
    pub kept_from: i64,
}

/// `GET /v1/sessions/{id}/logs` (without `follow`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Logs {
    pub session_id: Uuid,
    pub status: String,
    pub kernels: Vec<KernelLog>,
}

/// Resources as people read them: cores and GPUs in units, memory in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Amounts {
    pub cpu: f64,
    pub memory_bytes: i64,
    pub gpu: f64,
}

impl Amounts {
    /// `slots` as people read them.
    pub fn of(slots: events::payloads::ResourceSlots) -> Amounts {
        Amounts {
            cpu: slots.cpu_milli as f64 / 1000.0,
            memory_bytes: i64::try_from(slots.memory_bytes).unwrap_or(i64::MAX),
            gpu: slots.gpu_milli as f64 / 1000.0,
        }
    }
}

/// What the caller's resource policy allows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub resource_policy: String,
    pub max_concurrent_sessions: i32,
    pub max_total: Amounts,
    pub max_session_lifetime_secs: Option<i64>,
}

/// What the caller holds in a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MyUsage {
    pub sessions: i32,
    pub resources: Amounts,
}

/// A group's live agents and what they hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupResources {
    pub agents: i32,
    pub total: Amounts,
    pub used: Amounts,
    pub free: Amounts,
}

/// `GET /v1/resources`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceSummary {
    pub resource_group: String,
    pub my_limits: Limits,
    pub my_usage: MyUsage,
    pub group: GroupResources,
}

/// A saved resource preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    pub name: String,
    pub resources: Amounts,
    pub shared_memory_bytes: i64,
}

/// `GET /v1/presets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Presets {
    pub presets: Vec<Preset>,
}

/// One of the caller's folders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Folder {
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// The volume its files live on (`host-local`: the data directory of whichever agent
    /// runs a session of it).
    pub volume: String,
    /// What it holds: measured now where this gateway serves its volume, else when last
    /// measured (after each session that mounted it ended); null before any has.
    pub usage: Option<FolderUsage>,
    /// Its owner's email.
    pub owner: String,
    /// What the caller may do with it: `owner`, or the share's `rw` (read and write) or `ro`
    /// (read only; mounted read-only).
    #[schema(pattern = "^(owner|rw|ro)$")]
    pub permission: String,
    /// Whom its owner shared it with (listed to the owner alone).
    pub shares: Vec<FolderShare>,
    /// What it is for: `general`, `model` or `data`.
    #[schema(pattern = "^(general|model|data)$")]
    pub usage_mode: String,
    /// When its owner moved it to the trash (listed to the owner alone, reached by nobody
    /// until restored); null for a folder in use.
    pub trashed_at: Option<DateTime<Utc>>,
    /// The most bytes it may hold, from its owner's resource policy: an upload past it is
    /// refused (413 `quota_exceeded`). Null: no limit.
    pub quota_bytes: Option<u64>,
}

/// A resumable upload made: where to send its bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadMade {
    /// The upload's capability (32 hex digits).
    pub token: String,
    /// Its URL's path: `HEAD` it for its offset, `PATCH` its bytes to it.
    pub location: String,
    /// The file's bytes.
    pub length: u64,
}

/// A share of a folder: with a user or with every member of a project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FolderShare {
    /// `user` or `project`.
    #[schema(pattern = "^(user|project)$")]
    pub kind: String,
    /// The user's email or the project's name.
    pub with: String,
    /// `ro` or `rw`.
    #[schema(pattern = "^(ro|rw)$")]
    pub permission: String,
}

/// What a folder holds on its volume: measured by the gateway as it lists it where it serves
/// the volume, else by the agent of the last session that mounted it, once that session
/// ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FolderUsage {
    /// Allocated on the volume, as `du` counts.
    pub bytes: u64,
    /// Files, directories and links in it.
    pub files: u64,
    pub measured_at: DateTime<Utc>,
    /// Who measured it: the agent of the last session that mounted it, or `gateway` when the
    /// gateway serving its volume measured it as it listed it.
    pub agent_id: String,
}

impl FolderUsage {
    /// [`FolderUsage::agent_id`] of a measurement the gateway made.
    pub const BY_GATEWAY: &'static str = "gateway";
}

/// What kind of entry a folder holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Directory,
    Link,
    Other,
}

/// An entry of a folder's directory (`GET /v1/folders/{name}/files`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FolderEntry {
    pub name: String,
    /// `file`, `directory`, `link` (shown, never followed) or `other`.
    pub kind: EntryKind,
    /// A file's bytes (0 for anything else).
    pub size: u64,
    pub modified: Option<DateTime<Utc>>,
}

/// `GET /v1/folders/{name}/files`: a directory's entries by name, a page of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FolderListing {
    pub folder: String,
    /// The directory listed, inside the folder (`""`: the folder itself).
    pub path: String,
    /// Entries in the directory, in all.
    pub total: u64,
    pub entries: Vec<FolderEntry>,
}

/// `PUT /v1/folders/{name}/files`: the file written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileWritten {
    pub path: String,
    pub size: u64,
}

/// `GET /v1/folders`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Folders {
    pub folders: Vec<Folder>,
}

/// `POST /v1/folders`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FolderCreated {
    pub name: String,
    /// The volume its files live on.
    pub volume: String,
}

/// `GET /v1/whoami`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Whoami {
    pub user_id: Uuid,
    pub email: String,
    pub role: events::payloads::Role,
    pub resource_policy: String,
    /// Whether I have a password (then changing it asks for it as `current`).
    pub password_set: bool,
}

/// `POST /v1/sessions`: the sessions recorded, each PENDING.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Created {
    pub sessions: Vec<launcher::launch::Launched>,
}

/// `PATCH /v1/sessions/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Renamed {
    pub session_id: Uuid,
    pub name: String,
}

/// `DELETE /v1/sessions/{id}`: where the session stands after the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Terminated {
    pub session_id: Uuid,
    pub status: events::payloads::SessionStatus,
    pub reason: Option<String>,
}

/// `POST /v1/sessions/{id}/commit`: the commit under way and the image it makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitStarted {
    pub session_id: Uuid,
    pub commit_id: Uuid,
    /// The image a new session names to start from it (`berth-custom/u<owner>:<name>`).
    pub image: String,
}

/// One customized image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomImage {
    pub name: String,
    pub image: String,
    /// The session it was committed from.
    pub session_id: Uuid,
    /// The agent whose engine committed it.
    pub agent_id: Option<String>,
    pub image_id: String,
    pub size_bytes: i64,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Where it can run: `everywhere` when the stack's registry holds it (any agent pulls
    /// it), else `agent` (only on `agent_id`'s host).
    pub runs_on: ImageReach,
}

/// Where a customized image can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ImageReach {
    /// Any agent: the stack's registry holds it.
    Everywhere,
    /// Only the host of the agent that committed it.
    Agent,
}

/// `GET /v1/images`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomImages {
    pub items: Vec<CustomImage>,
}

/// One notification, as its owner lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoticeItem {
    /// The id of the event it tells of.
    pub notice_id: Uuid,
    pub session_id: Uuid,
    pub session_name: String,
    pub kind: events::notices::NoticeKind,
    pub message: String,
    pub at: chrono::DateTime<chrono::Utc>,
    /// When it was marked read; null while unread.
    pub read_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// `GET /v1/notifications`: a page, newest first, and how many are unread in all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoticePage {
    pub unread: i64,
    pub items: Vec<NoticeItem>,
}

/// `PUT /v1/notifications/webhook`: whether notifications are delivered to a webhook now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    pub delivering: bool,
    /// The secret deliveries are signed with (`whsec_` and base64, as Standard Webhooks
    /// show it): with a webhook set; null when it was removed.
    pub secret: Option<String>,
}

/// `POST /v1/notifications/webhook/secret`: the new secret deliveries are signed with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSecret {
    /// `whsec_` and the secret's bytes in base64.
    pub secret: String,
}

/// `POST /v1/notifications/read`: how many are left unread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Unread {
    pub unread: i64,
}

/// `POST /v1/sessions/{id}/idle-exemption`: the session and whether it is exempt now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Exempted {
    pub session_id: Uuid,
    pub idle_exempt: bool,
}

/// One version of an environment: an image the live agents of a group offer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentVersion {
    /// The tag (`latest`, `3.12`; a customized image's name).
    pub tag: String,
    /// The whole image name, as a create request's `image` names it.
    pub image: String,
    /// The resource groups open to the caller whose live agents offer it.
    pub resource_groups: Vec<String>,
}

/// An environment: one image repository and the versions of it offered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    /// The repository (`berth/python`).
    pub name: String,
    /// Whether these are the caller's own customized images (committed from their
    /// sessions; nobody else is offered them).
    pub customized: bool,
    /// By tag.
    pub versions: Vec<EnvironmentVersion>,
}

/// `GET /v1/environments`: the image catalogue, by repository (the caller's customized images
/// last).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Environments {
    pub environments: Vec<Environment>,
}

/// A resource group open to the caller and what its live agents hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceGroup {
    pub name: String,
    /// `fifo`, `backfill`, `lifo`, `drf` or `fair-share`.
    pub queue_policy: String,
    /// `concentrated` or `dispersed`.
    pub agent_selection: String,
    /// Its live agents.
    pub agents: i32,
    pub capacity: Amounts,
    pub used: Amounts,
    pub free: Amounts,
}

/// `GET /v1/resource-groups`: the groups open to the caller, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceGroups {
    pub resource_groups: Vec<ResourceGroup>,
}

/// An agent and what it holds. The last three fields are told to superadmins only (null
/// for anyone else, who sees only live agents).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    pub agent_id: String,
    pub resource_group: String,
    pub capacity: Amounts,
    pub used: Amounts,
    pub free: Amounts,
    /// Why nothing is placed on it any more (lost, departed, revoked); null while live.
    pub lost: Option<String>,
    /// Seconds since it was last heard from (a heartbeat, its registration).
    pub heartbeat_age_secs: Option<f64>,
    /// Sessions holding resources on it.
    pub sessions: Option<i64>,
}

/// `GET /v1/agents`: by group, then id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Agents {
    pub agents: Vec<Agent>,
}

/// One of the caller's launches: a create request they sent, kept whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    pub launch_id: Uuid,
    /// The name the caller gave it; null when none.
    pub label: Option<String>,
    /// Kept among the recent launches however old.
    pub pinned: bool,
    pub created_at: DateTime<Utc>,
    /// The request as it was sent, the fields left out absent: `POST /v1/sessions` with it
    /// launches it again.
    #[serde(serialize_with = "kept_request")]
    pub request: launcher::launch::CreateSession,
    /// The sessions it made.
    pub sessions: Vec<Uuid>,
}

fn kept_request<S: serde::Serializer>(
    request: &launcher::launch::CreateSession,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    request.kept().serialize(serializer)
}

/// `GET /v1/launches`: the caller's newest launches and the pinned ones, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Launches {
    pub launches: Vec<Launch>,
}

/// Why a PENDING session waits: its latest scheduling-history row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitReason {
    pub phase: String,
    pub result: String,
    pub error_code: Option<String>,
    pub message: String,
    pub attempts: i32,
    pub updated_at: DateTime<Utc>,
}

/// A session waiting in its group's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueuedSession {
    /// Its place in the order the scheduler tries the queue, from 1.
    pub position: i64,
    pub session_id: Uuid,
    pub name: String,
    pub owner: OwnerRef,
    #[serde(rename = "type")]
    pub session_type: String,
    pub created_at: DateTime<Utc>,
    /// When it last entered the queue (its request, or its return to it).
    pub queued_at: DateTime<Utc>,
    /// Per kernel.
    pub per_kernel: Amounts,
    pub cluster_size: i32,
    /// In all.
    pub requested: Amounts,
    pub wanted_agent: Option<String>,
    pub starts_at: Option<DateTime<Utc>>,
    /// Counted scheduling attempts.
    pub attempts: i32,
    /// Null until the scheduler has tried it.
    pub reason: Option<WaitReason>,
}

/// One resource group's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupQueue {
    pub resource_group: String,
    /// `fifo`, `backfill`, `lifo`, `drf` or `fair-share`.
    pub queue_policy: String,
    /// In the order the scheduler tries them.
    pub sessions: Vec<QueuedSession>,
}

/// `GET /v1/queue`: every resource group's queue, in the order the scheduler passes over
/// them (by name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Queue {
    pub resource_groups: Vec<GroupQueue>,
}

/// A circuit open to one of the session's apps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Circuit {
    pub circuit_id: Uuid,
    pub app: String,
    pub container_port: u16,
    /// The proxy's port.
    pub port: u16,
    pub public: bool,
    /// Client address ranges let through (all when empty).
    pub allowed_ips: Vec<String>,
    /// Bytes from clients and to them since this gateway serves it.
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
}

/// `GET /v1/sessions/{id}/apps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionApps {
    pub session_id: Uuid,
    pub apps: Vec<domain::apps::SessionApp>,
    pub circuits: Vec<Circuit>,
}

/// An opened app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OpenedApp {
    pub circuit_id: Uuid,
    pub app: String,
    /// The proxy's port the app is served on (in the subdomain mode, a web app's is held for
    /// it in the pool, and the app is served on its own host instead: see `url`).
    pub port: u16,
    pub preferred_port_honoured: bool,
    /// An open circuit of the same app and admission served this request.
    pub reused: bool,
    pub public: bool,
    /// How the proxy carries the app: an HTTP app (`http`, `preopen`, `pty`) is opened in a
    /// browser; any other is raw TCP.
    pub protocol: domain::apps::AppProtocol,
    /// Where to point a browser: for a private circuit a single-use link (valid a minute)
    /// that sets the circuit's cookie. `https://` when the gateway serves TLS; a web app's is
    /// `<circuit>.<apps domain>` where the operator set one. For a raw TCP app,
    /// `tcp://host:port` when public; when private, that link's cookie opens a tunnel on the
    /// port (`berth session app tunnel`).
    pub url: String,
}

/// A started app.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StartedApp {
    pub app: String,
    pub port: u16,
    /// Whether berth started a server (false: it listened already, or it is a preopen port,
    /// which its user serves).
    pub spawned: bool,
}

/// `POST /v1/sessions/{id}/apps/{app}/close`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ClosedApp {
    pub closed: usize,
}

/// A queued session's priority, after a change.
#[derive(Debug, Serialize, ToSchema)]
pub struct PrioritySet {
    pub session_id: Uuid,
    pub priority: i32,
}

/// One server-sent event as a client reads it (OpenAPI 3.1 describes an event stream by its
/// events): its name, its id where it has one, and its data, JSON text. Only described: axum's
/// `Event` writes the wire form.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct StreamedEvent {
    /// The event's name: an event type (`SessionScheduled`) on `/v1/events`; `log` or `end`
    /// on a followed session's logs.
    event: String,
    /// The log position (`/v1/events`), from which a client may resume.
    #[schema(nullable = false)]
    id: Option<String>,
    /// JSON text: the recorded event, or `{"kernel", "text"}` for `log`.
    data: String,
}

/// What `/readyz` answers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct Report {
    /// PostgreSQL and NATS are up and no reader trails the log by more than a minute.
    pub ready: bool,
    pub postgres: Dependency,
    pub nats: Dependency,
    /// Each reader of the log (its checkpoint's name: `relay`, the projections).
    pub readers: Vec<ReaderLag>,
    /// When this was checked (none before the first check).
    pub checked_at: Option<DateTime<Utc>>,
}

/// One dependency's state.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Dependency {
    pub up: bool,
    /// Why it is down, as its client said.
    pub error: Option<String>,
    /// Since when it has been down.
    pub down_since: Option<DateTime<Utc>>,
}

impl Default for Dependency {
    fn default() -> Self {
        Dependency {
            up: true,
            error: None,
            down_since: None,
        }
    }
}

/// How far one reader of the log trails it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReaderLag {
    pub name: String,
    /// Events written and not yet read by it (counted up to 10,000).
    pub events_behind: i64,
    /// How long the oldest of those has waited, in seconds (0 when none).
    pub seconds_behind: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The detail PostgreSQL builds for a session that ran is exactly this shape: a field the
    /// statement adds or renames fails here (and in the e2e test that reads real details).
    #[test]
    fn a_detail_document_reads_into_its_type_and_refuses_strays() {
        let document = serde_json::json!({
            "session_id": Uuid::nil(), "name": "job1",
            "owner": {"user_id": Uuid::nil(), "email": "a@b.c"},
            "type": "batch", "status": "TERMINATED", "status_reason": "done", "image": "i",
            "resource_group": "default", "agent_id": "a1",
            "created_at": "2026-11-23T00:00:00Z", "status_changed_at": "2026-11-23T00:00:01Z",
            "requested_by": null, "project": null,
            "resources": {"cpu_milli": 1000, "memory_bytes": 1, "gpu_milli": 0},
            "shared_memory_bytes": 1, "cluster_mode": "single-node", "cluster_size": 1,
            "kernels": [{"agent_id": "a1", "resources": {"cpu_milli": 1000, "memory_bytes": 1, "gpu_milli": 0}}],
            "containers": [{"kernel": 0, "agent_id": "a1", "container_id": "c", "hostname": null,
                            "ports": [{"container": 8080, "host": 32768}]}],
            "request": {"environment": {}, "mounts": [], "preopen_ports": [8080],
                        "startup_command": "true", "starts_at": null, "batch_timeout_secs": null,
                        "omp_num_threads": 1, "max_lifetime_secs": null, "wanted_agent": null},
            "reserved_at": "2026-11-23T00:00:00Z", "scheduled_at": null, "started_at": null,
            "ended_at": null, "elapsed_secs": null, "exit_code": 0, "scheduling_attempts": 1,
            "priority": 10, "termination_requested": false, "usage": null,
        });
        let detail: SessionDetail = serde_json::from_value(document.clone()).unwrap();
        assert_eq!(detail.containers[0].ports[0].host, 32768);
        let mut stray = document;
        stray["surprise"] = serde_json::json!(1);
        assert!(serde_json::from_value::<SessionDetail>(stray).is_err());
    }
}

/// A user, as a superadmin lists them (`GET /v1/admin/users`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminUser {
    pub user_id: Uuid,
    pub email: String,
    /// `user`, `admin` or `superadmin`.
    pub role: String,
    pub resource_policy: String,
    pub created_at: DateTime<Utc>,
    /// The projects they are a member of, by name.
    pub projects: Vec<String>,
    /// How many API keys they hold.
    pub api_keys: i64,
    /// Whether they have a password for the web console.
    pub has_password: bool,
    /// Whether they are disabled (nothing of theirs is honoured until they are enabled).
    #[serde(default)]
    pub disabled: bool,
}

/// `GET /v1/admin/users`: by email.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminUsers {
    pub users: Vec<AdminUser>,
}

/// An API key as listed: its first characters and its owner, never the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyListed {
    /// The key's first 12 characters (`berth_` and 6 hex digits).
    pub key_prefix: String,
    pub user_id: Uuid,
    pub email: String,
    /// Whether it was revoked.
    #[serde(default)]
    pub revoked: bool,
    /// When it is refused from; absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

/// `GET /v1/admin/api-keys`: by owner's email, then prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiKeysListed {
    pub api_keys: Vec<ApiKeyListed>,
}

/// A key just made, shown only in this answer (`POST /v1/admin/users`, `POST
/// /v1/admin/api-keys`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IssuedKey {
    pub user_id: Uuid,
    pub email: String,
    /// The API key; berth keeps only its digest, so it is shown only now.
    pub api_key: String,
    /// When it is refused from; absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

/// A Backend.AI keypair just issued (`POST /v1/admin/backendai-keypairs`), for Backend.AI's
/// client (`BACKEND_ACCESS_KEY`, `BACKEND_SECRET_KEY`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IssuedKeypair {
    pub user_id: Uuid,
    pub email: String,
    /// `AKIA` and 16 upper-case letters and digits.
    pub access_key: String,
    /// 40 hex digits. Derived by the gateway from the access key with its master key, never
    /// stored: shown here, not listed.
    pub secret_key: String,
}

/// A Backend.AI keypair as listed: its access key and holder, never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeypairListed {
    pub access_key: String,
    pub user_id: Uuid,
    pub email: String,
    /// Whether it still signs requests (false once revoked).
    pub active: bool,
}

/// `GET /v1/admin/backendai-keypairs`: by access key, revoked ones included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeypairsListed {
    pub keypairs: Vec<KeypairListed>,
}

/// A project and its members.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminProject {
    pub name: String,
    pub description: String,
    /// The members' emails.
    pub members: Vec<String>,
    /// The resource groups granted to it.
    pub resource_groups: Vec<String>,
}

/// `GET /v1/admin/projects`: by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminProjects {
    pub projects: Vec<AdminProject>,
}

/// A resource group's scheduling settings and the projects granted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminGroup {
    pub name: String,
    /// `fifo`, `backfill`, `lifo`, `drf` or `fair-share`.
    pub queue_policy: String,
    /// `concentrated` or `dispersed`.
    pub agent_selection: String,
    pub max_attempts: i32,
    pub skip_after: i32,
    /// Seconds a session may wait in PENDING (0: no limit).
    pub pending_timeout_secs: i64,
    /// The projects that may use it.
    pub projects: Vec<String>,
    /// Fair share: seconds after which past use counts half.
    pub half_life_secs: i64,
    /// Fair share: seconds of past use counted.
    pub lookback_secs: i64,
    pub weights: ShareWeights,
    /// Longest a session may be passed over before it goes first (0: no bound).
    pub starve_after_secs: i64,
}

/// Fair share's resource weights: what one core, one GiB and one GPU count for per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareWeights {
    pub cpu_per_core: f64,
    pub memory_per_gib: f64,
    pub gpu_per_device: f64,
}

/// Where one user stands in a resource group's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UserShare {
    pub user_id: Uuid,
    /// Absent for a user the ledger does not know.
    pub email: Option<String>,
    /// Sessions waiting in the group's queue.
    pub queued: i64,
    /// What their sessions hold in the group now.
    pub held: Amounts,
    /// DRF: the largest share of any of the group's resources they hold now (0 to 1).
    pub dominant_share: f64,
    /// That resource, in words (`cpu 4 of 16 cores`).
    pub dominant: String,
    /// Fair share: their use of the group over the look-back, each moment weighed by the
    /// weights and halved every half-life (weighed resource-seconds).
    pub decayed_usage: f64,
    /// Fair share: `2^(-(decayed_usage / all users' decayed usage) * users)`, the users being
    /// those listed with use or a queued session; 1 for one who ran nothing. A session's factor
    /// is its owner's times its project's.
    pub fair_share_factor: f64,
    /// The highest priority they may ask for a session (their resource policy's).
    pub max_session_priority: i32,
}

/// Where one project stands in a resource group's queue (fair share).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectShare {
    pub project: String,
    pub decayed_usage: f64,
    pub fair_share_factor: f64,
}

/// `GET /v1/admin/resource-groups/{name}/shares`: the group's ordering settings and every
/// user (and project) with past use in the look-back, a queued session or a hold, by email.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupShares {
    pub resource_group: String,
    pub queue_policy: String,
    pub half_life_secs: i64,
    pub lookback_secs: i64,
    pub weights: ShareWeights,
    /// Longest a session may be passed over before it goes first (0: no bound).
    pub starve_after_secs: i64,
    /// The group's agents not lost, together: dominant shares are of this.
    pub capacity: Amounts,
    /// The moment the usage is decayed to.
    pub computed_at: DateTime<Utc>,
    pub users: Vec<UserShare>,
    pub projects: Vec<ProjectShare>,
}

/// `GET /v1/admin/resource-groups`: by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminGroups {
    pub resource_groups: Vec<AdminGroup>,
}

/// A resource policy's limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminPolicy {
    pub name: String,
    pub max_concurrent_sessions: i32,
    pub max_total: Amounts,
    pub max_session_lifetime_secs: Option<i64>,
    pub max_custom_images: Option<i32>,
    /// The highest priority its users may ask for (absent: 100).
    pub max_session_priority: Option<i32>,
    /// Most processes per container (absent: 4096).
    pub max_pids: Option<i32>,
    /// Most bytes of each kernel's output kept (absent: 1 MiB).
    pub max_log_bytes: Option<i64>,
    /// Most bytes each folder of its users may hold (absent: no limit).
    pub max_folder_bytes: Option<i64>,
    /// How many users it applies to.
    pub users: i64,
}

/// `GET /v1/admin/policies`: by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminPolicies {
    pub policies: Vec<AdminPolicy>,
}

/// The idle checks set on a resource group or a resource policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IdleSetting {
    pub scope: events::idleness::IdleScope,
    pub checks: events::idleness::IdleChecks,
}

/// `GET /v1/admin/idle-checks`: every group's and policy's, as last set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IdleSettings {
    pub idle_checks: Vec<IdleSetting>,
}

/// `GET /v1/admin/idle-preview`: the sessions the idle-reaper would reap now, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IdlePreview {
    pub due: Vec<events::idleness::IdleVerdict>,
}

/// An agent as an operator admitted it, and what it offers since it registered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdmittedAgent {
    pub agent_id: String,
    /// The group it is admitted to.
    pub resource_group: String,
    /// The most it may offer.
    pub max_capacity: Amounts,
    /// Its NATS public key (what the server's authorization names); null once revoked.
    pub public_key: Option<String>,
    /// Why its admission was revoked; null while admitted.
    pub revoked: Option<String>,
    /// What it offers, holds and has free, since it registered (null: never registered).
    pub capacity: Option<Amounts>,
    pub used: Option<Amounts>,
    pub free: Option<Amounts>,
    /// Why nothing is placed on it (lost, departed, revoked); null while live.
    pub lost: Option<String>,
    /// Seconds since it was last heard from.
    pub heartbeat_age_secs: Option<f64>,
    /// Sessions holding resources on it.
    pub sessions: Option<i64>,
    /// The berth version it registered with (null: never registered, or before versions
    /// were reported).
    pub version: Option<String>,
}

/// `GET /v1/admin/agents`: every agent ever admitted, by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdmittedAgents {
    pub agents: Vec<AdmittedAgent>,
}

/// A registry whose images every agent pulls with the credential an admin stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryListed {
    /// `host[:port]`, as its images' references begin.
    pub registry: String,
    /// The user its credential names (the password is never shown).
    pub username: String,
    pub set_at: DateTime<Utc>,
}

/// `GET /v1/admin/registries`: by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Registries {
    pub registries: Vec<RegistryListed>,
}

/// An image the live agents hold, as the catalogue treats it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeldImage {
    /// `repository:tag`.
    pub image: String,
    /// The groups whose live agents hold it, by name.
    pub resource_groups: Vec<String>,
    /// Whether its labels make it a session image (berth's `ai.berth.image`, or any of
    /// Backend.AI's `ai.backend.*`, on an image that is not one of the stack's servers).
    pub session_image: bool,
    /// How an admin listed it: `labels` (as they say), `shown` or `hidden`.
    pub listing: domain::images::ImageListing,
    /// Whether the catalogue offers it.
    pub offered: bool,
}

/// `GET /v1/admin/images`: by reference (customized images, their owners' alone, left out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeldImages {
    pub images: Vec<HeldImage>,
}

/// `POST /v1/admin/agents`: the agent's credential, shown only in this answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentCredential {
    pub agent_id: String,
    pub resource_group: String,
    /// An nkey seed: give it to the agent as BERTH_AGENT_CREDENTIAL. Not kept by berth.
    pub credential: String,
}

/// One recorded estimate next to what happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EstimateOutcome {
    pub session_id: uuid::Uuid,
    /// When the estimate was made (the session's first wait).
    pub estimated_at: chrono::DateTime<chrono::Utc>,
    /// Seconds from then, as estimated; none when it was not expected to start.
    pub estimated_wait_secs: Option<u64>,
    /// The sessions named ahead of it.
    pub ahead: Vec<uuid::Uuid>,
    /// Seconds from then to its placement; none while it has not been placed.
    pub actual_wait_secs: Option<f64>,
    /// Actual minus estimated, in seconds (late is positive).
    pub error_secs: Option<f64>,
}

/// `GET /v1/estimates`: mine (everyone's, for superadmins), newest first, with how far off
/// they were.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Estimates {
    pub estimates: Vec<EstimateOutcome>,
    /// The median of the absolute errors of those that started.
    pub median_abs_error_secs: Option<f64>,
}

/// A shape its owner watches, until it fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FitWatch {
    pub watch_id: uuid::Uuid,
    pub resource_group: String,
    pub shape: domain::advice::Shape,
    /// The shape in words.
    pub label: String,
    pub requested_at: chrono::DateTime<chrono::Utc>,
}

/// `GET /v1/fit-watches`: the shapes I watch that have not fitted yet, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FitWatches {
    pub fit_watches: Vec<FitWatch>,
}

/// `POST /v1/fit-watches`' answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Watching {
    pub watch_id: uuid::Uuid,
}

/// How a subscription read over NATS is reached.
#[derive(Debug, Serialize, ToSchema)]
pub struct NatsReader {
    /// The relay's JetStream stream.
    pub stream: String,
    /// The durable consumer to pull from and acknowledge.
    pub consumer: String,
    /// The inbox prefix the NATS user must take (its replies come there alone).
    pub inbox_prefix: String,
    /// The NATS user's nkey seed: answered when the subscription is made, never again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
}

/// A durable subscription.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionOut {
    pub name: String,
    pub id: Uuid,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// Event types wanted (a prefix ends in `*`); empty: every type.
    #[serde(rename = "type")]
    pub types: Vec<String>,
    pub category: Vec<String>,
    pub stream: Vec<String>,
    /// Only the events of this user's sessions.
    pub owner: Option<Uuid>,
    pub resource_group: Option<String>,
    pub from_start: bool,
    /// The last position acknowledged (`TX:SEQ`); null before the first acknowledgement.
    pub acknowledged: Option<String>,
    /// Where its reading goes on: after this position.
    pub resumes_after: String,
    pub nats: Option<NatsReader>,
}

/// `GET /v1/subscriptions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Subscriptions {
    pub subscriptions: Vec<SubscriptionOut>,
}

/// What an acknowledgement left kept.
#[derive(Debug, Serialize, ToSchema)]
pub struct Acknowledged {
    /// The position kept: the one acknowledged, or a later one acknowledged before.
    pub acknowledged: String,
}

/// A model-serving endpoint: replicas of a model behind one lasting URL.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServiceOut {
    pub id: Uuid,
    pub name: String,
    /// Its owner's email.
    pub owner: String,
    pub created_at: DateTime<Utc>,
    /// Where it answers, on this gateway (`/serve/<id>/`, with the model's own paths after it).
    pub url: String,
    /// The host name it also answers at, on the gateway's port and scheme, when the operator
    /// set a serving domain (`<id>.<domain>`; the model's own paths at its root).
    pub host: Option<String>,
    /// `healthy` (every wanted replica serves), `serving` (some do), `provisioning` (none yet),
    /// `degraded` (replicas keep failing: no more are started until it is scaled or updated),
    /// `stopped` (none wanted) or `destroyed`.
    pub status: String,
    /// Why it is degraded.
    pub degraded_reason: Option<String>,
    pub image: String,
    pub resource_group: String,
    pub model_folder: String,
    pub model_name: String,
    /// Where the model's server listens in each replica.
    pub port: u16,
    pub health_check_path: String,
    /// Each replica's resources.
    pub resources: ResourceSlots,
    /// Replicas wanted.
    pub replicas: u32,
    /// Replicas that receive traffic.
    pub healthy_replicas: u32,
    /// Anyone may call it; otherwise a token is needed.
    pub open_to_public: bool,
    /// The revision new replicas run (each update adds one).
    pub revision: u32,
    pub routes: Vec<ServiceRoute>,
    /// Its autoscaling, if it has rules.
    pub autoscaling: Option<ServiceAutoscaling>,
    /// Every change of the wanted replicas, oldest first, with who or what decided and the
    /// figures a rule decided on.
    pub scaling_history: Vec<ServiceScaling>,
}

/// An endpoint's autoscaling.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServiceAutoscaling {
    pub min_replicas: u32,
    pub max_replicas: u32,
    pub rules: Vec<domain::payloads::ScalingRule>,
}

/// One change of an endpoint's wanted replicas.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServiceScaling {
    pub at: DateTime<Utc>,
    pub replicas: u32,
    pub previous: u32,
    pub reason: String,
    /// Per replica: `requests_per_second`, `outstanding_requests`; and `healthy_replicas`.
    pub figures: std::collections::BTreeMap<String, f64>,
}

/// A replica of an endpoint, as its balancer sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServiceRoute {
    /// Its inference session.
    pub session_id: Uuid,
    /// `starting`, `healthy`, `unhealthy` or `draining`.
    pub health: String,
    /// The revision it runs.
    pub revision: u32,
    pub added_at: DateTime<Utc>,
    /// When its health last changed.
    pub since: DateTime<Utc>,
    pub reason: Option<String>,
}

/// Endpoints.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServiceList {
    pub services: Vec<ServiceOut>,
}

/// A token made for an endpoint: shown this once, kept by berth only as a digest.
#[derive(Debug, Serialize, ToSchema)]
pub struct ServiceToken {
    pub token_id: Uuid,
    /// Send it as `Authorization: Bearer <token>`.
    pub token: String,
    pub expires_at: DateTime<Utc>,
}
