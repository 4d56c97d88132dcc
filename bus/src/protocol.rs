//! The messages agents and the control plane exchange, as Rust types (JSON on the wire).
//!
//! Downstream, [`Command`]s are derived from events by the dispatcher and idempotent: an
//! agent that gets one twice, or about a session that has moved on, does nothing more.
//! Upstream, a [`Request`] is answered by the recorder with an [`Answer`]; a [`Report`]
//! carries an id the agent chose, so a retry is recorded once.

use chrono::{DateTime, Utc};
use domain::aggregate::SessionState;
use domain::payloads::{
    AppStartOutcome, CommitOutcome, CommitStep, PublishedPort, ResourceSlots, SessionStatus,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What the control plane asks an agent to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    /// Run this agent's kernels of the session. `main`: the main kernel is here, and this
    /// agent moves the session through its statuses; otherwise it only starts its kernels
    /// (of another agent's multi-node cluster, once that agent is creating its own).
    Assign { session_id: Uuid, main: bool },
    /// Stop what this agent runs of the session: all of it (`placement` none: it is
    /// terminating), or what it runs of placement `placement` (counted from 0) or an earlier
    /// one, which the session gave back (it ended, or went back to the queue). A session
    /// placed here again since keeps its new placement's kernels: an agent that starts again
    /// may take the old placement's stop after it has started the new one.
    Stop {
        session_id: Uuid,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        placement: Option<u32>,
    },
    /// Commit the session's main container to `image` (labelled with its owner), report the
    /// steps and the end (`Fact::CommitProgressed`, `Fact::CommitEnded`).
    Commit {
        session_id: Uuid,
        commit_id: Uuid,
        owner: Uuid,
        image: String,
    },
    /// Remove customized image `image`, which session `session_id` made here; its owner
    /// removed it.
    RemoveImage { session_id: Uuid, image: String },
    /// Start `app` in the session's main kernel (from the image's service definition) and
    /// report when container `port` accepts connections, or why not (`Fact::AppStartEnded`).
    /// An app whose port already listens is reported started at once.
    StartApp {
        session_id: Uuid,
        start_id: Uuid,
        app: String,
        port: u16,
    },
}

impl Command {
    pub fn session_id(&self) -> Uuid {
        match self {
            Command::Assign { session_id, .. }
            | Command::Stop { session_id, .. }
            | Command::Commit { session_id, .. }
            | Command::RemoveImage { session_id, .. }
            | Command::StartApp { session_id, .. } => *session_id,
        }
    }
}

/// What an agent offers when it registers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    pub resource_group: String,
    pub capacity: ResourceSlots,
    #[serde(default)]
    pub images: Vec<String>,
    /// Those of `images` that are no session image by their labels
    /// (`domain::images::is_session_image`): not offered in the catalogue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unlabelled_images: Vec<String>,
    #[serde(default)]
    pub address: Option<String>,
    /// The apps each image declares (only images that declare some).
    #[serde(default)]
    pub image_apps: std::collections::BTreeMap<String, Vec<domain::apps::ServicePort>>,
    /// The cluster network the agent shares with others (`engine:<Docker engine id>`);
    /// none: it shares none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_scope: Option<String>,
    /// The shared volumes it mounts, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
}

/// A fact about a session, reported by the agent that runs (some of) its kernels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
pub enum Fact {
    /// The session moved (the agent asks for the move; the lifecycle decides).
    Moved {
        to: SessionStatus,
        #[serde(default)]
        reason: Option<String>,
        #[serde(default)]
        exit_code: Option<i32>,
        /// When it moved, by the clock of the agent's host, where that is not the report's
        /// time: a container's end (the engine's `State.FinishedAt`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<DateTime<Utc>>,
    },
    /// The session moved through `through`, in order (the agent's work between them took
    /// no report's worth of time: PREPARING, PREPARED and CREATING when the image is there).
    /// Recorded as one report: all of the moves, or, the first refused, none.
    MovedThrough { through: Vec<SessionStatus> },
    /// This agent's kernels of the session are running. Once every kernel of the session
    /// has started, the control plane moves it to RUNNING.
    KernelsStarted { kernels: Vec<StartedKernel> },
    /// How far the pull of the session's image has come (at most once a second).
    PullProgressed {
        image: String,
        current_bytes: u64,
        total_bytes: u64,
        layers_done: u32,
        layers: u32,
    },
    /// A commit went a step further.
    CommitProgressed {
        commit_id: Uuid,
        step: CommitStep,
        #[serde(default)]
        detail: String,
    },
    /// A commit ended. Refused when the commit is over (the session ended meanwhile): the
    /// agent then removes the image it made.
    CommitEnded {
        commit_id: Uuid,
        outcome: CommitOutcome,
    },
    /// An app's start ended.
    AppStartEnded {
        start_id: Uuid,
        app: String,
        outcome: AppStartOutcome,
    },
}

/// One kernel an agent started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedKernel {
    pub kernel: u32,
    pub container_id: String,
    #[serde(default)]
    pub ports: Vec<PublishedPort>,
    #[serde(default)]
    pub hostname: Option<String>,
    /// The host address its ports are published on.
    #[serde(default)]
    pub address: Option<String>,
    /// When its container started, by the clock of the agent's host: the moment the agent
    /// asked the engine to start it, or, for a container an agent adopted after it started,
    /// the engine's time of its creation (a bound its run cannot start before; the engine's
    /// `State.StartedAt` is stamped after the process started). Absent before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
}

/// A fact with the id its agent gave it: a report sent twice is recorded once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub report_id: Uuid,
    pub session_id: Uuid,
    #[serde(flatten)]
    pub fact: Fact,
    /// The trace the agent's work belongs to (the session's), for the events recorded.
    #[serde(default)]
    pub traceparent: Option<String>,
}

/// What an agent sends the recorder on its request subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Here is what I offer (at start, and when the host's images change).
    Register(Offer),
    /// I am alive.
    Heartbeat,
    /// A fact about one of my sessions.
    Report(Report),
    /// The session, if a kernel of it is placed on me.
    Session { session_id: Uuid },
    /// The live sessions with kernels on me (at start, to adopt what an earlier run left).
    Sync,
    /// I am leaving (stopped, or drained), for `reason`: place nothing more on me. My
    /// sessions' containers keep running; I adopt them when I register again.
    Depart { reason: String },
    /// The credential to pull the session's image with, which an admin stored for its
    /// registry (asked for a session whose kernels hold shares on me, and only then given).
    PullCredential { session_id: Uuid },
    /// What a folder holds now, measured on its volume after a session that mounted it ended.
    FolderUsage(FolderUsage),
    /// Keep the private half of the SSH key I installed in the session's main container, for
    /// its owner to download (a secret: never recorded as an event).
    KeepSshKey(SshKey),
}

/// The SSH key an agent made for a session it runs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshKey {
    pub session_id: Uuid,
    /// OpenSSH's private key format.
    pub private_key: String,
}

impl std::fmt::Debug for SshKey {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshKey")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

/// What one of a user's folders holds on its volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FolderUsage {
    pub owner: Uuid,
    pub folder: String,
    /// The volume it lives on (`host-local`: the measuring agent's own disk).
    pub volume: String,
    /// Allocated on the volume, as `du` counts.
    pub bytes: u64,
    /// Files, directories and links below it.
    pub files: u64,
    pub measured_at: DateTime<Utc>,
}

/// What a walk below a folder counted: the one way its usage is measured, by the agent after
/// a session and by the gateway where it serves the folder's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measured {
    /// Allocated, as `du` counts (whole blocks).
    pub bytes: u64,
    /// Files, directories and links below it.
    pub files: u64,
    /// Whether every entry was counted (the walk stops at its budget of entries).
    pub whole: bool,
}

impl Measured {
    /// Walks below `root` without following a link, counting at most `most_entries`
    /// entries; what cannot be read is passed over (a folder that does not exist holds
    /// nothing).
    pub fn walk(root: &std::path::Path, most_entries: u64) -> Measured {
        use std::os::unix::fs::MetadataExt;
        let mut measured = Measured {
            bytes: 0,
            files: 0,
            whole: true,
        };
        for entry in walkdir::WalkDir::new(root)
            .min_depth(1)
            .into_iter()
            .flatten()
        {
            if measured.files == most_entries {
                measured.whole = false;
                break;
            }
            if let Ok(meta) = entry.metadata() {
                measured.bytes = measured
                    .bytes
                    .saturating_add(meta.blocks().saturating_mul(512));
                measured.files += 1;
            }
        }
        measured
    }
}

/// A registry's user and password, handed to an agent that pulls one of its images.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryLogin {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for RegistryLogin {
    /// Never the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryLogin")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A session as an agent needs it: its state, and the trace its journey belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionView {
    pub state: SessionState,
    pub traceparent: Option<String>,
}

/// A live session with kernels on the asking agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSession {
    pub session_id: Uuid,
    pub status: SessionStatus,
    /// The main kernel is on the asking agent.
    pub main: bool,
}

/// The recorder's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Answer {
    /// Registered, the heartbeat noted, or the departure recorded.
    Done,
    /// The report is recorded (now or before); the session's status after it.
    Recorded { status: SessionStatus },
    /// The lifecycle refused the move: the session has moved on (terminated, forced, ...).
    Refused { reason: String },
    /// The request is not allowed for this agent (not its session, not its group, ...).
    Denied { reason: String },
    /// The session asked for (`None`: unknown, or no kernel of it on the asking agent).
    Session { session: Option<Box<SessionView>> },
    /// The live sessions with kernels on the asking agent.
    Live { sessions: Vec<LiveSession> },
    /// The credential for the session's image (`None`: none is stored for its registry).
    PullCredential { login: Option<RegistryLogin> },
    /// The control plane could not decide now (its database is away): ask again later.
    Unavailable { reason: String },
}

/// A piece of a kernel's output. `epoch` names one reading of the output from its start
/// (an agent that restarts reads it again, under a new, later epoch); `offset` is where the
/// text starts, in bytes, within that reading. The sink appends a chunk only at the end of
/// what it holds of the same epoch and replaces what it holds with a later epoch's first
/// chunk, so a redelivered chunk is never appended twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogChunk {
    pub session_id: Uuid,
    pub kernel: u32,
    pub epoch: Uuid,
    pub offset: u64,
    pub text: String,
    /// The kernel has ended: this is the end of its output.
    pub complete: bool,
    /// How many of the kernel's most recent bytes are kept (its session's log cap); absent
    /// from agents older than the field: the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_bytes: Option<u64>,
}

impl LogChunk {
    /// The most text one chunk carries (well under NATS's 1 MiB message): longer output is
    /// sent as several, so what is kept past a kernel's cap is at most one chunk.
    pub const MOST_TEXT: usize = 64 << 10;
}

/// A sample of a session's resource usage; the sink keeps the latest by `sampled_at`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UsageSample {
    pub session_id: Uuid,
    pub sampled_at: DateTime<Utc>,
    pub cpu_seconds: f64,
    pub cpu_percent: Option<f64>,
    pub memory_bytes: i64,
    pub rx_bytes: i64,
    pub tx_bytes: i64,
    /// The mean utilization of the GPUs the session's main kernel holds, in percent; `None`
    /// when it holds none or they were not measured (and from agents older than the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_percent: Option<f64>,
    /// How much of those GPUs' memory is in use, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_percent: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_folder_is_measured_as_du_counts_with_every_entry_below_it_up_to_a_budget() {
        let root = std::env::temp_dir().join(format!("berth-measure-{}", Uuid::new_v4()));
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("a"), vec![1u8; 10_000]).unwrap();
        std::fs::write(root.join("sub/b"), b"x").unwrap();
        std::os::unix::fs::symlink("/usr", root.join("out")).unwrap();
        let all = Measured::walk(&root, u64::MAX);
        assert_eq!(
            all.files, 4,
            "two files, a directory and a link (not followed)"
        );
        assert!(all.whole);
        // At least what the files hold, allocated in whole blocks.
        assert!(
            all.bytes >= 10_001 && all.bytes.is_multiple_of(512),
            "{all:?}"
        );
        assert!(all.bytes < 1 << 20, "the link is not followed: {all:?}");
        let part = Measured::walk(&root, 2);
        assert_eq!((part.files, part.whole), (2, false));
        let none = Measured::walk(&root.join("missing"), u64::MAX);
        assert_eq!((none.bytes, none.files, none.whole), (0, 0, true));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn messages_read_back_as_written() {
        let report = Request::Report(Report {
            report_id: Uuid::now_v7(),
            session_id: Uuid::now_v7(),
            fact: Fact::Moved {
                to: SessionStatus::Terminated,
                reason: Some("done".into()),
                exit_code: Some(3),
                at: Some(Utc::now()),
            },
            traceparent: None,
        });
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), report);
        let command = Command::Assign {
            session_id: Uuid::nil(),
            main: true,
        };
        let value = serde_json::to_value(&command).unwrap();
        assert_eq!(value["command"], "assign");
        assert_eq!(serde_json::from_value::<Command>(value).unwrap(), command);
    }

    #[test]
    fn a_request_names_its_kind_and_unknown_kinds_are_refused() {
        let value = serde_json::to_value(Request::Heartbeat).unwrap();
        assert_eq!(value, json!({"request": "heartbeat"}));
        assert!(serde_json::from_value::<Request>(json!({"request": "drop_tables"})).is_err());
        let depart = Request::Depart {
            reason: "stopped".into(),
        };
        let value = serde_json::to_value(&depart).unwrap();
        assert_eq!(value, json!({"request": "depart", "reason": "stopped"}));
        assert_eq!(serde_json::from_value::<Request>(value).unwrap(), depart);
    }
}

/// The app circuits a gateway saw in use (a client connected, or bytes moved) since its last
/// report: every gateway serves every circuit, and none closes one as idle that another
/// saw in use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CircuitsBusy {
    pub circuits: Vec<Uuid>,
}

/// Bytes moved through a session's app circuits since the last report, as berth's proxy
/// saw them at `at` (sent only when some did): the idle-reaper's network activity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppActivity {
    pub session_id: Uuid,
    pub at: DateTime<Utc>,
    pub bytes_in: u64,
    pub bytes_out: u64,
}
