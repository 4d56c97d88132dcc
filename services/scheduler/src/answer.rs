//! The scheduler answers the launcher's question on NATS (`Subjects::scheduler_advice`): when
//! a session of some shape would start in a group, and which smaller shapes or other groups
//! open to its owner would start it sooner ([`crate::advice`] over each group's live queue,
//! read as a pass reads it). An error is answered in words, never as silence.

use std::time::Duration;

use deadpool_postgres::Pool;
use events::advice::{Advice, AdviceAsked, Alternative, Estimate, Shape};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::advice::{self, Asked};
use crate::db;
use crate::run::{advice_snapshot, holdings_and_typical, SchedulerError};

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
    // Each group is read once: its rules, its snapshot, what its sessions hold.
    let groups = db::groups(&tx).await?;
    let asked = question.resource_group.clone();
    let home = group_in(&tx, &groups, &asked, question.owner, silent_after)
        .await?
        .ok_or_else(|| AdviceError::NoGroup(asked.clone()))?;
    let estimate = home.estimate(question, question.shape);
    let mut alternatives: Vec<Alternative> = advice::smaller_shapes(question.shape)
        .into_iter()
        .map(|(label, shape)| Alternative {
            label,
            resource_group: asked.clone(),
            shape,
            estimate: home.estimate(question, shape),
        })
        .collect();
    for group in question.other_groups.iter().filter(|g| **g != asked) {
        if let Some(there) = group_in(&tx, &groups, group, question.owner, silent_after).await? {
            alternatives.push(Alternative {
                label: format!("resource group `{group}`"),
                resource_group: group.clone(),
                shape: question.shape,
                estimate: there.estimate(question, question.shape),
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
        typical_hold_secs: home.typical.as_secs(),
    })
}

/// One group as the advice runs it forward.
struct GroupNow {
    snapshot: crate::core::Snapshot,
    holdings: Vec<advice::Holding>,
    typical: Duration,
}

impl GroupNow {
    /// When `shape` by the question's owner would start here.
    fn estimate(&self, question: &AdviceAsked, shape: Shape) -> Estimate {
        let asked = Asked::New {
            owner: question.owner,
            shape,
            priority: question.priority,
            project: question.project.clone(),
        };
        advice::estimate(&self.snapshot, &self.holdings, &asked, self.typical)
    }
}

/// `group` of `groups` as it stands, with `owner`'s load; `None` when there is no such group.
async fn group_in(
    tx: &deadpool_postgres::Transaction<'_>,
    groups: &[crate::core::GroupRules],
    group: &str,
    owner: uuid::Uuid,
    silent_after: Duration,
) -> Result<Option<GroupNow>, AdviceError> {
    let Some(rules) = groups.iter().find(|g| g.name == group).cloned() else {
        return Ok(None);
    };
    let snapshot = advice_snapshot(tx, rules, silent_after, &[owner]).await?;
    let (holdings, typical) = holdings_and_typical(tx, group, snapshot.now).await?;
    Ok(Some(GroupNow {
        snapshot,
        holdings,
        typical,
    }))
}
