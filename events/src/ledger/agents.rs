//! The agents family: the hosts sessions run on, what they offer, and whether the scheduler
//! may place on them.
//!
//! Table: `agents`. Changed by `AgentRegistered` (registering again keeps what the agent
//! holds and when it first came, and clears `lost`), `AgentHeartbeated`, `AgentLost`,
//! `AgentDeparted` (a departed agent is offered no more, as a lost one, until it registers
//! again), `AgentReturned` and `AgentRevoked` (a revoked agent is offered no more, as a lost
//! one). The `used_*` columns,
//! what the agent's kernels hold, are moved by the sessions family as kernels are placed and
//! released (`sessions`).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::types::ToSql;

use super::fold::exec;
use super::{i64_of, LedgerError};
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
        Event::AgentRegistered(e) => {
            exec(
                client,
                "INSERT INTO ledger.agents (agent_id, resource_group, cpu_milli, memory_bytes,
                       gpu_milli, images, registered_at, last_heartbeat, address, image_apps,
                       network_scope, volumes, unlabelled_images)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10, $11, $12)
                     ON CONFLICT (agent_id) DO UPDATE SET resource_group = $2, cpu_milli = $3,
                       memory_bytes = $4, gpu_milli = $5, images = $6, last_heartbeat = $7,
                       lost = NULL, address = $8, image_apps = $9, network_scope = $10,
                       volumes = $11, unlabelled_images = $12",
                &[
                    &e.agent_id,
                    &e.resource_group,
                    &i64_of(e.capacity.cpu_milli),
                    &i64_of(e.capacity.memory_bytes),
                    &i64_of(e.capacity.gpu_milli),
                    &e.images,
                    &at,
                    &e.address,
                    &serde_json::to_value(&e.image_apps).expect("apps serialise"),
                    &e.network_scope,
                    &e.volumes,
                    &e.unlabelled_images,
                ],
            )
            .await?;
        }
        Event::AgentHeartbeated(e) => {
            exec(
                client,
                "UPDATE ledger.agents SET last_heartbeat = greatest(last_heartbeat, $2)
                     WHERE agent_id = $1",
                &[&e.agent_id, &e.at],
            )
            .await?;
        }
        Event::AgentLost(e) => {
            exec(
                client,
                "UPDATE ledger.agents SET lost = $2 WHERE agent_id = $1",
                &[&e.agent_id, &e.reason],
            )
            .await?;
        }
        Event::AgentDeparted(e) => {
            exec(
                client,
                "UPDATE ledger.agents SET lost = $2 WHERE agent_id = $1",
                &[&e.agent_id, &e.lost()],
            )
            .await?;
        }
        Event::AgentReturned(e) => {
            exec(
                client,
                "UPDATE ledger.agents SET lost = NULL WHERE agent_id = $1",
                &[&e.agent_id],
            )
            .await?;
        }
        Event::AgentRevoked(e) => {
            exec(
                client,
                "UPDATE ledger.agents SET lost = $2 WHERE agent_id = $1",
                &[&e.agent_id, &format!("revoked: {}", e.reason)],
            )
            .await?;
        }
        other => unreachable!("`{}` is not an agents event", other.event_type()),
    }
    Ok(())
}

pub(super) struct Agent {
    pub resource_group: String,
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub gpu_milli: i64,
    pub used_cpu_milli: i64,
    pub used_memory_bytes: i64,
    pub used_gpu_milli: i64,
    pub images: Vec<String>,
    pub registered_at: DateTime<Utc>,
    pub last_heartbeat: DateTime<Utc>,
    pub lost: Option<String>,
    pub address: Option<String>,
    pub image_apps: serde_json::Value,
    pub network_scope: Option<String>,
    pub volumes: Vec<String>,
    pub unlabelled_images: Vec<String>,
}

/// The family's table folded in memory, keyed by agent id.
#[derive(Default)]
pub(super) struct Tables {
    pub agents: HashMap<String, Agent>,
}

impl Tables {
    /// Folds one of the family's events in, as the replay does.
    pub(super) fn apply_in_memory(&mut self, recorded: &RecordedEvent) {
        let at = recorded.recorded_at;
        match &recorded.event {
            Event::AgentRegistered(e) => {
                let image_apps = serde_json::to_value(&e.image_apps).expect("apps serialise");
                match self.agents.get_mut(&e.agent_id) {
                    // Registering again keeps what the agent holds and when it first came.
                    Some(a) => {
                        a.resource_group = e.resource_group.clone();
                        a.cpu_milli = i64_of(e.capacity.cpu_milli);
                        a.memory_bytes = i64_of(e.capacity.memory_bytes);
                        a.gpu_milli = i64_of(e.capacity.gpu_milli);
                        a.images = e.images.clone();
                        a.last_heartbeat = at;
                        a.lost = None;
                        a.address = e.address.clone();
                        a.image_apps = image_apps;
                        a.network_scope = e.network_scope.clone();
                        a.volumes = e.volumes.clone();
                        a.unlabelled_images = e.unlabelled_images.clone();
                    }
                    None => {
                        self.agents.insert(
                            e.agent_id.clone(),
                            Agent {
                                resource_group: e.resource_group.clone(),
                                cpu_milli: i64_of(e.capacity.cpu_milli),
                                memory_bytes: i64_of(e.capacity.memory_bytes),
                                gpu_milli: i64_of(e.capacity.gpu_milli),
                                used_cpu_milli: 0,
                                used_memory_bytes: 0,
                                used_gpu_milli: 0,
                                images: e.images.clone(),
                                registered_at: at,
                                last_heartbeat: at,
                                lost: None,
                                address: e.address.clone(),
                                image_apps,
                                network_scope: e.network_scope.clone(),
                                volumes: e.volumes.clone(),
                                unlabelled_images: e.unlabelled_images.clone(),
                            },
                        );
                    }
                }
            }
            Event::AgentHeartbeated(e) => {
                if let Some(a) = self.agents.get_mut(&e.agent_id) {
                    a.last_heartbeat = a.last_heartbeat.max(e.at);
                }
            }
            Event::AgentLost(e) => self.mark(&e.agent_id, Some(e.reason.clone())),
            Event::AgentDeparted(e) => self.mark(&e.agent_id, Some(e.lost())),
            Event::AgentReturned(e) => self.mark(&e.agent_id, None),
            Event::AgentRevoked(e) => {
                self.mark(&e.agent_id, Some(format!("revoked: {}", e.reason)))
            }
            other => unreachable!("`{}` is not an agents event", other.event_type()),
        }
    }

    fn mark(&mut self, agent_id: &str, lost: Option<String>) {
        if let Some(a) = self.agents.get_mut(agent_id) {
            a.lost = lost;
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
            &format!("{schema}.agents"),
            [
                "agent_id",
                "resource_group",
                "cpu_milli",
                "memory_bytes",
                "gpu_milli",
                "used_cpu_milli",
                "used_memory_bytes",
                "used_gpu_milli",
                "images",
                "registered_at",
                "last_heartbeat",
                "lost",
                "address",
                "image_apps",
                "network_scope",
                "volumes",
                "unlabelled_images",
            ],
            &self
                .agents
                .iter()
                .map(|(id, a)| -> [&(dyn ToSql + Sync); 17] {
                    [
                        id,
                        &a.resource_group,
                        &a.cpu_milli,
                        &a.memory_bytes,
                        &a.gpu_milli,
                        &a.used_cpu_milli,
                        &a.used_memory_bytes,
                        &a.used_gpu_milli,
                        &a.images,
                        &a.registered_at,
                        &a.last_heartbeat,
                        &a.lost,
                        &a.address,
                        &a.image_apps,
                        &a.network_scope,
                        &a.volumes,
                        &a.unlabelled_images,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }
}

/// Every agent ever admitted (revoked since or not), by id.
pub async fn ever_admitted(pool: &deadpool_postgres::Pool) -> Result<Vec<String>, LedgerError> {
    let client = pool.get().await?;
    let rows = client
        .query(
            "SELECT DISTINCT payload->>'agent_id' AS agent FROM events
             WHERE category = 'agent' AND event_type = 'AgentAdmitted' ORDER BY agent",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
