//! Who may launch what: users with roles and API keys, projects, resource groups, resource
//! policies and presets. Each change is an event in the log (kept in the ledger for fast,
//! exact lookups); `berth admin ...` calls these, and a fresh install gets one superadmin.
//! Credentials have a life cycle: a key may expire and be revoked, a user be disabled and
//! enabled again or change role (`domain::credentials` says who may); every gateway hears of
//! each change from the relayed event and stops honouring what it ended at once.

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use domain::apps::CircuitCloseReason;
use events::catalogue::{stream_id, Event};
use events::credentials::{check_account_change, AccountChange};
use events::ledger::{self, LedgerError};
use events::payloads::*;
use events::store::ExpectedVersion;
use rand::Rng;
use uuid::Uuid;

use crate::db::{self, Named};

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    /// The caller may not do this: `field` names what they got wrong (a current password).
    #[error("{field}: {message}")]
    Forbidden {
        field: &'static str,
        message: String,
    },
    #[error("no user has the email `{0}`")]
    NoSuchUser(String),
    #[error("{what} `{name}` does not exist")]
    Unknown { what: &'static str, name: String },
    /// More than one thing answers to a name (two keys sharing a prefix): `field` names it.
    #[error("{field}: {message}")]
    Ambiguous {
        field: &'static str,
        message: String,
    },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

impl From<deadpool_postgres::PoolError> for AccessError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        AccessError::Ledger(e.into())
    }
}

impl From<tokio_postgres::Error> for AccessError {
    fn from(e: tokio_postgres::Error) -> Self {
        AccessError::Ledger(e.into())
    }
}

/// Names of projects, groups, policies and presets: 1 to 64 letters, digits, `_` and `-`
/// (they are part of stream ids).
pub fn check_object_name(field: &'static str, name: &str) -> Result<(), AccessError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(AccessError::Invalid {
            field,
            message: format!("`{name}` must be 1 to 64 letters, digits, `_` or `-`"),
        })
    }
}

fn check_email(email: &str) -> Result<(), AccessError> {
    let ok = email.len() <= 254
        && email
            .split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && !domain.is_empty())
        && !email.chars().any(char::is_whitespace);
    if ok {
        Ok(())
    } else {
        Err(AccessError::Invalid {
            field: "email",
            message: format!("`{email}` is not an email address"),
        })
    }
}

pub(crate) fn admin_metadata() -> events::Metadata {
    events::trace::metadata("admin", None)
}

pub(crate) async fn record(
    pool: &Pool,
    stream: String,
    events: &[Event],
) -> Result<(), AccessError> {
    ledger::record_now(
        pool,
        &stream,
        ExpectedVersion::Any,
        events,
        &admin_metadata(),
    )
    .await?;
    Ok(())
}

/// A fresh API key: `berth_` and 40 random hex digits.
pub fn new_api_key() -> String {
    let bytes: [u8; 20] = rand::rng().random();
    format!("berth_{}", hex_encode(&bytes))
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn key_issued(user_id: Uuid, key: &str, expires_at: Option<DateTime<Utc>>) -> Event {
    Event::ApiKeyIssued(ApiKeyIssued {
        user_id,
        key_prefix: key[..12].to_owned(),
        key_sha256: ledger::key_digest(key),
        expires_at,
    })
}

impl From<events::credentials::CredentialError> for AccessError {
    fn from(e: events::credentials::CredentialError) -> Self {
        AccessError::Forbidden {
            field: e.field,
            message: e.message,
        }
    }
}

pub(crate) async fn user_id_of(pool: &Pool, email: &str) -> Result<Uuid, AccessError> {
    let client = pool.get().await?;
    db::user_by_email(&client, email)
        .await?
        .map(|u| u.user_id)
        .ok_or_else(|| AccessError::NoSuchUser(email.to_owned()))
}

async fn exists(pool: &Pool, what: Named, name: &str) -> Result<bool, AccessError> {
    let client = pool.get().await?;
    Ok(db::exists(&client, what, name).await?)
}

/// Creates a user in `projects` and returns its id and first API key (shown only now).
pub async fn create_user(
    pool: &Pool,
    email: &str,
    role: Role,
    resource_policy: &str,
    projects: &[String],
) -> Result<(Uuid, String), AccessError> {
    check_email(email)?;
    if !exists(pool, Named::Policy, resource_policy).await? {
        return Err(AccessError::Unknown {
            what: "resource policy",
            name: resource_policy.to_owned(),
        });
    }
    for project in projects {
        if !exists(pool, Named::Project, project).await? {
            return Err(AccessError::Unknown {
                what: "project",
                name: project.clone(),
            });
        }
    }
    let user_id = Uuid::now_v7();
    let key = new_api_key();
    let mut events = vec![
        Event::UserCreated(UserCreated {
            user_id,
            email: email.to_owned(),
            role,
            resource_policy: resource_policy.to_owned(),
        }),
        key_issued(user_id, &key, None),
    ];
    events.extend(projects.iter().map(|p| {
        Event::UserJoinedProject(UserJoinedProject {
            user_id,
            project: p.clone(),
        })
    }));
    ledger::record_now(
        pool,
        &stream_id("user", user_id),
        ExpectedVersion::NoStream,
        &events,
        &admin_metadata(),
    )
    .await?;
    Ok((user_id, key))
}

/// Issues another API key to a user, honoured until `expires_at` (for ever with none: the
/// caller checked it, `domain::credentials::key_expiry`); returns it (shown only now).
pub async fn issue_key(
    pool: &Pool,
    email: &str,
    expires_at: Option<DateTime<Utc>>,
) -> Result<String, AccessError> {
    let user_id = user_id_of(pool, email).await?;
    let key = new_api_key();
    record(
        pool,
        stream_id("user", user_id),
        &[key_issued(user_id, &key, expires_at)],
    )
    .await?;
    Ok(key)
}

/// Revokes the API key whose prefix is `prefix` (`ApiKeyRevoked`) and returns its holder;
/// revoking one already revoked changes nothing. No key with it is [`AccessError::Unknown`],
/// two keys sharing it [`AccessError::Ambiguous`] (neither is revoked).
pub async fn revoke_key(pool: &Pool, actor: Uuid, prefix: &str) -> Result<Uuid, AccessError> {
    let client = pool.get().await?;
    let mut found = ledger::api_keys_by_prefix(&client, prefix).await?;
    drop(client);
    if found.len() > 1 {
        return Err(AccessError::Ambiguous {
            field: "prefix",
            message: format!(
                "{} keys begin with `{prefix}`; revoke their holder's keys by disabling them",
                found.len()
            ),
        });
    }
    let key = found.pop().ok_or_else(|| AccessError::Unknown {
        what: "API key with the prefix",
        name: prefix.to_owned(),
    })?;
    if key.revoked {
        return Ok(key.user_id);
    }
    let event = Event::ApiKeyRevoked(ApiKeyRevoked {
        user_id: key.user_id,
        key_prefix: key.key_prefix,
        key_sha256: key.key_sha256,
    });
    record_by(pool, actor, stream_id("user", key.user_id), &[event]).await?;
    Ok(key.user_id)
}

async fn record_by(
    pool: &Pool,
    actor: Uuid,
    stream: String,
    events: &[Event],
) -> Result<(), AccessError> {
    let metadata = events::trace::metadata(&actor.to_string(), None);
    ledger::record_now(pool, &stream, ExpectedVersion::Any, events, &metadata).await?;
    Ok(())
}

/// The user with `email`, as [`AccessError::NoSuchUser`] when there is none.
async fn user_of(pool: &Pool, email: &str) -> Result<ledger::KeyOwner, AccessError> {
    let client = pool.get().await?;
    db::user_by_email(&client, email)
        .await?
        .ok_or_else(|| AccessError::NoSuchUser(email.to_owned()))
}

/// Disables (`disabled`) or enables again the user with `email`, as `actor` (refused for
/// themselves, `domain::credentials::check_account_change`); returns the user's id. Disabling
/// records `UserDisabled`, ends every console sign-in of theirs (`ConsoleSignedOutEverywhere`)
/// and closes their sessions' circuits (`AppCircuitClosed`, `owner_disabled`); their sessions
/// keep running. Enabling records `UserEnabled`: their keys and keypairs are honoured again.
/// Asking for what already holds records nothing.
pub async fn set_user_disabled(
    pool: &Pool,
    actor: Uuid,
    email: &str,
    disabled: bool,
) -> Result<Uuid, AccessError> {
    let user = user_of(pool, email).await?;
    let change = if disabled {
        AccountChange::Disable
    } else {
        AccountChange::Enable
    };
    check_account_change(actor, user.user_id, change)?;
    let user_id = user.user_id;
    let mut client = pool.get().await?;
    if db::user_disabled(&client, user_id).await? == Some(disabled) {
        return Ok(user_id);
    }
    let metadata = events::trace::metadata(&actor.to_string(), None);
    let tx = client.transaction().await?;
    let event = if disabled {
        Event::UserDisabled(UserDisabled { user_id })
    } else {
        Event::UserEnabled(UserEnabled { user_id })
    };
    ledger::record(
        &tx,
        &stream_id("user", user_id),
        ExpectedVersion::Any,
        &[event],
        &metadata,
    )
    .await?;
    if disabled {
        let out = Event::ConsoleSignedOutEverywhere(ConsoleSignedOutEverywhere {
            user_id,
            reason: SignOutReason::UserDisabled,
        });
        ledger::record(
            &tx,
            &stream_id("console", user_id),
            ExpectedVersion::Any,
            &[out],
            &metadata,
        )
        .await?;
    }
    events::activity::commit(tx).await?;
    if disabled {
        for (circuit_id, session_id, port) in db::circuits_of(&client, user_id).await? {
            let closed = Event::AppCircuitClosed(AppCircuitClosed {
                circuit_id,
                session_id,
                port,
                reason: CircuitCloseReason::OwnerDisabled,
            });
            // After its opening alone, as the proxy closes one: a circuit closed meanwhile
            // (its session ended, or it went idle) is left as it is.
            match ledger::record_now(
                pool,
                &stream_id("circuit", circuit_id),
                ExpectedVersion::Exact(0),
                &[closed],
                &metadata,
            )
            .await
            {
                Ok(_) | Err(LedgerError::Store(events::store::StoreError::Conflict { .. })) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(user_id)
}

/// Changes the role of the user with `email` to `role` (`UserRoleChanged`), as `actor`
/// (refused for themselves); returns the user's id. The same role records nothing.
pub async fn set_role(
    pool: &Pool,
    actor: Uuid,
    email: &str,
    role: Role,
) -> Result<Uuid, AccessError> {
    let user = user_of(pool, email).await?;
    check_account_change(actor, user.user_id, AccountChange::SetRole(role))?;
    if user.role == role {
        return Ok(user.user_id);
    }
    let event = Event::UserRoleChanged(UserRoleChanged {
        user_id: user.user_id,
        from: user.role,
        to: role,
    });
    record_by(pool, actor, stream_id("user", user.user_id), &[event]).await?;
    Ok(user.user_id)
}

/// A fresh Backend.AI access key: `AKIA` and 16 random upper-case letters and digits, the
/// shape Backend.AI's own keys have.
pub fn new_backendai_access_key() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::rng();
    let tail: String = (0..16)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("AKIA{tail}")
}

/// Issues a Backend.AI keypair to the user with `email` (`BackendAiKeypairIssued`) and
/// returns the user's id and the access key. The secret key is the gateway's to derive.
pub async fn issue_backendai_keypair(
    pool: &Pool,
    email: &str,
) -> Result<(Uuid, String), AccessError> {
    let user_id = user_id_of(pool, email).await?;
    let access_key = new_backendai_access_key();
    let event = Event::BackendAiKeypairIssued(BackendAiKeypairIssued {
        user_id,
        access_key: access_key.clone(),
    });
    record(pool, stream_id("user", user_id), &[event]).await?;
    Ok((user_id, access_key))
}

/// Revokes Backend.AI keypair `access_key` (`BackendAiKeypairRevoked`) and returns its
/// holder; revoking one already revoked changes nothing. An access key nobody was issued is
/// [`AccessError::Unknown`].
pub async fn revoke_backendai_keypair(pool: &Pool, access_key: &str) -> Result<Uuid, AccessError> {
    let client = pool.get().await?;
    let found = ledger::backendai_keypairs(&client, None, Some(access_key)).await?;
    drop(client);
    let keypair = found
        .into_iter()
        .next()
        .ok_or_else(|| AccessError::Unknown {
            what: "Backend.AI access key",
            name: access_key.to_owned(),
        })?;
    let holder = keypair.user_id;
    if !keypair.active {
        return Ok(holder);
    }
    let event = Event::BackendAiKeypairRevoked(BackendAiKeypairRevoked {
        user_id: keypair.user_id,
        access_key: keypair.access_key,
    });
    record(pool, stream_id("user", holder), &[event]).await?;
    Ok(holder)
}

pub async fn create_project(pool: &Pool, name: &str, description: &str) -> Result<(), AccessError> {
    check_object_name("project", name)?;
    let event = Event::ProjectCreated(ProjectCreated {
        name: name.to_owned(),
        description: description.to_owned(),
    });
    record(pool, format!("project-{name}"), &[event]).await
}

pub async fn add_member(pool: &Pool, project: &str, email: &str) -> Result<(), AccessError> {
    if !exists(pool, Named::Project, project).await? {
        return Err(AccessError::Unknown {
            what: "project",
            name: project.to_owned(),
        });
    }
    let user_id = user_id_of(pool, email).await?;
    let event = Event::UserJoinedProject(UserJoinedProject {
        user_id,
        project: project.to_owned(),
    });
    record(pool, stream_id("user", user_id), &[event]).await
}

pub async fn create_group(pool: &Pool, group: ResourceGroupCreated) -> Result<(), AccessError> {
    check_object_name("resource_group", &group.name)?;
    if group.max_attempts == 0 {
        return Err(AccessError::Invalid {
            field: "max_attempts",
            message: "must be at least 1".into(),
        });
    }
    let stream = format!("group-{}", group.name);
    record(pool, stream, &[Event::ResourceGroupCreated(group)]).await
}

/// Sets how an existing resource group's queue is ordered (`ResourceGroupSchedulingSet`).
pub async fn set_group_scheduling(
    pool: &Pool,
    scheduling: ResourceGroupSchedulingSet,
) -> Result<(), AccessError> {
    check_object_name("resource_group", &scheduling.name)?;
    if !exists(pool, Named::ResourceGroup, &scheduling.name).await? {
        return Err(AccessError::Unknown {
            what: "resource group",
            name: scheduling.name,
        });
    }
    let stream = format!("group-{}", scheduling.name);
    record(
        pool,
        stream,
        &[Event::ResourceGroupSchedulingSet(scheduling)],
    )
    .await
}

/// Sets what a launch in an existing resource group gets when it names no environment or no
/// resources (`ResourceGroupDefaultsSet`); the preset, when named, must exist.
pub async fn set_group_defaults(
    pool: &Pool,
    defaults: ResourceGroupDefaultsSet,
) -> Result<(), AccessError> {
    check_object_name("resource_group", &defaults.name)?;
    if let Some(image) = &defaults.image {
        if image.trim().is_empty() || image.len() > 512 || image.contains('\0') {
            return Err(AccessError::Invalid {
                field: "image",
                message: "must name an image (at most 512 characters)".into(),
            });
        }
    }
    if let Some(preset) = &defaults.preset {
        check_object_name("preset", preset)?;
        if !exists(pool, Named::Preset, preset).await? {
            return Err(AccessError::Unknown {
                what: "preset",
                name: preset.clone(),
            });
        }
    }
    if !exists(pool, Named::ResourceGroup, &defaults.name).await? {
        return Err(AccessError::Unknown {
            what: "resource group",
            name: defaults.name,
        });
    }
    let stream = format!("group-{}", defaults.name);
    record(pool, stream, &[Event::ResourceGroupDefaultsSet(defaults)]).await
}

pub async fn grant_group(pool: &Pool, group: &str, project: &str) -> Result<(), AccessError> {
    for (table, what, name) in [
        (Named::ResourceGroup, "resource group", group),
        (Named::Project, "project", project),
    ] {
        if !exists(pool, table, name).await? {
            return Err(AccessError::Unknown {
                what,
                name: name.to_owned(),
            });
        }
    }
    let event = Event::ResourceGroupGranted(ResourceGroupGranted {
        resource_group: group.to_owned(),
        project: project.to_owned(),
    });
    record(pool, format!("group-{group}"), &[event]).await
}

pub async fn set_policy(pool: &Pool, policy: ResourcePolicySet) -> Result<(), AccessError> {
    check_object_name("resource_policy", &policy.name)?;
    let stream = format!("policy-{}", policy.name);
    record(pool, stream, &[Event::ResourcePolicySet(policy)]).await
}

/// Sets the idle checks of a resource group or a resource policy (whole: a checker left out
/// is off, or on a policy, as the group sets it).
pub async fn set_idle_checks(
    pool: &Pool,
    scope: events::idleness::IdleScope,
    checks: events::idleness::IdleChecks,
) -> Result<(), AccessError> {
    let (field, name) = match &scope {
        events::idleness::IdleScope::ResourceGroup(n) => ("resource_group", n),
        events::idleness::IdleScope::ResourcePolicy(n) => ("resource_policy", n),
    };
    check_object_name(field, name)?;
    if let Some((field, message)) = checks.problem() {
        return Err(AccessError::Invalid { field, message });
    }
    let stream = scope.stream_id();
    record(
        pool,
        stream,
        &[Event::IdleChecksSet(IdleChecksSet { scope, checks })],
    )
    .await
}

pub async fn save_preset(pool: &Pool, preset: PresetSaved) -> Result<(), AccessError> {
    check_object_name("preset", &preset.name)?;
    if preset.resources.cpu_milli == 0 || preset.resources.memory_bytes == 0 {
        return Err(AccessError::Invalid {
            field: "preset",
            message: "a preset needs CPU and memory above 0".into(),
        });
    }
    if preset.shared_memory_bytes > preset.resources.memory_bytes {
        return Err(AccessError::Invalid {
            field: "shared_memory",
            message: "shared memory may not exceed memory".into(),
        });
    }
    let stream = format!("preset-{}", preset.name);
    record(pool, stream, &[Event::PresetSaved(preset)]).await
}

const GIB: u64 = 1 << 30;

/// The email of the superadmin a fresh install gets.
pub const FIRST_SUPERADMIN: &str = "admin@berth.local";

/// On a fresh install (no users yet), creates the defaults (policy, project and resource
/// group `default`, presets `small` and `medium`) and the first superadmin, and returns its
/// email and key. Returns `None` when users exist. Safe when several processes start at once.
pub async fn bootstrap(pool: &Pool) -> Result<Option<(String, String)>, AccessError> {
    bootstrap_with_key(pool, new_api_key()).await
}

/// Whether `key` has the shape of a key berth makes (`berth_` and 40 hex digits): the only
/// shape an operator may choose for the first superadmin ([`bootstrap_with_key`]).
pub fn is_api_key_shaped(key: &str) -> bool {
    key.strip_prefix("berth_")
        .is_some_and(|hex| hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// [`bootstrap`], with the first superadmin's key chosen by the operator (an automated
/// install, such as the compose stack, that must know the key without reading a log).
/// The image an install's first resource group launches when a request names none.
pub const FIRST_DEFAULT_IMAGE: &str = "berth/shell:latest";

pub async fn bootstrap_with_key(
    pool: &Pool,
    key: String,
) -> Result<Option<(String, String)>, AccessError> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    if db::lock_bootstrap(&tx).await? {
        return Ok(None);
    }
    let meta = admin_metadata();
    let default = "default".to_owned();
    let mut put = Vec::new();
    put.push((
        "policy-default".to_owned(),
        vec![Event::ResourcePolicySet(ResourcePolicySet {
            name: default.clone(),
            max_concurrent_sessions: 64,
            max_total: ResourceSlots {
                cpu_milli: 1024 * 1000,
                memory_bytes: 4 << 40,
                gpu_milli: 64 * 1000,
            },
            max_session_lifetime_secs: None,
            max_custom_images: None,
            max_session_priority: None,
            max_pids: None,
            max_log_bytes: None,
            max_folder_bytes: None,
        })],
    ));
    put.push((
        "project-default".to_owned(),
        vec![Event::ProjectCreated(ProjectCreated {
            name: default.clone(),
            description: "everyone's first project".into(),
        })],
    ));
    put.push((
        "group-default".to_owned(),
        vec![
            Event::ResourceGroupCreated(ResourceGroupCreated {
                name: default.clone(),
                queue_policy: QueuePolicy::Fifo,
                agent_selection: AgentSelection::Concentrated,
                max_attempts: 5,
                skip_after: 3,
                pending_timeout_secs: 3600,
            }),
            Event::ResourceGroupGranted(ResourceGroupGranted {
                resource_group: default.clone(),
                project: default.clone(),
            }),
            // A first launch that names nothing gets berth's own shell image
            // (`infra/images.sh` builds it); the preset falls back to the smallest that fits.
            Event::ResourceGroupDefaultsSet(ResourceGroupDefaultsSet {
                name: default.clone(),
                image: Some(FIRST_DEFAULT_IMAGE.into()),
                preset: None,
            }),
        ],
    ));
    for (name, cpu, mem) in [("small", 1, GIB), ("medium", 2, 4 * GIB)] {
        put.push((
            format!("preset-{name}"),
            vec![Event::PresetSaved(PresetSaved {
                name: name.into(),
                resources: ResourceSlots {
                    cpu_milli: cpu * 1000,
                    memory_bytes: mem,
                    gpu_milli: 0,
                },
                shared_memory_bytes: 64 << 20,
            })],
        ));
    }
    let user_id = Uuid::now_v7();
    put.push((
        stream_id("user", user_id),
        vec![
            Event::UserCreated(UserCreated {
                user_id,
                email: FIRST_SUPERADMIN.into(),
                role: Role::Superadmin,
                resource_policy: default.clone(),
            }),
            key_issued(user_id, &key, None),
            Event::UserJoinedProject(UserJoinedProject {
                user_id,
                project: default,
            }),
        ],
    ));
    for (stream, events) in put {
        ledger::record(&tx, &stream, ExpectedVersion::Any, &events, &meta).await?;
    }
    events::activity::commit(tx).await?;
    Ok(Some((FIRST_SUPERADMIN.to_owned(), key)))
}
