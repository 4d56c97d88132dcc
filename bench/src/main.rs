//! `berth-bench`: figures for docs/performance.md, each next to the raw PostgreSQL figure
//! for the same rows measured in the same run. `berth bench ...` runs this binary (found
//! beside `berth`, else on the `PATH`); `cargo build --release -p berth-bench` builds it.
//!
//! The benchmarks live outside the `berth` that operators run, so that what only they and the
//! tests need (scratch clusters, a certificate authority: `testkit`) is not linked into it.
//! Every run uses a database of its own (dropped at the end), so the figures do not depend
//! on what the platform's database holds.

// A benchmark measures wall-clock time on purpose, outside any runtime's clock.
#![allow(clippy::disallowed_types)]

mod apps;
mod backendai;
mod commit;
mod console;
mod data;
mod db;
mod event_stream;
mod fleet;
mod reap;
mod recovery;
mod relay;
mod replay;
mod serve;
mod sessions;
mod shapes;
mod store;
mod tls;
mod whatif;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use berth::config::{Config, Settings};
use clap::{CommandFactory, Parser, Subcommand};

/// `berth bench`'s command line: the bench, and every setting `berth` reads (the same flags
/// and `BERTH_*` variables).
#[derive(Parser)]
#[command(
    name = "berth-bench",
    bin_name = "berth bench",
    version,
    about = "Measure the platform and print figures (docs/performance.md)"
)]
struct Cli {
    #[command(subcommand)]
    command: BenchCommand,
    #[command(flatten)]
    settings: Settings,
}

fn main() -> ExitCode {
    // As `berth` reads its settings (berth::config::load): a flag wins over its variable, an
    // empty BERTH_* variable counts as unset, a bad value names its variable.
    let loaded = match berth::config::load::<Cli>(
        Cli::command(),
        std::env::args_os(),
        berth::config::Variables::Process,
    ) {
        Ok(loaded) => loaded,
        // --help, --version and clap's own refusals, printed and exited as clap does.
        Err(berth::config::ConfigError::Command(e)) => e.exit(),
        Err(e) => {
            eprintln!("berth bench: {e}");
            return ExitCode::from(2);
        }
    };
    // Before any HTTP client: reqwest builds its TLS from it.
    events::tls::use_ring();
    let config = match loaded.config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("berth bench: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = loaded.parsed;
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("berth bench: start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let _telemetry = match berth::telemetry::init("berth-bench", config.log_format) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("berth bench: telemetry: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        match run(&config, cli.command).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("berth bench: {e:#}");
                ExitCode::FAILURE
            }
        }
    })
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Appends (single and batched), reading the whole log, and raw PostgreSQL for each.
    Store {
        /// Seconds each append phase runs.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Concurrent writers.
        #[arg(long, default_value_t = 16)]
        writers: usize,
        /// Run without the audit sealer beside the writers.
        #[arg(long)]
        no_sealer: bool,
        /// Rounds of each kind of append, raw and berth taking turns at going first: the
        /// ratio reported is the rounds' median, so a VM that slows for a minute moves it
        /// less than it moves one phase.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// The log's append statement next to raw inserts and to a version row per stream, all
    /// three by pgbench on the same rows, single events and 100 at a time: the shapes issue 44
    /// asks to be measured before the log's is changed.
    Shapes {
        /// Seconds each statement runs in a round.
        #[arg(long, default_value_t = 6)]
        seconds: u64,
        /// pgbench clients, each on 64 streams of its own.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Rounds, each statement once a round, a different one first in each: the ratios
        /// reported are the rounds' medians.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// The audit sealer alone over a log of `--events` events, and `verify` over what it
    /// sealed, each next to a raw `COPY` of the same rows out of PostgreSQL (the least either
    /// must do: read every event once).
    Seal {
        #[arg(long, default_value_t = 200_000)]
        events: u64,
    },
    /// Append-to-delivery latency through the relay to a JetStream consumer, on a log of
    /// `--backlog` events whose catch-up is timed apart.
    Relay {
        /// Events appended per second.
        #[arg(long, default_value_t = 10_000)]
        rate: u64,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Events to an append (one transaction).
        #[arg(long, default_value_t = 10)]
        per_append: u64,
        /// Events in the log before the relay starts.
        #[arg(long, default_value_t = 100_000)]
        backlog: u64,
    },
    /// The event stream's consumers: a burst delivered live to 1, 10 and 100 SSE consumers
    /// next to a direct JetStream consumer, latency at a paced rate to 10 of them next to the
    /// JetStream consumer's, and a catch-up from position zero next to reading the log.
    Events {
        /// Events of each fan-out burst.
        #[arg(long, default_value_t = 20_000)]
        burst: u64,
        /// SSE consumers of each fan-out round.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 10, 100])]
        consumers: Vec<usize>,
        /// Events appended per second in the latency round.
        #[arg(long, default_value_t = 2_000)]
        rate: u64,
        /// Seconds of the latency round.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// The scheduling core under fifo and drf side by side, and scheduling end to end, with
    /// 1,000 agents and 10,000 pending.
    Schedule {
        #[arg(long, default_value_t = 1_000)]
        agents: usize,
        #[arg(long, default_value_t = 10_000)]
        sessions: usize,
        /// Only the scheduling core, in memory (no database): e.g. `--agents 10000
        /// --sessions 100000`.
        #[arg(long)]
        core_only: bool,
    },
    /// An in-process launch to RUNNING with real containers, next to the bare Engine API's
    /// create and start and plain `docker run -d`; and sessions started per second in a
    /// burst, next to as many parallel `docker run -d` on an engine as quiet.
    Start {
        #[arg(long, default_value_t = 50)]
        sessions: usize,
        #[arg(long, default_value_t = 20)]
        burst: usize,
        /// How many fenced bridges the agent keeps made ahead (0: each session's made at its
        /// start, as before they were).
        #[arg(long, default_value_t = 2)]
        spare_networks: usize,
        /// The agent lends no runtime, so its spares are bridges alone and every kernel has a
        /// network endpoint of its own (as before 2026-12-03).
        #[arg(long)]
        no_sandboxes: bool,
    },
    /// A folder's write of `--mib` MiB from inside a session on a shared volume (a directory
    /// the engine bind-mounts, `--volume-dir`; an NFS mount to measure that), next to a
    /// host-local folder's and to the same dd on the host's path.
    VolumeWrite {
        #[arg(long, default_value_t = 1024)]
        mib: u32,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[arg(long, value_name = "DIR")]
        volume_dir: Option<PathBuf>,
    },
    /// A file of `--mib` MiB uploaded to a folder and downloaded from it through the files
    /// API, next to raw loopback HTTP and `cp`, with the process's peak memory growth.
    Data {
        #[arg(long, default_value_t = 1024)]
        mib: u32,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// A 2-node cluster from its request to RUNNING with a kernel on each of two engines of a
    /// swarm (an overlay network), next to both kernels on this machine's engine (a bridge).
    /// The engines: `infra/host.sh swarm 2 3` makes two, `infra/host.sh load N
    /// berth/shell:latest` gives them the image; name their sockets here.
    StartCluster {
        #[arg(long, default_value_t = 20)]
        sessions: usize,
        /// The two engines' Unix sockets (`infra/host.sh env N` names each).
        #[arg(long, num_args = 2, value_name = "SOCKET")]
        engines: Vec<PathBuf>,
    },
    /// Create to placement, one session at a time: the scheduler woken by the bus (relay and
    /// NATS, as in service) next to an in-process poke (how the gateway woke it before).
    Wake {
        #[arg(long, default_value_t = 200)]
        sessions: usize,
    },
    /// Simulated agents on the bus against `berth up` as its own process: PostgreSQL
    /// connections and CPU idle, with none and with all of them; then batch sessions
    /// placed and run per second.
    Fleet {
        #[arg(long, default_value_t = 1_000)]
        agents: usize,
        #[arg(long, default_value_t = 2_000)]
        sessions: usize,
        /// Seconds each idle CPU figure is measured over (the settling before it scales with it).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
        window: u64,
        /// Seconds after the last registration that the settled idle window begins: what a
        /// burst of 1,000 registrations leaves behind took about a minute here.
        #[arg(long, default_value_t = 60)]
        settle: u64,
    },
    /// The idle-reaper: from a session falling due to its reaping, next to terminating it in
    /// process when due; the CPU of watching sessions, next to watching none.
    Reap {
        #[arg(long, default_value_t = 100)]
        sessions: usize,
        #[arg(long, default_value_t = 1_000)]
        watched: usize,
        /// Seconds each CPU figure is measured over (the settling before it scales with it).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
        window: u64,
    },
    /// A RUNNING berth/python session committed to an image, next to the bare Engine API's
    /// commit and `docker commit` of the same container; only commits that ended done are
    /// timed.
    Commit {
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Model serving's balancer next to the replicas' published ports: a small call's added
    /// latency at p50 and p99, and the throughput of an endpoint with two replicas next to the
    /// same callers split over the two replicas directly.
    Serve {
        /// Small calls each way, for the latency.
        #[arg(long, default_value_t = 1_000)]
        requests: usize,
        /// Seconds each throughput phase runs.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Concurrent callers in the throughput phases.
        #[arg(long, default_value_t = 16)]
        callers: usize,
    },
    /// The app proxy next to the published port (a small request's latency, a 100 MB
    /// download), the terminal's keystroke echo, and JupyterLab's first page.
    Apps {
        #[arg(long, default_value_t = 500)]
        requests: usize,
    },
    /// How soon sessions are placed and RUNNING again once PostgreSQL or NATS returns from
    /// an outage, next to a create's own times with nothing away. Runs on a PostgreSQL
    /// cluster and a nats-server of its own, which it stops and starts.
    Recovery {
        /// Outages of each dependency.
        #[arg(long, default_value_t = 10)]
        rounds: usize,
        /// Seconds each outage lasts.
        #[arg(long, default_value_t = 3)]
        outage: u64,
    },
    /// The ledger replayed and each projection folded again over a log of sessions' lives,
    /// next to a raw `COPY` of the log and to applying events a statement at a time.
    Replay {
        /// Events in the log (at least; whole sessions are recorded).
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
    },
    /// The console's Sessions page over many sessions next to the JSON list of the same
    /// page: bytes and answer times, and in headless Chromium its first paint next to the
    /// list fetched from the page; the Data page and the administration pages next to
    /// their JSON lists.
    Console {
        #[arg(long, default_value_t = 1_000)]
        sessions: usize,
        /// Users on the administration's users page.
        #[arg(long, default_value_t = 200)]
        users: usize,
        /// The superadmin's folders on the Data page.
        #[arg(long, default_value_t = 100)]
        folders: usize,
        #[arg(long, default_value_t = 30)]
        rounds: usize,
    },
    /// What Backend.AI's compatibility costs: a signed request's verification next to an API
    /// key's, through the gateway and alone, and Backend.AI's own `backend.ai ps` over one
    /// user's sessions next to `berth session ls` (the client is installed from PyPI into
    /// `--client-dir` when missing).
    Backendai {
        #[arg(long, default_value_t = 1_000)]
        sessions: usize,
        /// Requests each way.
        #[arg(long, default_value_t = 2_000)]
        requests: usize,
        /// Runs of each CLI.
        #[arg(long, default_value_t = 10)]
        runs: usize,
        #[arg(long, default_value_os_t = crate::backendai::default_client_dir())]
        client_dir: std::path::PathBuf,
    },
    /// What TLS costs a session create: over HTTPS kept alive, with a new connection and
    /// with a new client (a full handshake) each time, next to plain HTTP.
    Tls {
        /// Creates measured in each way.
        #[arg(long, default_value_t = 300)]
        creates: usize,
    },
    /// A what-if replay of recorded requests (synthetic, in memory) through FIFO and DRF,
    /// next to reading the workload out of its log and one pass of the core over it all.
    Whatif {
        #[arg(long, default_value_t = 100_000)]
        sessions: usize,
        #[arg(long, default_value_t = 100)]
        agents: usize,
    },
    /// Session-detail reads through the gateway: requests per second and latency.
    Gateway {
        /// Seconds of reads; the first is a warm-up, not measured.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..))]
        seconds: u64,
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Serve every read from the projection (no detail cache).
        #[arg(long)]
        no_cache: bool,
        /// Sessions placed and projected before the reads, each read one of them.
        #[arg(long, default_value_t = 10_000)]
        sessions: usize,
    },
    /// The gateway's session-detail reads with metrics on (every request measured, `/metrics`
    /// scraped every second) next to metrics off, in alternating rounds in one run.
    Metrics {
        /// Seconds of each round, each way.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(2..))]
        seconds: u64,
        #[arg(long, default_value_t = 4)]
        rounds: usize,
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Sessions placed and projected before the reads, each read one of them.
        #[arg(long, default_value_t = 10_000)]
        sessions: usize,
    },
}

async fn run(config: &Config, command: BenchCommand) -> anyhow::Result<()> {
    // In memory only: no database of its own.
    if let BenchCommand::Whatif { sessions, agents } = command {
        return crate::whatif::whatif(sessions, agents);
    }
    let (url, name) = bench_database(&config.database_url)?;
    events::store::ensure_database(&url).await?;
    let result = match command {
        BenchCommand::Store {
            seconds,
            writers,
            no_sealer,
            rounds,
        } => {
            let shape = store::StoreShape {
                phase: Duration::from_secs(seconds),
                writers,
                sealer: !no_sealer,
                rounds: rounds.max(1),
            };
            store::store_bench(&url, shape).await
        }
        BenchCommand::Seal { events } => store::seal_bench(&url, events).await,
        BenchCommand::Shapes {
            seconds,
            clients,
            rounds,
        } => {
            let run = shapes::ShapesRun {
                phase: Duration::from_secs(seconds),
                clients: clients.max(1),
                rounds: rounds.max(1),
            };
            shapes::shapes(&url, run).await
        }
        BenchCommand::Events {
            burst,
            consumers,
            rate,
            seconds,
        } => {
            crate::event_stream::events(&config.nats_url, &url, burst, rate, seconds, &consumers)
                .await
        }
        BenchCommand::Relay {
            rate,
            seconds,
            per_append,
            backlog,
        } => {
            let run = relay::RelayRun {
                rate,
                seconds,
                per_append: per_append.max(1),
                backlog,
            };
            relay::relay_bench(config, &url, run).await
        }
        BenchCommand::Schedule {
            agents,
            sessions,
            core_only,
        } => crate::sessions::schedule(&url, agents, sessions, core_only).await,
        BenchCommand::Start {
            sessions,
            burst,
            spare_networks,
            no_sandboxes,
        } => {
            let sandboxes = !no_sandboxes;
            crate::sessions::start(
                &config.nats_url,
                &url,
                sessions,
                burst,
                spare_networks,
                sandboxes,
            )
            .await
        }
        BenchCommand::VolumeWrite {
            mib,
            rounds,
            volume_dir,
        } => crate::sessions::volume_write(&config.nats_url, &url, volume_dir, mib, rounds).await,
        BenchCommand::Data { mib, rounds } => crate::data::data(&url, mib, rounds).await,
        BenchCommand::StartCluster { sessions, engines } => {
            let engines: [PathBuf; 2] = engines
                .try_into()
                .map_err(|_| anyhow::anyhow!("--engines takes two sockets"))?;
            crate::sessions::start_cluster(&config.nats_url, &url, &engines, sessions).await
        }
        BenchCommand::Wake { sessions } => {
            crate::sessions::wake(&config.nats_url, &url, sessions).await
        }
        BenchCommand::Commit { rounds } => {
            crate::commit::commit(&config.nats_url, &url, rounds).await
        }
        BenchCommand::Apps { requests } => crate::apps::apps(config, &url, requests).await,
        BenchCommand::Serve {
            requests,
            seconds,
            callers,
        } => crate::serve::serve(config, &url, requests, seconds, callers).await,
        BenchCommand::Reap {
            sessions,
            watched,
            window,
        } => {
            let window = Duration::from_secs(window);
            crate::reap::reap(&config.nats_url, &url, sessions, watched, window).await
        }
        BenchCommand::Fleet {
            agents,
            sessions,
            window,
            settle,
        } => {
            let binary = berth_binary()?;
            let shape = crate::fleet::Shape {
                agents,
                sessions,
                window: Duration::from_secs(window),
                settle: Duration::from_secs(settle),
            };
            crate::fleet::fleet(&binary, &config.nats_url, &url, &name, shape).await
        }
        BenchCommand::Recovery { rounds, outage } => {
            crate::recovery::recovery(rounds, Duration::from_secs(outage)).await
        }
        BenchCommand::Replay { events } => crate::replay::replay(&url, events).await,
        BenchCommand::Console {
            sessions,
            users,
            folders,
            rounds,
        } => crate::console::console(&url, sessions, users, folders, rounds).await,
        BenchCommand::Tls { creates } => crate::tls::tls(&url, creates).await,
        BenchCommand::Backendai {
            sessions,
            requests,
            runs,
            client_dir,
        } => crate::backendai::backendai(&url, sessions, requests, runs, &client_dir).await,
        BenchCommand::Gateway {
            seconds,
            clients,
            no_cache,
            sessions,
        } => {
            let cache = !no_cache;
            crate::sessions::gateway(&config.nats_url, &url, sessions, seconds, clients, cache)
                .await
        }
        BenchCommand::Metrics {
            seconds,
            rounds,
            clients,
            sessions,
        } => {
            crate::sessions::metrics(&config.nats_url, &url, sessions, seconds, rounds, clients)
                .await
        }
        BenchCommand::Whatif { .. } => unreachable!("run in memory above"),
    };
    drop_database(&config.database_url, &name).await?;
    result
}

fn bench_database(url: &str) -> anyhow::Result<(String, String)> {
    let (prefix, _) = url
        .rsplit_once('/')
        .context("the database url names no database")?;
    let name = format!("berth_bench_{}", std::process::id());
    Ok((format!("{prefix}/{name}"), name))
}

async fn drop_database(url: &str, name: &str) -> anyhow::Result<()> {
    let (prefix, _) = url
        .rsplit_once('/')
        .context("the database url names no database")?;
    db::drop_database(&format!("{prefix}/postgres"), name).await
}

/// The `berth` binary the benches run as processes of their own (`berth up`, `berth session
/// ls`): the one beside this binary (both are built into the same `target/` directory), else
/// the first on the `PATH`.
fn berth_binary() -> anyhow::Result<PathBuf> {
    let beside = std::env::current_exe()?
        .parent()
        .map(|dir| dir.join("berth"))
        .filter(|path| path.is_file());
    beside
        .or_else(|| {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .map(|dir| dir.join("berth"))
                .find(|path| path.is_file())
        })
        .context("no `berth` beside this binary nor on the PATH: build it with `cargo build --release -p berth`")
}
