//! Logging and tracing for every berth process: `tracing` to stderr, filtered by `RUST_LOG`,
//! and OpenTelemetry spans, exported over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is
//! set. The OpenTelemetry layer is installed either way: it gives every span a trace id, so
//! the events a request or a session task records carry a `traceparent` (rule 7) whether or
//! not anything collects the spans.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Keeps the exporter alive; flushes spans when dropped.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

/// Installs the process's subscriber; fails when one is installed already.
pub fn init(service: &'static str) -> anyhow::Result<Telemetry> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,tokio_postgres=warn,async_nats=warn"));
    // Colours only for a person at a terminal, not in log files (`berth up > berth.log`).
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .ok()
        .filter(|v| !v.is_empty());
    let mut builder = SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(service).build());
    if endpoint.is_some() {
        // The exporter reads the endpoint (and OTEL_EXPORTER_OTLP_HEADERS etc.) itself.
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .build()?;
        builder = builder.with_batch_exporter(exporter);
    }
    let provider = builder.build();
    let tracer = provider.tracer(service);
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(tracing_opentelemetry::layer().with_tracer(tracer))
        .try_init()?;
    Ok(Telemetry {
        provider: Some(provider),
    })
}
