//! The scheduler answers the launcher's question on NATS (`Subjects::scheduler_advice`): when
//! a session of some shape would start in a group, and which smaller shapes or other groups
//! open to its owner would start it sooner ([`crate::advice`] over each group's live queue,
//! read as a pass reads it). An error is answered in words, never as silence.

use std::time::Duration;

use chrono::Utc;
use deadpool_postgres::Pool;
use events::advice::{Advice, AdviceAsked, Alternative, Estimate, Shape};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::advice::{self, Asked};
use crate::db;
use crate::run::{group_snapshot, SchedulerError, TYPICAL_HOLD_LOOKBACK};

/// Answers every question asked until `stop`.
pub async fn answer(
    nats: async_nats::Client,
    subjects: bus::Subjects,
    pool: Pool,
    silent_after: Duration,
    stop: CancellationToken,
) -> Result<(), async_nats::SubscribeError> {
    let mut asked = nats
        .queue_subscribe(subjects.scheduler_advice(), "scheduler".into())
        .await?;
    loop {
        let message = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            m = asked.next() => m,
        };
        let Some(message) = message else {
            return Ok(());
        };
        let Some(reply) = message.reply else { continue };
        let answered: Result<Advice, String> =
            match serde_json::from_slice::<AdviceAsked>(&message.payload) {
                Ok(question) => advise(&pool, &question, silent_after)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(format!("the question does not read: {e}")),
            };
        let body = serde_json::to_vec(&answered).expect("advice serialises");
        if let Err(e) = nats.publish(reply, body.into()).await {
            tracing::debug!(error = %e, "advice not sent");
        }
    }
}

/// Why a question has no answer.
#[derive(Debug, thiserror::Error)]
pub enum AdviceError {
    #[error("no resource group `{0}`")]
    NoGroup(String),
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
}

impl From<events::ledger::LedgerError> for AdviceError {
    fn from(e: events::ledger::LedgerError) -> Self {
        AdviceError::Scheduler(e.into())
    }
}

impl From<tokio_postgres::Error> for AdviceError {
    fn from(e: tokio_postgres::Error) -> Self {
        AdviceError::Scheduler(e.into())
    }
}

impl From<deadpool_postgres::PoolError> for AdviceError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        AdviceError::Scheduler(e.into())
    }
}

/// The advice for `question`: its estimate, and the alternatives that start sooner, soonest
/// first.
pub async fn advise(
    pool: &Pool,
    question: &AdviceAsked,
    silent_after: Duration,
) -> Result<Advice, AdviceError> {
    let mut client = pool.get().await?;
    let tx = client
        .build_transaction()
        .read_only(true)
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await?;
    let (estimate, typical) = estimate_in(
        &tx,
        &question.resource_group,
        question,
        question.shape,
        silent_after,
    )
    .await?
    .ok_or_else(|| AdviceError::NoGroup(question.resource_group.clone()))?;
    let mut alternatives = Vec::new();
    for (label, shape) in advice::smaller_shapes(question.shape) {
        let (e, _) = estimate_in(&tx, &question.resource_group, question, shape, silent_after)
            .await?
            .expect("the group was just read");
        alternatives.push(Alternative {
            label,
            resource_group: question.resource_group.clone(),
            shape,
            estimate: e,
        });
    }
    for group in question
        .other_groups
        .iter()
        .filter(|g| **g != question.resource_group)
    {
        if let Some((e, _)) =
            estimate_in(&tx, group, question, question.shape, silent_after).await?
        {
            alternatives.push(Alternative {
                label: format!("resource group `{group}`"),
                resource_group: group.clone(),
                shape: question.shape,
                estimate: e,
            });
        }
    }
    alternatives.retain(|a| a.estimate.sooner_than(&estimate));
    alternatives.sort_by_key(|a| a.estimate.wait_secs);
    Ok(Advice {
        resource_group: question.resource_group.clone(),
        shape: question.shape,
        estimate,
        alternatives,
        typical_hold_secs: typical.as_secs(),
    })
}

/// When `shape` by the question's owner would start in `group`, and the group's typical
/// hold; `None` when there is no such group.
async fn estimate_in(
    tx: &deadpool_postgres::Transaction<'_>,
    group: &str,
    question: &AdviceAsked,
    shape: Shape,
    silent_after: Duration,
) -> Result<Option<(Estimate, Duration)>, AdviceError> {
    let Some(rules) = db::groups(tx).await?.into_iter().find(|g| g.name == group) else {
        return Ok(None);
    };
    let queue = db::queue_bounded(
        tx,
        group,
        rules.queue_policy,
        rules.starve_after_secs,
        advice::MOST_ESTIMATED_QUEUE as i64,
    )
    .await?
    .sessions;
    let snapshot = group_snapshot(tx, rules, queue, silent_after, &[question.owner]).await?;
    let holdings = db::holdings(tx, group).await?;
    let typical = db::typical_hold(tx, group, Utc::now() - TYPICAL_HOLD_LOOKBACK)
        .await?
        .unwrap_or(advice::DEFAULT_TYPICAL_HOLD);
    let asked = Asked::New {
        owner: question.owner,
        shape,
        priority: question.priority,
        project: question.project.clone(),
    };
    Ok(Some((
        advice::estimate(&snapshot, &holdings, &asked, typical),
        typical,
    )))
}
