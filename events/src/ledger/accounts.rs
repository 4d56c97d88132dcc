//! The accounts family: who the users are and what they hold.
//!
//! Tables: `users`, `api_keys`, `backendai_keypairs`, `folders`, `folder_shares`, `projects`,
//! `project_members`, `user_passwords`, `console_sign_ins`. Changed by `UserCreated`,
//! `ApiKeyIssued`, `BackendAiKeypairIssued`, `BackendAiKeypairRevoked` (the keypair stays,
//! inactive), `FolderCreated`, `FolderShared` (a share made, or its permission changed),
//! `FolderUnshared`, `FolderRenamed` (its shares follow), `FolderTrashed` and `FolderRestored`
//! (`trashed_at` set and cleared), `FolderPurged` (the folder and its shares removed),
//! `ProjectCreated`, `UserJoinedProject`, `UserPasswordSet` (the last one set is the password),
//! `ConsoleSignedIn` and `ConsoleSignedOut` (which removes the sign-in; an expired one stays,
//! and `events::ledger::credentials` no longer honours it), `ConsoleSignedOutEverywhere`
//! (removes every sign-in of the user), `ApiKeyRevoked` (the key stays, `revoked`; an expired
//! one stays too, refused by its `expires_at`), `UserDisabled` and `UserEnabled` (`disabled`),
//! `UserRoleChanged`.
//! A user's email and a folder's name are decided here: the SQL account refuses a second
//! one; the in-memory account keeps the first, because the log holds only accepted ones.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::fold::exec;
use super::LedgerError;
use crate::catalogue::Event;
use crate::pg::copy_rows;
use crate::RecordedEvent;

/// Applies one of the family's events to the live tables, as [`record`](super::record) does.
pub(super) async fn apply_sql<C: GenericClient>(
    client: &C,
    event: &Event,
    at: DateTime<Utc>,
) -> Result<(), LedgerError> {
    match event {
        Event::UserCreated(e) => {
            let n = exec(
                client,
                "INSERT INTO ledger.users VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[
                    &e.user_id,
                    &e.email,
                    &e.role.as_str(),
                    &e.resource_policy,
                    &at,
                ],
            )
            .await?;
            if n == 0 {
                return Err(LedgerError::Exists {
                    what: "user",
                    name: e.email.clone(),
                });
            }
        }
        Event::FolderCreated(e) => {
            let n = exec(
                client,
                "INSERT INTO ledger.folders (owner, name, created_at, volume, usage_mode)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[&e.owner, &e.name, &at, &e.volume, &e.usage_mode.as_str()],
            )
            .await?;
            if n == 0 {
                return Err(LedgerError::Exists {
                    what: "folder",
                    name: e.name.clone(),
                });
            }
        }
        Event::FolderRenamed(e) => {
            // The name is the key: a taken one refuses the rename as a taken one refuses a
            // new folder (shares follow through the foreign key's ON UPDATE CASCADE).
            let taken = client
                .query_opt(
                    "SELECT 1 FROM ledger.folders WHERE owner = $1 AND name = $2",
                    &[&e.owner, &e.to],
                )
                .await?;
            if taken.is_some() {
                return Err(LedgerError::Exists {
                    what: "folder",
                    name: e.to.clone(),
                });
            }
            exec(
                client,
                "UPDATE ledger.folders SET name = $3 WHERE owner = $1 AND name = $2",
                &[&e.owner, &e.name, &e.to],
            )
            .await?;
        }
        Event::FolderTrashed(e) => {
            exec(
                client,
                "UPDATE ledger.folders SET trashed_at = $3 WHERE owner = $1 AND name = $2",
                &[&e.owner, &e.name, &at],
            )
            .await?;
        }
        Event::FolderRestored(e) => {
            exec(
                client,
                "UPDATE ledger.folders SET trashed_at = NULL WHERE owner = $1 AND name = $2",
                &[&e.owner, &e.name],
            )
            .await?;
        }
        Event::FolderPurged(e) => {
            exec(
                client,
                "DELETE FROM ledger.folders WHERE owner = $1 AND name = $2",
                &[&e.owner, &e.name],
            )
            .await?;
        }
        Event::FolderShared(e) => {
            let (kind, key) = e.grantee.parts();
            exec(
                client,
                "INSERT INTO ledger.folder_shares (owner, name, grantee_kind, grantee, permission)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (owner, name, grantee_kind, grantee)
                 DO UPDATE SET permission = EXCLUDED.permission",
                &[&e.owner, &e.name, &kind, &key, &e.permission.as_str()],
            )
            .await?;
        }
        Event::FolderUnshared(e) => {
            let (kind, key) = e.grantee.parts();
            exec(
                client,
                "DELETE FROM ledger.folder_shares
                 WHERE owner = $1 AND name = $2 AND grantee_kind = $3 AND grantee = $4",
                &[&e.owner, &e.name, &kind, &key],
            )
            .await?;
        }
        Event::ApiKeyIssued(e) => {
            exec(
                client,
                "INSERT INTO ledger.api_keys (key_sha256, key_prefix, user_id, expires_at)
                 VALUES ($1, $2, $3, $4)",
                &[&e.key_sha256, &e.key_prefix, &e.user_id, &e.expires_at],
            )
            .await?;
        }
        Event::ApiKeyRevoked(e) => {
            exec(
                client,
                "UPDATE ledger.api_keys SET revoked = true WHERE key_sha256 = $1",
                &[&e.key_sha256],
            )
            .await?;
        }
        Event::UserDisabled(e) => {
            exec(
                client,
                "UPDATE ledger.users SET disabled = true WHERE user_id = $1",
                &[&e.user_id],
            )
            .await?;
        }
        Event::UserEnabled(e) => {
            exec(
                client,
                "UPDATE ledger.users SET disabled = false WHERE user_id = $1",
                &[&e.user_id],
            )
            .await?;
        }
        Event::UserRoleChanged(e) => {
            exec(
                client,
                "UPDATE ledger.users SET role = $2 WHERE user_id = $1",
                &[&e.user_id, &e.to.as_str()],
            )
            .await?;
        }
        Event::ConsoleSignedOutEverywhere(e) => {
            exec(
                client,
                "DELETE FROM ledger.console_sign_ins WHERE user_id = $1",
                &[&e.user_id],
            )
            .await?;
        }
        Event::BackendAiKeypairIssued(e) => {
            exec(
                client,
                "INSERT INTO ledger.backendai_keypairs VALUES ($1, $2, true)",
                &[&e.access_key, &e.user_id],
            )
            .await?;
        }
        Event::BackendAiKeypairRevoked(e) => {
            exec(
                client,
                "UPDATE ledger.backendai_keypairs SET active = false WHERE access_key = $1",
                &[&e.access_key],
            )
            .await?;
        }
        Event::ProjectCreated(e) => {
            exec(
                client,
                "INSERT INTO ledger.projects VALUES ($1, $2)
                     ON CONFLICT (name) DO UPDATE SET description = $2",
                &[&e.name, &e.description],
            )
            .await?;
        }
        Event::UserJoinedProject(e) => {
            exec(
                client,
                "INSERT INTO ledger.project_members VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&e.project, &e.user_id],
            )
            .await?;
        }
        Event::UserPasswordSet(e) => {
            exec(
                client,
                // Who has a password; its hash is in `secrets.password_hashes`, not the log.
                "INSERT INTO ledger.user_passwords VALUES ($1) ON CONFLICT (user_id) DO NOTHING",
                &[&e.user_id],
            )
            .await?;
        }
        Event::ConsoleSignedIn(e) => {
            exec(
                client,
                "INSERT INTO ledger.console_sign_ins VALUES ($1, $2, $3, $4)",
                &[&e.token_sha256, &e.user_id, &e.how.as_str(), &e.expires_at],
            )
            .await?;
        }
        Event::ConsoleSignedOut(e) => {
            exec(
                client,
                "DELETE FROM ledger.console_sign_ins WHERE token_sha256 = $1",
                &[&e.token_sha256],
            )
            .await?;
        }
        other => unreachable!("`{}` is not an accounts event", other.event_type()),
    }
    Ok(())
}

pub(super) struct User {
    pub email: String,
    pub role: String,
    pub resource_policy: String,
    pub created_at: DateTime<Utc>,
    pub disabled: bool,
}

pub(super) struct ApiKey {
    pub prefix: String,
    pub user_id: Uuid,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked: bool,
}

/// The family's tables folded in memory, keyed by their primary keys.
#[derive(Default)]
pub(super) struct Tables {
    pub users: HashMap<Uuid, User>,
    /// Each folder by owner and name.
    pub folders: HashMap<(Uuid, String), Folder>,
    /// Each folder's shares: (owner, folder, grantee's kind, grantee) to the permission.
    pub folder_shares: HashMap<(Uuid, String, &'static str, String), &'static str>,
    /// Key digest to the key.
    pub api_keys: HashMap<String, ApiKey>,
    /// Backend.AI access key to (user, active).
    pub backendai_keypairs: HashMap<String, (Uuid, bool)>,
    /// Project name to description.
    pub projects: HashMap<String, String>,
    pub project_members: HashMap<(String, Uuid), ()>,
    /// The users who have a password (its hash is kept apart, in `secrets`).
    pub user_passwords: HashMap<Uuid, ()>,
    /// Token digest to the console sign-in.
    pub console_sign_ins: HashMap<String, SignIn>,
}

pub(super) struct Folder {
    pub created_at: DateTime<Utc>,
    /// None: host-local.
    pub volume: Option<String>,
    pub usage_mode: &'static str,
    pub trashed_at: Option<DateTime<Utc>>,
}

pub(super) struct SignIn {
    pub user_id: Uuid,
    pub how: &'static str,
    pub expires_at: DateTime<Utc>,
}

impl Tables {
    /// Folds one of the family's events in, as the replay does.
    pub(super) fn apply_in_memory(&mut self, recorded: &RecordedEvent) {
        let at = recorded.recorded_at;
        match &recorded.event {
            Event::UserCreated(e) => {
                self.users.entry(e.user_id).or_insert_with(|| User {
                    email: e.email.clone(),
                    role: e.role.as_str().to_owned(),
                    resource_policy: e.resource_policy.clone(),
                    created_at: at,
                    disabled: false,
                });
            }
            Event::FolderCreated(e) => {
                self.folders
                    .entry((e.owner, e.name.clone()))
                    .or_insert(Folder {
                        created_at: at,
                        volume: e.volume.clone(),
                        usage_mode: e.usage_mode.as_str(),
                        trashed_at: None,
                    });
            }
            Event::FolderRenamed(e) => {
                if self.folders.contains_key(&(e.owner, e.to.clone())) {
                    return;
                }
                if let Some(folder) = self.folders.remove(&(e.owner, e.name.clone())) {
                    self.folders.insert((e.owner, e.to.clone()), folder);
                    self.folder_shares = std::mem::take(&mut self.folder_shares)
                        .into_iter()
                        .map(|((owner, name, kind, key), permission)| {
                            let name = if owner == e.owner && name == e.name {
                                e.to.clone()
                            } else {
                                name
                            };
                            ((owner, name, kind, key), permission)
                        })
                        .collect();
                }
            }
            Event::FolderTrashed(e) => {
                if let Some(folder) = self.folders.get_mut(&(e.owner, e.name.clone())) {
                    folder.trashed_at = Some(at);
                }
            }
            Event::FolderRestored(e) => {
                if let Some(folder) = self.folders.get_mut(&(e.owner, e.name.clone())) {
                    folder.trashed_at = None;
                }
            }
            Event::FolderPurged(e) => {
                self.folders.remove(&(e.owner, e.name.clone()));
                self.folder_shares
                    .retain(|(owner, name, _, _), _| !(*owner == e.owner && *name == e.name));
            }
            Event::FolderShared(e) => {
                let (kind, key) = e.grantee.parts();
                self.folder_shares
                    .insert((e.owner, e.name.clone(), kind, key), e.permission.as_str());
            }
            Event::FolderUnshared(e) => {
                let (kind, key) = e.grantee.parts();
                self.folder_shares
                    .remove(&(e.owner, e.name.clone(), kind, key));
            }
            Event::ApiKeyIssued(e) => {
                self.api_keys.insert(
                    e.key_sha256.clone(),
                    ApiKey {
                        prefix: e.key_prefix.clone(),
                        user_id: e.user_id,
                        expires_at: e.expires_at,
                        revoked: false,
                    },
                );
            }
            Event::ApiKeyRevoked(e) => {
                if let Some(key) = self.api_keys.get_mut(&e.key_sha256) {
                    key.revoked = true;
                }
            }
            Event::UserDisabled(e) => {
                if let Some(user) = self.users.get_mut(&e.user_id) {
                    user.disabled = true;
                }
            }
            Event::UserEnabled(e) => {
                if let Some(user) = self.users.get_mut(&e.user_id) {
                    user.disabled = false;
                }
            }
            Event::UserRoleChanged(e) => {
                if let Some(user) = self.users.get_mut(&e.user_id) {
                    user.role = e.to.as_str().to_owned();
                }
            }
            Event::ConsoleSignedOutEverywhere(e) => {
                self.console_sign_ins.retain(|_, s| s.user_id != e.user_id);
            }
            Event::BackendAiKeypairIssued(e) => {
                self.backendai_keypairs
                    .insert(e.access_key.clone(), (e.user_id, true));
            }
            Event::BackendAiKeypairRevoked(e) => {
                if let Some((_, active)) = self.backendai_keypairs.get_mut(&e.access_key) {
                    *active = false;
                }
            }
            Event::ProjectCreated(e) => {
                self.projects.insert(e.name.clone(), e.description.clone());
            }
            Event::UserJoinedProject(e) => {
                self.project_members
                    .insert((e.project.clone(), e.user_id), ());
            }
            Event::UserPasswordSet(e) => {
                self.user_passwords.insert(e.user_id, ());
            }
            Event::ConsoleSignedIn(e) => {
                self.console_sign_ins.insert(
                    e.token_sha256.clone(),
                    SignIn {
                        user_id: e.user_id,
                        how: e.how.as_str(),
                        expires_at: e.expires_at,
                    },
                );
            }
            Event::ConsoleSignedOut(e) => {
                self.console_sign_ins.remove(&e.token_sha256);
            }
            other => unreachable!("`{}` is not an accounts event", other.event_type()),
        }
    }

    /// Writes the tables into `schema` (the replay's scratch copy).
    pub(super) async fn copy_into(
        &self,
        tx: &Transaction<'_>,
        schema: &str,
    ) -> Result<(), tokio_postgres::Error> {
        copy_rows(
            tx,
            &format!("{schema}.users"),
            [
                "user_id",
                "email",
                "role",
                "resource_policy",
                "created_at",
                "disabled",
            ],
            &self
                .users
                .iter()
                .map(|(id, u)| -> [&(dyn ToSql + Sync); 6] {
                    [
                        id,
                        &u.email,
                        &u.role,
                        &u.resource_policy,
                        &u.created_at,
                        &u.disabled,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.folders"),
            [
                "owner",
                "name",
                "created_at",
                "volume",
                "usage_mode",
                "trashed_at",
            ],
            &self
                .folders
                .iter()
                .map(|((owner, name), f)| -> [&(dyn ToSql + Sync); 6] {
                    [
                        owner,
                        name,
                        &f.created_at,
                        &f.volume,
                        &f.usage_mode,
                        &f.trashed_at,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.folder_shares"),
            ["owner", "name", "grantee_kind", "grantee", "permission"],
            &self
                .folder_shares
                .iter()
                .map(
                    |((owner, name, kind, key), permission)| -> [&(dyn ToSql + Sync); 5] {
                        [owner, name, kind, key, permission]
                    },
                )
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.api_keys"),
            [
                "key_sha256",
                "key_prefix",
                "user_id",
                "expires_at",
                "revoked",
            ],
            &self
                .api_keys
                .iter()
                .map(|(digest, k)| -> [&(dyn ToSql + Sync); 5] {
                    [digest, &k.prefix, &k.user_id, &k.expires_at, &k.revoked]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.backendai_keypairs"),
            ["access_key", "user_id", "active"],
            &self
                .backendai_keypairs
                .iter()
                .map(|(key, (user, active))| -> [&(dyn ToSql + Sync); 3] { [key, user, active] })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.projects"),
            ["name", "description"],
            &self
                .projects
                .iter()
                .map(|(name, description)| -> [&(dyn ToSql + Sync); 2] { [name, description] })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.project_members"),
            ["project", "user_id"],
            &self
                .project_members
                .keys()
                .map(|(project, user)| -> [&(dyn ToSql + Sync); 2] { [project, user] })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.user_passwords"),
            ["user_id"],
            &self
                .user_passwords
                .keys()
                .map(|user| -> [&(dyn ToSql + Sync); 1] { [user] })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.console_sign_ins"),
            ["token_sha256", "user_id", "how", "expires_at"],
            &self
                .console_sign_ins
                .iter()
                .map(|(digest, s)| -> [&(dyn ToSql + Sync); 4] {
                    [digest, &s.user_id, &s.how, &s.expires_at]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }
}
