//! The notification service: turns session events into notices for their owner (created,
//! started, failed, terminated or cancelled with the reason, reaped by which checker, a
//! commit done or failed), keeps them in its projection (schema `notification`, which the
//! crate owns and migrates: [`MIGRATIONS`]) where the gateway serves them with unread counts,
//! and pushes each new one live on `<root>.notify.<user>` for the gateway's notification
//! streams. `berth notification` on its own, or part of `berth up`.
//!
//! A durable consumer of the session and notice events applies each event once, in the
//! transaction that keeps its notice (whose id is the event's), so a restart loses and
//! duplicates nothing. The live push is published before that transaction commits: a notice
//! whose transaction fails is pushed again with the same id when its event comes back.
//! Marking read is an event (`NotificationsRead`) the gateway records and this service folds;
//! so is a user's webhook (`NotificationWebhookSet`), to which [`webhook`] delivers each new
//! notice with retries, signed with the user's secret, only to addresses the operator's
//! policy admits.

mod db;
pub mod webhook;

pub use db::MIGRATIONS;

use std::sync::Arc;

use async_nats::jetstream;
use bus::Subjects;
use deadpool_postgres::{Pool, Transaction};
use events::catalogue::Event;
use events::consumer::{ConsumerConfig, Handler, HandlerError};
use events::notices::notice_for;
use events::relay::{RelayError, Topology};
use events::RecordedEvent;
use tokio_util::sync::CancellationToken;

/// The consumer's durable name.
pub const NAME: &str = "notification";

/// What can fail keeping webhook deliveries: PostgreSQL's errors as its client gave them, so
/// `events::fault` can tell an outage from a mistake.
#[derive(Debug, thiserror::Error)]
pub enum NotificationError {
    #[error(transparent)]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database: {}", events::fault::described(.0))]
    Database(#[from] tokio_postgres::Error),
}

/// Runs the service until `stop`, delivering webhooks with `sender` ([`webhook::Sender`]).
pub async fn run(
    nats: async_nats::Client,
    pool: Pool,
    subjects: Subjects,
    topology: Topology,
    sender: webhook::Sender,
    stop: CancellationToken,
) -> Result<(), RelayError> {
    let js = jetstream::new(nats.clone());
    let consumer = ConsumerConfig::new(
        NAME,
        ["session", "notice", "fitwatch"]
            .iter()
            .map(|c| topology.category_subject(c))
            .collect(),
    );
    let wake = Arc::new(tokio::sync::Notify::new());
    let notifier = Notifier {
        nats,
        subjects,
        wake: wake.clone(),
    };
    let delivering = webhook::deliver(pool.clone(), sender, wake, stop.clone());
    let consuming = events::consumer::run(pool, js, topology, consumer, notifier, stop);
    let (consumed, _) = tokio::join!(consuming, delivering);
    consumed
}

struct Notifier {
    nats: async_nats::Client,
    subjects: Subjects,
    /// Wakes the webhook sender when a delivery was queued.
    wake: Arc<tokio::sync::Notify>,
}

impl Handler for Notifier {
    async fn handle<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        event: &'a RecordedEvent,
    ) -> Result<(), HandlerError> {
        match &event.event {
            Event::SessionRequested(r) => {
                db::remember(tx, r.session_id, r.owner.user_id, &r.name).await?
            }
            Event::SessionRenamed(e) => db::rename(tx, e.session_id, &e.new_name).await?,
            Event::NotificationsRead(e) => {
                db::mark_read(tx, e.user_id, &e.notice_ids, e.all, event.recorded_at).await?;
                return Ok(());
            }
            Event::NotificationWebhookSet(e) => {
                db::set_webhook(tx, e.user_id, e.url.as_deref()).await?;
                return Ok(());
            }
            _ => {}
        }
        let session = match session_of(&event.event) {
            Some(id) if !matches!(event.event, Event::SessionRequested(_)) => {
                db::session(tx, id).await?
            }
            _ => None,
        };
        let Some(notice) = notice_for(
            &event.event,
            event.event_id,
            event.recorded_at,
            session.as_ref(),
        ) else {
            return Ok(());
        };
        if db::keep(tx, &notice).await? {
            if db::queue_delivery(tx, &notice).await? {
                self.wake.notify_one();
            }
            let body = serde_json::to_vec(&notice).expect("a notice serialises");
            self.nats
                .publish(self.subjects.notices(notice.user_id), body.into())
                .await
                .map_err(|e| HandlerError::Transient(e.to_string()))?;
        }
        Ok(())
    }
}

fn session_of(event: &Event) -> Option<uuid::Uuid> {
    match event {
        Event::SessionStatusChanged(e) => Some(e.session_id),
        Event::SessionIdleReaped(e) => Some(e.session_id),
        Event::SessionCommitEnded(e) => Some(e.session_id),
        _ => None,
    }
}
