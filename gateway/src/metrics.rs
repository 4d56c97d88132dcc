//! The names and help of the gateway's metrics: each request by its route and status (measured
//! by the router, [`crate::measure`]), the app proxy's circuits and bytes, the sessions view's
//! counts, creates to placed and to RUNNING, the log's readers' lag, and the calls of model
//! endpoints. The gateway records
//! through the `metrics` facade only; the process that runs it installs the recorder and hands
//! its exposition in ([`crate::AppState::with_metrics`]), which `GET /metrics` serves
//! ([`crate::metrics_page`]).

use ::metrics::{describe_counter, describe_gauge, describe_histogram, Unit};

/// Prometheus's text exposition format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub const HTTP_REQUESTS: &str = "berth_http_requests_total";
pub const HTTP_DURATION: &str = "berth_http_request_duration_seconds";
pub const PROXY_CIRCUITS: &str = "berth_proxy_circuits";
pub const PROXY_BYTES: &str = "berth_proxy_bytes_total";
pub const SESSIONS: &str = "berth_sessions";
pub const AGENTS: &str = "berth_agents";
pub const SESSIONS_CREATED: &str = "berth_sessions_created_total";
pub const SESSIONS_ENDED: &str = "berth_sessions_ended_total";
pub const CREATE_TO_PLACED: &str = "berth_session_create_to_placed_seconds";
pub const CREATE_TO_RUNNING: &str = "berth_session_create_to_running_seconds";
pub const READER_LAG_EVENTS: &str = "berth_reader_lag_events";
pub const READER_LAG_SECONDS: &str = "berth_reader_lag_seconds";
pub const SERVING_REQUESTS: &str = "berth_serving_requests_total";
pub const SERVING_DURATION: &str = "berth_serving_request_seconds";

/// Describes the gateway's metrics (and its sessions view's) to the installed recorder.
pub fn describe_metrics() {
    describe_counter!(
        SERVING_REQUESTS,
        "Calls of model-serving endpoints' URLs, by endpoint and outcome (`ok`, `4xx`, `5xx`)"
    );
    describe_histogram!(
        SERVING_DURATION,
        Unit::Seconds,
        "Time from a call of an endpoint's URL to its answer's head, by endpoint"
    );
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests answered by the gateway, by method, route (its pattern) and status"
    );
    describe_histogram!(
        HTTP_DURATION,
        Unit::Seconds,
        "Time the gateway took to answer a request (to its response's head), by method and route"
    );
    describe_gauge!(PROXY_CIRCUITS, "App proxy circuits this gateway serves now");
    describe_counter!(
        PROXY_BYTES,
        Unit::Bytes,
        "Bytes the app proxy carried: direction `in` from clients to apps, `out` back"
    );
    describe_gauge!(
        SESSIONS,
        "Sessions in the sessions view by status and type (counted every 10 s)"
    );
    describe_gauge!(
        AGENTS,
        "Agents by state: `alive`, `silent` (unheard for two heartbeats), `lost` (counted every 10 s)"
    );
    describe_counter!(
        SESSIONS_CREATED,
        "Sessions requested, by type, as the sessions projection applies them"
    );
    describe_counter!(
        SESSIONS_ENDED,
        "Sessions that reached TERMINATED, ERROR or CANCELLED, by type and status"
    );
    describe_histogram!(
        CREATE_TO_PLACED,
        Unit::Seconds,
        "Time from a session's request to its placement on agents, by type"
    );
    describe_histogram!(
        CREATE_TO_RUNNING,
        Unit::Seconds,
        "Time from a session's request to its first RUNNING, by type"
    );
    describe_gauge!(
        READER_LAG_EVENTS,
        "Events written to the log and not yet read by each checkpointed reader (the relay, \
         the projections), counted up to 10,000"
    );
    describe_gauge!(
        READER_LAG_SECONDS,
        Unit::Seconds,
        "How long the oldest event each checkpointed reader has not read has waited"
    );
}
