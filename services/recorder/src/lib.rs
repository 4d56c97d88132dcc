//! The control plane's side of the agents. Agents speak only NATS (`berth-bus`); this crate
//! turns what they say into the log and what the log says into what they do:
//!
//! - [`admission`]: an operator admits an agent (group, most capacity, NATS key) or revokes
//!   it; the NATS server's authorization is made from the admitted agents.
//! - [`record`]: the facts an agent reports, checked against the session's lifecycle and its
//!   placement (an agent reports only for sessions placed on it), recorded once per report id.
//! - [`serve`]: the recorder, answering every agent's requests (queue group `recorder`).
//! - [`dispatch`]: the dispatcher, a consumer of session events that sends each agent its
//!   commands (assign, stop, start an app; commits and image removals are the image-commit
//!   service's) on a JetStream stream where they wait while the agent is away.
//! - [`liveness`]: when each agent was last heard from, kept outside the log.
//! - [`telemetry`]: the sink that stores the output and usage agents send, idempotently.
//! - `db`: the statements this crate makes, on the ledger and on the tables the crate owns
//!   in schema `recorder` (logs, usage, liveness), which it migrates itself ([`MIGRATIONS`]).

pub mod admission;
mod db;
pub mod dispatch;
pub mod liveness;
pub mod record;
pub mod serve;
pub mod telemetry;

pub use db::MIGRATIONS;
pub use record::RecordError;

use deadpool_postgres::Pool;
use events::relay::Topology;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    #[error("recorder: {0}")]
    Serve(#[from] serve::ServeError),
    #[error("dispatcher: {0}")]
    Dispatch(#[from] events::relay::RelayError),
}

/// Runs the agents' side of the control plane until `stop`: the recorder, the dispatcher
/// (a consumer of the session events on `topology`) and the telemetry sink. Returns the
/// first error any of them ends with.
pub async fn run(
    nats: async_nats::Client,
    pool: Pool,
    subjects: bus::Subjects,
    topology: Topology,
    stop: CancellationToken,
) -> Result<(), RecorderError> {
    let js = async_nats::jetstream::new(nats.clone());
    let dispatcher = dispatch::Dispatcher {
        js: js.clone(),
        subjects: subjects.clone(),
    };
    let consumer = events::consumer::ConsumerConfig::new(
        dispatch::NAME,
        vec![topology.category_subject("session")],
    );
    let liveness = liveness::Liveness::default();
    let watching = liveness::keep(pool.clone(), nats.clone(), liveness.clone(), stop.clone());
    let serving = serve::run(nats, pool.clone(), subjects.clone(), liveness, stop.clone());
    let dispatching = events::consumer::run(
        pool.clone(),
        js.clone(),
        topology,
        consumer,
        dispatcher,
        stop.clone(),
    );
    let sinking = async {
        telemetry::run(js, pool, subjects, stop.clone()).await;
        Ok::<(), RecorderError>(())
    };
    tokio::try_join!(
        async {
            watching.await;
            Ok::<(), RecorderError>(())
        },
        async { Ok::<(), RecorderError>(serving.await?) },
        async { Ok::<(), RecorderError>(dispatching.await?) },
        sinking,
    )?;
    Ok(())
}

pub use bus::ensure_streams;
