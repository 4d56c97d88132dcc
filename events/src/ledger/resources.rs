//! The resources family: what an operator sets about where sessions may run and how much
//! they may ask for.
//!
//! Tables: `resource_groups`, `group_projects`, `policies`, `presets`. Changed by
//! `ResourceGroupCreated`, `ResourceGroupGranted`, `ResourcePolicySet` and `PresetSaved`;
//! each sets its row again, whole, when it is recorded for a name that has one, except that
//! `ResourceGroupCreated` keeps what `ResourceGroupSchedulingSet` set (fair share, the
//! starvation bound) and `ResourceGroupDefaultsSet` (its default image and preset);
//! `ResourceGroupSchedulingSet` changes only those and the queue policy, and
//! `ResourceGroupDefaultsSet` only the defaults, of a group that exists.

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
        Event::ResourceGroupDefaultsSet(e) => {
            exec(
                client,
                "UPDATE ledger.resource_groups SET default_image = $2, default_preset = $3
                 WHERE name = $1",
                &[&e.name, &e.image, &e.preset],
            )
            .await?;
        }
        Event::ResourceGroupSchedulingSet(e) => {
            exec(
                client,
                "UPDATE ledger.resource_groups SET queue_policy = $2, half_life_secs = $3,
                   lookback_secs = $4, weight_cpu_per_core = $5, weight_memory_per_gib = $6,
                   weight_gpu_per_device = $7, starve_after_secs = $8
                 WHERE name = $1",
                &[
                    &e.name,
                    &name_of(&e.queue_policy),
                    &i64_of(e.half_life_secs),
                    &i64_of(e.lookback_secs),
                    &e.weight_cpu_per_core,
                    &e.weight_memory_per_gib,
                    &e.weight_gpu_per_device,
                    &i64_of(e.starve_after_secs),
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
                "INSERT INTO ledger.policies (name, max_concurrent_sessions, max_cpu_milli,
                       max_memory_bytes, max_gpu_milli, max_session_lifetime_secs,
                       max_custom_images, max_session_priority, max_pids, max_log_bytes,
                       max_folder_bytes)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                     ON CONFLICT (name) DO UPDATE SET max_concurrent_sessions = $2,
                       max_cpu_milli = $3, max_memory_bytes = $4, max_gpu_milli = $5,
                       max_session_lifetime_secs = $6, max_custom_images = $7,
                       max_session_priority = $8, max_pids = $9, max_log_bytes = $10,
                       max_folder_bytes = $11",
                &[
                    &e.name,
                    &(e.max_concurrent_sessions as i32),
                    &i64_of(e.max_total.cpu_milli),
                    &i64_of(e.max_total.memory_bytes),
                    &i64_of(e.max_total.gpu_milli),
                    &e.max_session_lifetime_secs.map(i64_of),
                    &e.max_custom_images.map(|n| n as i32),
                    &e.max_session_priority.map(|n| n as i32),
                    &e.max_pids.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
                    &e.max_log_bytes.map(i64_of),
                    &e.max_folder_bytes.map(i64_of),
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
    pub half_life_secs: i64,
    pub lookback_secs: i64,
    pub weight_cpu_per_core: f64,
    pub weight_memory_per_gib: f64,
    pub weight_gpu_per_device: f64,
    pub starve_after_secs: i64,
    pub default_image: Option<String>,
    pub default_preset: Option<String>,
}

pub(super) struct Policy {
    pub max_concurrent_sessions: i32,
    pub max_cpu_milli: i64,
    pub max_memory_bytes: i64,
    pub max_gpu_milli: i64,
    pub max_session_lifetime_secs: Option<i64>,
    pub max_custom_images: Option<i32>,
    pub max_session_priority: Option<i32>,
    pub max_pids: Option<i32>,
    pub max_log_bytes: Option<i64>,
    pub max_folder_bytes: Option<i64>,
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
                // The migration's defaults, or what the group's scheduling was set to.
                let group = self
                    .resource_groups
                    .entry(e.name.clone())
                    .or_insert_with(|| ResourceGroup {
                        queue_policy: String::new(),
                        agent_selection: String::new(),
                        max_attempts: 0,
                        skip_after: 0,
                        pending_timeout_secs: 0,
                        half_life_secs: 604_800,
                        lookback_secs: 2_592_000,
                        weight_cpu_per_core: 1.0,
                        weight_memory_per_gib: 0.25,
                        weight_gpu_per_device: 10.0,
                        starve_after_secs: 0,
                        default_image: None,
                        default_preset: None,
                    });
                group.queue_policy = name_of(&e.queue_policy);
                group.agent_selection = name_of(&e.agent_selection);
                group.max_attempts = e.max_attempts as i32;
                group.skip_after = e.skip_after as i32;
                group.pending_timeout_secs = i64_of(e.pending_timeout_secs);
            }
            Event::ResourceGroupDefaultsSet(e) => {
                if let Some(group) = self.resource_groups.get_mut(&e.name) {
                    group.default_image = e.image.clone();
                    group.default_preset = e.preset.clone();
                }
            }
            Event::ResourceGroupSchedulingSet(e) => {
                if let Some(group) = self.resource_groups.get_mut(&e.name) {
                    group.queue_policy = name_of(&e.queue_policy);
                    group.half_life_secs = i64_of(e.half_life_secs);
                    group.lookback_secs = i64_of(e.lookback_secs);
                    group.weight_cpu_per_core = e.weight_cpu_per_core;
                    group.weight_memory_per_gib = e.weight_memory_per_gib;
                    group.weight_gpu_per_device = e.weight_gpu_per_device;
                    group.starve_after_secs = i64_of(e.starve_after_secs);
                }
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
                        max_session_priority: e.max_session_priority.map(|n| n as i32),
                        max_pids: e.max_pids.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
                        max_log_bytes: e.max_log_bytes.map(i64_of),
                        max_folder_bytes: e.max_folder_bytes.map(i64_of),
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
                "max_session_priority",
                "max_pids",
                "max_log_bytes",
                "max_folder_bytes",
            ],
            &self
                .policies
                .iter()
                .map(|(name, p)| -> [&(dyn ToSql + Sync); 11] {
                    [
                        name,
                        &p.max_concurrent_sessions,
                        &p.max_cpu_milli,
                        &p.max_memory_bytes,
                        &p.max_gpu_milli,
                        &p.max_session_lifetime_secs,
                        &p.max_custom_images,
                        &p.max_session_priority,
                        &p.max_pids,
                        &p.max_log_bytes,
                        &p.max_folder_bytes,
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
                "half_life_secs",
                "lookback_secs",
                "weight_cpu_per_core",
                "weight_memory_per_gib",
                "weight_gpu_per_device",
                "starve_after_secs",
                "default_image",
                "default_preset",
            ],
            &self
                .resource_groups
                .iter()
                .map(|(name, g)| -> [&(dyn ToSql + Sync); 14] {
                    [
                        name,
                        &g.queue_policy,
                        &g.agent_selection,
                        &g.max_attempts,
                        &g.skip_after,
                        &g.pending_timeout_secs,
                        &g.half_life_secs,
                        &g.lookback_secs,
                        &g.weight_cpu_per_core,
                        &g.weight_memory_per_gib,
                        &g.weight_gpu_per_device,
                        &g.starve_after_secs,
                        &g.default_image,
                        &g.default_preset,
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
