//! The OpenAPI 3.1 document served at `/openapi.json`. Written as data; a test in `lib.rs`
//! holds it to exactly the (method, path) pairs the router registers.

use events::payloads::SessionStatus;
use serde_json::{json, Value};

fn query(name: &str, description: &str) -> Value {
    query_of(
        name,
        description,
        json!({"type": "string", "minLength": 1, "pattern": "^[^\\u0000]+$"}),
    )
}

/// A query parameter whose values the server accepts are exactly `schema`'s.
fn query_of(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "schema": schema, "description": description})
}

/// Every session status by name, from the domain's one list.
fn statuses() -> Value {
    let names: Vec<&str> = SessionStatus::ALL.iter().map(|s| s.as_str()).collect();
    one_of(&names)
}

fn one_of(values: &[&str]) -> Value {
    json!({"type": "string", "enum": values})
}

/// The results a scheduling phase may have, as the history names them.
pub(crate) const RESULTS: &[&str] = &[
    "SUCCESS",
    "FAILURE",
    "STALE",
    "NEED_RETRY",
    "EXPIRED",
    "GIVE_UP",
    "SKIPPED",
];
const TRUE_OR_FALSE: &[&str] = &["true", "false"];
/// Session names: 4 to 64 ASCII letters and digits.
const NAME_PATTERN: &str = "^[A-Za-z0-9]{4,64}$";
/// Folder names: 1 to 64 letters, digits, `_`, `-` or `.`, not starting with `.`.
const FOLDER_PATTERN: &str = "^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}$";
/// Names of groups, projects, presets, policies and agents as the API takes them.
const OBJECT_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$";
/// A size in bytes as text: a number with an optional unit (k, m, g, t; `i` and `b` allowed).
const SIZE_PATTERN: &str = "^[0-9]+(\\.[0-9]+)?[kKmMgGtT]?[iI]?[bB]?$";

fn id_param() -> Value {
    json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string", "format": "uuid"}})
}

fn ok(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

fn errors() -> Value {
    let e = json!({"$ref": "#/components/schemas/Error"});
    json!({
        "400": ok("the body is not JSON", e.clone()),
        "401": ok("no or unknown API key", e.clone()),
        "404": ok("no such session (or not yours)", e.clone()),
        "409": ok("name taken, or the session's status does not allow it", e.clone()),
        "413": ok("the body is too large", e.clone()),
        "422": ok("a field breaks a rule; `field` names it", e),
    })
}

fn op(
    summary: &str,
    params: Vec<Value>,
    body: Option<Value>,
    status: &str,
    response: Value,
) -> Value {
    let mut responses = errors();
    responses[status] = response;
    let mut op = json!({"summary": summary, "parameters": params, "responses": responses,
        "security": [{"apiKey": []}]});
    if let Some(schema) = body {
        op["requestBody"] =
            json!({"required": true, "content": {"application/json": {"schema": schema}}});
    }
    op
}

pub fn document() -> Value {
    let session = json!({"$ref": "#/components/schemas/Session"});
    json!({
        "openapi": "3.1.0",
        "info": {"title": "berth", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Compute sessions: create, watch, explain and end them."},
        "paths": {
            "/v1/sessions": {
                "post": op("Create sessions (count: N; those that do not fit wait in the queue)", vec![],
                    Some(json!({"$ref": "#/components/schemas/CreateSession"})), "201",
                    ok("created, PENDING", json!({"type": "object", "properties": {"sessions": {"type": "array"}}}))),
                "get": op("List my sessions (all, for superadmins)", vec![
                    query_of("type", "the session type", one_of(&["interactive", "batch", "inference", "system"])),
                    query_of("state", "running or finished", one_of(&["running", "finished"])),
                    query_of("status", "one status", statuses()),
                    query("owner", "owner's email (superadmins)"),
                    query_of("limit", "default 50", json!({"type": "integer", "minimum": 1, "maximum": 500})),
                    query_of("offset", "default 0", json!({"type": "integer", "minimum": 0, "maximum": i64::MAX})),
                    query_of("sort", "default -created_at", one_of(&["created_at", "-created_at", "name", "-name", "status", "-status"]))],
                    None, "200", ok("a page of sessions", json!({"type": "object"}))),
            },
            "/v1/sessions/{id}": {
                "get": op("Session detail", vec![id_param()], None, "200", ok("the session", session)),
                "patch": op("Rename (4 to 64 letters and digits)", vec![id_param()],
                    Some(json!({"type": "object", "required": ["name"], "additionalProperties": false,
                        "properties": {"name": {"type": "string", "pattern": NAME_PATTERN}}})),
                    "200", ok("renamed", json!({"type": "object"}))),
                "delete": op("Terminate (force=true ends it at once)", vec![id_param(), query_of("force", "true ends it at once", one_of(TRUE_OR_FALSE))],
                    None, "202", ok("terminating, terminated or cancelled", json!({"type": "object"}))),
            },
            "/v1/sessions/{id}/history": {
                "get": op("Scheduling history", vec![id_param(),
                    query_of("id", "history row id", json!({"type": "string", "format": "uuid"})),
                    query("phase", "phase name"), query_of("result", "the phase's result", one_of(RESULTS)),
                    query_of("from_status", "status before", statuses()),
                    query_of("to_status", "status after", statuses()),
                    query("error_code", "error code"), query("message", "part of the message"),
                    query_of("sort", "default created_at", one_of(&["created_at", "-created_at", "updated_at", "-updated_at"]))],
                    None, "200", ok("history rows with sub-steps", json!({"type": "object"}))),
            },
            "/v1/sessions/{id}/logs": {
                "get": op("Container output per kernel (kept every second while running, whole once ended); follow=true streams it as server-sent events until it ends",
                    vec![id_param(), query_of("follow", "true: text/event-stream of `log` events, then `end`", one_of(TRUE_OR_FALSE))], None, "200", ok("logs", json!({"type": "object"}))),
            },
            "/v1/folders": {
                "get": op("My folders", vec![], None, "200", ok("folders", json!({"type": "object"}))),
                "post": op("Create a folder (1 to 64 letters, digits, `_`, `-`, `.`; not starting with `.`)", vec![],
                    Some(json!({"type": "object", "required": ["name"], "additionalProperties": false,
                        "properties": {"name": {"type": "string", "pattern": FOLDER_PATTERN}}})),
                    "201", ok("created", json!({"type": "object"}))),
            },
            "/v1/resources": {"get": op("My limits, my usage in a group, the group's total, used and free",
                vec![query_of("resource_group", "default: default; an unknown group is a 404", json!({"type": "string", "pattern": OBJECT_PATTERN}))], None, "200", ok("summary", json!({"type": "object"})))},
            "/v1/presets": {"get": op("Resource presets", vec![], None, "200", ok("presets", json!({"type": "object"})))},
            "/v1/whoami": {"get": op("The caller", vec![], None, "200", ok("user", json!({"type": "object"})))},
            "/v1/events": {"get": {"summary": "Server-sent events: my sessions' events (every event for superadmins)",
                "security": [{"apiKey": []}],
                "responses": {"200": {"description": "text/event-stream; each event's data is the recorded event as JSON"},
                              "401": ok("no or unknown API key", json!({"$ref": "#/components/schemas/Error"})),
                              "503": ok("the event stream needs NATS", json!({"$ref": "#/components/schemas/Error"}))}}},
            "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}},
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": {"description": "ok"}}}},
        },
        "components": {
            "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}},
            "schemas": {
                "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
                    "code": {"type": "string"}, "field": {"type": ["string", "null"]}, "message": {"type": "string"}}}}},
                "CreateSession": {"type": "object", "required": ["image"], "additionalProperties": false, "properties": {
                    "name": {"type": "string", "pattern": NAME_PATTERN, "description": "random when absent; with count > 1, a base that is numbered"},
                    "type": {"enum": ["interactive", "batch", "inference", "system"]},
                    "image": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": "\\S"},
                    "environment": {"type": "object", "additionalProperties": {"type": "string"},
                        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]{0,127}$"}},
                    "resource_group": {"type": "string", "pattern": OBJECT_PATTERN},
                    "project": {"type": "string", "pattern": OBJECT_PATTERN},
                    "preset": {"type": "string", "pattern": OBJECT_PATTERN},
                    "resources": {"type": "object", "additionalProperties": false, "properties": {
                        "cpu": {"type": "number", "minimum": 0, "maximum": 1024, "description": "cores; at most three decimals"},
                        "memory": {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": SIZE_PATTERN}]},
                        "shared_memory": {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": SIZE_PATTERN}]},
                        "gpu": {"type": "number", "minimum": 0, "maximum": 64, "description": "GPUs; fractions allowed, at most three decimals"}}},
                    "cluster_mode": {"enum": ["single-node", "multi-node"]},
                    "cluster_size": {"type": "integer", "minimum": 1, "maximum": 32},
                    "agent": {"type": "string", "pattern": OBJECT_PATTERN},
                    "preopen_ports": {"type": "array", "uniqueItems": true, "items": {"type": "integer", "minimum": 1024, "maximum": 65535}},
                    "mounts": {"type": "array", "items": {"type": "string", "pattern": FOLDER_PATTERN}},
                    "startup_command": {"type": "string"}, "starts_at": {"type": "string", "format": "date-time"},
                    "batch_timeout": {"type": "integer", "minimum": 1, "description": "seconds (batch sessions)"},
                    "omp_num_threads": {"type": "integer", "minimum": 1},
                    "count": {"type": "integer", "minimum": 1, "maximum": 100},
                    "owner_email": {"type": "string", "format": "email", "description": "admins: create for this user"}}},
                "Session": {"type": "object", "properties": {
                    "session_id": {"type": "string"}, "name": {"type": "string"}, "status": {"type": "string"},
                    "status_reason": {"type": ["string", "null"]}, "type": {"type": "string"}}},
            }
        }
    })
}
