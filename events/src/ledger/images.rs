//! The images family: the customized images that committed sessions made, per owner.
//!
//! Table: `custom_images`. Changed by `SessionCommitEnded` (an image made, or made again
//! under the same name) and `CustomImageRemoved` (by its owner). `SessionCommitRequested`,
//! `SessionCommitProgressed` and `SessionCommitEnded` are events of the session's stream, so
//! they move the session's version too (`sessions`).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::fold::exec;
use super::sessions::{self, SessionPatch};
use super::{i64_of, LedgerError};
use crate::catalogue::Event;
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
            patch.enter(client, e.session_id, stream_version).await?
        }
        Event::SessionCommitProgressed(e) => {
            patch.enter(client, e.session_id, stream_version).await?
        }
        Event::SessionCommitEnded(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            if let CommitOutcome::Done {
                image_id,
                size_bytes,
                ..
            } = &e.outcome
            {
                exec(
                    client,
                    "INSERT INTO ledger.custom_images VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (image) DO UPDATE SET owner = $2, session_id = $3,
                       agent_id = $4, image_id = $5, size_bytes = $6, created_at = $7",
                    &[
                        &e.image,
                        &e.owner,
                        &e.session_id,
                        &e.agent_id,
                        image_id,
                        &i64_of(*size_bytes),
                        &at,
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
        other => unreachable!("`{}` is not an images event", other.event_type()),
    }
    Ok(())
}

pub(super) struct CustomImage {
    pub owner: Uuid,
    pub session_id: Uuid,
    pub agent_id: Option<String>,
    pub image_id: String,
    pub size_bytes: i64,
    pub created_at: DateTime<Utc>,
}

/// The family's table folded in memory, keyed by image name.
#[derive(Default)]
pub(super) struct Tables {
    pub custom_images: HashMap<String, CustomImage>,
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
            Event::SessionCommitRequested(e) => sessions.change(e.session_id, version, |_| {}),
            Event::SessionCommitProgressed(e) => sessions.change(e.session_id, version, |_| {}),
            Event::SessionCommitEnded(e) => {
                if let CommitOutcome::Done {
                    image_id,
                    size_bytes,
                    ..
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
            ],
            &self
                .custom_images
                .iter()
                .map(|(image, i)| -> [&(dyn ToSql + Sync); 7] {
                    [
                        image,
                        &i.owner,
                        &i.session_id,
                        &i.agent_id,
                        &i.image_id,
                        &i.size_bytes,
                        &i.created_at,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }
}
