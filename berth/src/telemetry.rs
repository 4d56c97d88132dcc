//! Logging and tracing for every berth process: `tracing` to stderr, filtered by `RUST_LOG`,
//! as text lines or JSON objects (`BERTH_LOG_FORMAT`), and OpenTelemetry spans, exported over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is
//! set. The OpenTelemetry layer is installed either way: it gives every span a trace id, so
//! the events a request or a session task records carry a `traceparent` (rule 7) whether or
//! not anything collects the spans. Each process names itself in its traces' `service.name`
//! (`berth-up`, `berth-gateway`, `berth-scheduler`, `berth-agent`, ...).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::LogFormat;

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

/// The log filter when `RUST_LOG` is not set.
// deadpool logs every connection it cannot make or recycle; an outage is logged once by
// the part that meets it (`events::fault::Outage`), so only its errors are kept.
const DEFAULT_LOG: &str = "info,tokio_postgres=warn,async_nats=warn,deadpool.postgres=error";

/// berth's crates, whose spans make the traces whatever the log level.
const TRACED: [&str; 8] = [
    "gateway",
    "launcher",
    "scheduler",
    "agent",
    "recorder",
    "bus",
    "events",
    "berth",
];

/// Installs the process's subscriber (`RUST_LOG` filters the log, written as `format`
/// says); its spans name the process `service`. Fails when one is installed already.
pub fn init(service: &'static str, format: LogFormat) -> anyhow::Result<Telemetry> {
    let log = std::env::var("RUST_LOG").unwrap_or_else(|_| DEFAULT_LOG.to_owned());
    init_with(service, &log, format)
}

/// The log's layer: text (coloured only for a person at a terminal, not in log files:
/// `berth up > berth.log`) or one JSON object a line, with the event's fields flattened and
/// the span it happened in, written to `writer`.
fn log_layer<S, W>(format: LogFormat, writer: W, ansi: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let fmt = tracing_subscriber::fmt::layer().with_writer(writer);
    match format {
        LogFormat::Text => Box::new(fmt.with_ansi(ansi)),
        LogFormat::Json => Box::new(
            fmt.json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false),
        ),
    }
}

/// [`init`] with the log filtered by `log` (`RUST_LOG`'s syntax). The OpenTelemetry layer has
/// a filter of its own, so berth's spans, and the traceparent of every event recorded in
/// them, exist at any log level.
pub fn init_with(service: &'static str, log: &str, format: LogFormat) -> anyhow::Result<Telemetry> {
    // The OTLP exporter's HTTP client (and every other) builds its TLS from ring's provider.
    events::tls::use_ring();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let filter = EnvFilter::try_new(log).unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = log_layer(format, std::io::stderr, ansi).with_filter(filter);
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
    let traced = Targets::new().with_targets(TRACED.map(|t| (t, LevelFilter::INFO)));
    tracing_subscriber::registry()
        .with(fmt)
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(traced),
        )
        .try_init()?;
    Ok(Telemetry {
        provider: Some(provider),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quiet logs do not silence the traces: an event recorded in a span of berth's carries
    /// a traceparent at `warn` too.
    #[test]
    fn spans_make_traces_whatever_the_log_level() {
        let _telemetry = init_with("test", "warn", LogFormat::Text).expect("the first subscriber");
        let traceparent = tracing::info_span!(target: "gateway", "request")
            .in_scope(|| events::trace::metadata("test", None).traceparent);
        assert!(traceparent.is_some_and(|t| events::trace::is_valid_traceparent(&t)));
        let outside = tracing::info_span!(target: "hyper", "other")
            .in_scope(events::trace::current_traceparent);
        assert_eq!(outside, None, "other crates' spans are not traced");
    }

    /// What a log line is written into, for the test to read.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// `BERTH_LOG_FORMAT=json`: each event is one line holding one JSON object, with its
    /// level, target, message, fields and span.
    #[test]
    fn the_json_format_writes_one_object_a_line() {
        let captured = Captured::default();
        let writer = captured.clone();
        let layer = log_layer(LogFormat::Json, move || writer.clone(), false);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info_span!("request", route = "/v1/sessions").in_scope(|| {
                tracing::info!(session = "s1", "placed");
                tracing::warn!("second \"line\"");
            });
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("each line is one JSON object"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["level"], "INFO");
        assert_eq!(lines[0]["message"], "placed");
        assert_eq!(lines[0]["session"], "s1");
        assert_eq!(lines[0]["span"]["route"], "/v1/sessions");
        assert_eq!(lines[1]["message"], "second \"line\"");
        assert!(lines[0]["timestamp"].is_string() && lines[0]["target"].is_string());
    }
}
