//! The one composition of berth's control plane. [`start`] wires the parts a process runs
//! (relay and sealer, projections, scheduler, reconciler, recorder, idle-reaper,
//! notification, image-commit, gateway) onto one database pool and one stop token. `berth up`
//! starts every part; `berth relay`, `berth projections`, `berth scheduler`,
//! `berth reconciler`, `berth recorder`, `berth idle-reaper`, `berth notification`,
//! `berth image-commit` and `berth gateway` start one each; the end-to-end tests start the same function, so what they test is what runs.
//!
//! A process stops gracefully ([`App::stop_within`]): every part is cancelled, finishes the
//! unit it is on (a batch of the log, a pass, a request) and saves its checkpoint; the
//! gateway takes no new connection and lets those open finish. Past the bound, the process
//! names the parts that did not stop.
//!
//! Agents are not parts: they run on compute hosts (`berth agent`) and reach the control
//! plane only through NATS, where the recorder answers them.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use deadpool_postgres::Pool;
use events::projection::{self, StreamIndex};
use events::relay::RelayConfig;
use events::{audit, store};
use gateway::projection::SessionsView;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::supervise;

/// Which parts of the control plane a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Parts {
    /// Publishes committed events to NATS, and seals the audit chain behind it.
    pub relay: bool,
    /// Keeps the read models (streams, sessions) folded from the log.
    pub projections: bool,
    /// Places pending sessions on agents.
    pub scheduler: bool,
    /// Moves on sessions past their deadlines, and marks silent agents lost.
    pub reconciler: bool,
    /// Meets the agents on NATS: records what they report, sends them their commands, and
    /// keeps their telemetry.
    pub recorder: bool,
    /// Terminates sessions past their lifetime or idle, and says why.
    pub idle_reaper: bool,
    /// Tells each session's owner what became of it.
    pub notification: bool,
    /// Sends commits to the agents that make them, and fails those never finished.
    pub image_commit: bool,
    /// Serves the HTTP API.
    pub gateway: bool,
}

impl Parts {
    /// Everything: `berth up`.
    pub const ALL: Parts = Parts {
        relay: true,
        projections: true,
        scheduler: true,
        reconciler: true,
        recorder: true,
        idle_reaper: true,
        notification: true,
        image_commit: true,
        gateway: true,
    };
    const NONE: Parts = Parts {
        relay: false,
        projections: false,
        scheduler: false,
        reconciler: false,
        recorder: false,
        idle_reaper: false,
        notification: false,
        image_commit: false,
        gateway: false,
    };
    pub const RELAY: Parts = Parts {
        relay: true,
        ..Parts::NONE
    };
    pub const PROJECTIONS: Parts = Parts {
        projections: true,
        ..Parts::NONE
    };
    pub const SCHEDULER: Parts = Parts {
        scheduler: true,
        ..Parts::NONE
    };
    pub const RECONCILER: Parts = Parts {
        reconciler: true,
        ..Parts::NONE
    };
    pub const RECORDER: Parts = Parts {
        recorder: true,
        ..Parts::NONE
    };
    pub const IDLE_REAPER: Parts = Parts {
        idle_reaper: true,
        ..Parts::NONE
    };
    pub const NOTIFICATION: Parts = Parts {
        notification: true,
        ..Parts::NONE
    };
    pub const IMAGE_COMMIT: Parts = Parts {
        image_commit: true,
        ..Parts::NONE
    };
    pub const GATEWAY: Parts = Parts {
        gateway: true,
        ..Parts::NONE
    };
}

/// A started control plane: its parts run on their own tasks until [`App::stop`].
pub struct App {
    pub pool: Pool,
    /// Where the gateway listens, when it runs.
    pub gateway: Option<SocketAddr>,
    /// Where the process's metrics listener serves `/metrics`, when it has one
    /// (`BERTH_METRICS_LISTEN`).
    pub metrics: Option<SocketAddr>,
    /// The first superadmin's email and API key, when this start set up a fresh install.
    pub first_superadmin: Option<(String, String)>,
    stop: CancellationToken,
    tasks: Running,
}

/// The parts' tasks, with the name of each.
#[derive(Default)]
struct Running {
    tasks: JoinSet<anyhow::Result<()>>,
    names: HashMap<tokio::task::Id, &'static str>,
}

/// Migrates the control plane's database: the backbone's schemas (the log, the ledger), then
/// those the services own, each from its own crate. Every control-plane process migrates all
/// of them, whichever parts it runs, as when they were the backbone's: the gateway reads the
/// notification service's notices, and a part started alone finds its tables there.
pub async fn migrate(pool: &Pool) -> Result<(), store::StoreError> {
    store::migrate(pool, &service_migrations()).await
}

/// The migrations of the schemas the services own, each under its service's component.
pub fn service_migrations() -> Vec<store::Migration> {
    [
        recorder::MIGRATIONS,
        idle_reaper::MIGRATIONS,
        notification::MIGRATIONS,
        image_commit::MIGRATIONS,
        gateway::MIGRATIONS,
    ]
    .concat()
}

/// Connects to PostgreSQL (creating the database when it does not exist) and migrates it
/// ([`migrate`]).
/// While PostgreSQL is unreachable or starting it waits, saying so once; a refusal that
/// waiting will not mend (a wrong password, no such database server) is the error.
pub async fn connect_database(config: &Config, max_size: usize) -> anyhow::Result<Pool> {
    let url = &config.database_url;
    bus::patience::until_up(
        "PostgreSQL",
        || store::ensure_database(url),
        |e| e.is_unavailable(),
    )
    .await
    .context("reach PostgreSQL")?;
    let pool = store::pool(&config.database_url, max_size)?;
    migrate(&pool).await.context("migrate the database")?;
    Ok(pool)
}

/// Connects to NATS. While the server is unreachable it waits, saying so once (and the
/// client reconnects by itself after any later outage); a refused login is the error.
pub async fn connect_nats(config: &Config) -> anyhow::Result<async_nats::Client> {
    bus::patience::until_up(
        "NATS",
        || try_connect_nats(config, false),
        |e| !nats_refused(e),
    )
    .await
}

/// A NATS client that connects in the background when the server is away now (the gateway
/// serves its API without the bus); a refused login is still the error.
async fn connect_nats_later(config: &Config) -> anyhow::Result<async_nats::Client> {
    match try_connect_nats(config, false).await {
        Err(e) if !nats_refused(&e) => {
            tracing::warn!(
                error = format!("{e:#}"),
                "NATS is away; the event stream waits for it"
            );
            try_connect_nats(config, true).await
        }
        connected => connected,
    }
}

/// Whether NATS refused the login (no waiting mends that).
fn nats_refused(error: &anyhow::Error) -> bool {
    use async_nats::ConnectErrorKind::{Authentication, AuthorizationViolation};
    error.chain().any(|cause| {
        cause
            .downcast_ref::<async_nats::ConnectError>()
            .is_some_and(|e| matches!(e.kind(), Authentication | AuthorizationViolation))
    })
}

/// One attempt to connect to NATS (`in_background`: the client keeps trying by itself), as
/// the user and password in the URL (`nats://control:secret@host:4222`, the control plane's
/// user on a server with authorization).
async fn try_connect_nats(
    config: &Config,
    in_background: bool,
) -> anyhow::Result<async_nats::Client> {
    let (options, address) = bus::link::connect_options(&config.nats_url, &config.nats_tls)
        .with_context(|| {
            format!(
                "BERTH_NATS_URL `{}`",
                address_without_password(&config.nats_url)
            )
        })?;
    let options = if in_background {
        options.retry_on_initial_connect()
    } else {
        options
    };
    let options = options.connection_timeout(std::time::Duration::from_secs(5));
    bus::link::connect_with(options, address)
        .await
        .with_context(|| {
            format!(
                "connect to NATS at {}",
                address_without_password(&config.nats_url)
            )
        })
}

/// `url` with its password hidden, for messages.
fn address_without_password(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

/// Starts `parts` of the control plane as `config` describes.
pub async fn start(config: &Config, parts: Parts) -> anyhow::Result<App> {
    warn_plain_connections(config, parts.gateway);
    let pool = connect_database(config, 32).await?;
    let stop = CancellationToken::new();
    let mut tasks = Running::default();
    let timings = &config.timings;

    // Metrics are recorded from here on, unless turned off (`BERTH_METRICS=off`).
    let metrics = config.metrics.then(crate::metrics::install).flatten();
    let mut metrics_address = None;
    if let (Some(handle), Some(listen)) = (&metrics, &config.metrics_listen) {
        let (address, _served) =
            crate::metrics::listen(listen, handle.clone(), stop.clone()).await?;
        metrics_address = Some(address);
    }

    // A fresh install gets its first superadmin from the process that serves users.
    let first_superadmin = if parts.gateway {
        let key = (config.first_api_key.clone()).unwrap_or_else(launcher::access::new_api_key);
        launcher::access::bootstrap_with_key(&pool, key).await?
    } else {
        None
    };

    if parts.relay {
        let js = async_nats::jetstream::new(connect_nats(config).await?);
        let (p, url, topology) = (
            pool.clone(),
            config.database_url.clone(),
            config.topology.clone(),
        );
        keep(&mut tasks, "relay", &stop, move |s| {
            let (p, url, js, topology) = (p.clone(), url.clone(), js.clone(), topology.clone());
            async move {
                events::relay::run(p, url, js, topology, RelayConfig::default(), s).await?;
                Ok(())
            }
        });
        let (p, idle) = (pool.clone(), timings.sealer_idle);
        keep(&mut tasks, "sealer", &stop, move |s| {
            let p = p.clone();
            async move { Ok(audit::keep_sealing(&p, idle, &s).await?) }
        });
    }
    // The gateway reads the sessions view: its tables exist before the first request.
    if parts.projections || parts.gateway {
        projection::install(&pool, &SessionsView).await?;
    }
    if parts.projections {
        let (p, poll) = (pool.clone(), timings.streams_poll);
        keep(&mut tasks, "streams projection", &stop, move |s| {
            let p = p.clone();
            async move {
                projection::run(p, StreamIndex, poll, s).await?;
                Ok(())
            }
        });
        let (p, poll) = (pool.clone(), timings.sessions_poll);
        keep(&mut tasks, "sessions projection", &stop, move |s| {
            let p = p.clone();
            async move {
                projection::run(p, SessionsView, poll, s).await?;
                Ok(())
            }
        });
    }
    if parts.scheduler {
        // The bus wakes the scheduler (the events that can change a decision); its interval
        // is only the safety net, so it works the same in `berth up` and as its own process.
        let wake = Arc::new(Notify::new());
        let nats = connect_nats(config).await?;
        let (w, topology, p) = (wake.clone(), config.topology.clone(), pool.clone());
        keep(&mut tasks, "scheduler wake-ups", &stop, move |s| {
            let (nats, topology, w, p) = (nats.clone(), topology.clone(), w.clone(), p.clone());
            async move {
                scheduler::wake::follow(nats, p, topology, w, s).await?;
                Ok(())
            }
        });
        // The launcher's question, when a shape would start: answered from the live queue.
        let b = OnBus::connect(config, &pool).await?;
        let silent_after = timings.agent_silent_after;
        let config = scheduler::run::SchedulerConfig {
            silent_after: timings.agent_silent_after,
            ..scheduler::run::SchedulerConfig::new(timings.scheduler_interval)
        };
        keep(&mut tasks, "scheduler advice", &stop, move |s| {
            let b = b.clone();
            async move {
                scheduler::answer::answer(b.nats, b.subjects, b.pool, silent_after, s).await?;
                Ok(())
            }
        });
        let p = pool.clone();
        keep(&mut tasks, "scheduler", &stop, move |s| {
            let scheduler = scheduler::run::Scheduler::new(p.clone(), config.clone());
            let w = wake.clone();
            async move {
                scheduler.run(w, s).await;
                Ok(())
            }
        });
    }
    if parts.reconciler {
        let deadlines = scheduler::reconcile::Deadlines {
            heartbeat: timings.heartbeat_timeout,
            departed: timings.agent_departed_timeout,
            ..Default::default()
        };
        let (p, every) = (pool.clone(), timings.reconcile_every);
        keep(&mut tasks, "reconciler", &stop, move |s| {
            let (p, deadlines) = (p.clone(), deadlines.clone());
            async move {
                scheduler::reconcile::run(p, deadlines, every, s).await;
                Ok(())
            }
        });
    }
    if parts.recorder {
        let b = OnBus::connect(config, &pool).await?;
        if let Some(dir) = &config.nats_authorization {
            // The recorder decides who is admitted; the server on this host learns it.
            let (b, dir) = (b.clone(), dir.clone());
            keep(&mut tasks, "nats authority", &stop, move |s| {
                let (b, dir) = (b.clone(), dir.clone());
                async move {
                    crate::nats_authority::follow(b.nats, b.pool, b.subjects, b.topology, dir, s)
                        .await
                }
            });
        }
        keep(&mut tasks, "recorder", &stop, move |s| {
            let b = b.clone();
            async move {
                recorder::run(b.nats, b.pool, b.subjects, b.topology, s).await?;
                Ok(())
            }
        });
    }
    if parts.idle_reaper {
        let b = OnBus::connect(config, &pool).await?;
        let reaper = idle_reaper::ReaperConfig {
            tick: timings.reaper_tick,
            ..Default::default()
        };
        keep(&mut tasks, "idle-reaper", &stop, move |s| {
            let b = b.clone();
            async move {
                idle_reaper::run(b.nats, b.pool, b.subjects, b.topology, reaper, s).await?;
                Ok(())
            }
        });
    }
    if parts.notification {
        let b = OnBus::connect(config, &pool).await?;
        let http = notification::webhook::Sender::new(
            config.webhook_ca.as_deref(),
            config.webhook_policy.clone(),
        )
        .map_err(anyhow::Error::msg)
        .context("BERTH_WEBHOOK_CA")?;
        keep(&mut tasks, "notification", &stop, move |s| {
            let (b, http) = (b.clone(), http.clone());
            async move {
                notification::run(b.nats, b.pool, b.subjects, b.topology, http, s).await?;
                Ok(())
            }
        });
    }
    if parts.image_commit {
        let b = OnBus::connect(config, &pool).await?;
        let commits = image_commit::CommitConfig {
            deadline: timings.commit_deadline,
            check_every: (timings.commit_deadline / 4).min(std::time::Duration::from_secs(5)),
        };
        keep(&mut tasks, "image-commit", &stop, move |s| {
            let b = b.clone();
            async move {
                image_commit::run(b.nats, b.pool, b.subjects, b.topology, commits, s).await?;
                Ok(())
            }
        });
    }
    let mut gateway = None;
    if parts.gateway {
        // NATS feeds the event stream and the detail cache; the API works without it.
        let nats = connect_nats_later(config).await?;
        let state = gateway::AppState::with_detail_ttl(
            pool.clone(),
            Some(nats),
            config.topology.clone(),
            timings.detail_cache_ttl,
        )
        .with_agent_bus(config.agent_bus.clone())
        .with_webhook_policy(config.webhook_policy.clone())
        .with_default_volume(config.default_volume.clone())
        .with_file_roots(file_roots(config))
        .with_create_queue(config.create_queue)
        .watch_readiness();
        let state = match &metrics {
            Some(handle) => state.with_metrics(crate::metrics::renderer(handle.clone())),
            None => state,
        };
        let state = match &config.serve_domain {
            Some(domain) => state.with_serve_domain(domain.clone()),
            None => state,
        };
        let state = match &config.backendai {
            Some(key) => state.with_backendai(key.load().context("BERTH_BACKENDAI_MASTER_KEY")?),
            None => state,
        };
        // Bound once, here, so a port already taken stops the start; each run of the
        // supervised gateway serves on this same socket.
        let listener = tokio::net::TcpListener::bind(&config.gateway_listen)
            .await
            .with_context(|| format!("listen on {}", config.gateway_listen))?;
        let address = listener.local_addr()?;
        let tls = gateway_tls(config)?;
        let state = match config.proxy_ports {
            Some(ports) => {
                let listen = config.proxy_address.unwrap_or(address.ip());
                tracing::info!(%listen, first = ports.0, last = ports.1, "app proxy on");
                let proxy = gateway::proxy::ProxyConfig {
                    listen,
                    ports,
                    idle_after: config.proxy_idle,
                    tls: tls.clone(),
                    apps_domain: config.apps_domain.clone(),
                };
                state.with_proxy(proxy)
            }
            None => state,
        };
        let state = match tls {
            Some(_) => state.served_over_tls(),
            None => state,
        };
        tracing::info!(%address, https = tls.is_some(), "gateway listening");
        gateway = Some(address);
        let listener = match tls {
            Some(tls) => gateway::run::Listener::from(listener).with_tls(tls),
            None => gateway::run::Listener::from(listener),
        };
        keep(&mut tasks, "gateway", &stop, move |s| {
            let (listener, state) = (listener.clone(), state.clone());
            async move {
                gateway::run::serve(listener, state, s).await?;
                Ok(())
            }
        });
    }
    Ok(App {
        pool,
        gateway,
        metrics: metrics_address,
        first_superadmin,
        stop,
        tasks,
    })
}

/// The gateway's TLS, when `BERTH_GATEWAY_TLS_CERT` and `BERTH_GATEWAY_TLS_KEY` name its
/// certificate chain and key; one without the other is an error at start.
fn gateway_tls(config: &Config) -> anyhow::Result<Option<Arc<rustls::ServerConfig>>> {
    match (&config.gateway_tls_cert, &config.gateway_tls_key) {
        (Some(cert), Some(key)) => Ok(Some(
            gateway::tls::server_config(cert, key)
                .context("BERTH_GATEWAY_TLS_CERT and BERTH_GATEWAY_TLS_KEY")?,
        )),
        (None, None) => Ok(None),
        (Some(_), None) => {
            anyhow::bail!("BERTH_GATEWAY_TLS_CERT is set without BERTH_GATEWAY_TLS_KEY")
        }
        (None, Some(_)) => {
            anyhow::bail!("BERTH_GATEWAY_TLS_KEY is set without BERTH_GATEWAY_TLS_CERT")
        }
    }
}

/// Says once, at start, which of this process's connections would cross hosts unencrypted:
/// PostgreSQL or NATS off loopback without TLS, and (`gateway`) a gateway listening beyond
/// loopback without a certificate. A warning, not a refusal: a private network may be
/// trusted.
pub fn warn_plain_connections(config: &Config, gateway: bool) {
    if events::tls::plain_off_host(&config.database_url) {
        tracing::warn!(
            url = %address_without_password(&config.database_url),
            "PostgreSQL is off this host and its connections are not sure to be encrypted: add sslmode=verify-full&sslrootcert=<CA file> (or require) to BERTH_DATABASE_URL"
        );
    }
    if bus::link::plain_off_host(&config.nats_url, &config.nats_tls) {
        tracing::warn!(
            url = %address_without_password(&config.nats_url),
            "NATS is off this host without TLS: use a tls:// URL, and BERTH_NATS_CA (and BERTH_NATS_CERT, BERTH_NATS_KEY)"
        );
    }
    let listens_beyond_loopback = config
        .gateway_listen
        .parse::<SocketAddr>()
        .map(|a| !a.ip().is_loopback())
        .unwrap_or(!config.gateway_listen.starts_with("localhost:"));
    if gateway && config.gateway_tls_cert.is_none() && listens_beyond_loopback {
        tracing::warn!(
            listen = %config.gateway_listen,
            "the gateway listens beyond loopback without a certificate: API keys and passwords travel in the clear; set BERTH_GATEWAY_TLS_CERT and BERTH_GATEWAY_TLS_KEY"
        );
    }
}

/// What a service that meets the others on the bus is given: a NATS connection of its own,
/// the pool, the subjects agents and services meet on, where events are published.
#[derive(Clone)]
struct OnBus {
    nats: async_nats::Client,
    pool: Pool,
    subjects: bus::Subjects,
    topology: events::relay::Topology,
}

impl OnBus {
    async fn connect(config: &Config, pool: &Pool) -> anyhow::Result<OnBus> {
        Ok(OnBus {
            nats: connect_nats(config).await?,
            pool: pool.clone(),
            subjects: config.agent_bus.clone(),
            topology: config.topology.clone(),
        })
    }
}

/// Runs `part` on its own task, started again after each outage ([`supervise`]); `start`
/// makes a fresh run from the stop token it is given.
fn keep<F, Fut>(tasks: &mut Running, part: &'static str, stop: &CancellationToken, start: F)
where
    F: Fn(CancellationToken) -> Fut + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let stop = stop.clone();
    let task = tasks.tasks.spawn(async move {
        let s = stop.clone();
        supervise::keep_running(part, stop, move || start(s.clone())).await
    });
    tasks.names.insert(task.id(), part);
}

impl App {
    /// Runs until `shutdown` completes, then stops every part within `within`
    /// ([`App::stop_within`]). A part that ends before (it failed, or stopped on its own)
    /// stops the others and is the error returned.
    pub async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()>,
        within: Duration,
    ) -> anyhow::Result<()> {
        let ended = tokio::select! {
            _ = shutdown => None,
            Some(ended) = self.tasks.tasks.join_next_with_id() => Some(ended),
        };
        if let Some(ended) = ended {
            self.stop.cancel();
            let (part, result) = self.tasks.named(ended);
            result.with_context(|| format!("berth's {part}"))?;
            anyhow::bail!("berth's {part} stopped unexpectedly");
        }
        self.stop_within(within).await
    }

    /// The first part that has ended, if any (they run until stopped, so an ended part
    /// failed or panicked): its error, for a caller that checks on a running app.
    pub fn ended(&mut self) -> Option<anyhow::Error> {
        let ended = self.tasks.tasks.try_join_next_with_id()?;
        let (part, result) = self.tasks.named(ended);
        Some(match result {
            Ok(()) => anyhow::anyhow!("berth's {part} stopped unexpectedly"),
            Err(e) => e.context(format!("berth's {part}")),
        })
    }

    /// Stops every part and waits for them; the first error any of them ended with.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.stop.cancel();
        let mut first = Ok(());
        while let Some(ended) = self.tasks.tasks.join_next_with_id().await {
            let (_, result) = self.tasks.named(ended);
            if first.is_ok() {
                first = result;
            }
        }
        first
    }

    /// Stops every part, as [`App::stop`], waiting at most `within`: each finishes the unit
    /// it is on and keeps its checkpoint. Past the bound, the error names the parts that had
    /// not stopped (they are abandoned: what they had not checkpointed is done again by the
    /// next start).
    pub async fn stop_within(mut self, within: Duration) -> anyhow::Result<()> {
        self.stop.cancel();
        let deadline = tokio::time::Instant::now() + within;
        let mut first = Ok(());
        loop {
            match tokio::time::timeout_at(deadline, self.tasks.tasks.join_next_with_id()).await {
                Ok(None) => return first,
                Ok(Some(ended)) => {
                    let (part, result) = self.tasks.named(ended);
                    tracing::debug!(part, "stopped");
                    if first.is_ok() {
                        first = result.with_context(|| format!("berth's {part}"));
                    }
                }
                Err(_) => {
                    let mut late: Vec<&str> = self.tasks.names.values().copied().collect();
                    late.sort_unstable();
                    self.tasks.tasks.abort_all();
                    anyhow::bail!(
                        "not stopped within {} s: {}",
                        within.as_secs_f64(),
                        late.join(", ")
                    );
                }
            }
        }
    }
}

impl Running {
    /// The part that `ended` and how it ended, forgotten from the names.
    fn named(
        &mut self,
        ended: Result<(tokio::task::Id, anyhow::Result<()>), tokio::task::JoinError>,
    ) -> (&'static str, anyhow::Result<()>) {
        let (id, result) = match ended {
            Ok((id, result)) => (id, result),
            Err(e) => (e.id(), Err(e.into())),
        };
        (self.names.remove(&id).unwrap_or("part"), result)
    }
}

/// The volumes whose folders' files this host's gateway serves: the shared volumes it mounts
/// (`BERTH_VOLUMES`), and `host-local` when an agent keeps its data directory on this host
/// (`BERTH_AGENT_DATA` exists: a one-host install), whose folders are there.
fn file_roots(config: &Config) -> std::collections::BTreeMap<String, std::path::PathBuf> {
    let mut roots = config.volumes.clone();
    if config.agent_data_dir.is_dir() {
        roots.insert(
            domain::volumes::HOST_LOCAL.to_owned(),
            config.agent_data_dir.clone(),
        );
    }
    roots
}
