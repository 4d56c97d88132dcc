//! The images family: the customized images that committed sessions made, per owner.
//!
//! Tables: `custom_images`, changed by `SessionCommitEnded` (an image made) and
//! `CustomImageRemoved` (by its owner); and `image_claims`, the names commits under way have
//! taken: claimed by `SessionCommitRequested`, let go by `SessionCommitEnded`; and
//! `registries`, those an admin stored a credential for (`RegistryCredentialSet`,
//! `RegistryCredentialRemoved`), whose images are offered to everyone. The credential's
//! password is not in the event: [`keep_registry_password`] keeps it in the `secrets` schema
//! in the transaction that records it. And `image_listings`: how an admin listed an image in
//! the catalogue (`ImageListingSet`; listed as its labels say, the row is removed).
//! `SessionCommitRequested`, `SessionCommitProgressed` and `SessionCommitEnded` are events of
//! the session's stream, so they move the session's version too (`sessions`).
//!
//! The claim is where the owner's limit holds under concurrency: it is made under a lock per
//! owner, in the transaction that records the request, and refused when the name is taken
//! (by an image or another claim) or when the owner's images and claims would pass their
//! policy's most. The gateway checks both first, for a clear answer; two requests racing past
//! that check meet here, and the second is refused whole.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::fold::exec;
use super::sessions::{self, SessionPatch};
use super::{i64_of, LedgerError};
use crate::catalogue::Event;
use crate::images::ImageListing;
use crate::payloads::*;
use crate::pg::copy_rows;
use crate::RecordedEvent;

/// Applies one of the family's events to the live table, as [`record`](super::record) does.
pub(super) async fn apply_sql<C: GenericClient>(
    client: &C,
    patch: &mut SessionPatch,
    event: &Event,
    stream_version: u64,
    at: DateTime<Utc>,
) -> Result<(), LedgerError> {
    match event {
        Event::SessionCommitRequested(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            claim(client, e).await?;
        }
        Event::SessionCommitProgressed(e) => {
            patch.enter(client, e.session_id, stream_version).await?
        }
        Event::SessionCommitEnded(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            exec(
                client,
                "DELETE FROM ledger.image_claims WHERE image = $1 AND commit_id = $2",
                &[&e.image, &e.commit_id],
            )
            .await?;
            if let CommitOutcome::Done {
                image_id,
                size_bytes,
                pushed,
            } = &e.outcome
            {
                exec(
                    client,
                    "INSERT INTO ledger.custom_images
                       (image, owner, session_id, agent_id, image_id, size_bytes, created_at, pushed)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT (image) DO UPDATE SET owner = $2, session_id = $3,
                       agent_id = $4, image_id = $5, size_bytes = $6, created_at = $7, pushed = $8",
                    &[
                        &e.image,
                        &e.owner,
                        &e.session_id,
                        &e.agent_id,
                        image_id,
                        &i64_of(*size_bytes),
                        &at,
                        pushed,
                    ],
                )
                .await?;
            }
        }
        Event::CustomImageRemoved(e) => {
            patch.flush(client).await?;
            exec(
                client,
                "DELETE FROM ledger.custom_images WHERE image = $1 AND owner = $2",
                &[&e.image, &e.owner],
            )
            .await?;
        }
        Event::RegistryCredentialSet(e) => {
            patch.flush(client).await?;
            exec(
                client,
                "INSERT INTO ledger.registries VALUES ($1, $2, $3)
                 ON CONFLICT (registry) DO UPDATE SET username = $2, set_at = $3",
                &[&e.registry, &e.username, &at],
            )
            .await?;
        }
        Event::RegistryCredentialRemoved(e) => {
            patch.flush(client).await?;
            exec(
                client,
                "DELETE FROM ledger.registries WHERE registry = $1",
                &[&e.registry],
            )
            .await?;
        }
        Event::ImageListingSet(e) => {
            patch.flush(client).await?;
            match listing_column(e.listing) {
                Some(listing) => {
                    exec(
                        client,
                        "INSERT INTO ledger.image_listings VALUES ($1, $2)
                         ON CONFLICT (image) DO UPDATE SET listing = $2",
                        &[&e.image, &listing],
                    )
                    .await?
                }
                None => {
                    exec(
                        client,
                        "DELETE FROM ledger.image_listings WHERE image = $1",
                        &[&e.image],
                    )
                    .await?
                }
            };
        }
        other => unreachable!("`{}` is not an images event", other.event_type()),
    }
    Ok(())
}

/// Keeps `registry`'s credential apart from the log: call it in the transaction that records
/// its `RegistryCredentialSet` (which names the user alone). `None` forgets it, with its
/// `RegistryCredentialRemoved`.
pub async fn keep_registry_password<C: GenericClient>(
    client: &C,
    registry: &str,
    login: Option<(&str, &str)>,
) -> Result<(), LedgerError> {
    match login {
        Some((username, password)) => {
            exec(
                client,
                "INSERT INTO secrets.registry_credentials VALUES ($1, $2, $3)
                 ON CONFLICT (registry) DO UPDATE SET username = $2, password = $3",
                &[&registry, &username, &password],
            )
            .await?
        }
        None => {
            exec(
                client,
                "DELETE FROM secrets.registry_credentials WHERE registry = $1",
                &[&registry],
            )
            .await?
        }
    };
    Ok(())
}

/// The user and password agents pull `registry`'s images with, when an admin stored them.
pub async fn registry_login<C: GenericClient>(
    client: &C,
    registry: &str,
) -> Result<Option<(String, String)>, LedgerError> {
    let row = client
        .query_opt(
            "SELECT username, password FROM secrets.registry_credentials WHERE registry = $1",
            &[&registry],
        )
        .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// How `image_listings` spells a listing; `None`: as the labels say, which has no row.
fn listing_column(listing: ImageListing) -> Option<&'static str> {
    match listing {
        ImageListing::Labels => None,
        ImageListing::Shown => Some("shown"),
        ImageListing::Hidden => Some("hidden"),
    }
}

/// The listing `image_listings.listing` spells (read through a `LEFT JOIN`: no row, as the
/// labels say).
pub fn listing_of_column(column: Option<&str>) -> ImageListing {
    match column {
        Some("shown") => ImageListing::Shown,
        Some("hidden") => ImageListing::Hidden,
        _ => ImageListing::Labels,
    }
}

/// Claims the image's name for the commit, under the owner's lock: refused when the name is
/// taken or the owner's images and claims would pass their policy's most.
async fn claim<C: GenericClient>(
    client: &C,
    e: &SessionCommitRequested,
) -> Result<(), LedgerError> {
    client
        .execute(
            "SELECT pg_advisory_xact_lock(hashtext('berth.image_claims'), hashtext($1::uuid::text))",
            &[&e.owner],
        )
        .await?;
    let claimed = exec(
        client,
        "INSERT INTO ledger.image_claims
         SELECT $1, $2, $3, $4
          WHERE NOT EXISTS (SELECT 1 FROM ledger.custom_images WHERE image = $1)
         ON CONFLICT DO NOTHING",
        &[&e.image, &e.owner, &e.session_id, &e.commit_id],
    )
    .await?;
    if claimed == 0 {
        return Err(LedgerError::Exists {
            what: "image",
            name: e.name.clone(),
        });
    }
    let row = client
        .query_opt(
            "SELECT p.max_custom_images,
                    (SELECT count(*) FROM ledger.custom_images WHERE owner = $1)
                  + (SELECT count(*) FROM ledger.image_claims WHERE owner = $1)
             FROM ledger.users u LEFT JOIN ledger.policies p ON p.name = u.resource_policy
             WHERE u.user_id = $1",
            &[&e.owner],
        )
        .await?;
    // An owner the ledger does not know has no policy, so no most.
    let (most, held): (Option<i32>, i64) = row.map_or((None, 0), |r| (r.get(0), r.get(1)));
    match most {
        Some(most) if held > i64::from(most) => Err(LedgerError::LimitReached {
            what: "customized images",
            most: i64::from(most),
        }),
        _ => Ok(()),
    }
}

pub(super) struct CustomImage {
    pub owner: Uuid,
    pub session_id: Uuid,
    pub agent_id: Option<String>,
    pub image_id: String,
    pub size_bytes: i64,
    pub created_at: DateTime<Utc>,
    /// In the stack's registry, where every agent can pull it.
    pub pushed: bool,
}

/// A name a commit under way holds.
pub(super) struct Claim {
    pub owner: Uuid,
    pub session_id: Uuid,
    pub commit_id: Uuid,
}

/// The family's tables folded in memory, keyed by image name.
#[derive(Default)]
pub(super) struct Tables {
    pub custom_images: HashMap<String, CustomImage>,
    pub image_claims: HashMap<String, Claim>,
    /// Registry → the user its credential names and when it was set.
    pub registries: HashMap<String, (String, DateTime<Utc>)>,
    /// Image → how an admin listed it, where not as its labels say.
    pub image_listings: HashMap<String, &'static str>,
}

impl Tables {
    /// Folds one of the family's events in, as the replay does, moving the version of the
    /// session among `sessions` whose stream it is in.
    pub(super) fn apply_in_memory(
        &mut self,
        sessions: &mut sessions::Tables,
        recorded: &RecordedEvent,
    ) {
        let at = recorded.recorded_at;
        let version = i64_of(recorded.stream_version);
        match &recorded.event {
            Event::SessionCommitRequested(e) => {
                // The log holds only requests the claim let through.
                self.image_claims.insert(
                    e.image.clone(),
                    Claim {
                        owner: e.owner,
                        session_id: e.session_id,
                        commit_id: e.commit_id,
                    },
                );
                sessions.change(e.session_id, version, |_| {});
            }
            Event::SessionCommitProgressed(e) => sessions.change(e.session_id, version, |_| {}),
            Event::SessionCommitEnded(e) => {
                if self
                    .image_claims
                    .get(&e.image)
                    .is_some_and(|c| c.commit_id == e.commit_id)
                {
                    self.image_claims.remove(&e.image);
                }
                if let CommitOutcome::Done {
                    image_id,
                    size_bytes,
                    pushed,
                } = &e.outcome
                {
                    self.custom_images.insert(
                        e.image.clone(),
                        CustomImage {
                            owner: e.owner,
                            session_id: e.session_id,
                            agent_id: e.agent_id.clone(),
                            image_id: image_id.clone(),
                            size_bytes: i64_of(*size_bytes),
                            created_at: at,
                            pushed: *pushed,
                        },
                    );
                }
                sessions.change(e.session_id, version, |_| {});
            }
            Event::CustomImageRemoved(e) => {
                if self
                    .custom_images
                    .get(&e.image)
                    .is_some_and(|i| i.owner == e.owner)
                {
                    self.custom_images.remove(&e.image);
                }
            }
            Event::RegistryCredentialSet(e) => {
                self.registries
                    .insert(e.registry.clone(), (e.username.clone(), at));
            }
            Event::RegistryCredentialRemoved(e) => {
                self.registries.remove(&e.registry);
            }
            Event::ImageListingSet(e) => match listing_column(e.listing) {
                Some(listing) => {
                    self.image_listings.insert(e.image.clone(), listing);
                }
                None => {
                    self.image_listings.remove(&e.image);
                }
            },
            other => unreachable!("`{}` is not an images event", other.event_type()),
        }
    }

    /// Writes the table into `schema` (the replay's scratch copy).
    pub(super) async fn copy_into(
        &self,
        tx: &Transaction<'_>,
        schema: &str,
    ) -> Result<(), tokio_postgres::Error> {
        copy_rows(
            tx,
            &format!("{schema}.custom_images"),
            [
                "image",
                "owner",
                "session_id",
                "agent_id",
                "image_id",
                "size_bytes",
                "created_at",
                "pushed",
            ],
            &self
                .custom_images
                .iter()
                .map(|(image, i)| -> [&(dyn ToSql + Sync); 8] {
                    [
                        image,
                        &i.owner,
                        &i.session_id,
                        &i.agent_id,
                        &i.image_id,
                        &i.size_bytes,
                        &i.created_at,
                        &i.pushed,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.image_claims"),
            ["image", "owner", "session_id", "commit_id"],
            &self
                .image_claims
                .iter()
                .map(|(image, c)| -> [&(dyn ToSql + Sync); 4] {
                    [image, &c.owner, &c.session_id, &c.commit_id]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.registries"),
            ["registry", "username", "set_at"],
            &self
                .registries
                .iter()
                .map(|(registry, (username, at))| -> [&(dyn ToSql + Sync); 3] {
                    [registry, username, at]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.image_listings"),
            ["image", "listing"],
            &self
                .image_listings
                .iter()
                .map(|(image, listing)| -> [&(dyn ToSql + Sync); 2] { [image, listing] })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }
}
