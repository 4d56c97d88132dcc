//! Metrics in Prometheus's text format. Services, the backbone and the gateway record through
//! the `metrics` facade's macros only; this module installs the one recorder that keeps them
//! (`metrics-exporter-prometheus`), describes every metric berth records, and serves the
//! exposition on a listener of its own (`BERTH_METRICS_LISTEN`, `berth agent
//! --metrics-listen`) for a process without a gateway. The gateway serves the same exposition
//! on its `/metrics` ([`gateway::AppState::with_metrics`]).
//!
//! The recorder is global to the process: [`install`] installs it once and hands the same
//! handle to every later caller (the end-to-end tests start several parts in one process), and
//! finds no handle, without panicking, where another recorder was installed first.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

/// Histogram buckets, in seconds, for every `_seconds` histogram: from a millisecond (an
/// HTTP request, a scheduler pass) to ten minutes (a session created to RUNNING behind an
/// image pull).
const BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
    600.0,
];

/// How often histograms are compacted when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static INSTALLED: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs berth's recorder once per process and returns its handle: the same one to every
/// caller; none where a recorder of another kind was installed before (said once, in the
/// log). Call it inside a Tokio runtime: the handle's upkeep runs on a task of it.
pub fn install() -> Option<PrometheusHandle> {
    INSTALLED
        .get_or_init(|| {
            let builder = PrometheusBuilder::new();
            let builder = match builder.set_buckets(&BUCKETS) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: default buckets kept");
                    PrometheusBuilder::new()
                }
            };
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if let Err(e) = metrics::set_global_recorder(recorder) {
                tracing::warn!(error = %e, "metrics: another recorder is installed; berth's are off");
                return None;
            }
            describe();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let upkeep = handle.clone();
                runtime.spawn(async move {
                    loop {
                        tokio::time::sleep(UPKEEP_EVERY).await;
                        upkeep.run_upkeep();
                    }
                });
            }
            Some(handle)
        })
        .clone()
}

/// The handle's exposition as the gateway's `/metrics` renders it.
pub fn renderer(handle: PrometheusHandle) -> gateway::MetricsRender {
    Arc::new(move || handle.render())
}

/// Every metric berth records, described once: each crate describes its own.
fn describe() {
    gateway::describe_metrics();
    scheduler::describe_metrics();
    events::describe_metrics();
    agent::describe_metrics();
    idle_reaper::describe_metrics();
    image_commit::describe_metrics();
}

/// Serves `GET /metrics` on `listen` until `stop`; answers where it listens once bound.
pub async fn listen(
    listen: &str,
    handle: PrometheusHandle,
    stop: CancellationToken,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("metrics: listen on {listen}"))?;
    let address = listener.local_addr()?;
    let router = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let handle = handle.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        gateway::METRICS_CONTENT_TYPE,
                    )],
                    handle.render(),
                )
            }
        }),
    );
    tracing::info!(%address, "metrics listening");
    let served = tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "metrics listener ended");
        }
    });
    Ok((address, served))
}
