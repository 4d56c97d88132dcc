//! The launches family: each user's create requests, kept whole so that one can be launched
//! again, with the name and the pin the user gave it (the launcher's "Recent History").
//!
//! Table: `launches`. Changed by `LaunchRecorded` (in the transaction that records the
//! sessions the request made), `LaunchRenamed` and `LaunchPinned`. A rename or a pin of a
//! launch the table lacks changes nothing, in both accounts. And `fit_watches`, the shapes
//! users watch ("notify me when it fits"): made by `FitWatchRequested`, gone with
//! `FitWatchFired`.

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

/// Applies one of the family's events to the live table, as [`record`](super::record) does.
pub(super) async fn apply_sql<C: GenericClient>(
    client: &C,
    event: &Event,
    at: DateTime<Utc>,
) -> Result<(), LedgerError> {
    match event {
        Event::LaunchRecorded(e) => {
            exec(
                client,
                "INSERT INTO ledger.launches (launch_id, user_id, request, sessions, created_at)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[&e.launch_id, &e.user_id, &e.request, &e.sessions, &at],
            )
            .await?;
        }
        Event::LaunchRenamed(e) => {
            exec(
                client,
                "UPDATE ledger.launches SET label = $2 WHERE launch_id = $1",
                &[&e.launch_id, &e.label],
            )
            .await?;
        }
        Event::LaunchPinned(e) => {
            exec(
                client,
                "UPDATE ledger.launches SET pinned = $2 WHERE launch_id = $1",
                &[&e.launch_id, &e.pinned],
            )
            .await?;
        }
        Event::FitWatchRequested(e) => {
            exec(
                client,
                "INSERT INTO ledger.fit_watches VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT DO NOTHING",
                &[
                    &e.watch_id,
                    &e.owner,
                    &e.resource_group,
                    &serde_json::to_value(e.shape).expect("a shape serialises"),
                    &e.label,
                    &at,
                ],
            )
            .await?;
        }
        Event::FitWatchFired(e) => {
            exec(
                client,
                "DELETE FROM ledger.fit_watches WHERE watch_id = $1",
                &[&e.watch_id],
            )
            .await?;
        }
        other => unreachable!("`{}` is not a launches event", other.event_type()),
    }
    Ok(())
}

/// A shape a user watches.
pub(super) struct FitWatch {
    pub owner: Uuid,
    pub resource_group: String,
    pub shape: serde_json::Value,
    pub label: String,
    pub requested_at: DateTime<Utc>,
}

pub(super) struct Launch {
    pub user_id: Uuid,
    pub request: serde_json::Value,
    pub sessions: Vec<Uuid>,
    pub label: Option<String>,
    pub pinned: bool,
    pub created_at: DateTime<Utc>,
}

/// The family's table folded in memory, keyed by launch id.
#[derive(Default)]
pub(super) struct Tables {
    pub launches: HashMap<Uuid, Launch>,
    pub fit_watches: HashMap<Uuid, FitWatch>,
}

impl Tables {
    /// Folds one of the family's events in, as the replay does.
    pub(super) fn apply_in_memory(&mut self, recorded: &RecordedEvent) {
        match &recorded.event {
            Event::LaunchRecorded(e) => {
                self.launches.entry(e.launch_id).or_insert_with(|| Launch {
                    user_id: e.user_id,
                    request: e.request.clone(),
                    sessions: e.sessions.clone(),
                    label: None,
                    pinned: false,
                    created_at: recorded.recorded_at,
                });
            }
            Event::LaunchRenamed(e) => {
                if let Some(launch) = self.launches.get_mut(&e.launch_id) {
                    launch.label = e.label.clone();
                }
            }
            Event::LaunchPinned(e) => {
                if let Some(launch) = self.launches.get_mut(&e.launch_id) {
                    launch.pinned = e.pinned;
                }
            }
            Event::FitWatchRequested(e) => {
                self.fit_watches
                    .entry(e.watch_id)
                    .or_insert_with(|| FitWatch {
                        owner: e.owner,
                        resource_group: e.resource_group.clone(),
                        shape: serde_json::to_value(e.shape).expect("a shape serialises"),
                        label: e.label.clone(),
                        requested_at: recorded.recorded_at,
                    });
            }
            Event::FitWatchFired(e) => {
                self.fit_watches.remove(&e.watch_id);
            }
            other => unreachable!("`{}` is not a launches event", other.event_type()),
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
            &format!("{schema}.launches"),
            [
                "launch_id",
                "user_id",
                "request",
                "sessions",
                "label",
                "pinned",
                "created_at",
            ],
            &self
                .launches
                .iter()
                .map(|(id, l)| -> [&(dyn ToSql + Sync); 7] {
                    [
                        id,
                        &l.user_id,
                        &l.request,
                        &l.sessions,
                        &l.label,
                        &l.pinned,
                        &l.created_at,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.fit_watches"),
            [
                "watch_id",
                "owner",
                "resource_group",
                "shape",
                "label",
                "requested_at",
            ],
            &self
                .fit_watches
                .iter()
                .map(|(id, w)| -> [&(dyn ToSql + Sync); 6] {
                    [
                        id,
                        &w.owner,
                        &w.resource_group,
                        &w.shape,
                        &w.label,
                        &w.requested_at,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }
}
