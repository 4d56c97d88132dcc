//! The image-commit service: a session committed to a customized image, from the request to
//! its end. `berth image-commit` on its own, or part of `berth up`.
//!
//! A durable consumer of the session and customized-image events:
//! - a commit requested (`SessionCommitRequested`, after the gateway checked the owner's
//!   policy): `Commit` to the agent of the main kernel, which writes the image through its
//!   engine and reports the steps and the end (the recorder records them);
//! - a commit ended: forgotten;
//! - an image removed by its owner: `RemoveImage` to the agent whose engine holds it.
//!
//! Commits in progress are kept (`image_commit.pending`, in the consumer's transaction) with
//! when they were asked; one whose agent reports no end within the deadline (the agent died,
//! its host is gone) is failed, so no session stays uncommittable and unterminable. Each
//! command carries the id `<event id>.<agent>`, so a redelivered event sends nothing twice.

mod db;

pub use db::MIGRATIONS;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use bus::protocol::Command;
use bus::Subjects;
use chrono::{DateTime, Utc};
use deadpool_postgres::{Pool, Transaction};
use events::catalogue::Event;
use events::consumer::{ConsumerConfig, Handler, HandlerError};
use events::payloads::CommitOutcome;
use events::relay::{RelayError, Topology};
use events::{Metadata, RecordedEvent};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The consumer's durable name, and the actor of the failures it records.
pub const NAME: &str = "image-commit";

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("the commits in progress: {}", events::fault::described(.0))]
    Load(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Events(#[from] RelayError),
    #[error("the database: {0}")]
    Pool(String),
}

/// How long an agent has to finish a commit, and how often that is looked at.
#[derive(Debug, Clone, Copy)]
pub struct CommitConfig {
    pub deadline: Duration,
    pub check_every: Duration,
}

impl Default for CommitConfig {
    fn default() -> Self {
        CommitConfig {
            deadline: Duration::from_secs(30 * 60),
            check_every: Duration::from_secs(5),
        }
    }
}

/// Commits in progress: commit id -> (session, asked at).
type Pending = Arc<Mutex<HashMap<Uuid, (Uuid, DateTime<Utc>)>>>;

fn lock(p: &Pending) -> std::sync::MutexGuard<'_, HashMap<Uuid, (Uuid, DateTime<Utc>)>> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs the service until `stop`.
pub async fn run(
    nats: async_nats::Client,
    pool: Pool,
    subjects: Subjects,
    topology: Topology,
    config: CommitConfig,
    stop: CancellationToken,
) -> Result<(), CommitError> {
    let client = pool
        .get()
        .await
        .map_err(|e| CommitError::Pool(e.to_string()))?;
    let pending: Pending = Arc::new(Mutex::new(db::pending(&**client).await?));
    drop(client);
    let js = jetstream::new(nats);
    bus::ensure_streams(&js, &subjects)
        .await
        .map_err(|e| RelayError::Nats(e.to_string()))?;
    let consumer = ConsumerConfig::new(
        NAME,
        ["session", "customimage"]
            .iter()
            .map(|c| topology.category_subject(c))
            .collect(),
    );
    let sender = Sender {
        js: js.clone(),
        subjects,
        pending: pending.clone(),
    };
    let consuming =
        events::consumer::run(pool.clone(), js, topology, consumer, sender, stop.clone());
    let overseeing = fail_overdue(pool, pending, config, stop);
    let (consumed, _) = tokio::join!(consuming, overseeing);
    Ok(consumed?)
}

struct Sender {
    js: jetstream::Context,
    subjects: Subjects,
    pending: Pending,
}

impl Sender {
    async fn send(
        &self,
        event_id: Uuid,
        agent: &str,
        command: &Command,
    ) -> Result<(), HandlerError> {
        bus::command::send(&self.js, &self.subjects, event_id, agent, command)
            .await
            .map_err(|e| HandlerError::Transient(e.to_string()))
    }
}

impl Handler for Sender {
    fn wants(&self, event: &RecordedEvent) -> bool {
        matches!(
            event.event,
            Event::SessionCommitRequested(_)
                | Event::SessionCommitEnded(_)
                | Event::CustomImageRemoved(_)
        )
    }

    async fn handle<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        event: &'a RecordedEvent,
    ) -> Result<(), HandlerError> {
        match &event.event {
            Event::SessionCommitRequested(e) => {
                db::keep(tx, e.commit_id, e.session_id, event.recorded_at).await?;
                lock(&self.pending).insert(e.commit_id, (e.session_id, event.recorded_at));
                let Some(agent) = &e.agent_id else {
                    return Err(HandlerError::Permanent(format!(
                        "commit {} names no agent; it fails at its deadline",
                        e.commit_id
                    )));
                };
                let command = Command::Commit {
                    session_id: e.session_id,
                    commit_id: e.commit_id,
                    owner: e.owner,
                    image: e.image.clone(),
                };
                self.send(event.event_id, agent, &command).await
            }
            Event::SessionCommitEnded(e) => {
                db::forget(tx, e.commit_id).await?;
                // Counted once, by the service that waited for it.
                if lock(&self.pending).remove(&e.commit_id).is_some() {
                    let outcome = match e.outcome {
                        CommitOutcome::Done { .. } => "done",
                        CommitOutcome::Failed { .. } => "failed",
                    };
                    metrics::counter!(COMMITS, "outcome" => outcome).increment(1);
                }
                Ok(())
            }
            Event::CustomImageRemoved(e) => match (&e.agent_id, e.session_id) {
                (Some(agent), Some(session_id)) => {
                    let command = Command::RemoveImage {
                        session_id,
                        image: e.image.clone(),
                    };
                    self.send(event.event_id, agent, &command).await
                }
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }
}

pub const COMMITS: &str = "berth_commits_total";

/// Describes the image-commit service's metrics to the installed recorder.
pub fn describe_metrics() {
    metrics::describe_counter!(
        COMMITS,
        "Commits to customized images that ended, by outcome: `done` or `failed` (by the \
         agent, or overdue)"
    );
}

/// Fails every commit asked longer than the deadline ago and not ended.
async fn fail_overdue(pool: Pool, pending: Pending, config: CommitConfig, stop: CancellationToken) {
    let deadline = chrono::Duration::from_std(config.deadline).unwrap_or(chrono::Duration::MAX);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(config.check_every) => {}
        }
        let now = Utc::now();
        let overdue: Vec<(Uuid, Uuid)> = lock(&pending)
            .iter()
            .filter(|(_, (_, asked))| *asked + deadline <= now)
            .map(|(commit, (session, _))| (*commit, *session))
            .collect();
        for (commit_id, session_id) in overdue {
            let reason = format!(
                "the agent reported no end within {} s",
                config.deadline.as_secs()
            );
            let metadata = Metadata {
                actor: Some(NAME.into()),
                ..Default::default()
            };
            let failed = events::lifecycle::command(&pool, session_id, &metadata, |s| {
                s.fail_commit(commit_id, reason.clone())
            })
            .await;
            match failed {
                // Its `SessionCommitEnded` comes back through the consumer, which forgets it.
                Ok(_) => tracing::warn!(%session_id, %commit_id, "{reason}: the commit failed"),
                Err(e) => {
                    tracing::warn!(%session_id, %commit_id, error = %e, "could not fail an overdue commit")
                }
            }
        }
    }
}
