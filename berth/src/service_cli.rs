//! `berth service`: model-serving endpoints through the gateway's `/v1/services` (made from a
//! model folder, listed, shown with their replicas' health, scaled, given tokens, destroyed).
//! An endpoint is named by its name or its id.

use std::process::ExitCode;

use anyhow::Context as _;
use berth::config::Config;
use serde_json::{json, Value};

use crate::session_cli::{print_error, show, Client, Output};

#[derive(clap::Subcommand, Debug)]
pub enum ServiceCommand {
    /// Make an endpoint from a model folder holding a model definition file (Backend.AI's
    /// `model-definition.yaml`); its replicas start as inference sessions of mine.
    Create {
        name: String,
        /// The folder holding the model and its definition.
        #[arg(long)]
        model_folder: String,
        /// The definition's path in the folder.
        #[arg(long)]
        model_definition_path: Option<String>,
        /// The replicas' image (the group's default when left out).
        #[arg(long)]
        image: Option<String>,
        #[arg(long)]
        resource_group: Option<String>,
        /// Each replica's cores.
        #[arg(long)]
        cpu: Option<f64>,
        /// Each replica's memory (`512m`, `2g`).
        #[arg(long)]
        memory: Option<String>,
        /// Each replica's GPUs (fractions share one).
        #[arg(long)]
        gpu: Option<f64>,
        #[arg(long, default_value_t = 1)]
        replicas: u32,
        /// Anyone may call it (otherwise a token is needed: `berth service token`).
        #[arg(long)]
        public: bool,
    },
    /// List my endpoints.
    Ls {
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// An endpoint with its replicas' health.
    Info {
        service: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Set how many replicas an endpoint wants.
    Scale { service: String, replicas: u32 },
    /// Update what an endpoint's replicas run: a rolling update (new replicas start beside
    /// the old, which are drained once the new serve).
    Update {
        service: String,
        #[arg(long)]
        image: Option<String>,
        #[arg(long)]
        model_folder: Option<String>,
        #[arg(long)]
        model_definition_path: Option<String>,
        /// Each replica's cores (with --memory: its resources from now on).
        #[arg(long, requires = "memory")]
        cpu: Option<f64>,
        #[arg(long, requires = "cpu")]
        memory: Option<String>,
    },
    /// Set an endpoint's autoscaling: `--rule METRIC:CMP:THRESHOLD:STEP:COOLDOWN`, e.g.
    /// `requests_per_second:gt:5:1:30` (metric `requests_per_second` or
    /// `outstanding_requests` per healthy replica; `lt`, `le`, `gt`, `ge`); no rule: none.
    Autoscale {
        service: String,
        #[arg(long, default_value_t = 1)]
        min: u32,
        #[arg(long)]
        max: u32,
        #[arg(long = "rule", value_parser = parse_rule)]
        rules: Vec<Value>,
    },
    /// Make a token for calling a non-public endpoint (printed this once).
    Token {
        service: String,
        /// How long it lasts, in seconds (a day by default).
        #[arg(long, default_value_t = 86_400)]
        expires_in: u64,
    },
    /// Destroy an endpoint: its URL answers no more, its replicas end.
    Rm { service: String },
}

/// A rule as `--rule` writes it, as the API reads it.
fn parse_rule(text: &str) -> Result<Value, String> {
    let parts: Vec<&str> = text.split(':').collect();
    let [metric, comparator, threshold, step, cooldown] = parts[..] else {
        return Err(
            "METRIC:CMP:THRESHOLD:STEP:COOLDOWN, e.g. requests_per_second:gt:5:1:30".into(),
        );
    };
    let number = |what: &str, v: &str| -> Result<f64, String> {
        v.parse::<f64>()
            .map_err(|_| format!("{what} `{v}` is not a number"))
    };
    let step: i64 = step
        .parse()
        .map_err(|_| format!("step `{step}` is not a whole number"))?;
    let cooldown: u64 = cooldown
        .parse()
        .map_err(|_| format!("cooldown `{cooldown}` is not a number of seconds"))?;
    Ok(json!({"metric": metric, "comparator": comparator,
              "threshold": number("threshold", threshold)?, "step": step, "cooldown_secs": cooldown}))
}

/// The id of endpoint `service`: itself when it is one, else the id of mine so named.
async fn resolve(client: &Client, service: &str) -> anyhow::Result<String> {
    if uuid::Uuid::parse_str(service).is_ok() {
        return Ok(service.to_owned());
    }
    let listed = client
        .send(client.http.get(client.url("/v1/services")))
        .await?
        .map_err(|e| anyhow::anyhow!("{}", e["error"]["message"]))?;
    listed["services"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == service)
        .and_then(|s| s["id"].as_str())
        .map(str::to_owned)
        .with_context(|| format!("no endpoint of yours is named `{service}`"))
}

fn print_service(s: &Value) {
    println!(
        "{}  {}  {}/{} healthy  {}",
        s["name"].as_str().unwrap_or(""),
        s["status"].as_str().unwrap_or(""),
        s["healthy_replicas"],
        s["replicas"],
        s["url"].as_str().unwrap_or("")
    );
    if let Some(host) = s["host"].as_str() {
        println!("host: {host}");
    }
    if let Some(reason) = s["degraded_reason"].as_str() {
        println!("degraded: {reason}");
    }
    for step in s["scaling_history"].as_array().into_iter().flatten() {
        println!(
            "  scaled {} -> {} at {}: {}",
            step["previous"],
            step["replicas"],
            step["at"].as_str().unwrap_or(""),
            step["reason"].as_str().unwrap_or("")
        );
    }
    for r in s["routes"].as_array().into_iter().flatten() {
        println!(
            "  replica {}  {}{}",
            r["session_id"].as_str().unwrap_or(""),
            r["health"].as_str().unwrap_or(""),
            r["reason"]
                .as_str()
                .map(|why| format!(" ({why})"))
                .unwrap_or_default()
        );
    }
}

pub async fn run(config: &Config, command: ServiceCommand) -> anyhow::Result<ExitCode> {
    let client = Client::new(config)?;
    let result = match command {
        ServiceCommand::Create {
            name,
            model_folder,
            model_definition_path,
            image,
            resource_group,
            cpu,
            memory,
            gpu,
            replicas,
            public,
        } => {
            let mut resources = serde_json::Map::new();
            for (key, value) in [
                ("cpu", cpu.map(Value::from)),
                ("memory", memory.map(Value::from)),
                ("gpu", gpu.map(Value::from)),
            ] {
                if let Some(value) = value {
                    resources.insert(key.to_owned(), value);
                }
            }
            let mut body = json!({"name": name, "model_folder": model_folder,
                "replicas": replicas, "open_to_public": public, "resources": resources});
            for (key, value) in [
                ("model_definition_path", model_definition_path),
                ("image", image),
                ("resource_group", resource_group),
            ] {
                if let Some(value) = value {
                    body[key] = Value::from(value);
                }
            }
            client
                .send(client.http.post(client.url("/v1/services")).json(&body))
                .await?
                .map(|s| {
                    println!(
                        "{}  {}",
                        s["id"].as_str().unwrap_or(""),
                        s["name"].as_str().unwrap_or("")
                    );
                    println!(
                        "url: {}{}",
                        config.gateway_url.trim_end_matches('/'),
                        s["url"].as_str().unwrap_or("")
                    );
                    if let Some(host) = s["host"].as_str() {
                        println!("host: {host}");
                    }
                })
        }
        ServiceCommand::Ls { output } => client
            .send(client.http.get(client.url("/v1/services")))
            .await?
            .map(|v| {
                show(output, v, |v: Value| {
                    println!(
                        "{:<24} {:<12} {:>7} {:<38} URL",
                        "NAME", "STATUS", "HEALTHY", "ID"
                    );
                    for s in v["services"].as_array().into_iter().flatten() {
                        println!(
                            "{:<24} {:<12} {:>7} {:<38} {}",
                            s["name"].as_str().unwrap_or(""),
                            s["status"].as_str().unwrap_or(""),
                            format!("{}/{}", s["healthy_replicas"], s["replicas"]),
                            s["id"].as_str().unwrap_or(""),
                            s["url"].as_str().unwrap_or("")
                        );
                    }
                })
            }),
        ServiceCommand::Info { service, output } => {
            let id = resolve(&client, &service).await?;
            client
                .send(client.http.get(client.url(&format!("/v1/services/{id}"))))
                .await?
                .map(|v| show(output, v, |v: Value| print_service(&v)))
        }
        ServiceCommand::Scale { service, replicas } => {
            let id = resolve(&client, &service).await?;
            client
                .send(
                    client
                        .http
                        .post(client.url(&format!("/v1/services/{id}/scale")))
                        .json(&json!({"replicas": replicas})),
                )
                .await?
                .map(|s| print_service(&s))
        }
        ServiceCommand::Update {
            service,
            image,
            model_folder,
            model_definition_path,
            cpu,
            memory,
        } => {
            let id = resolve(&client, &service).await?;
            let mut body = json!({});
            for (key, value) in [
                ("image", image),
                ("model_folder", model_folder),
                ("model_definition_path", model_definition_path),
            ] {
                if let Some(value) = value {
                    body[key] = Value::from(value);
                }
            }
            if let (Some(cpu), Some(memory)) = (cpu, memory) {
                body["resources"] = json!({"cpu": cpu, "memory": memory});
            }
            client
                .send(
                    client
                        .http
                        .patch(client.url(&format!("/v1/services/{id}")))
                        .json(&body),
                )
                .await?
                .map(|s| print_service(&s))
        }
        ServiceCommand::Autoscale {
            service,
            min,
            max,
            rules,
        } => {
            let id = resolve(&client, &service).await?;
            client
                .send(
                    client
                        .http
                        .put(client.url(&format!("/v1/services/{id}/autoscaling")))
                        .json(&json!({"min_replicas": min, "max_replicas": max, "rules": rules})),
                )
                .await?
                .map(|s| print_service(&s))
        }
        ServiceCommand::Token {
            service,
            expires_in,
        } => {
            let id = resolve(&client, &service).await?;
            client
                .send(
                    client
                        .http
                        .post(client.url(&format!("/v1/services/{id}/tokens")))
                        .json(&json!({"expires_in": expires_in})),
                )
                .await?
                .map(|t| {
                    println!("{}", t["token"].as_str().unwrap_or(""));
                    eprintln!(
                        "expires at {}; shown this once: send it as `Authorization: Bearer <token>`",
                        t["expires_at"].as_str().unwrap_or("")
                    );
                })
        }
        ServiceCommand::Rm { service } => {
            let id = resolve(&client, &service).await?;
            client
                .send(
                    client
                        .http
                        .delete(client.url(&format!("/v1/services/{id}"))),
                )
                .await?
                .map(|_| println!("{service} destroyed"))
        }
    };
    Ok(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(body) => print_error(&body),
    })
}
