//! W3C trace context for events: taken from the current `tracing` span when an event is
//! recorded, carried in the event's metadata, and set on the NATS message that carries it,
//! so one session's journey can be followed across services.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use domain::Metadata;

/// The `traceparent` of the current span, when it belongs to a sampled or remote trace.
pub fn current_traceparent() -> Option<String> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        )
    })
}

/// Metadata for an event recorded now by `actor`, carrying the current trace context.
pub fn metadata(actor: &str, correlation_id: Option<uuid::Uuid>) -> Metadata {
    Metadata {
        actor: Some(actor.to_owned()),
        correlation_id,
        traceparent: current_traceparent(),
        ..Metadata::default()
    }
}

/// Whether `value` is a well-formed W3C `traceparent` (version 00).
pub fn is_valid_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    parts.len() == 4
        && parts[0] == "00"
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1].bytes().any(|b| b != b'0')
        && parts[2].bytes().any(|b| b != b'0')
}

/// The remote span a well-formed `traceparent` names, as a context to continue from.
pub fn context_of(traceparent: &str) -> Option<opentelemetry::Context> {
    if !is_valid_traceparent(traceparent) {
        return None;
    }
    let parts: Vec<&str> = traceparent.split('-').collect();
    let span_context = SpanContext::new(
        TraceId::from_hex(parts[1]).ok()?,
        SpanId::from_hex(parts[2]).ok()?,
        TraceFlags::new(u8::from_str_radix(parts[3], 16).ok()?),
        true,
        TraceState::default(),
    );
    Some(opentelemetry::Context::new().with_remote_span_context(span_context))
}

/// Makes `span` continue the trace `traceparent` names, so what is recorded inside it joins
/// the journey that began elsewhere (an HTTP request, the session's creation). Nothing
/// happens when there is no well-formed traceparent or no OpenTelemetry layer.
pub fn follow(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(context) = traceparent.and_then(context_of) {
        // Without the OpenTelemetry layer the span has no trace to join: nothing to do.
        let _ = span.set_parent(context);
    }
}

/// The trace id part of a `traceparent`.
pub fn trace_id_of(traceparent: &str) -> Option<&str> {
    is_valid_traceparent(traceparent).then(|| &traceparent[3..35])
}

/// NATS header names berth sets on every published event (lower case: NATS header lookups
/// are case-sensitive).
pub mod headers {
    pub const TRACEPARENT: &str = "traceparent";
    pub const TRACESTATE: &str = "tracestate";
    pub const EVENT_TYPE: &str = "berth-event-type";
    pub const POSITION: &str = "berth-position";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_checked_for_shape() {
        assert!(is_valid_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        assert!(!is_valid_traceparent(
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
        ));
        assert!(!is_valid_traceparent(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        ));
        assert!(!is_valid_traceparent("garbage"));
    }

    #[test]
    fn without_a_tracer_there_is_no_context_to_carry() {
        assert_eq!(current_traceparent(), None);
        assert_eq!(metadata("tester", None).traceparent, None);
    }

    #[test]
    fn a_traceparent_names_a_remote_parent_and_its_trace_id() {
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = context_of(traceparent).expect("well formed");
        let span = context.span();
        let remote = span.span_context();
        assert!(remote.is_remote() && remote.is_sampled());
        assert_eq!(
            remote.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(remote.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(
            trace_id_of(traceparent),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert!(context_of("00-bad").is_none());
        assert_eq!(trace_id_of("garbage"), None);
    }

    /// With the OpenTelemetry layer, what is recorded inside a span that follows a
    /// traceparent carries that trace, under a span of its own.
    #[test]
    fn metadata_recorded_inside_a_following_span_carries_its_trace() {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::layer::SubscriberExt;
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let span = tracing::info_span!("work");
            follow(&span, Some(incoming));
            let recorded = span.in_scope(|| metadata("tester", None));
            let traceparent = recorded.traceparent.expect("a traceparent");
            assert_eq!(trace_id_of(&traceparent), trace_id_of(incoming));
            assert_ne!(traceparent, incoming, "a span of its own in the same trace");

            let root = tracing::info_span!("root").in_scope(current_traceparent);
            assert!(root.is_some_and(|t| trace_id_of(&t) != trace_id_of(incoming)));
        });
    }
}
