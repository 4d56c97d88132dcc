//! Payload types of the event catalogue, and the small value types they share.
//!
//! Fields added later carry `#[serde(default)]` so that older payloads stay readable; a change
//! that cannot be defaulted bumps the type's schema version and adds an upcaster.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// An amount of the resources a session asks for or an agent offers.
///
/// CPU and GPU are counted in thousandths (`cpu_milli: 1500` is one and a half cores,
/// `gpu_milli: 250` is a quarter of one GPU) so fractions add up exactly.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResourceSlots {
    pub cpu_milli: u64,
    pub memory_bytes: u64,
    #[serde(default)]
    pub gpu_milli: u64,
}

impl ResourceSlots {
    pub fn saturating_add(self, other: ResourceSlots) -> ResourceSlots {
        ResourceSlots {
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            gpu_milli: self.gpu_milli.saturating_add(other.gpu_milli),
        }
    }

    pub fn saturating_sub(self, other: ResourceSlots) -> ResourceSlots {
        ResourceSlots {
            cpu_milli: self.cpu_milli.saturating_sub(other.cpu_milli),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
            gpu_milli: self.gpu_milli.saturating_sub(other.gpu_milli),
        }
    }

    /// Whether `self` fits inside `room` on every resource.
    pub fn fits_in(self, room: ResourceSlots) -> bool {
        self.cpu_milli <= room.cpu_milli
            && self.memory_bytes <= room.memory_bytes
            && self.gpu_milli <= room.gpu_milli
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum SessionType {
    Interactive,
    Batch,
    Inference,
    System,
}

impl SessionType {
    /// Whether someone works in its main kernel while it runs: an interactive session, or a
    /// system session (berth's serve uploads over SFTP). Such a kernel gets the terminal (the
    /// agent's door), the SSH server app and an SSH key of its own.
    pub fn is_attended(self) -> bool {
        matches!(self, SessionType::Interactive | SessionType::System)
    }
}

/// The statuses of a session, as Backend.AI names them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SessionStatus {
    Pending,
    Scheduled,
    Preparing,
    Pulling,
    Prepared,
    Creating,
    Running,
    Restarting,
    Terminating,
    Terminated,
    Error,
    Cancelled,
}

impl SessionStatus {
    /// Every status, in the order a session meets them on its way.
    pub const ALL: [SessionStatus; 12] = {
        use SessionStatus::*;
        [
            Pending,
            Scheduled,
            Preparing,
            Pulling,
            Prepared,
            Creating,
            Running,
            Restarting,
            Terminating,
            Terminated,
            Error,
            Cancelled,
        ]
    };

    /// Statuses a session never leaves. Every SQL text that needs this set is built from it.
    pub const TERMINAL: [SessionStatus; 3] = {
        use SessionStatus::*;
        [Terminated, Error, Cancelled]
    };

    /// Statuses in which a session holds resources on an agent.
    pub const HOLDING_RESOURCES: [SessionStatus; 8] = {
        use SessionStatus::*;
        [
            Scheduled,
            Preparing,
            Pulling,
            Prepared,
            Creating,
            Running,
            Restarting,
            Terminating,
        ]
    };

    /// Statuses of a session placed on an agent whose container has not run yet: one whose
    /// agent goes away is placed again elsewhere, since nothing of it ran.
    pub const NOT_STARTED: [SessionStatus; 5] = {
        use SessionStatus::*;
        [Scheduled, Preparing, Pulling, Prepared, Creating]
    };

    /// Whether the session's container has not run yet ([`Self::NOT_STARTED`]).
    pub fn not_started(self) -> bool {
        Self::NOT_STARTED.contains(&self)
    }

    /// Whether the session has ended for good.
    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }

    /// Whether the session is live: not yet ended (the complement of [`Self::TERMINAL`]).
    pub fn is_live(self) -> bool {
        !self.is_terminal()
    }

    /// Whether the session holds resources on an agent.
    pub fn holds_resources(self) -> bool {
        Self::HOLDING_RESOURCES.contains(&self)
    }

    /// The name as stored and shown (`RUNNING`), the same as its serde form.
    pub fn as_str(self) -> &'static str {
        use SessionStatus::*;
        match self {
            Pending => "PENDING",
            Scheduled => "SCHEDULED",
            Preparing => "PREPARING",
            Pulling => "PULLING",
            Prepared => "PREPARED",
            Creating => "CREATING",
            Running => "RUNNING",
            Restarting => "RESTARTING",
            Terminating => "TERMINATING",
            Terminated => "TERMINATED",
            Error => "ERROR",
            Cancelled => "CANCELLED",
        }
    }

    /// The status named `name` (`RUNNING`), if there is one.
    pub fn parse(name: &str) -> Option<SessionStatus> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl std::fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum ClusterMode {
    SingleNode,
    MultiNode,
}

/// The result of one scheduling attempt or sub-step, as Backend.AI names them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SchedulingResult {
    Success,
    Failure,
    Stale,
    NeedRetry,
    Expired,
    GiveUp,
    Skipped,
}

impl SchedulingResult {
    pub const ALL: [SchedulingResult; 7] = [
        SchedulingResult::Success,
        SchedulingResult::Failure,
        SchedulingResult::Stale,
        SchedulingResult::NeedRetry,
        SchedulingResult::Expired,
        SchedulingResult::GiveUp,
        SchedulingResult::Skipped,
    ];

    /// The name as stored and shown (`NEED_RETRY`), the same as its serde form.
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulingResult::Success => "SUCCESS",
            SchedulingResult::Failure => "FAILURE",
            SchedulingResult::Stale => "STALE",
            SchedulingResult::NeedRetry => "NEED_RETRY",
            SchedulingResult::Expired => "EXPIRED",
            SchedulingResult::GiveUp => "GIVE_UP",
            SchedulingResult::Skipped => "SKIPPED",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentRegistered {
    pub agent_id: String,
    pub resource_group: String,
    pub capacity: ResourceSlots,
    /// Images present on the agent host, by full name.
    #[serde(default)]
    pub images: Vec<String>,
    /// Those of `images` whose labels make them no session image
    /// ([`crate::images::is_session_image`]): the agent runs them, the catalogue does not offer
    /// them unless an admin shows them. Absent from agents before the rule: all offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unlabelled_images: Vec<String>,
    /// Where the agent's published ports are reached (the proxy connects there).
    #[serde(default)]
    pub address: Option<String>,
    /// The apps each image declares (only images that declare some), by full name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub image_apps: BTreeMap<String, Vec<crate::apps::ServicePort>>,
    /// The cluster network it shares with other agents (`engine:<Docker engine id>`): a
    /// multi-node cluster goes to agents of one scope. None: it shares none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_scope: Option<String>,
    /// The shared volumes it mounts (checked at its start), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentHeartbeated {
    pub agent_id: String,
    pub at: DateTime<Utc>,
}

/// An operator admitted an agent: the group it may join, the most it may offer, and the
/// public half of its NATS key (the seed, its secret half, was shown once to the operator).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentAdmitted {
    pub agent_id: String,
    pub resource_group: String,
    pub max_capacity: ResourceSlots,
    pub public_key: String,
}

/// A lost agent was heard from again: it is offered to the scheduler again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentReturned {
    pub agent_id: String,
}

/// An operator revoked an agent's admission: it may no longer connect or register.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentRevoked {
    pub agent_id: String,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentLost {
    pub agent_id: String,
    pub reason: String,
    /// When it was last heard from (a heartbeat, a registration), on the database's clock:
    /// the scheduler passed over it from then on plus its `silent_after`, which a replay of
    /// the log needs. Absent from losses recorded before it was, and from departures taken
    /// for a loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heard: Option<DateTime<Utc>>,
}

/// The scheduler's bus connection was broken from `from` to `until`: the wake-ups published
/// meanwhile never reached it, so it passed only at its interval until the relay's backlog
/// woke it. Recorded by the scheduler once it is connected again; a replay of the log needs
/// it to pass where the live scheduler did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SchedulerWakeupsMissed {
    pub from: DateTime<Utc>,
    pub until: DateTime<Utc>,
}

/// A user made a durable subscription to the log: a name of theirs, the events it wants, and
/// where its reading starts (berth keeps how far its consumer acknowledged, outside the log).
/// Its stream is `subscription-<owner>-<name>`, so a name is its owner's once at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SubscriptionCreated {
    /// Fresh for each creation: a name made again starts over.
    pub subscription_id: Uuid,
    pub owner: Uuid,
    pub name: String,
    pub filter: crate::event_filter::EventFilter,
    /// The reading starts at the log's start; otherwise after this event.
    pub from_start: bool,
    /// The public nkey of the NATS user that reads the subscription's JetStream consumer
    /// (its seed is shown once, never recorded); `None`: read over HTTP only.
    pub nats_key: Option<String>,
}

/// A user deleted a durable subscription: its consumer and NATS user are gone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SubscriptionDeleted {
    pub subscription_id: Uuid,
    pub name: String,
}

/// What an endpoint's replicas run, read from its model definition file when it was made or
/// updated (Backend.AI's `model-definition.yaml`: the first model with a `service`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ServedModel {
    /// The model's `name` in the definition.
    pub model_name: String,
    /// Where the model lives in the replica (`model_path`).
    pub model_path: String,
    /// `service.start_command`, as one shell command line.
    pub start_command: String,
    /// `service.port`: where the model's server listens in the replica.
    pub port: u16,
    pub health_check: HealthCheck,
}

/// How a replica is asked whether it serves (`service.health_check`, with berth's defaults
/// for what the definition leaves out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HealthCheck {
    /// The path asked with `GET`.
    pub path: String,
    /// Between two checks of one replica.
    pub interval_ms: u64,
    /// Failed checks in a row that take a replica out.
    pub max_retries: u32,
    /// How long one check may wait for its answer.
    pub max_wait_ms: u64,
    /// The status a serving replica answers.
    pub expected_status: u16,
    /// How long a new replica's failed checks are not counted (the model loading).
    pub initial_delay_ms: u64,
}

/// A user made a model-serving endpoint: replicas of a model, run as inference sessions of
/// theirs, behind one lasting URL. Its stream is `endpoint-<endpoint_id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointCreated {
    pub endpoint_id: Uuid,
    /// Its owner's name for it, unique among their live endpoints.
    pub name: String,
    /// Whose replicas these are (their sessions are this user's).
    pub owner: Owner,
    pub image: String,
    pub resource_group: String,
    /// The folder holding the model and its definition, mounted in every replica.
    pub model_folder: String,
    /// What each replica is given.
    pub resources: ResourceSlots,
    /// How many replicas it asks for.
    pub replicas: u32,
    /// Anyone may call it; otherwise a token of its owner's is needed.
    pub open_to_public: bool,
    pub model: ServedModel,
}

/// An endpoint's wanted number of replicas changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointScaled {
    pub endpoint_id: Uuid,
    pub replicas: u32,
    pub previous: u32,
    /// Who decided: `user <email>`, a rule of its autoscaling (`rule 1: ...`), or a request
    /// that came while it was scaled to zero.
    pub reason: String,
    /// The figures an autoscaling rule decided on (`requests_per_second` and
    /// `outstanding_requests` per replica, over the last window); empty for a user's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub figures: BTreeMap<String, f64>,
}

/// What an autoscaling rule watches, per replica that serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ScalingMetric {
    /// Calls answered per second, over the last window, per healthy replica.
    RequestsPerSecond,
    /// Calls under way now, per healthy replica.
    OutstandingRequests,
    /// The healthy replicas' CPU use, in percent of the CPU each is given, averaged over
    /// those with a recent sample.
    CpuUtilization,
    /// The healthy replicas' GPU use, in percent (the mean utilization of the GPUs each
    /// holds), averaged over those with a recent sample; a rule over it never holds for
    /// replicas without GPUs.
    GpuUtilization,
}

/// How a rule compares its metric with its threshold (Backend.AI's comparators).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Comparator {
    Lt,
    Le,
    Gt,
    Ge,
}

/// One autoscaling rule: when `metric` compares to `threshold` as `comparator` says, change
/// the wanted replicas by `step` (negative: fewer), then wait `cooldown_secs` before this rule
/// acts again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ScalingRule {
    pub metric: ScalingMetric,
    pub comparator: Comparator,
    pub threshold: f64,
    /// Replicas added (negative: removed) when it holds; 0 does nothing.
    pub step: i32,
    pub cooldown_secs: u64,
}

/// An endpoint's autoscaling: its rules, and the bounds they keep to (`min_replicas` 0 scales
/// to zero: the first call then waits for a replica).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointAutoscalingSet {
    pub endpoint_id: Uuid,
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Tried in order; the first that holds and is not cooling down acts. Empty: no
    /// autoscaling.
    pub rules: Vec<ScalingRule>,
}

/// An endpoint's replicas are to run something else (an image, a model folder or its
/// definition changed): a new revision, started beside the old, which are drained once the new
/// serve (a rolling update).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointUpdated {
    pub endpoint_id: Uuid,
    /// 1 for the first update (the creation's is 0).
    pub revision: u32,
    pub image: String,
    pub model_folder: String,
    pub resources: ResourceSlots,
    pub model: ServedModel,
    /// Who asked.
    pub reason: String,
}

/// A replica gets no new calls; it is ended once those under way had time to finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointRouteDraining {
    pub endpoint_id: Uuid,
    pub session_id: Uuid,
    /// Why: scaled down, or of an older revision.
    pub reason: String,
}

/// A replica was started for an endpoint: an inference session it owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointReplicaAdded {
    pub endpoint_id: Uuid,
    pub session_id: Uuid,
    /// What it runs: 0, the creation's, or an update's revision.
    #[serde(default)]
    pub revision: u32,
}

/// A replica left an endpoint (scaled down, taken out by its health checks, its session ended,
/// or the endpoint destroyed); its session is terminated unless it had ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointReplicaRemoved {
    pub endpoint_id: Uuid,
    pub session_id: Uuid,
    pub reason: String,
    /// It left without ever serving, or because it stopped serving: counted towards the
    /// endpoint's back-off and its cap.
    pub failed: bool,
}

/// A replica answered its health check: it receives traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointRouteHealthy {
    pub endpoint_id: Uuid,
    pub session_id: Uuid,
}

/// A replica failed its health check its maximum times in a row: it receives no traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointRouteUnhealthy {
    pub endpoint_id: Uuid,
    pub session_id: Uuid,
    pub reason: String,
}

/// Its owner made a token for a non-public endpoint (the token's digest is kept outside the
/// log; this says only that one exists, and until when).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointTokenIssued {
    pub endpoint_id: Uuid,
    pub token_id: Uuid,
    pub expires_at: DateTime<Utc>,
}

/// An endpoint was destroyed: its replicas end and its URL answers no more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EndpointDestroyed {
    pub endpoint_id: Uuid,
}

/// An agent said it is leaving (it was stopped, or drained): from now on nothing is placed
/// on it, as on a lost one, and it registers again when it returns. Its sessions' containers
/// keep running and are adopted then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentDeparted {
    pub agent_id: String,
    /// The agent's own words: why it left.
    pub reason: String,
}

impl AgentDeparted {
    /// What the ledger and the views keep as the agent's `lost`: the reason, marked as a
    /// departure (as a revocation is marked `revoked:`), so that a heartbeat sent before it
    /// left and heard after is not taken for its return; only registering brings it back.
    pub fn lost(&self) -> String {
        format!("{DEPARTED}{}", self.reason)
    }
}

/// How the `lost` of a departed agent begins ([`AgentDeparted::lost`]).
pub const DEPARTED: &str = "departed: ";

/// Who a session belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Owner {
    pub user_id: Uuid,
    pub email: String,
    #[serde(default)]
    pub project: Option<String>,
}

/// A validated request for one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionRequested {
    pub session_id: Uuid,
    pub name: String,
    pub owner: Owner,
    /// The user who sent the request, when an admin created it for somebody else.
    #[serde(default)]
    pub requested_by: Option<Uuid>,
    pub session_type: SessionType,
    pub resource_group: String,
    pub image: String,
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    pub resources: ResourceSlots,
    pub shared_memory_bytes: u64,
    pub cluster_mode: ClusterMode,
    pub cluster_size: u32,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub preopen_ports: Vec<u16>,
    #[serde(default)]
    pub mounts: Vec<String>,
    #[serde(default)]
    pub startup_command: Option<String>,
    #[serde(default)]
    pub starts_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub batch_timeout_secs: Option<u64>,
    pub omp_num_threads: u32,
    /// The owner's policy's maximum lifetime at the time of the request.
    #[serde(default)]
    pub max_lifetime_secs: Option<u64>,
    /// The most seconds it may go without a byte in or out, whatever its group's idle checks
    /// say (an upload session's: it ends when idle); absent: as its checks say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_idle_timeout_secs: Option<u64>,
    /// The apps the image declared when the session was requested.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apps: Vec<crate::apps::ServicePort>,
    /// Higher goes first within the group's queue policy ([`SessionPriority`]); requests
    /// recorded before priorities have the default.
    #[serde(default = "SessionPriority::default_value")]
    pub priority: i32,
    /// Most processes each of its containers may hold at once (the owner's policy's
    /// `max_pids` at the time of the request); absent in requests recorded before it was
    /// kept: [`ContainerFence::DEFAULT_PIDS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<u32>,
    /// Most bytes of each kernel's output kept (the most recent; the policy's
    /// `max_log_bytes`); absent: [`ContainerFence::DEFAULT_LOG_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_limit_bytes: Option<u64>,
    /// The volume each mounted folder lives on, for folders on a shared volume (those on
    /// [`crate::volumes::HOST_LOCAL`] are left out): the session goes only to agents that
    /// mount them all. Absent in requests recorded before volumes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volumes: BTreeMap<String, String>,
    /// The mounted folders that are not the owner's but shared with them: whose each is and
    /// whether it is mounted read-only. Absent in requests recorded before sharing.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub shared_mounts: BTreeMap<String, SharedMount>,
}

impl SessionRequested {
    /// The bounds its containers run within: the request's, or the defaults.
    pub fn fence(&self) -> ContainerFence {
        ContainerFence {
            pids: self.pids_limit.unwrap_or(ContainerFence::DEFAULT_PIDS),
            log_bytes: self
                .log_limit_bytes
                .unwrap_or(ContainerFence::DEFAULT_LOG_BYTES)
                .clamp(
                    ContainerFence::LEAST_LOG_BYTES,
                    ContainerFence::MOST_LOG_BYTES,
                ),
        }
    }
}

/// What a session's containers are bounded by beyond their resources: processes, and how
/// much of their output is kept (by the engine on the host, and by the control plane).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerFence {
    pub pids: u32,
    pub log_bytes: u64,
}

impl ContainerFence {
    /// Processes (threads count) per container unless the policy says otherwise: room for
    /// a notebook, its kernels, compilers and data loaders, not for a fork bomb.
    pub const DEFAULT_PIDS: u32 = 4096;
    /// Output kept per kernel unless the policy says otherwise: the most recent 1 MiB.
    pub const DEFAULT_LOG_BYTES: u64 = 1 << 20;
    /// The bounds a policy's `max_log_bytes` must stay within (4 KiB to 64 MiB).
    pub const LEAST_LOG_BYTES: u64 = 4 << 10;
    pub const MOST_LOG_BYTES: u64 = 64 << 20;
    /// The bounds a policy's `max_pids` must stay within.
    pub const LEAST_PIDS: u32 = 16;
    pub const MOST_PIDS: u32 = 1 << 22;
}

/// A session's priority in its group's queue: `0..=100`, [`SessionPriority::DEFAULT`] unless
/// asked for, at most what the owner's resource policy allows (its `max_session_priority`,
/// [`SessionPriority::MAX`] when it names none). As Backend.AI: higher goes first, within the
/// group's queue policy.
pub struct SessionPriority;

impl SessionPriority {
    pub const MIN: i32 = 0;
    pub const MAX: i32 = 100;
    pub const DEFAULT: i32 = 10;

    pub fn default_value() -> i32 {
        Self::DEFAULT
    }
}

/// An admin changed a queued (PENDING) session's priority.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionPriorityChanged {
    pub session_id: Uuid,
    pub from: i32,
    pub to: i32,
}

/// One sub-step of a scheduling attempt.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SchedulingStep {
    pub step: String,
    pub result: SchedulingResult,
    pub message: String,
    #[serde(default)]
    pub error_code: Option<String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SchedulingAttempted {
    pub session_id: Uuid,
    pub phase: String,
    pub result: SchedulingResult,
    pub status_before: SessionStatus,
    pub status_after: SessionStatus,
    /// Attempts counted so far, this one included; skips are not counted.
    pub attempts: u32,
    pub message: String,
    #[serde(default)]
    pub error_code: Option<String>,
    #[serde(default)]
    pub steps: Vec<SchedulingStep>,
    /// What the pass's read of its agents saw of the log, on the first row of each group's
    /// pass (absent on the others, on the reconciler's, and on rows older than it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<LogView>,
}

/// Which transactions of the log a read saw committed, on the log's clock (`events.tx_id`):
/// PostgreSQL's snapshot of the read. A what-if replay orders a release its pass did not see
/// after that pass, whatever the release's recorded time (its transaction was still
/// committing when the pass read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LogView {
    /// No transaction from this one on had committed.
    pub xmax: u64,
    /// Transactions below `xmax` still in progress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_progress: Vec<u64>,
}

impl LogView {
    /// Whether the read saw what transaction `tx` wrote.
    pub fn sees(&self, tx: u64) -> bool {
        tx < self.xmax && !self.in_progress.contains(&tx)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionScheduled {
    pub session_id: Uuid,
    /// The agent of the main kernel.
    pub agent_id: String,
    /// Everything reserved, over all kernels.
    pub resources: ResourceSlots,
    /// One entry per kernel; absent in events written before clusters were placed.
    #[serde(default)]
    pub kernels: Vec<KernelPlacement>,
}

impl SessionScheduled {
    /// What each kernel holds, reading an event from before clusters as one kernel.
    pub fn placements(&self) -> Vec<KernelPlacement> {
        placements_or_one(&self.kernels, &self.agent_id, self.resources)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionStatusChanged {
    pub session_id: Uuid,
    pub from: SessionStatus,
    pub to: SessionStatus,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// When the move happened where it happened, by the clock of the agent's host: for
    /// RUNNING the start of the session's last container, for an end its container's end
    /// (the engine's `State.FinishedAt`). Absent when the move happened as it was recorded,
    /// and in events recorded before it was kept: then the event's time is the move's. It
    /// differs from the event's time when the report came late (an agent restarted adopts
    /// containers that started or ended while it was away).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionRenamed {
    pub session_id: Uuid,
    pub old_name: String,
    pub new_name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionTerminationRequested {
    pub session_id: Uuid,
    pub forced: bool,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionResourcesReleased {
    pub session_id: Uuid,
    pub agent_id: String,
    pub resources: ResourceSlots,
    #[serde(default)]
    pub kernels: Vec<KernelPlacement>,
}

impl SessionResourcesReleased {
    /// What each kernel gives back, reading an event from before clusters as one kernel.
    pub fn placements(&self) -> Vec<KernelPlacement> {
        placements_or_one(&self.kernels, &self.agent_id, self.resources)
    }
}

fn placements_or_one(
    kernels: &[KernelPlacement],
    agent_id: &str,
    resources: ResourceSlots,
) -> Vec<KernelPlacement> {
    if kernels.is_empty() {
        vec![KernelPlacement {
            agent_id: agent_id.to_owned(),
            resources,
        }]
    } else {
        kernels.to_vec()
    }
}

/// What a user may do: `user` acts on their own sessions, `admin` may also create sessions
/// for other users, `superadmin` sees and acts on everything and manages the platform.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Admin,
    Superadmin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Admin => "admin",
            Role::Superadmin => "superadmin",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "user" => Some(Role::User),
            "admin" => Some(Role::Admin),
            "superadmin" => Some(Role::Superadmin),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UserCreated {
    pub user_id: Uuid,
    pub email: String,
    pub role: Role,
    /// Name of the resource policy that bounds this user's sessions.
    pub resource_policy: String,
}

/// An API key was issued. Only its SHA-256 is recorded; the key itself is shown once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ApiKeyIssued {
    pub user_id: Uuid,
    /// The key's first characters, to tell keys apart without revealing them.
    pub key_prefix: String,
    pub key_sha256: String,
    /// When the key stops being honoured (`domain::credentials::key_is_live`); none: never.
    /// Absent from keys issued before expiries existed, which never expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

/// An API key was revoked: it is refused from now on, on every gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ApiKeyRevoked {
    pub user_id: Uuid,
    pub key_prefix: String,
    pub key_sha256: String,
}

/// A user was disabled: their API keys, Backend.AI keypairs and console sign-ins are refused
/// and their circuits closed; their sessions keep running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UserDisabled {
    pub user_id: Uuid,
}

/// A disabled user was enabled again: their keys and keypairs are honoured again (their
/// console sign-ins ended when they were disabled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UserEnabled {
    pub user_id: Uuid,
}

/// A user's role changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UserRoleChanged {
    pub user_id: Uuid,
    pub from: Role,
    pub to: Role,
}

/// Why every console sign-in of a user ended at once.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SignOutReason {
    /// Their password changed.
    PasswordChanged,
    /// They were disabled.
    UserDisabled,
}

/// Every console sign-in of a user ended (signed out everywhere).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConsoleSignedOutEverywhere {
    pub user_id: Uuid,
    pub reason: SignOutReason,
}

/// A Backend.AI keypair was issued to a user, for Backend.AI's own client (HMAC-signed
/// requests on the gateway's compatibility paths). Only the access key is recorded: the secret
/// key is derived from it with a master key held outside the log and the database, so it can
/// be shown once and never erased from anywhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BackendAiKeypairIssued {
    pub user_id: Uuid,
    /// `AKIA` and 16 upper-case letters and digits.
    pub access_key: String,
}

/// A Backend.AI keypair was revoked: its signatures are refused from now on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BackendAiKeypairRevoked {
    pub user_id: Uuid,
    pub access_key: String,
}

/// A user's password was set, by an admin or by the user (the event's `actor` says which).
/// Only its Argon2id hash is recorded, as a PHC string; the password itself never is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UserPasswordSet {
    /// Whose password it is. The Argon2id hash is kept in `secrets.password_hashes`, a table
    /// that can be erased, and never in the log (which cannot forget); version 1 carried it.
    pub user_id: Uuid,
}

/// How a person proved who they are when signing in to the web console.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum SignInMethod {
    /// With one of their API keys.
    Key,
    /// With their email and password.
    Password,
}

impl SignInMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            SignInMethod::Key => "key",
            SignInMethod::Password => "password",
        }
    }

    pub fn parse(text: &str) -> Option<SignInMethod> {
        match text {
            "key" => Some(SignInMethod::Key),
            "password" => Some(SignInMethod::Password),
            _ => None,
        }
    }
}

/// A person signed in to the web console. Only the SHA-256 of the session's token is
/// recorded; the token itself is handed to the browser once, in its cookie.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConsoleSignedIn {
    pub user_id: Uuid,
    pub token_sha256: String,
    /// When the sign-in stops being honoured, whatever happens meanwhile.
    pub expires_at: DateTime<Utc>,
    pub how: SignInMethod,
}

/// A console session was ended by its holder before it expired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConsoleSignedOut {
    pub user_id: Uuid,
    pub token_sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProjectCreated {
    pub name: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UserJoinedProject {
    pub user_id: Uuid,
    pub project: String,
}

/// The order in which a resource group's queue is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum QueuePolicy {
    /// Oldest first. A head that does not fit holds those behind it back for at most
    /// `skip_after` attempts; then they are served around it.
    Fifo,
    /// Oldest first, but any session that fits now goes, whatever waits ahead of it.
    Backfill,
    /// Newest first; a head that does not fit holds back as under `fifo`.
    Lifo,
    /// Dominant resource fairness over what runs now: the next session is always the
    /// owner's whose largest share of any of the group's resources is smallest.
    Drf,
    /// Fair share over past use: owners (and projects) that ran least lately, by their decayed
    /// resource-seconds, go first.
    #[serde(rename = "fair-share")]
    FairShare,
}

impl QueuePolicy {
    pub const ALL: [QueuePolicy; 5] = [
        QueuePolicy::Fifo,
        QueuePolicy::Backfill,
        QueuePolicy::Lifo,
        QueuePolicy::Drf,
        QueuePolicy::FairShare,
    ];

    /// The name as stored and typed (`fair-share`), the same as its serde form.
    pub fn as_str(self) -> &'static str {
        match self {
            QueuePolicy::Fifo => "fifo",
            QueuePolicy::Backfill => "backfill",
            QueuePolicy::Lifo => "lifo",
            QueuePolicy::Drf => "drf",
            QueuePolicy::FairShare => "fair-share",
        }
    }

    /// The policy named `name`, as [`QueuePolicy::as_str`] spells it.
    pub fn parse(name: &str) -> Option<QueuePolicy> {
        QueuePolicy::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

/// How the scheduler picks among the agents a session fits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum AgentSelection {
    /// The fullest agent that fits: packs sessions, keeps whole agents free.
    Concentrated,
    /// The emptiest agent: spreads sessions.
    Dispersed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResourceGroupCreated {
    pub name: String,
    pub queue_policy: QueuePolicy,
    pub agent_selection: AgentSelection,
    /// Attempts after which the scheduler gives up on a session and cancels it.
    pub max_attempts: u32,
    /// Failed attempts of a queue head after which it no longer holds back those behind it.
    pub skip_after: u32,
    /// Longest time a session may wait in PENDING before it is cancelled.
    pub pending_timeout_secs: u64,
}

/// An admin set how a resource group's queue is ordered: its policy, how fair share counts
/// past use, and how long a session may be passed over before it goes first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResourceGroupSchedulingSet {
    pub name: String,
    pub queue_policy: QueuePolicy,
    /// Fair share: past use this old counts half.
    pub half_life_secs: u64,
    /// Fair share: past use older than this counts not at all.
    pub lookback_secs: u64,
    /// Fair share: what a core, a GiB of memory and a GPU count for, each per second.
    pub weight_cpu_per_core: f64,
    pub weight_memory_per_gib: f64,
    pub weight_gpu_per_device: f64,
    /// Longest a session may be passed over by higher priorities or policy ranks before it
    /// goes first; 0: no bound.
    pub starve_after_secs: u64,
}

/// An operator set what a launch in a resource group gets when it names no environment or no
/// resources ([`crate::defaults`]); a default left out falls back to the group's most used
/// environment, or the smallest preset that fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResourceGroupDefaultsSet {
    pub name: String,
    /// An image (`repository:tag`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A preset's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
}

/// A project may use a resource group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResourceGroupGranted {
    pub resource_group: String,
    pub project: String,
}

/// A resource policy was created or changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResourcePolicySet {
    pub name: String,
    pub max_concurrent_sessions: u32,
    /// Most resources one user may hold at once, over all their sessions.
    pub max_total: ResourceSlots,
    pub max_session_lifetime_secs: Option<u64>,
    /// Most customized images (committed sessions) one user may keep; none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_custom_images: Option<u32>,
    /// Highest priority a user may ask for a session; none: [`SessionPriority::MAX`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_session_priority: Option<u32>,
    /// Most processes per container of a user's sessions; none:
    /// [`ContainerFence::DEFAULT_PIDS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids: Option<u32>,
    /// Most bytes of each kernel's output kept (the most recent); none:
    /// [`ContainerFence::DEFAULT_LOG_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_log_bytes: Option<u64>,
    /// Most bytes each of a user's folders may hold ([`crate::folders::Quota`]); none: no
    /// limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_folder_bytes: Option<u64>,
}

/// A named resource preset was created or changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PresetSaved {
    pub name: String,
    pub resources: ResourceSlots,
    pub shared_memory_bytes: u64,
}

/// Where one kernel of a session was placed.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KernelPlacement {
    pub agent_id: String,
    pub resources: ResourceSlots,
}

/// A container port published on the agent's host.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PublishedPort {
    pub container: u16,
    pub host: u16,
}

/// A kernel's container started on its agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KernelStarted {
    pub session_id: Uuid,
    pub kernel: u32,
    pub agent_id: String,
    pub container_id: String,
    #[serde(default)]
    pub ports: Vec<PublishedPort>,
    /// The kernel's host name (`main1`, `sub1`, ... in a cluster); absent in events written
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// The host address its ports are published on (the agent's); absent before it was
    /// recorded, or when the agent named none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// When its container started, by the clock of the agent's host: the moment the agent
    /// asked the engine to start it, or, for a container an agent adopted after it started,
    /// the engine's time of its creation (a bound its run cannot start before; the engine's
    /// `State.StartedAt` is stamped after the process started). Absent before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
}

/// A folder a session mounts that another user shared with its owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SharedMount {
    /// The folder's owner (its files live under their folders).
    pub owner: Uuid,
    pub read_only: bool,
}

/// A user created a named folder; its data lives on its volume (a shared file system the
/// agents that mount it see alike), or on the data directory of whichever agent runs a
/// session of it, and outlives the sessions that mount it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FolderCreated {
    pub owner: Uuid,
    pub name: String,
    /// Its volume; absent: [`crate::volumes::HOST_LOCAL`] (and in folders made before
    /// volumes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    /// What it is for; absent: general (and in folders made before usage modes).
    #[serde(default, skip_serializing_if = "is_general")]
    pub usage_mode: crate::folders::UsageMode,
    /// The folder whose files it began with, when cloned (`<owner's id>/<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloned_from: Option<String>,
}

fn is_general(mode: &crate::folders::UsageMode) -> bool {
    *mode == crate::folders::UsageMode::General
}

/// An owner renamed a folder; its files moved with it, and its shares follow the new name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FolderRenamed {
    pub owner: Uuid,
    pub name: String,
    pub to: String,
}

/// An owner moved a folder to the trash: its files and shares stay, nobody reaches it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FolderTrashed {
    pub owner: Uuid,
    pub name: String,
}

/// An owner brought a folder back from the trash, as it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FolderRestored {
    pub owner: Uuid,
    pub name: String,
}

/// An owner purged a folder from the trash: its files were removed, its shares with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FolderPurged {
    pub owner: Uuid,
    pub name: String,
}

/// An owner shared a folder with a user or a project, or changed what an earlier share allows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FolderShared {
    pub owner: Uuid,
    pub name: String,
    pub grantee: crate::sharing::Grantee,
    pub permission: crate::sharing::FolderPermission,
}

/// An owner took a share of a folder back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FolderUnshared {
    pub owner: Uuid,
    pub name: String,
    pub grantee: crate::sharing::Grantee,
}

/// The idle checks of a resource group or a resource policy, set again whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IdleChecksSet {
    pub scope: crate::idleness::IdleScope,
    pub checks: crate::idleness::IdleChecks,
}

/// A session the idle checks leave alone from now on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionIdleExempted {
    pub session_id: Uuid,
    /// The user who exempted it.
    pub by: Uuid,
    pub reason: String,
}

/// Why the idle-reaper terminated a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionIdleReaped {
    pub session_id: Uuid,
    pub reading: crate::idleness::IdleReading,
}

/// Somebody asked to commit a RUNNING session's main container to a customized image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionCommitRequested {
    pub session_id: Uuid,
    pub commit_id: Uuid,
    /// The session's owner, who will own the image.
    pub owner: Uuid,
    pub name: String,
    /// The image it becomes (`images::custom_image`).
    pub image: String,
    /// The agent of the main kernel, which commits it.
    #[serde(default)]
    pub agent_id: Option<String>,
}

/// A step of a commit, as the agent doing it reports it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CommitStep {
    /// The agent began.
    Started,
    /// The container's layer is written: the image exists on the agent's host.
    LayerWritten,
    /// The image is pushed to the registry.
    Pushed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionCommitProgressed {
    pub session_id: Uuid,
    pub commit_id: Uuid,
    pub step: CommitStep,
    #[serde(default)]
    pub detail: String,
}

/// How far the agent's pull of a session's image has come: reported while the session is
/// PULLING, at most once a second, so a client can draw a bar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionPullProgressed {
    pub session_id: Uuid,
    pub image: String,
    /// Bytes downloaded, of `total_bytes`: over the layers whose size the engine has said.
    pub current_bytes: u64,
    pub total_bytes: u64,
    /// Layers pulled (or found already there), of `layers` the engine has named so far.
    pub layers_done: u32,
    pub layers: u32,
}

/// How a commit ended.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case", tag = "result")]
pub enum CommitOutcome {
    Done {
        /// The engine's id of the image.
        image_id: String,
        size_bytes: u64,
        /// Pushed to the configured registry.
        pushed: bool,
    },
    Failed {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionCommitEnded {
    pub session_id: Uuid,
    pub commit_id: Uuid,
    pub owner: Uuid,
    pub image: String,
    /// The agent whose engine holds the image (the main kernel's).
    #[serde(default)]
    pub agent_id: Option<String>,
    pub outcome: CommitOutcome,
}

/// An admin stored the credential agents pull a registry's images with: its images are
/// offered to every user, pulled with it. The password is kept in
/// `secrets.registry_credentials`, a table that can be erased, never in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RegistryCredentialSet {
    /// `host[:port]`, as an image reference begins ([`crate::images::registry_of`]).
    pub registry: String,
    pub username: String,
}

/// The scheduler's estimate of when a waiting session starts (`crate::advice`), made when it
/// first waits: kept so that its error can be measured once the session starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionStartEstimated {
    pub session_id: Uuid,
    pub estimate: crate::advice::Estimate,
    /// How long a session typically held its agents in the group: the model's one guess.
    pub typical_hold_secs: u64,
}

/// A user asked to be told when a shape would be placed at once in a resource group ("notify
/// me when it fits"); the scheduler fires it once (`FitWatchFired`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FitWatchRequested {
    pub watch_id: Uuid,
    pub owner: Uuid,
    pub resource_group: String,
    pub shape: crate::advice::Shape,
    /// The shape in words, as the notification names it.
    pub label: String,
}

/// The scheduler found a watched shape would be placed at once: the watch is done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FitWatchFired {
    pub watch_id: Uuid,
    pub owner: Uuid,
    pub resource_group: String,
    pub label: String,
}

/// An admin listed an image in the catalogue: offered as its labels say, shown whatever they
/// say, or hidden (never offered, and refused to a launch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ImageListingSet {
    /// `repository:tag`.
    pub image: String,
    pub listing: crate::images::ImageListing,
}

/// An admin removed a registry's credential: its images are offered no more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RegistryCredentialRemoved {
    pub registry: String,
}

/// An owner removed a customized image: offered no more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CustomImageRemoved {
    pub owner: Uuid,
    pub image: String,
    /// The session that made it, and the agent whose engine holds it (told to remove it).
    #[serde(default)]
    pub session_id: Option<Uuid>,
    #[serde(default)]
    pub agent_id: Option<String>,
}

/// A user set where their notifications are also POSTed, or (`None`) stopped it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NotificationWebhookSet {
    pub user_id: Uuid,
    #[serde(default)]
    pub url: Option<String>,
}

/// A new secret signs a user's webhook deliveries from now on: the first, made when they
/// set their webhook, or (`rotated`) one they asked for in place of the last. The secret is
/// kept only in the notification service's table, never here: the log cannot forget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NotificationWebhookSecretSet {
    pub user_id: Uuid,
    #[serde(default)]
    pub rotated: bool,
}

/// A user marked some of their notifications read, or all those made before this event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NotificationsRead {
    pub user_id: Uuid,
    #[serde(default)]
    pub notice_ids: Vec<Uuid>,
    #[serde(default)]
    pub all: bool,
}

/// A user's create request was taken: the request as they sent it (the launcher's
/// `CreateSession`, kept whole so that it can be launched again) and the sessions it made.
/// One of a user's recent launches (`crate::launches`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LaunchRecorded {
    pub launch_id: Uuid,
    /// Who sent the request (an admin's, when they created sessions for somebody else).
    pub user_id: Uuid,
    pub request: serde_json::Value,
    pub sessions: Vec<Uuid>,
}

/// A user named one of their launches (`None`: took its name away).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LaunchRenamed {
    pub launch_id: Uuid,
    pub user_id: Uuid,
    #[serde(default)]
    pub label: Option<String>,
}

/// A user pinned one of their launches (kept among the recent ones however old), or
/// unpinned it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LaunchPinned {
    pub launch_id: Uuid,
    pub user_id: Uuid,
    pub pinned: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_name_is_its_serde_form_and_parses_back() {
        for status in SessionStatus::ALL {
            let serde_form = serde_json::to_value(status).unwrap();
            assert_eq!(serde_form.as_str(), Some(status.as_str()));
            assert_eq!(SessionStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(SessionStatus::parse("running"), None);
    }

    #[test]
    fn a_scheduling_result_name_is_its_serde_form() {
        for result in SchedulingResult::ALL {
            let serde_form = serde_json::to_value(result).unwrap();
            assert_eq!(serde_form.as_str(), Some(result.as_str()));
        }
    }

    #[test]
    fn no_status_both_holds_resources_and_has_ended() {
        for status in SessionStatus::ALL {
            assert!(
                !(status.holds_resources() && status.is_terminal()),
                "{status}"
            );
        }
        assert!(!SessionStatus::Pending.holds_resources());
        assert!(SessionStatus::Pending.is_live());
    }
}

/// A circuit of berth's proxy opened: `port` of the proxy now leads to `container_port` of
/// the session's main kernel, for the session's owner alone unless `admission` is public.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AppCircuitOpened {
    pub circuit_id: Uuid,
    pub session_id: Uuid,
    /// The session's owner, the one user a private circuit lets through.
    pub owner: Uuid,
    /// Who opened it (the owner, or an admin).
    pub opened_by: Uuid,
    pub app: String,
    pub protocol: crate::apps::AppProtocol,
    pub container_port: u16,
    /// The proxy's port.
    pub port: u16,
    pub admission: crate::apps::Admission,
}

/// A circuit of berth's proxy closed: its port no longer leads anywhere.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AppCircuitClosed {
    pub circuit_id: Uuid,
    pub session_id: Uuid,
    pub port: u16,
    pub reason: crate::apps::CircuitCloseReason,
}

/// Somebody asked for one of a session's apps to be started in its main kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AppStartRequested {
    pub session_id: Uuid,
    /// Names this start; its end carries it.
    pub start_id: Uuid,
    pub app: String,
    /// The container port the app serves on.
    pub port: u16,
    pub by: Uuid,
}

/// How an app's start ended.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum AppStartOutcome {
    /// Its port accepts connections (it was already running, or it was started). `token`:
    /// the secret the app was started with, which berth's proxy hands it on every request
    /// (absent when berth did not start it).
    Started {
        #[serde(default)]
        token: Option<String>,
    },
    Failed {
        reason: String,
    },
}

/// How an app's start ended, as the log keeps it: without the app's secret, which berth keeps
/// in `secrets.app_tokens` (erasable) for its proxy to hand the app.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum AppStartEnd {
    /// Its port accepts connections; `token_kept`: berth started it with a secret, kept apart.
    Started {
        #[serde(default)]
        token_kept: bool,
    },
    Failed {
        reason: String,
    },
}

impl From<&AppStartOutcome> for AppStartEnd {
    fn from(outcome: &AppStartOutcome) -> AppStartEnd {
        match outcome {
            AppStartOutcome::Started { token } => AppStartEnd::Started {
                token_kept: token.is_some(),
            },
            AppStartOutcome::Failed { reason } => AppStartEnd::Failed {
                reason: reason.clone(),
            },
        }
    }
}

/// An app's start ended, as the agent running the main kernel reports it (version 1 carried
/// the app's secret in its outcome; version 2 says only whether one was kept).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AppStartEnded {
    pub session_id: Uuid,
    pub start_id: Uuid,
    pub app: String,
    pub outcome: AppStartEnd,
}
