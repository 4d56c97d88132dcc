//! `berth`: one binary for every part of the platform.
//!
//! `berth up` runs the control plane in one process; each part can also run alone
//! (`berth relay`, `berth projections`, `berth scheduler`, `berth reconciler`,
//! `berth recorder`, `berth idle-reaper`, `berth notification`, `berth image-commit`,
//! `berth gateway`), all through the one composition `berth::app::start`.
//! `berth agent` runs an agent on a compute host; it needs NATS and nothing else. Operators replay projections and audit the log from here, and
//! `berth bench` prints the figures recorded in docs/performance.md.

mod admin;
mod agent_cli;
mod bench;
mod events_cli;
mod folder_cli;
mod service_cli;
mod session_cli;
mod whatif_cli;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use berth::app::{self, Parts};
use berth::config::{self, Config, ConfigError, Group};
use berth::telemetry;
use clap::{CommandFactory, Parser, Subcommand};
use events::projection::{self, StreamIndex};
use events::{audit, EventStore};
use gateway::projection::SessionsView;

#[derive(Parser)]
#[command(
    name = "berth",
    version,
    about = "berth: compute sessions, event-sourced",
    after_help = "Every setting is a flag and a BERTH_* variable: `berth <COMMAND> --help` lists those the command reads, `berth config` all of them with the values in force."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    settings: berth::config::Settings,
}

#[derive(Subcommand)]
enum Command {
    /// Run the whole control plane in this process until interrupted.
    Up,
    /// Print every setting's variable, the value in force (secrets masked) and where it came
    /// from (flag, environment or default).
    Config,
    /// Apply database migrations and exit.
    Migrate,
    /// Write a dump of berth's database (BERTH_DATABASE_URL) to FILE (`pg_dump`, custom
    /// format), while berth runs or not.
    Backup { file: std::path::PathBuf },
    /// Restore a dump made by `berth backup` into an empty database (BERTH_DATABASE_URL, on
    /// any cluster), then move the log's clock past every restored event, so that what is
    /// written from now on sorts after it. Run it before berth starts on the database.
    Restore { file: std::path::PathBuf },
    /// Run only the relay (PostgreSQL -> NATS JetStream) and the audit sealer.
    Relay,
    /// Run only the projections (the streams index and the sessions view).
    Projections,
    /// Run only the scheduler.
    Scheduler,
    /// Run only the reconciler (deadlines, lost agents).
    Reconciler,
    /// Run only the recorder, the dispatcher and the telemetry sink (the agents' side of the
    /// control plane, on NATS).
    Recorder,
    /// Run only the idle-reaper (sessions past their lifetime, or idle, terminated).
    IdleReaper,
    /// Run only the notification service (each owner told what became of their sessions).
    Notification,
    /// Run only the image-commit service (commits sent to their agents, overdue ones failed).
    ImageCommit,
    /// Run only the gateway (HTTP API on BERTH_GATEWAY_LISTEN).
    Gateway,
    /// Rebuild a projection from position zero into fresh tables and compare with the live
    /// one; `ledger` folds the write-side tables again and compares them; `workload` replays
    /// the log's requests through another queue policy in simulated time and prints it next
    /// to what really happened (`--policy drf --from T1 --to T2`).
    Replay {
        /// `streams`, `sessions`, `ledger` or `workload`.
        projection: String,
        /// Replace the live tables with the rebuilt ones afterwards.
        #[arg(long)]
        swap: bool,
        #[command(flatten)]
        workload: whatif_cli::WorkloadArgs,
    },
    /// Check the log against its hash chain, or show a stream as it was.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Record a few events and watch the running relay deliver them on NATS.
    Demo,
    /// Measure the platform and print figures: runs `berth-bench` (beside this binary or on
    /// the PATH; `cargo build --release -p berth-bench` builds it) with the arguments given.
    #[command(disable_help_flag = true)]
    Bench {
        /// The bench and its flags, as `berth-bench` reads them (`berth bench --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Users, keys, projects, resource groups, policies, presets, idle checks and agents,
    /// through the gateway's superadmin endpoints (BERTH_GATEWAY_URL, BERTH_API_KEY).
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Sessions through the gateway (BERTH_GATEWAY_URL, BERTH_API_KEY).
    #[command(subcommand)]
    Session(session_cli::SessionCommand),
    /// Folders and their files through the gateway (BERTH_GATEWAY_URL, BERTH_API_KEY).
    #[command(subcommand)]
    Folder(folder_cli::FolderCommand),
    /// The log's events through the gateway's event stream, read to the log's end or
    /// followed (`-f`), resuming by itself (BERTH_GATEWAY_URL, BERTH_API_KEY).
    Events(events_cli::EventsArgs),
    /// Durable subscriptions to the log: made with filters, listed with how far each was
    /// acknowledged, deleted (read them with `berth events --subscription NAME`).
    #[command(subcommand)]
    Subscription(events_cli::SubscriptionCommand),
    /// Model-serving endpoints: made from a model folder, listed with their replicas' health,
    /// scaled, given tokens, destroyed (BERTH_GATEWAY_URL, BERTH_API_KEY).
    #[command(subcommand)]
    Service(service_cli::ServiceCommand),
    /// Run an agent: registers this host, heartbeats, and runs the sessions placed on it as
    /// Docker containers (`--simulate`: moves them without containers). It speaks only NATS
    /// (BERTH_NATS_URL) and never reaches the database.
    Agent(agent_cli::AgentArgs),
    /// Print a completion script for a shell (e.g. `source <(berth completion bash)`).
    Completion { shell: clap_complete::Shell },
}

impl Command {
    /// The process's name in its traces (`service.name`): each part run alone names
    /// itself, `berth up` is `berth-up`, and the CLI's commands are `berth`.
    fn service_name(&self) -> &'static str {
        match self {
            Command::Up => "berth-up",
            Command::Relay => "berth-relay",
            Command::Projections => "berth-projections",
            Command::Scheduler => "berth-scheduler",
            Command::Reconciler => "berth-reconciler",
            Command::Recorder => "berth-recorder",
            Command::IdleReaper => "berth-idle-reaper",
            Command::Notification => "berth-notification",
            Command::ImageCommit => "berth-image-commit",
            Command::Gateway => "berth-gateway",
            Command::Agent(_) => "berth-agent",
            _ => "berth",
        }
    }
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Seal what is not sealed yet, then recompute the whole chain and name the first break.
    Verify {
        /// Verify only what is sealed already.
        #[arg(long)]
        no_seal: bool,
    },
    /// Print a stream's events and the state they fold into, optionally as of a time.
    Stream {
        stream_id: String,
        /// RFC 3339 time, e.g. 2026-11-21T10:00:00Z: ignore events recorded after it.
        #[arg(long)]
        as_of: Option<chrono::DateTime<chrono::Utc>>,
    },
    /// Print the chain head, to keep it somewhere outside the database.
    Head,
}

/// berth's command line: every setting is taken by every command, and a command's `--help`
/// lists those it reads.
fn cli_command() -> clap::Command {
    berth::config::shown_by_what_each_reads(Cli::command(), reads)
}

/// The groups of settings each command reads, by its name: what its `--help` lists.
fn reads(command: &str) -> &'static [Group] {
    match command {
        "up" | "relay" | "projections" | "scheduler" | "reconciler" | "recorder"
        | "idle-reaper" | "notification" | "image-commit" | "gateway" => Group::CONTROL_PLANE,
        "migrate" | "backup" | "restore" | "replay" | "audit" => &[Group::Database, Group::Logs],
        "demo" => &[Group::Database, Group::Nats, Group::Logs],
        // Through the gateway with a key; straight to the database for `init`, and without
        // a key for `issue-key` and `nats-authorization` (which reads NATS's user from
        // BERTH_NATS_URL).
        "admin" => &[Group::Client, Group::Database, Group::Nats, Group::Logs],
        "session" => &[Group::Client, Group::Logs],
        "agent" => &[Group::Nats, Group::Agent, Group::Logs, Group::Metrics],
        "completion" => &[],
        // `berth config` prints every setting; a command not named here may read any.
        _ => Group::ALL,
    }
}

fn main() -> ExitCode {
    let loaded = match config::load::<Cli>(
        cli_command(),
        std::env::args_os(),
        config::Variables::Process,
    ) {
        Ok(loaded) => loaded,
        Err(error) => return refuse(error),
    };
    // The benchmarks read their own settings, in a process of their own.
    if let Command::Bench { args } = &loaded.parsed.command {
        return bench::pass_through(loaded.matches(), args.clone());
    }
    let listing = loaded.listing();
    // Made while `loaded` is whole; refused only after `berth completion`, which needs none.
    let config = loaded.config();
    let cli = loaded.parsed;
    // Before configuration and telemetry: a completion script needs neither.
    if let Command::Completion { shell } = cli.command {
        completion(shell);
        return ExitCode::SUCCESS;
    }
    // Before any HTTP client: reqwest and the OTLP exporter build their TLS from it.
    events::tls::use_ring();
    let config = match config {
        Ok(config) => config,
        Err(error) => return refuse(error),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("berth: start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let service = cli.command.service_name();
    runtime.block_on(async move {
        let _telemetry = match telemetry::init(service, config.log_format) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("berth: telemetry: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        match run(cli, config, listing).await {
            Ok(code) => code,
            Err(e) => {
                eprintln!("berth: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}

/// Stops on a command line or a setting that does not parse (exit code 2), or prints help or
/// the version, as clap does.
fn refuse(error: ConfigError) -> ExitCode {
    match error {
        ConfigError::Command(error) => error.exit(),
        error => {
            eprintln!("berth: {error}");
            ExitCode::from(2)
        }
    }
}

/// Prints `berth`'s completion script for `shell`.
fn completion(shell: clap_complete::Shell) {
    let mut command = cli_command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "berth", &mut script);
    // A reader that closed early (`| head`) is no failure of ours.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
}

async fn connect_store(config: &Config) -> anyhow::Result<EventStore> {
    Ok(EventStore::new(app::connect_database(config, 32).await?))
}

/// Runs `cli`'s command; `listing` is every setting in force, as `berth config` prints it.
async fn run(
    cli: Cli,
    config: Config,
    listing: Vec<(String, String, &'static str)>,
) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Config => {
            for (variable, value, source) in listing {
                println!("{variable}={value}\t# {source}");
            }
        }
        Command::Migrate => {
            connect_store(&config).await?;
            println!("migrations applied");
        }
        Command::Backup { file } => {
            berth::backup::backup(&config.database_url, &file).await?;
            println!("backed up to {}", file.display());
        }
        Command::Restore { file } => {
            let restored = berth::backup::restore(&config.database_url, &file).await?;
            println!(
                "restored {} events; the log's clock continues after them (offset {})",
                restored.events, restored.clock_offset
            );
        }
        Command::Up => serve(&config, Parts::ALL).await?,
        Command::Relay => serve(&config, Parts::RELAY).await?,
        Command::Projections => serve(&config, Parts::PROJECTIONS).await?,
        Command::Scheduler => serve(&config, Parts::SCHEDULER).await?,
        Command::Reconciler => serve(&config, Parts::RECONCILER).await?,
        Command::Recorder => serve(&config, Parts::RECORDER).await?,
        Command::IdleReaper => serve(&config, Parts::IDLE_REAPER).await?,
        Command::Notification => serve(&config, Parts::NOTIFICATION).await?,
        Command::ImageCommit => serve(&config, Parts::IMAGE_COMMIT).await?,
        Command::Gateway => serve(&config, Parts::GATEWAY).await?,
        Command::Replay {
            projection: name,
            swap,
            workload,
        } => {
            if name == "workload" {
                anyhow::ensure!(!swap, "a workload is replayed in memory, never swapped");
                return whatif_cli::run(&config, workload).await;
            }
            let store = connect_store(&config).await?;
            let began = tokio::time::Instant::now();
            // How fast the log was folded again: the operator's measure of a check's cost.
            let rate = |events: u64| {
                let seconds = began.elapsed().as_secs_f64();
                format!(
                    "in {seconds:.2} s, {:.0} events/s",
                    events as f64 / seconds.max(1e-9)
                )
            };
            if name == "ledger" {
                anyhow::ensure!(
                    !swap,
                    "the ledger is compared, never swapped: commands decide on it"
                );
                let report = events::ledger::replay(store.pool()).await?;
                println!(
                    "ledger: {} tables folded again from {} events and compared with the live ones, {}",
                    report.tables,
                    report.events,
                    rate(report.events)
                );
                if report.equal() {
                    println!("equal: the folded tables match the live ones");
                    return Ok(ExitCode::SUCCESS);
                }
                for (table, live_only, replayed_only) in &report.differences {
                    println!("DIFFERENT {table}: {live_only} rows only live, {replayed_only} rows only folded");
                }
                return Ok(ExitCode::from(1));
            }
            let report = match name.as_str() {
                "streams" => projection::rebuild(store.pool(), &StreamIndex, swap).await?,
                "sessions" => projection::rebuild(store.pool(), &SessionsView, swap).await?,
                other => {
                    anyhow::bail!(
                        "unknown projection `{other}`; known: streams, sessions, ledger, workload"
                    )
                }
            };
            println!(
                "projection {name}: rebuilt from {} events, compared at position {}, {}",
                report.events,
                report.at,
                rate(report.events)
            );
            if report.equal() {
                println!("equal: the rebuilt tables match the live ones");
            } else {
                for (table, live_only, rebuilt_only) in &report.differences {
                    println!("DIFFERENT {table}: {live_only} rows only live, {rebuilt_only} rows only rebuilt");
                }
            }
            if report.swapped {
                println!("the rebuilt tables are now live");
            }
            if !report.equal() && !report.swapped {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Audit(command) => return audit_command(&config, command).await,
        Command::Bench { .. } => unreachable!("main hands `berth bench` to berth-bench"),
        Command::Demo => demo(&config).await?,
        Command::Admin(command) => return admin::run(&config, command).await,
        Command::Session(command) => return session_cli::run(&config, command).await,
        Command::Folder(command) => return folder_cli::run(&config, command).await,
        Command::Events(args) => return events_cli::run(&config, args).await,
        Command::Subscription(command) => return events_cli::subscription(&config, command).await,
        Command::Service(command) => return service_cli::run(&config, command).await,
        Command::Agent(args) => agent_cli::run(&config, args).await?,
        Command::Completion { shell } => completion(shell),
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts `parts` and runs them until SIGTERM or SIGINT (or until one of them fails), then
/// stops them within `BERTH_STOP_WITHIN_SECS`: past it, the error names the parts that did
/// not stop, and the process exits non-zero.
async fn serve(config: &Config, parts: Parts) -> anyhow::Result<()> {
    let mut signals = berth::signals::StopSignals::listen().context("listen for signals")?;
    let app = tokio::select! {
        app = app::start(config, parts) => app?,
        signal = signals.next() => {
            tracing::info!(signal, "stopped before berth was up");
            return Ok(());
        }
    };
    if let Some((email, key)) = &app.first_superadmin {
        println!("fresh install: superadmin {email}");
        if config.first_api_key.is_some() {
            println!("API key: the one BERTH_FIRST_API_KEY gives");
        } else {
            println!("API key (shown only now): {key}");
        }
    }
    tracing::info!(?parts, "berth is up; SIGTERM or Ctrl-C stops it");
    let within = config.timings.stop_within;
    let stopped = app
        .run_until(
            async {
                let signal = signals.next().await;
                tracing::info!(signal, ?within, "stopping");
            },
            within,
        )
        .await;
    if stopped.is_ok() {
        tracing::info!("stopped");
    }
    stopped
}

async fn audit_command(config: &Config, command: AuditCommand) -> anyhow::Result<ExitCode> {
    let store = connect_store(config).await?;
    match command {
        AuditCommand::Verify { no_seal } => {
            if !no_seal {
                let sealed = audit::seal_all(store.pool()).await?;
                println!("sealed {sealed} new events");
            }
            let result = audit::verify(store.pool()).await?;
            match result.first_break {
                None => println!("ok: {} sealed events, the chain is intact", result.sealed),
                Some(broken) => {
                    println!("BROKEN {broken}");
                    return Ok(ExitCode::from(1));
                }
            }
        }
        AuditCommand::Head => match audit::head(store.pool()).await? {
            None => println!("nothing sealed yet"),
            Some(head) => println!(
                "audit_seq {} position {} hash {}",
                head.audit_seq,
                head.position,
                hex_string(&head.hash)
            ),
        },
        AuditCommand::Stream { stream_id, as_of } => {
            let mut recorded = store.read_stream(&stream_id).await?;
            if let Some(as_of) = as_of {
                recorded.retain(|e| e.recorded_at <= as_of);
            }
            for event in &recorded {
                println!("{}", serde_json::to_string(event)?);
            }
            let state = events::aggregate::fold(&recorded);
            println!(
                "state{}: {}",
                as_of.map(|t| format!(" as of {t}")).unwrap_or_default(),
                serde_json::to_string_pretty(&state)?
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn hex_string(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Registers an agent and heartbeats it, and waits until the relay (run by `berth up`)
/// delivers each event on JetStream.
async fn demo(config: &Config) -> anyhow::Result<()> {
    use events::catalogue::Event;
    use events::payloads::{AgentHeartbeated, AgentRegistered, ResourceSlots};
    use events::ExpectedVersion;
    use futures::StreamExt;

    let store = connect_store(config).await?;
    let js = async_nats::jetstream::new(app::connect_nats(config).await?);
    let topology = config.topology.clone();
    let stream = events::relay::ensure_stream(&js, &topology).await?;
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: topology.category_subject("agent"),
            deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::New,
            ..Default::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;

    let agent_id = format!("demo{}", uuid::Uuid::new_v4().simple());
    let stream_id = format!("agent-{agent_id}");
    let metadata = events::trace::metadata("berth-demo", None);
    let registered = Event::AgentRegistered(AgentRegistered {
        unlabelled_images: Vec::new(),
        agent_id: agent_id.clone(),
        resource_group: "demo".into(),
        capacity: ResourceSlots {
            cpu_milli: 4_000,
            memory_bytes: 8 << 30,
            gpu_milli: 0,
        },
        images: vec![],
        address: None,
        image_apps: Default::default(),
        network_scope: None,
        volumes: Default::default(),
    });
    let heartbeat = Event::AgentHeartbeated(AgentHeartbeated {
        agent_id,
        at: chrono::Utc::now(),
    });
    let started = tokio::time::Instant::now();
    // Through the ledger, like every agent event, so its tables stay exactly the log's fold.
    let appended = events::ledger::record_now(
        store.pool(),
        &stream_id,
        ExpectedVersion::NoStream,
        &[registered, heartbeat],
        &metadata,
    )
    .await?;
    println!(
        "appended 2 events to {stream_id}; last at log position {}",
        appended.position
    );
    let mut delivered = 0;
    while delivered < 2 {
        let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .context("the relay delivered nothing within 10 s: is `berth up` running?")?
            .context("consumer ended")??;
        let event: events::RecordedEvent = serde_json::from_slice(&message.payload)?;
        if event.stream_id != stream_id {
            continue;
        }
        delivered += 1;
        println!(
            "delivered {} v{} on {} after {:.1} ms",
            event.event_type(),
            event.stream_version,
            message.subject,
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    for event in store.read_stream(&stream_id).await? {
        println!("{}", serde_json::to_string(&event)?);
    }
    Ok(())
}
