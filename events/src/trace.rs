//! W3C trace context for events: taken from the current `tracing` span when an event is
//! recorded, carried in the event's metadata, and set on the NATS message that carries it,
//! so one session's journey can be followed across services.

use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::catalogue::Metadata;

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
        assert_eq!(metadata("tester", None).actor.as_deref(), Some("tester"));
    }
}
