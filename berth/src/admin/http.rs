//! Executes an admin [`Call`] through the gateway with the superadmin's key
//! (BERTH_GATEWAY_URL, BERTH_API_KEY), and prints what it answered: a refusal as the API
//! words it (`berth: field: message`, exit 1).

use std::process::ExitCode;

use gateway::model::{AdmittedAgents, AgentCredential, IdlePreview, IssuedKey, IssuedKeypair};
use serde_json::Value;

use super::print::{print_keypair, print_listing, print_shares};
use super::requests::{Answer, Call};
use crate::session_cli::{print_error, Client};

/// Sends `call` and prints its answer.
pub async fn execute(config: &berth::config::Config, call: Call) -> anyhow::Result<ExitCode> {
    let client = Client::new(config)?;
    let mut request = client.http.request(call.method, client.url(&call.path));
    if let Some(body) = &call.body {
        request = request.json(body);
    }
    match client.send(request).await? {
        Ok(answer) => {
            print_answer(config, &client, call.answer, answer)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(refusal) => Ok(print_error(&refusal)),
    }
}

fn print_answer(
    config: &berth::config::Config,
    client: &Client,
    answer: Answer,
    v: Value,
) -> anyhow::Result<()> {
    match answer {
        Answer::Listing(kind, output) => print_listing(kind, output, v),
        Answer::Shares(output) => print_shares(output, v),
        Answer::IdlePreview => {
            let preview: IdlePreview = serde_json::from_value(v)?;
            if preview.due.is_empty() {
                println!("nothing would be reaped now");
            }
            for verdict in preview.due {
                println!(
                    "{}  {}  {}",
                    verdict.session_id,
                    verdict.reading.checker.as_str(),
                    verdict.reading.explanation
                );
            }
        }
        Answer::NatsAuthorization => {
            let listed: AdmittedAgents = serde_json::from_value(v)?;
            let keys: Vec<bus::permissions::AdmittedKey> = listed
                .agents
                .into_iter()
                .filter_map(|a| {
                    Some(bus::permissions::AdmittedKey {
                        public_key: a.public_key?,
                        agent_id: a.agent_id,
                    })
                })
                .collect();
            super::print_nats_authorization(config, &keys)?;
        }
        Answer::User(email) => {
            let issued: IssuedKey = serde_json::from_value(v)?;
            println!("created user {email} ({})", issued.user_id);
            println!("API key (shown only now): {}", issued.api_key);
            if let Some(at) = issued.expires_at {
                println!("refused from {}", at.to_rfc3339());
            }
        }
        Answer::ApiKey => {
            let issued: IssuedKey = serde_json::from_value(v)?;
            println!("API key (shown only now): {}", issued.api_key);
            if let Some(at) = issued.expires_at {
                println!("refused from {}", at.to_rfc3339());
            }
        }
        Answer::Keypair(email) => {
            let issued: IssuedKeypair = serde_json::from_value(v)?;
            let endpoint = client.url("");
            print_keypair(
                &email,
                &issued.access_key,
                &issued.secret_key,
                Some(&endpoint),
            );
        }
        Answer::Admitted {
            id,
            group,
            credential_out,
        } => {
            let admitted: AgentCredential = serde_json::from_value(v)?;
            match credential_out {
                Some(path) => {
                    write_secret(&path, &admitted.credential)?;
                    println!(
                        "agent {id} admitted to {group}; its credential is in {}",
                        path.display()
                    );
                }
                None => {
                    println!("agent {id} admitted to {group}");
                    println!(
                        "credential (shown only now; give it to the agent as BERTH_AGENT_CREDENTIAL): {}",
                        admitted.credential
                    );
                }
            }
            tell_nats_server();
        }
        Answer::Revoked(id) => {
            println!("agent {id} revoked");
            tell_nats_server();
        }
        Answer::Done(line) => println!("{line}"),
    }
    Ok(())
}

/// Says how the NATS server learns of an admission or a revocation: a control plane that
/// keeps its authorization (`BERTH_NATS_AUTHORIZATION_DIR`, its recorder's process) follows
/// the event; elsewhere the operator makes the authorization again.
fn tell_nats_server() {
    println!(
        "a control plane that keeps the NATS server's authorization (BERTH_NATS_AUTHORIZATION_DIR) brings it in step; \
         elsewhere make it again (berth admin nats-authorization) and reload the server"
    );
}

/// Writes a secret to a file only its owner can read.
fn write_secret(path: &std::path::Path, secret: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    writeln!(file, "{secret}")?;
    Ok(())
}
