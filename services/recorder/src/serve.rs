//! The recorder: answers every agent's requests on `<root>.rec.<agent>` (queue group
//! `recorder`, so recorders share the work). The agent's id comes from the subject; with
//! NATS authorization on, only that agent can publish there. A request that needs the
//! database while it is away is answered "unavailable", and the agent asks again later.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use bus::protocol::{Answer, RegistryLogin, Request};
use bus::Subjects;
use deadpool_postgres::Pool;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::liveness::Liveness;
use crate::record::{self, RecordError};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("NATS: {0}")]
    Bus(String),
    #[error("NATS: {0}")]
    Streams(#[from] bus::BusError),
    /// Said to the agent as the reason its registration is unavailable for now.
    #[error("the command consumer of agent `{agent}`: {source}")]
    CommandConsumer {
        agent: String,
        source: jetstream::stream::ConsumerError,
    },
}

/// How many requests one recorder handles at once.
const IN_FLIGHT: usize = 64;

/// How long the requests under way at a stop have to be answered.
const ANSWERS_AT_STOP: Duration = Duration::from_secs(5);

/// Answers agents' requests until `stop`.
pub async fn run(
    client: async_nats::Client,
    pool: Pool,
    subjects: Subjects,
    liveness: Liveness,
    stop: CancellationToken,
) -> Result<(), ServeError> {
    let js = jetstream::new(client.clone());
    crate::ensure_streams(&js, &subjects).await?;
    let mut requests = client
        .queue_subscribe(
            subjects.all_requests(),
            bus::subjects::RECORDER_QUEUE.into(),
        )
        .await
        .map_err(|e| ServeError::Bus(e.to_string()))?;
    let turns = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let recorder = Arc::new(Recorder {
        pool,
        js,
        subjects,
        liveness,
        known: Default::default(),
        outage: Default::default(),
    });
    loop {
        let message = tokio::select! {
            _ = stop.cancelled() => {
                // The requests under way are answered before the recorder ends (an agent
                // that misses an answer asks again, so this only spares it the wait).
                let all = turns.acquire_many(IN_FLIGHT as u32);
                let _ = tokio::time::timeout(ANSWERS_AT_STOP, all).await;
                return Ok(());
            }
            message = requests.next() => message,
        };
        let Some(message) = message else {
            return Err(ServeError::Bus("the request subscription ended".into()));
        };
        let Some(reply) = message.reply.clone() else {
            continue;
        };
        let Ok(turn) = turns.clone().acquire_owned().await else {
            return Ok(());
        };
        let (recorder, client) = (recorder.clone(), client.clone());
        tokio::spawn(async move {
            let answer = recorder.answer(&message.subject, &message.payload).await;
            let body = serde_json::to_vec(&answer).expect("answers serialise");
            if let Err(e) = client.publish(reply, body.into()).await {
                tracing::debug!(error = %e, "an answer was not sent");
            }
            drop(turn);
        });
    }
}

struct Recorder {
    pool: Pool,
    js: jetstream::Context,
    subjects: Subjects,
    liveness: Liveness,
    /// The sessions this recorder last read or recorded: their next report is decided
    /// without reading their streams again.
    known: events::lifecycle::Known,
    /// Requests failing for want of PostgreSQL, logged once per outage.
    outage: std::sync::Mutex<events::fault::Outage>,
}

impl Recorder {
    async fn answer(&self, subject: &str, payload: &[u8]) -> Answer {
        let Some(agent) = self.subjects.agent_of_request(subject) else {
            return Answer::Denied {
                reason: format!("`{subject}` names no agent"),
            };
        };
        let request = match serde_json::from_slice::<Request>(payload) {
            Ok(r) => r,
            Err(e) => {
                return Answer::Denied {
                    reason: format!("the request does not read: {e}"),
                }
            }
        };
        let handled = self.handle(agent, request).await;
        let mut outage = self.outage.lock().unwrap_or_else(|e| e.into_inner());
        match handled {
            Ok(answer) => {
                outage.passed("recorder");
                answer
            }
            Err(e) => {
                // The agent asks again; an outage is logged once, not per request.
                outage.failed("recorder", &format_args!("agent {agent}: {e}"));
                Answer::Unavailable {
                    reason: e.to_string(),
                }
            }
        }
    }

    async fn handle(&self, agent: &str, request: Request) -> Result<Answer, RecordError> {
        Ok(match request {
            Request::Register(offer) => {
                match record::register(&self.pool, agent, &offer).await {
                    Err(RecordError::NotAdmitted(refused)) => {
                        return Ok(Answer::Denied {
                            reason: refused.to_string(),
                        })
                    }
                    other => other?,
                }
                if let Err(e) = self.ensure_consumer(agent).await {
                    return Ok(Answer::Unavailable {
                        reason: e.to_string(),
                    });
                }
                self.liveness.heard_from(agent);
                Answer::Done
            }
            Request::Heartbeat => {
                self.liveness.heard_from(agent);
                Answer::Done
            }
            Request::Report(report) => {
                record::report(&self.pool, &self.known, agent, &report).await?
            }
            Request::Session { session_id } => Answer::Session {
                session: record::session_for(&self.pool, &self.known, agent, session_id)
                    .await?
                    .map(Box::new),
            },
            Request::Sync => Answer::Live {
                sessions: record::live_sessions(&self.pool, agent).await?,
            },
            Request::PullCredential { session_id } => Answer::PullCredential {
                login: db::pull_login(&self.pool, session_id, agent)
                    .await?
                    .map(|(username, password)| RegistryLogin { username, password }),
            },
            Request::KeepSshKey(key) => {
                if db::keep_ssh_key(&self.pool, agent, &key).await? {
                    Answer::Done
                } else {
                    Answer::Denied {
                        reason: format!("session {} is not live on {agent}", key.session_id),
                    }
                }
            }
            Request::FolderUsage(usage) => {
                db::keep_folder_usage(&self.pool, agent, &usage).await?;
                Answer::Done
            }
            Request::Depart { reason } => match record::depart(&self.pool, agent, &reason).await {
                Err(RecordError::NotAdmitted(refused)) => Answer::Denied {
                    reason: refused.to_string(),
                },
                other => {
                    other?;
                    Answer::Done
                }
            },
        })
    }

    /// Makes the agent's durable command consumer, so its commands wait while it is away.
    async fn ensure_consumer(&self, agent: &str) -> Result<(), ServeError> {
        let config = consumer::pull::Config {
            durable_name: Some(self.subjects.consumer_of(agent)),
            filter_subject: self.subjects.commands_of(agent),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(30),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        };
        self.js
            .create_consumer_on_stream(config, self.subjects.commands_stream.clone())
            .await
            .map(|_| ())
            .map_err(|source| ServeError::CommandConsumer {
                agent: agent.to_owned(),
                source,
            })
    }
}
