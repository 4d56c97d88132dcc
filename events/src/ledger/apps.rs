//! The apps family: the apps started in sessions and the app proxy's open circuits to them.
//!
//! Tables: `circuits` and `app_services`. Changed by `AppCircuitOpened` and
//! `AppCircuitClosed` (one open circuit per proxy port: two gateways racing for a port meet
//! here, and the second append fails), `AppStartEnded` (an app started, with its secret) and
//! `SessionResourcesReleased` of the sessions family (a released session's apps are gone).
//! `AppStartRequested` and `AppStartEnded` are events of the session's stream, so they move
//! the session's version too (`sessions`).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::fold::exec;
use super::sessions::{self, SessionPatch};
use super::{i64_of, name_of, LedgerError};
use crate::catalogue::Event;
use crate::payloads::*;
use crate::pg::copy_rows;
use crate::RecordedEvent;

/// Applies one of the family's events to the live tables, as [`record`](super::record) does.
pub(super) async fn apply_sql<C: GenericClient>(
    client: &C,
    patch: &mut SessionPatch,
    event: &Event,
    stream_version: u64,
    at: DateTime<Utc>,
) -> Result<(), LedgerError> {
    match event {
        Event::AppCircuitOpened(e) => {
            patch.flush(client).await?;
            let admission = serde_json::to_value(&e.admission).expect("admissions serialise");
            exec(
                client,
                "INSERT INTO ledger.circuits VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &e.circuit_id,
                    &e.session_id,
                    &e.owner,
                    &e.app,
                    &name_of(&e.protocol),
                    &i32::from(e.container_port),
                    &i32::from(e.port),
                    &admission,
                    &at,
                ],
            )
            .await?;
        }
        Event::AppCircuitClosed(e) => {
            patch.flush(client).await?;
            exec(
                client,
                "DELETE FROM ledger.circuits WHERE circuit_id = $1",
                &[&e.circuit_id],
            )
            .await?;
        }
        Event::AppStartRequested(e) => patch.enter(client, e.session_id, stream_version).await?,
        Event::AppStartEnded(e) => {
            patch.enter(client, e.session_id, stream_version).await?;
            if let AppStartEnd::Started { .. } = &e.outcome {
                // Its secret, if any, is in `secrets.app_tokens` (the recorder keeps it there).
                exec(
                    client,
                    "INSERT INTO ledger.app_services VALUES ($1, $2, $3)
                     ON CONFLICT (session_id, app) DO NOTHING",
                    &[&e.session_id, &e.app, &at],
                )
                .await?;
            }
        }
        other => unreachable!("`{}` is not an apps event", other.event_type()),
    }
    Ok(())
}

/// A released session's apps are gone (its `SessionResourcesReleased`), and with them the
/// SSH key its agent made, a secret no one needs once its container is gone.
pub(super) async fn session_released_sql<C: GenericClient>(
    client: &C,
    session_id: Uuid,
) -> Result<(), LedgerError> {
    exec(
        client,
        "DELETE FROM ledger.app_services WHERE session_id = $1",
        &[&session_id],
    )
    .await?;
    exec(
        client,
        "DELETE FROM secrets.ssh_keys WHERE session_id = $1",
        &[&session_id],
    )
    .await?;
    Ok(())
}

pub(super) struct Circuit {
    pub session_id: Uuid,
    pub owner: Uuid,
    pub app: String,
    pub protocol: String,
    pub container_port: i32,
    pub port: i32,
    pub admission: serde_json::Value,
    pub opened_at: DateTime<Utc>,
}

pub(super) struct AppService {
    pub started_at: DateTime<Utc>,
}

/// The family's tables folded in memory, keyed by their primary keys.
#[derive(Default)]
pub(super) struct Tables {
    pub circuits: HashMap<Uuid, Circuit>,
    pub app_services: HashMap<(Uuid, String), AppService>,
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
            Event::AppCircuitOpened(e) => {
                self.circuits.insert(
                    e.circuit_id,
                    Circuit {
                        session_id: e.session_id,
                        owner: e.owner,
                        app: e.app.clone(),
                        protocol: name_of(&e.protocol),
                        container_port: i32::from(e.container_port),
                        port: i32::from(e.port),
                        admission: serde_json::to_value(&e.admission)
                            .expect("admissions serialise"),
                        opened_at: at,
                    },
                );
            }
            Event::AppCircuitClosed(e) => {
                self.circuits.remove(&e.circuit_id);
            }
            Event::AppStartRequested(e) => sessions.change(e.session_id, version, |_| {}),
            Event::AppStartEnded(e) => {
                if let AppStartEnd::Started { .. } = &e.outcome {
                    self.app_services
                        .entry((e.session_id, e.app.clone()))
                        .or_insert(AppService { started_at: at });
                }
                sessions.change(e.session_id, version, |_| {});
            }
            other => unreachable!("`{}` is not an apps event", other.event_type()),
        }
    }

    /// A released session's apps are gone (its `SessionResourcesReleased`).
    pub(super) fn session_released(&mut self, session_id: Uuid) {
        self.app_services.retain(|(s, _), _| *s != session_id);
    }

    /// Writes the tables into `schema` (the replay's scratch copy).
    pub(super) async fn copy_into(
        &self,
        tx: &Transaction<'_>,
        schema: &str,
    ) -> Result<(), tokio_postgres::Error> {
        copy_rows(
            tx,
            &format!("{schema}.circuits"),
            [
                "circuit_id",
                "session_id",
                "owner",
                "app",
                "protocol",
                "container_port",
                "port",
                "admission",
                "opened_at",
            ],
            &self
                .circuits
                .iter()
                .map(|(id, c)| -> [&(dyn ToSql + Sync); 9] {
                    [
                        id,
                        &c.session_id,
                        &c.owner,
                        &c.app,
                        &c.protocol,
                        &c.container_port,
                        &c.port,
                        &c.admission,
                        &c.opened_at,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.app_services"),
            ["session_id", "app", "started_at"],
            &self
                .app_services
                .iter()
                .map(|((session, app), a)| -> [&(dyn ToSql + Sync); 3] {
                    [session, app, &a.started_at]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }
}
