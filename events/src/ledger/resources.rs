//! The resources family: what an operator sets about where sessions may run and how much
//! they may ask for.
//!
//! Tables: `resource_groups`, `group_projects`, `policies`, `presets`. Changed by
//! `ResourceGroupCreated`, `ResourceGroupGranted`, `ResourcePolicySet` and `PresetSaved`;
//! each sets its row again, whole, when it is recorded for a name that has one.

use std::collections::HashMap;

use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::types::ToSql;

use super::fold::exec;
use super::{i64_of, name_of, LedgerError};
use crate::catalogue::Event;
use crate::pg::copy_rows;

/// Applies one of the family's events to the live tables, as [`record`](super::record) does.
pub(super) async fn apply_sql<C: GenericClient>(
    client: &C,
    event: &Event,
) -> Result<(), LedgerError> {
    match event {
        Event::ResourceGroupCreated(e) => {
            exec(
                client,
                "INSERT INTO ledger.resource_groups VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (name) DO UPDATE SET queue_policy = $2, agent_selection = $3,
                       max_attempts = $4, skip_after = $5, pending_timeout_secs = $6",
                &[
                    &e.name,
                    &name_of(&e.queue_policy),
                    &name_of(&e.agent_selection),
                    &(e.max_attempts as i32),
                    &(e.skip_after as i32),
                    &i64_of(e.pending_timeout_secs),
                ],
            )
            .await?;
        }
        Event::ResourceGroupGranted(e) => {
            exec(
                client,
                "INSERT INTO ledger.group_projects VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&e.resource_group, &e.project],
            )
            .await?;
        }
        Event::ResourcePolicySet(e) => {
            exec(
                client,
                "INSERT INTO ledger.policies VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (name) DO UPDATE SET max_concurrent_sessions = $2,
                       max_cpu_milli = $3, max_memory_bytes = $4, max_gpu_milli = $5,
                       max_session_lifetime_secs = $6, max_custom_images = $7",
                &[
                    &e.name,
                    &(e.max_concurrent_sessions as i32),
                    &i64_of(e.max_total.cpu_milli),
                    &i64_of(e.max_total.memory_bytes),
                    &i64_of(e.max_total.gpu_milli),
                    &e.max_session_lifetime_secs.map(i64_of),
                    &e.max_custom_images.map(|n| n as i32),
                ],
            )
            .await?;
        }
        Event::PresetSaved(e) => {
            exec(
                client,
                "INSERT INTO ledger.presets VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (name) DO UPDATE SET cpu_milli = $2, memory_bytes = $3,
                       gpu_milli = $4, shared_memory_bytes = $5",
                &[
                    &e.name,
                    &i64_of(e.resources.cpu_milli),
                    &i64_of(e.resources.memory_bytes),
                    &i64_of(e.resources.gpu_milli),
                    &i64_of(e.shared_memory_bytes),
                ],
            )
            .await?;
        }
        other => unreachable!("`{}` is not a resources event", other.event_type()),
    }
    Ok(())
}

pub(super) struct ResourceGroup {
    pub queue_policy: String,
    pub agent_selection: String,
    pub max_attempts: i32,
    pub skip_after: i32,
    pub pending_timeout_secs: i64,
}

pub(super) struct Policy {
    pub max_concurrent_sessions: i32,
    pub max_cpu_milli: i64,
    pub max_memory_bytes: i64,
    pub max_gpu_milli: i64,
    pub max_session_lifetime_secs: Option<i64>,
    pub max_custom_images: Option<i32>,
}

pub(super) struct Preset {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub gpu_milli: i64,
    pub shared_memory_bytes: i64,
}

/// The family's tables folded in memory, keyed by their primary keys.
#[derive(Default)]
pub(super) struct Tables {
    pub resource_groups: HashMap<String, ResourceGroup>,
    pub group_projects: HashMap<(String, String), ()>,
    pub policies: HashMap<String, Policy>,
    pub presets: HashMap<String, Preset>,
}

impl Tables {
    /// Folds one of the family's events in, as the replay does.
    pub(super) fn apply_in_memory(&mut self, event: &Event) {
        match event {
            Event::ResourceGroupCreated(e) => {
                self.resource_groups.insert(
                    e.name.clone(),
                    ResourceGroup {
                        queue_policy: name_of(&e.queue_policy),
                        agent_selection: name_of(&e.agent_selection),
                        max_attempts: e.max_attempts as i32,
                        skip_after: e.skip_after as i32,
                        pending_timeout_secs: i64_of(e.pending_timeout_secs),
                    },
                );
            }
            Event::ResourceGroupGranted(e) => {
                self.group_projects
                    .insert((e.resource_group.clone(), e.project.clone()), ());
            }
            Event::ResourcePolicySet(e) => {
                self.policies.insert(
                    e.name.clone(),
                    Policy {
                        max_concurrent_sessions: e.max_concurrent_sessions as i32,
                        max_cpu_milli: i64_of(e.max_total.cpu_milli),
                        max_memory_bytes: i64_of(e.max_total.memory_bytes),
                        max_gpu_milli: i64_of(e.max_total.gpu_milli),
                        max_session_lifetime_secs: e.max_session_lifetime_secs.map(i64_of),
                        max_custom_images: e.max_custom_images.map(|n| n as i32),
                    },
                );
            }
            Event::PresetSaved(e) => {
                self.presets.insert(
                    e.name.clone(),
                    Preset {
                        cpu_milli: i64_of(e.resources.cpu_milli),
                        memory_bytes: i64_of(e.resources.memory_bytes),
                        gpu_milli: i64_of(e.resources.gpu_milli),
                        shared_memory_bytes: i64_of(e.shared_memory_bytes),
                    },
                );
            }
            other => unreachable!("`{}` is not a resources event", other.event_type()),
        }
    }

    /// Writes the tables into `schema` (the replay's scratch copy).
    pub(super) async fn copy_into(
        &self,
        tx: &Transaction<'_>,
        schema: &str,
    ) -> Result<(), tokio_postgres::Error> {
        self.copy_groups(tx, schema).await?;
        copy_rows(
            tx,
            &format!("{schema}.policies"),
            [
                "name",
                "max_concurrent_sessions",
                "max_cpu_milli",
                "max_memory_bytes",
                "max_gpu_milli",
                "max_session_lifetime_secs",
                "max_custom_images",
            ],
            &self
                .policies
                .iter()
                .map(|(name, p)| -> [&(dyn ToSql + Sync); 7] {
                    [
                        name,
                        &p.max_concurrent_sessions,
                        &p.max_cpu_milli,
                        &p.max_memory_bytes,
                        &p.max_gpu_milli,
                        &p.max_session_lifetime_secs,
                        &p.max_custom_images,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.presets"),
            [
                "name",
                "cpu_milli",
                "memory_bytes",
                "gpu_milli",
                "shared_memory_bytes",
            ],
            &self
                .presets
                .iter()
                .map(|(name, p)| -> [&(dyn ToSql + Sync); 5] {
                    [
                        name,
                        &p.cpu_milli,
                        &p.memory_bytes,
                        &p.gpu_milli,
                        &p.shared_memory_bytes,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }

    /// Writes the resource groups and the projects granted them into `schema`.
    async fn copy_groups(
        &self,
        tx: &Transaction<'_>,
        schema: &str,
    ) -> Result<(), tokio_postgres::Error> {
        copy_rows(
            tx,
            &format!("{schema}.resource_groups"),
            [
                "name",
                "queue_policy",
                "agent_selection",
                "max_attempts",
                "skip_after",
                "pending_timeout_secs",
            ],
            &self
                .resource_groups
                .iter()
                .map(|(name, g)| -> [&(dyn ToSql + Sync); 6] {
                    [
                        name,
                        &g.queue_policy,
                        &g.agent_selection,
                        &g.max_attempts,
                        &g.skip_after,
                        &g.pending_timeout_secs,
                    ]
                })
                .collect::<Vec<_>>(),
        )
        .await?;
        copy_rows(
            tx,
            &format!("{schema}.group_projects"),
            ["resource_group", "project"],
            &self
                .group_projects
                .keys()
                .map(|(group, project)| -> [&(dyn ToSql + Sync); 2] { [group, project] })
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    }
}
