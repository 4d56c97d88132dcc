//! `berth session exec SESSION -- CMD...`: a command run in a running interactive session's
//! main kernel (`POST /v1/sessions/{id}/exec`, as `docker exec` runs one), its output printed
//! as it comes (the kernel's stdout here on stdout, its stderr on stderr), and this command's
//! exit code the command's own.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use futures::StreamExt;
use gateway::api::session_exec::RunOutput;
use reqwest::Method;
use serde_json::json;

use super::Client;

pub(super) async fn exec(
    client: &Client,
    session: &str,
    command: &[String],
) -> anyhow::Result<ExitCode> {
    let id = client.resolve(session).await?;
    // Each argument kept whole, as `session run` keeps its command's.
    let line = shlex::try_join(command.iter().map(String::as_str))
        .context("an argument holds a NUL byte, which no shell passes")?;
    let request = client
        .request(Method::POST, &format!("/v1/sessions/{id}/exec"))
        .json(&json!({ "shell": line }));
    let response = match client.send_raw(request).await? {
        Ok(response) => response,
        Err(code) => return Ok(code),
    };
    let (mut held, mut code) = (Vec::new(), None);
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        held.extend_from_slice(&chunk.context("read the command's output")?);
        while let Some(end) = held.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = held.drain(..=end).collect();
            match serde_json::from_slice::<RunOutput>(&line) {
                Ok(RunOutput::Stdout(text)) => {
                    print!("{text}");
                    std::io::stdout().flush()?;
                }
                Ok(RunOutput::Stderr(text)) => eprint!("{text}"),
                Ok(RunOutput::ExitCode(c)) => code = Some(c),
                Err(_) => {}
            }
        }
    }
    Ok(match code {
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => {
            eprintln!("berth: the command's end was not heard (its session may have ended)");
            ExitCode::FAILURE
        }
    })
}
