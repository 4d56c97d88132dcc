//! `berth events`: the log's events as the gateway's event stream serves them
//! (`GET /v1/events`), read to the log's end or followed. A followed stream that drops (a
//! gateway restarted, the network) is resumed by itself after the last event it printed, with
//! `Last-Event-ID`, so none is missed or printed twice. Server-sent events are parsed by the
//! `eventsource-stream` crate.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use berth::config::Config;
use chrono::{DateTime, Utc};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;

use crate::session_cli::{print_error, Client, Output};

#[derive(clap::Args)]
pub struct EventsArgs {
    /// Keep following the log after its end (resuming by itself when the stream drops).
    #[arg(short, long)]
    pub follow: bool,
    /// Start after this position (an event's `TX:SEQ`, as printed).
    #[arg(long, conflicts_with = "since")]
    pub after: Option<String>,
    /// Start with the first event recorded at or after this time (RFC 3339).
    #[arg(long)]
    pub since: Option<DateTime<Utc>>,
    /// Event types, comma-separated; `Session*` is a prefix.
    #[arg(long = "type")]
    pub event_type: Option<String>,
    /// Stream categories, comma-separated (`session`, `agent`, ...).
    #[arg(long)]
    pub category: Option<String>,
    /// One session's events, by id.
    #[arg(long)]
    pub session: Option<uuid::Uuid>,
    /// How to print: table (a line per event, the default) or json (one recorded event per
    /// line).
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
}

/// How long to wait before resuming a dropped stream.
const RESUME_AFTER: Duration = Duration::from_secs(1);

pub async fn run(config: &Config, args: EventsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(config)?;
    let mut query: Vec<(&str, String)> = vec![("follow", args.follow.to_string())];
    let filters = [
        ("after", args.after.clone()),
        ("since", args.since.map(|t| t.to_rfc3339())),
        ("type", args.event_type.clone()),
        ("category", args.category.clone()),
        ("session", args.session.map(|s| s.to_string())),
    ];
    query.extend(filters.into_iter().filter_map(|(k, v)| Some((k, v?))));
    let mut last_id: Option<String> = None;
    loop {
        let mut request = client
            .request(reqwest::Method::GET, "/v1/events")
            .query(&query);
        if let Some(id) = &last_id {
            request = request.header("last-event-id", id);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) if args.follow && last_id.is_some() => {
                eprintln!("the event stream is unreachable ({e}); resuming");
                tokio::time::sleep(RESUME_AFTER).await;
                continue;
            }
            Err(e) => return Err(e).context("reach the gateway (is `berth up` running?)"),
        };
        if !response.status().is_success() {
            let body: Value = response.json().await.unwrap_or(Value::Null);
            return Ok(print_error(&body));
        }
        let mut events = response.bytes_stream().eventsource();
        while let Some(event) = events.next().await {
            let Ok(event) = event else {
                break;
            };
            if event.id.is_empty() {
                continue;
            }
            print_event(args.output, &event.id, &event.event, &event.data)?;
            last_id = Some(event.id);
        }
        if !args.follow {
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!(
            "the event stream dropped; resuming after {}",
            last_id.as_deref().unwrap_or("its start")
        );
        tokio::time::sleep(RESUME_AFTER).await;
        // A stream followed from now that dropped before any event resumes from now.
    }
}

fn print_event(output: Output, id: &str, name: &str, data: &str) -> anyhow::Result<()> {
    if !output.is_table() {
        println!("{data}");
        return Ok(());
    }
    let recorded: Value = serde_json::from_str(data).context("an event that is not JSON")?;
    println!(
        "{:<16} {:<32} {:<28} {}",
        id,
        recorded["recorded_at"].as_str().unwrap_or(""),
        name,
        recorded["stream_id"].as_str().unwrap_or("")
    );
    Ok(())
}
