//! Sending an agent a command: the one way the control plane puts a [`Command`] on the
//! commands stream, where it waits until its agent takes it (the dispatcher's and the
//! image-commit service's commands alike).

use async_nats::jetstream;
use uuid::Uuid;

use crate::protocol::Command;
use crate::subjects::Subjects;
use crate::BusError;

/// Sends `agent` the `command` the event `cause` called for, and waits for the stream to
/// have it. Its `Nats-Msg-Id` is `<cause>.<agent>`: a redelivered event sends nothing twice
/// within the stream's duplicate window.
pub async fn send(
    js: &jetstream::Context,
    subjects: &Subjects,
    cause: Uuid,
    agent: &str,
    command: &Command,
) -> Result<(), BusError> {
    let subject = subjects.command(agent, command.session_id());
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", format!("{cause}.{agent}").as_str());
    let body = serde_json::to_vec(command).expect("commands serialise");
    let sent = js
        .publish_with_headers(subject, headers, body.into())
        .await?;
    sent.await.map_err(|source| BusError::Unacknowledged {
        agent: agent.to_owned(),
        source,
    })?;
    Ok(())
}
