//! Launching: a create request checked against every rule of the seeds and against what the
//! owner, the project, the resource group and its agents allow, then recorded as one
//! `SessionRequested` per session, all or none, in one transaction.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use events::catalogue::{stream_id, Event};
use events::ledger::{self, KeyOwner, LedgerError};
use events::payloads::*;
use events::store::ExpectedVersion;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use utoipa::ToSchema;

use crate::domain::{self, FieldError};
use crate::{db, decide, schema};

/// Most sessions one request may create.
pub const MAX_COUNT: u32 = 100;
/// Shared memory a session gets when it names none (capped at its memory).
pub const DEFAULT_SHARED_MEMORY: u64 = 64 << 20;

/// A size in bytes, given as a number or as text with a unit (`512m`, `4g`, `1Gi`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ByteSize {
    Bytes(u64),
    Text(String),
}

impl ByteSize {
    pub(crate) fn bytes(&self, field: &str) -> Result<u64, FieldError> {
        let text = match self {
            ByteSize::Bytes(n) => return Ok(*n),
            ByteSize::Text(t) => t.trim(),
        };
        let bad = || FieldError {
            field: field.to_owned(),
            message: format!("`{text}` is not a size (use bytes, or a number with k, m, g or t)"),
        };
        let split = text
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: f64 = number.parse().map_err(|_| bad())?;
        let scale: u64 = match unit.to_ascii_lowercase().trim_end_matches(['b', 'i']) {
            "" => 1,
            "k" => 1 << 10,
            "m" => 1 << 20,
            "g" => 1 << 30,
            "t" => 1 << 40,
            _ => return Err(bad()),
        };
        let bytes = number * scale as f64;
        if !bytes.is_finite() || bytes > u64::MAX as f64 {
            return Err(bad());
        }
        Ok(bytes as u64)
    }
}

/// Resources asked for one kernel. CPU and GPU in units (0.5 is half), sizes as [`ByteSize`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceRequest {
    /// Cores, at most three decimals.
    #[schema(
        nullable = false,
        exclusive_minimum = 0,
        maximum = 1024,
        multiple_of = 0.001
    )]
    pub cpu: Option<f64>,
    #[schema(nullable = false, schema_with = schema::size)]
    pub memory: Option<ByteSize>,
    /// At most the memory (default 64 MiB, or the memory when less).
    #[schema(nullable = false, schema_with = schema::size)]
    pub shared_memory: Option<ByteSize>,
    /// GPUs; fractions of one share it (at most three decimals).
    #[schema(nullable = false, minimum = 0, maximum = 64, multiple_of = 0.001)]
    pub gpu: Option<f64>,
}

/// A request to create sessions, as the gateway receives it. Its schema states every rule
/// that needs nothing but the request ([`schema`] holds the ones a derive cannot say).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// Random when absent; with `count` above 1, a base that is numbered.
    #[schema(pattern = "^[A-Za-z0-9]{3,64}$")]
    pub name: Option<String>,
    /// `interactive` when absent; `system` for superadmins.
    #[serde(rename = "type")]
    pub session_type: Option<SessionType>,
    /// Set by berth alone, never read from a request: an upload session
    /// ([`launch_upload_session`]), the one system session its owner starts.
    #[serde(skip)]
    pub upload: Option<UploadSession>,
    /// Not blank; no NUL character. Absent: the resource group's default environment.
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 512,
        pattern = "^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$"
    )]
    pub image: String,
    #[serde(default)]
    #[schema(schema_with = schema::environment)]
    pub environment: BTreeMap<String, String>,
    /// `default` when absent.
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    pub resource_group: Option<String>,
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    pub project: Option<String>,
    /// A saved preset's resources; `resources` overrides any of them. Absent, with the cores
    /// or the memory left out too: the resource group's default preset.
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    pub preset: Option<String>,
    #[serde(default)]
    pub resources: ResourceRequest,
    pub cluster_mode: Option<ClusterMode>,
    #[schema(minimum = 1, maximum = 32)]
    pub cluster_size: Option<u32>,
    /// An agent chosen by hand.
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
    pub agent: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schema::ports)]
    pub preopen_ports: Vec<u32>,
    /// Names of folders to mount under /home/work.
    #[serde(default)]
    #[schema(schema_with = schema::mounts)]
    pub mounts: Vec<String>,
    #[schema(pattern = "^[^\\u0000]*$")]
    pub startup_command: Option<String>,
    /// When a batch session may start, at the earliest.
    pub starts_at: Option<DateTime<Utc>>,
    /// Seconds a batch session may run.
    #[schema(minimum = 1)]
    pub batch_timeout: Option<u64>,
    /// OpenMP threads (default: the session's cores, rounded up), at most 1024.
    #[schema(minimum = 1, maximum = 1024)]
    pub omp_num_threads: Option<u32>,
    /// How many sessions to create ("Sessions: N"); those that do not fit wait in the queue.
    #[schema(minimum = 1, maximum = 100)]
    pub count: Option<u32>,
    /// Create the session for this user (admins only).
    #[schema(format = Email)]
    pub owner_email: Option<String>,
    /// Its priority in the group's queue, higher first within the group's queue policy:
    /// 0 to 100, 10 when absent, at most what the owner's resource policy allows
    /// (`max_session_priority`, 100 when it names none).
    #[schema(minimum = 0, maximum = 100)]
    pub priority: Option<i32>,
    /// The rule the name follows: the seeds' on berth's API, Backend.AI's on its
    /// compatibility paths. Not part of the body.
    #[serde(skip)]
    #[schema(ignore)]
    pub name_rule: domain::NameRule,
}

impl CreateSession {
    /// The request as it is kept and shown again: the fields its sender left out absent
    /// (the document calls none of them nullable), so that it reads back as the same request.
    pub fn kept(&self) -> serde_json::Value {
        without_nulls(serde_json::to_value(self).expect("a create request serialises"))
    }
}

/// A session the launcher recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Launched {
    pub session_id: Uuid,
    pub name: String,
    pub status: SessionStatus,
    /// The launch that made it: the request, kept among the caller's recent launches.
    pub launch_id: Uuid,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The request breaks a rule; the field says where.
    #[error(transparent)]
    Invalid(#[from] FieldError),
    /// The caller may not do this.
    #[error("{0}")]
    Forbidden(FieldError),
    /// The request names something that does not exist (a user, group, preset, agent, image
    /// offered by the group, or folder).
    #[error("{0}")]
    NotFound(FieldError),
    /// The platform cannot take the request as it stands (no live agent in the group, more
    /// than the group holds in all).
    #[error("{0}")]
    Conflict(FieldError),
    /// The owner already has a live session of that name.
    #[error("{0}")]
    NameTaken(FieldError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl From<deadpool_postgres::PoolError> for LaunchError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        LaunchError::Ledger(e.into())
    }
}

impl From<tokio_postgres::Error> for LaunchError {
    fn from(e: tokio_postgres::Error) -> Self {
        LaunchError::Ledger(e.into())
    }
}

/// Checks `request` made by `actor` and records the sessions it asks for: the request alone
/// first (bad input costs no query), then every fact it depends on read in one step, the
/// pure [`decide`](crate::decide::decide), and one transaction for all the sessions or none.
/// The request itself is kept in the same transaction (`LaunchRecorded`), whole, among the
/// actor's recent launches, so that it can be launched again.
#[tracing::instrument(name = "launch", skip_all, fields(actor = %actor.email))]
pub async fn launch(
    pool: &Pool,
    actor: &KeyOwner,
    mut request: CreateSession,
) -> Result<Vec<Launched>, LaunchError> {
    with_defaults(pool, actor, &mut request).await?;
    decide::check_request(actor, &request)?;
    let kept = request.kept();
    let context = db::load_context(pool, actor, &request).await?;
    let sessions = {
        // Dropped before the next await: the thread's generator does not cross threads.
        let mut rng = rand::rng();
        decide::decide(&context, &request, &mut || domain::random_name(&mut rng))?
    };

    let metadata = events::trace::metadata(&actor.user_id.to_string(), Some(Uuid::now_v7()));
    let launch_id = Uuid::now_v7();
    let launched: Vec<Launched> = sessions
        .iter()
        .map(|requested| Launched {
            session_id: requested.session_id,
            name: requested.name.clone(),
            status: SessionStatus::Pending,
            launch_id,
        })
        .collect();
    // Every session's request and the launch recorded together: one append and one insert of
    // the sessions' rows, however many the launch makes.
    let launch = Event::LaunchRecorded(LaunchRecorded {
        launch_id,
        user_id: actor.user_id,
        request: kept,
        sessions: launched.iter().map(|l| l.session_id).collect(),
    });
    let mut recordings: Vec<ledger::Recording> = sessions
        .into_iter()
        .map(|requested| ledger::Recording {
            stream_id: stream_id("session", requested.session_id),
            expected: ExpectedVersion::NoStream,
            events: vec![Event::SessionRequested(Box::new(requested))],
            metadata: metadata.clone(),
        })
        .collect();
    recordings.push(ledger::Recording {
        stream_id: stream_id("launch", launch_id),
        expected: ExpectedVersion::NoStream,
        events: vec![launch],
        metadata,
    });
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    match ledger::record_many(&tx, &recordings).await {
        Ok(()) => {}
        Err(LedgerError::NameTaken(name)) => {
            return Err(LaunchError::NameTaken(FieldError {
                field: "name".into(),
                message: format!("the owner already has a live session named `{name}`"),
            }))
        }
        Err(e) => return Err(e.into()),
    }
    events::activity::commit(tx).await?;
    tracing::info!(count = launched.len(), "sessions requested");
    Ok(launched)
}

/// What [`launch`] would decide for `request` made by `actor`, written nowhere: the same
/// checks in the same order (the request alone, then the facts it depends on), so a review
/// page can show every rule a launch would break before anything is recorded. A launch may
/// still fail on what changes meanwhile (a name taken, an agent gone).
pub async fn check(
    pool: &Pool,
    actor: &KeyOwner,
    request: &CreateSession,
) -> Result<usize, LaunchError> {
    Ok(resolve(pool, actor, request).await?.len())
}

/// The sessions [`launch`] would request for `request` made by `actor` (its defaults filled
/// in, its preset resolved, its owner and group found), recorded nowhere: what a question
/// about them (when would they start?) is about.
pub async fn resolve(
    pool: &Pool,
    actor: &KeyOwner,
    request: &CreateSession,
) -> Result<Vec<SessionRequested>, LaunchError> {
    let mut request = request.clone();
    with_defaults(pool, actor, &mut request).await?;
    decide::check_request(actor, &request)?;
    let context = db::load_context(pool, actor, &request).await?;
    let mut rng = rand::rng();
    decide::decide(&context, &request, &mut || domain::random_name(&mut rng))
}

/// Watches the shape `request` would launch in its group ("notify me when it fits"): the
/// scheduler tells its owner once, when it would be placed at once (`FitWatchRequested`, in a
/// stream of its own). Checked as a launch is; its id.
pub async fn watch_fit(
    pool: &Pool,
    actor: &KeyOwner,
    request: &CreateSession,
) -> Result<Uuid, LaunchError> {
    let sessions = resolve(pool, actor, request).await?;
    let Some(first) = sessions.first() else {
        return Err(LaunchError::Invalid(FieldError {
            field: "count".into(),
            message: "asks for no session".into(),
        }));
    };
    let shape = events::advice::Shape {
        per_kernel: first.resources,
        cluster_size: first.cluster_size,
    };
    let watch_id = Uuid::now_v7();
    let event = Event::FitWatchRequested(FitWatchRequested {
        watch_id,
        owner: first.owner.user_id,
        resource_group: first.resource_group.clone(),
        shape,
        label: shape.words(),
    });
    let metadata = events::trace::metadata(&actor.user_id.to_string(), None);
    ledger::record_now(
        pool,
        &stream_id("fitwatch", watch_id),
        ExpectedVersion::NoStream,
        &[event],
        &metadata,
    )
    .await?;
    Ok(watch_id)
}

/// `value` without the fields that are null: a request kept as its sender wrote it, the
/// fields they left out absent (the document calls none of them nullable).
fn without_nulls(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(fields) => fields
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k, without_nulls(v)))
            .collect(),
        other => other,
    }
}

/// What a launch that names no environment, or no resources, would get in a resource group
/// (`domain::defaults`), each with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchDefaults {
    /// Whether the owner exists (else no preset is chosen).
    pub owner_exists: bool,
    /// Whether the group exists (else nothing is chosen).
    pub group_exists: bool,
    pub image: Option<::domain::defaults::Chosen>,
    pub preset: Option<::domain::defaults::Chosen>,
}

/// The defaults of `group` (`default` when `None`) for a launch owned by the user with
/// `email`.
pub async fn launch_defaults(
    pool: &Pool,
    email: &str,
    group: Option<&str>,
) -> Result<LaunchDefaults, LaunchError> {
    let facts = db::defaults_facts(pool, email, group.unwrap_or("default")).await?;
    if !facts.group_exists {
        return Ok(LaunchDefaults {
            owner_exists: facts.policy.is_some(),
            ..LaunchDefaults::default()
        });
    }
    Ok(LaunchDefaults {
        owner_exists: facts.policy.is_some(),
        group_exists: true,
        image: ::domain::defaults::image(facts.set_image.as_deref(), &facts.used, &facts.offered),
        preset: facts.policy.and_then(|policy| {
            ::domain::defaults::preset(
                facts.set_preset.as_deref(),
                &facts.presets,
                policy,
                &facts.agents,
            )
        }),
    })
}

/// Fills what `request` leaves out with its group's defaults: an image when it names none,
/// a preset when it names none and leaves out the cores or the memory (what it does say
/// still overrides the preset's).
async fn with_defaults(
    pool: &Pool,
    actor: &KeyOwner,
    request: &mut CreateSession,
) -> Result<(), LaunchError> {
    // Left out (or empty); a blank one is refused as the request wrote it.
    let wants_image = request.image.is_empty();
    let wants_resources = request.preset.is_none()
        && (request.resources.cpu.is_none() || request.resources.memory.is_none());
    if !wants_image && !wants_resources {
        return Ok(());
    }
    let owner = request.owner_email.as_deref().unwrap_or(&actor.email);
    let group = decide::group_of(request);
    let defaults = launch_defaults(pool, owner, Some(&group)).await?;
    // No default comes from an owner or a group that does not exist: refused as the launch's
    // own checks refuse them (the owner first), naming the field.
    if !defaults.owner_exists {
        return Err(decide::no_such_owner(owner));
    }
    if !defaults.group_exists {
        return Err(decide::no_such_group(&group));
    }
    // What the platform holds now has no default to give: the request must say (409, a
    // refusal of the state, not of the request's shape).
    if wants_image {
        let image = defaults.image.ok_or_else(|| {
            decide::conflict(
                "image",
                format!(
                    "`{group}` has no default environment (none set, none used yet): name an image"
                ),
            )
        })?;
        request.image = image.value;
    }
    if wants_resources {
        let preset = defaults.preset.ok_or_else(|| {
            decide::conflict(
                "resources",
                format!(
                    "no preset of `{group}` fits both the owner's policy and one of its agents: \
                     name the cores and memory, or a preset"
                ),
            )
        })?;
        request.preset = Some(preset.value);
    }
    Ok(())
}

/// The image upload sessions run: an SSH server serving SFTP (`infra/images.sh sftp`).
pub const UPLOAD_IMAGE: &str = "berth/sftp:latest";

/// What makes a session an upload session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadSession {
    /// It ends once this long passes without a byte in or out (the idle-reaper's network
    /// check, whatever its group sets).
    pub idle_timeout_secs: u64,
}

impl UploadSession {
    /// How long an upload session waits for traffic unless asked otherwise.
    pub const IDLE_TIMEOUT_SECS: u64 = 600;
    /// The bounds an owner may ask for.
    pub const IDLE_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 10..=86_400;
}

/// Starts an upload session for `owner` (Backend.AI's "system sessions used for SFTP
/// uploads"): a system session of [`UPLOAD_IMAGE`] mounting `folders` (theirs, or shared
/// with them: read-only ones stay so), small, whose SSH server its owner reaches through the
/// proxy's tunnel with the session's key, ending once idle for `upload`'s timeout. Users
/// start no other system session.
pub async fn launch_upload_session(
    pool: &Pool,
    owner: &KeyOwner,
    folders: Vec<String>,
    upload: UploadSession,
) -> Result<Launched, LaunchError> {
    if folders.is_empty() {
        return Err(LaunchError::Invalid(FieldError {
            field: "folders".into(),
            message: "name at least one folder to upload into".into(),
        }));
    }
    if !UploadSession::IDLE_TIMEOUT_RANGE.contains(&upload.idle_timeout_secs) {
        return Err(LaunchError::Invalid(FieldError {
            field: "idle_timeout_secs".into(),
            message: format!(
                "{} is not from {} to {} seconds",
                upload.idle_timeout_secs,
                UploadSession::IDLE_TIMEOUT_RANGE.start(),
                UploadSession::IDLE_TIMEOUT_RANGE.end()
            ),
        }));
    }
    let request = CreateSession {
        session_type: Some(SessionType::System),
        upload: Some(upload),
        image: UPLOAD_IMAGE.to_owned(),
        mounts: folders,
        resources: ResourceRequest {
            cpu: Some(0.25),
            memory: Some(ByteSize::Text("256m".into())),
            ..ResourceRequest::default()
        },
        ..CreateSession::default()
    };
    let mut launched = launch(pool, owner, request).await?;
    Ok(launched.remove(0))
}

/// Creates a named folder for `owner` on `volume` (`host-local`, or a
/// shared volume some live agent mounts).
pub async fn create_folder(
    pool: &Pool,
    owner: &KeyOwner,
    name: &str,
    volume: &str,
    usage_mode: ::domain::folders::UsageMode,
) -> Result<(), LaunchError> {
    record_folder(pool, owner, name, volume, usage_mode, None).await
}

/// Records `owner`'s folder `name` cloned from `cloned_from` (`<owner's id>/<name>`), its
/// files already copied onto `volume` by the caller, as [`create_folder`] records one.
pub async fn clone_folder(
    pool: &Pool,
    owner: &KeyOwner,
    name: &str,
    volume: &str,
    usage_mode: ::domain::folders::UsageMode,
    cloned_from: String,
) -> Result<(), LaunchError> {
    record_folder(pool, owner, name, volume, usage_mode, Some(cloned_from)).await
}

async fn record_folder(
    pool: &Pool,
    owner: &KeyOwner,
    name: &str,
    volume: &str,
    usage_mode: ::domain::folders::UsageMode,
    cloned_from: Option<String>,
) -> Result<(), LaunchError> {
    domain::check_folder_name("name", name)?;
    let volume_error = |message: String| FieldError {
        field: "volume".into(),
        message,
    };
    ::domain::volumes::volume_name(volume).map_err(|e| volume_error(e.to_string()))?;
    let shared = volume != ::domain::volumes::HOST_LOCAL;
    if shared && !db::volume_mounted(pool, volume).await? {
        return Err(LaunchError::NotFound(volume_error(format!(
            "no live agent mounts volume `{volume}` (agents name theirs in BERTH_VOLUMES)"
        ))));
    }
    let event = Event::FolderCreated(FolderCreated {
        owner: owner.user_id,
        name: name.to_owned(),
        volume: shared.then(|| volume.to_owned()),
        usage_mode,
        cloned_from,
    });
    let metadata = events::trace::metadata(&owner.user_id.to_string(), None);
    match ledger::record_now(
        pool,
        &stream_id("user", owner.user_id),
        ExpectedVersion::Any,
        &[event],
        &metadata,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(LedgerError::Exists { .. }) => Err(LaunchError::NameTaken(FieldError {
            field: "name".into(),
            message: format!("you already have a folder named `{name}`"),
        })),
        Err(e) => Err(e.into()),
    }
}

/// Whom an owner shares a folder with, as a caller names them.
#[derive(Debug, Clone)]
pub enum ShareWith {
    /// A user, by email.
    User(String),
    /// Every member of a project, by name.
    Project(String),
}

/// Shares `owner`'s folder `name` with a user or a project (`permission`: read-only or
/// read-write), or changes what an earlier share of it allows.
pub async fn share_folder(
    pool: &Pool,
    owner: &KeyOwner,
    name: &str,
    with: &ShareWith,
    permission: ::domain::sharing::FolderPermission,
) -> Result<(), LaunchError> {
    let grantee = grantee(pool, owner, name, with).await?;
    record_folder_event(
        pool,
        owner,
        Event::FolderShared(FolderShared {
            owner: owner.user_id,
            name: name.to_owned(),
            grantee,
            permission,
        }),
    )
    .await
}

/// Takes back a share of `owner`'s folder `name` (none there: nothing changes).
pub async fn unshare_folder(
    pool: &Pool,
    owner: &KeyOwner,
    name: &str,
    with: &ShareWith,
) -> Result<(), LaunchError> {
    let grantee = grantee(pool, owner, name, with).await?;
    record_folder_event(
        pool,
        owner,
        Event::FolderUnshared(FolderUnshared {
            owner: owner.user_id,
            name: name.to_owned(),
            grantee,
        }),
    )
    .await
}

/// The grantee `with` names, once `owner` is found to own a folder `name`; a share with
/// oneself is refused.
async fn grantee(
    pool: &Pool,
    owner: &KeyOwner,
    name: &str,
    with: &ShareWith,
) -> Result<::domain::sharing::Grantee, LaunchError> {
    use ::domain::sharing::Grantee;
    let client = pool.get().await?;
    let (standing, _) = owned_folder(&client, owner, name).await?;
    ::domain::folders::check_move(standing, ::domain::folders::FolderMove::Rename)
        .map_err(|e| in_trash(name, e))?;
    match with {
        ShareWith::User(email) => {
            let user = db::user_by_email(&client, email).await?.ok_or_else(|| {
                LaunchError::NotFound(FieldError {
                    field: "email".into(),
                    message: format!("no user has the email `{email}`"),
                })
            })?;
            if user.user_id == owner.user_id {
                return Err(LaunchError::Conflict(FieldError {
                    field: "email".into(),
                    message: "the folder is yours: a share with yourself changes nothing".into(),
                }));
            }
            Ok(Grantee::User(user.user_id))
        }
        ShareWith::Project(project) => {
            if !db::exists(&client, db::Named::Project, project).await? {
                return Err(LaunchError::NotFound(FieldError {
                    field: "project".into(),
                    message: format!("there is no project `{project}`"),
                }));
            }
            Ok(Grantee::Project(project.clone()))
        }
    }
}

/// What an owner does to one of their folders, besides sharing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FolderStep {
    Rename { to: String },
    Trash,
    Restore,
    Purge,
}

impl FolderStep {
    fn kind(&self) -> ::domain::folders::FolderMove {
        use ::domain::folders::FolderMove;
        match self {
            FolderStep::Rename { .. } => FolderMove::Rename,
            FolderStep::Trash => FolderMove::Trash,
            FolderStep::Restore => FolderMove::Restore,
            FolderStep::Purge => FolderMove::Purge,
        }
    }
}

/// Checks `step` on `owner`'s folder `name` against where it stands (and, for a rename, the
/// new name), and answers the folder's volume: the caller makes the step's part on disk
/// (moving or removing its files) and then records it with [`record_folder_step`].
pub async fn check_folder_step(
    pool: &Pool,
    owner: &KeyOwner,
    name: &str,
    step: &FolderStep,
) -> Result<String, LaunchError> {
    let client = pool.get().await?;
    let (standing, volume) = owned_folder(&client, owner, name).await?;
    ::domain::folders::check_move(standing, step.kind()).map_err(|e| in_trash(name, e))?;
    if let FolderStep::Rename { to } = step {
        domain::check_folder_name("to", to)?;
        if db::folder_standing(&client, owner.user_id, to)
            .await?
            .is_some()
        {
            return Err(name_taken(to));
        }
    }
    Ok(volume)
}

/// Records `step` on `owner`'s folder `name`, once [`check_folder_step`] allowed it and its
/// part on disk is made.
pub async fn record_folder_step(
    pool: &Pool,
    owner: &KeyOwner,
    name: &str,
    step: &FolderStep,
) -> Result<(), LaunchError> {
    let (owner_id, name) = (owner.user_id, name.to_owned());
    let event = match step {
        FolderStep::Rename { to } => Event::FolderRenamed(FolderRenamed {
            owner: owner_id,
            name,
            to: to.clone(),
        }),
        FolderStep::Trash => Event::FolderTrashed(FolderTrashed {
            owner: owner_id,
            name,
        }),
        FolderStep::Restore => Event::FolderRestored(FolderRestored {
            owner: owner_id,
            name,
        }),
        FolderStep::Purge => Event::FolderPurged(FolderPurged {
            owner: owner_id,
            name,
        }),
    };
    match record_folder_event(pool, owner, event).await {
        Err(LaunchError::Ledger(LedgerError::Exists { name, .. })) => Err(name_taken(&name)),
        other => other,
    }
}

/// `owner`'s folder `name` (where it stands, its volume), or 404 naming the field `name`.
async fn owned_folder(
    client: &deadpool_postgres::Client,
    owner: &KeyOwner,
    name: &str,
) -> Result<(::domain::folders::Standing, String), LaunchError> {
    db::folder_standing(client, owner.user_id, name)
        .await?
        .ok_or_else(|| {
            LaunchError::NotFound(FieldError {
                field: "name".into(),
                message: format!("you have no folder named `{name}`"),
            })
        })
}

fn in_trash(name: &str, refused: ::domain::folders::MoveRefused) -> LaunchError {
    LaunchError::Conflict(FieldError {
        field: "name".into(),
        message: format!("folder `{name}`: {refused}"),
    })
}

fn name_taken(name: &str) -> LaunchError {
    LaunchError::NameTaken(FieldError {
        field: "to".into(),
        message: format!("you already have a folder named `{name}`"),
    })
}

/// Records an owner's event on one of their folders (a share, a move) on their stream.
async fn record_folder_event(
    pool: &Pool,
    owner: &KeyOwner,
    event: Event,
) -> Result<(), LaunchError> {
    let metadata = events::trace::metadata(&owner.user_id.to_string(), None);
    ledger::record_now(
        pool,
        &stream_id("user", owner.user_id),
        ExpectedVersion::Any,
        &[event],
        &metadata,
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A launch is kept as its sender wrote it: the fields they left out are absent (none is
    /// nullable in the document), and what is kept reads back as the same request.
    #[test]
    fn a_request_kept_without_its_absent_fields_reads_back_whole() {
        let request = CreateSession {
            image: "berth/shell:latest".into(),
            session_type: Some(SessionType::Batch),
            startup_command: Some("echo hi".into()),
            resources: ResourceRequest {
                cpu: Some(0.5),
                memory: Some(ByteSize::Text("256m".into())),
                ..ResourceRequest::default()
            },
            count: Some(2),
            ..CreateSession::default()
        };
        let kept = request.kept();
        assert_eq!(
            kept,
            serde_json::json!({"type": "batch", "image": "berth/shell:latest",
                "environment": {}, "resources": {"cpu": 0.5, "memory": "256m"},
                "preopen_ports": [], "mounts": [], "startup_command": "echo hi", "count": 2})
        );
        let back: CreateSession = serde_json::from_value(kept).unwrap();
        assert_eq!(back, request);
    }
}
