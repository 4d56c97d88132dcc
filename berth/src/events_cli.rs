//! `berth events`: the log's events as the gateway's event stream serves them
//! (`GET /v1/events`), read to the log's end or followed. A followed stream that drops (a
//! gateway restarted, the network) is resumed by itself after the last event it printed, with
//! `Last-Event-ID`, so none is missed or printed twice. Server-sent events are parsed by the
//! `eventsource-stream` crate (`berth::event_stream_client`).
//!
//! `berth events --subscription NAME` reads a durable subscription instead, from where it was
//! last acknowledged, and acknowledges what it printed (every [`ACK_EVERY`] events, and when
//! the stream ends), so the next reading goes on after it; `berth subscription` makes, lists
//! and deletes them.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use berth::config::Config;
use chrono::{DateTime, Utc};
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
    /// Read this durable subscription of mine from its acknowledgement, acknowledging what is
    /// printed (its own filters apply; no other may be given).
    #[arg(long, conflicts_with_all = ["after", "since", "event_type", "category", "session"])]
    pub subscription: Option<String>,
    /// How to print: table (a line per event, the default) or json (one recorded event per
    /// line).
    #[arg(short, long, value_enum, default_value_t)]
    pub output: Output,
}

/// How long to wait before resuming a dropped stream.
const RESUME_AFTER: Duration = Duration::from_secs(1);

/// A subscription's reading acknowledges at least this often (in events printed).
const ACK_EVERY: usize = 100;

pub async fn run(config: &Config, args: EventsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::new(config)?;
    if let Some(name) = &args.subscription {
        return read_subscription(&client, name, args.follow, args.output).await;
    }
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
        let mut events = berth::event_stream_client::events_of(response);
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

/// Reads subscription `name` from its acknowledgement, printing each event and acknowledging
/// what was printed; a followed one that drops resumes from the acknowledgement.
async fn read_subscription(
    client: &Client,
    name: &str,
    follow: bool,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let path = format!("/v1/subscriptions/{}", crate::session_cli::path_part(name));
    loop {
        let request = client.request(
            reqwest::Method::GET,
            &format!("{path}/events?follow={follow}"),
        );
        let response = match client.send_raw(request).await? {
            Ok(response) => response,
            Err(code) => return Ok(code),
        };
        let mut events = berth::event_stream_client::events_of(response);
        let (mut printed, mut unacknowledged) = (None::<String>, 0);
        while let Some(Ok(event)) = events.next().await {
            if event.id.is_empty() {
                continue;
            }
            print_event(output, &event.id, &event.event, &event.data)?;
            printed = Some(event.id);
            unacknowledged += 1;
            if unacknowledged >= ACK_EVERY {
                acknowledge(client, &path, printed.as_deref()).await?;
                unacknowledged = 0;
            }
        }
        acknowledge(client, &path, printed.as_deref()).await?;
        if !follow {
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("the subscription's stream dropped; resuming after its acknowledgement");
        tokio::time::sleep(RESUME_AFTER).await;
    }
}

/// Acknowledges `position`, when some event was printed since the last acknowledgement.
async fn acknowledge(client: &Client, path: &str, position: Option<&str>) -> anyhow::Result<()> {
    let Some(position) = position else {
        return Ok(());
    };
    let request = client
        .request(reqwest::Method::POST, &format!("{path}/ack"))
        .json(&serde_json::json!({ "position": position }));
    match client.send_raw(request).await? {
        Ok(_) => Ok(()),
        Err(_) => anyhow::bail!("the acknowledgement of {position} was refused"),
    }
}

#[derive(clap::Subcommand)]
pub enum SubscriptionCommand {
    /// Make a durable subscription of mine (its reading starts now, unless --from-start).
    Create {
        name: String,
        /// Event types, comma-separated; `Session*` is a prefix.
        #[arg(long = "type")]
        event_type: Option<String>,
        /// Stream categories, comma-separated.
        #[arg(long)]
        category: Option<String>,
        /// One session's events, by id.
        #[arg(long)]
        session: Option<uuid::Uuid>,
        /// Read from the log's start.
        #[arg(long)]
        from_start: bool,
        /// Superadmins: also read over NATS (prints the NATS user's seed, once).
        #[arg(long)]
        nats: bool,
    },
    /// List my durable subscriptions, with how far each was acknowledged.
    Ls {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Delete a durable subscription of mine.
    Rm { name: String },
}

pub async fn subscription(
    config: &Config,
    command: SubscriptionCommand,
) -> anyhow::Result<ExitCode> {
    let client = Client::new(config)?;
    let result = match command {
        SubscriptionCommand::Create {
            name,
            event_type,
            category,
            session,
            from_start,
            nats,
        } => {
            let body = serde_json::json!({
                "name": name, "type": event_type, "category": category, "session": session,
                "from_start": from_start, "nats": nats,
            });
            let body = Value::Object(
                body.as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            );
            client
                .send(
                    client
                        .http
                        .post(client.url("/v1/subscriptions"))
                        .json(&body),
                )
                .await?
                .map(|v| {
                    println!(
                        "{}  resumes after {}",
                        v["name"].as_str().unwrap_or(""),
                        v["resumes_after"].as_str().unwrap_or("")
                    );
                    if let Some(nats) = v["nats"].as_object() {
                        for field in ["stream", "consumer", "inbox_prefix", "seed"] {
                            println!("nats {field}: {}", nats[field].as_str().unwrap_or(""));
                        }
                    }
                })
        }
        SubscriptionCommand::Ls { output } => client
            .send(client.http.get(client.url("/v1/subscriptions")))
            .await?
            .map(|v| {
                crate::session_cli::show(output, v, |v: Value| {
                    println!("{:<24} {:<20} {:<5} FILTER", "NAME", "ACKNOWLEDGED", "NATS");
                    for s in v["subscriptions"].as_array().into_iter().flatten() {
                        let filter: Vec<String> = ["type", "category", "stream"]
                            .iter()
                            .filter_map(|k| {
                                let items: Vec<&str> =
                                    s[k].as_array()?.iter().filter_map(Value::as_str).collect();
                                (!items.is_empty()).then(|| format!("{k}={}", items.join(",")))
                            })
                            .collect();
                        println!(
                            "{:<24} {:<20} {:<5} {}",
                            s["name"].as_str().unwrap_or(""),
                            s["acknowledged"].as_str().unwrap_or("-"),
                            if s["nats"].is_null() { "no" } else { "yes" },
                            filter.join(" ")
                        );
                    }
                })
            }),
        SubscriptionCommand::Rm { name } => client
            .send(client.http.delete(client.url(&format!(
                "/v1/subscriptions/{}",
                crate::session_cli::path_part(&name)
            ))))
            .await?
            .map(|_| println!("{name} deleted")),
    };
    Ok(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(body) => print_error(&body),
    })
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
