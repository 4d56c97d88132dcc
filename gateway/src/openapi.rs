//! The OpenAPI 3.1 document served at `/openapi.json`. Written as data next to the routes it
//! describes; a test checks that every route of the router is documented here.

use serde_json::{json, Value};

/// Every documented (method, path), as the router registers them.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/sessions"),
    ("get", "/v1/sessions"),
    ("get", "/v1/sessions/{id}"),
    ("patch", "/v1/sessions/{id}"),
    ("delete", "/v1/sessions/{id}"),
    ("get", "/v1/sessions/{id}/history"),
    ("get", "/v1/sessions/{id}/logs"),
    ("get", "/v1/folders"),
    ("post", "/v1/folders"),
    ("get", "/v1/resources"),
    ("get", "/v1/presets"),
    ("get", "/v1/whoami"),
    ("get", "/v1/events"),
    ("get", "/openapi.json"),
    ("get", "/healthz"),
];

fn query(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "schema": {"type": "string"}, "description": description})
}

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
                    query("type", "interactive, batch, inference or system"),
                    query("state", "running or finished"),
                    query("status", "one status"),
                    query("owner", "owner's email (superadmins)"),
                    query("limit", "1 to 500, default 50"), query("offset", "default 0"),
                    query("sort", "created_at, -created_at (default), name, -name, status, -status")],
                    None, "200", ok("a page of sessions", json!({"type": "object"}))),
            },
            "/v1/sessions/{id}": {
                "get": op("Session detail", vec![id_param()], None, "200", ok("the session", session)),
                "patch": op("Rename (4 to 64 letters and digits)", vec![id_param()],
                    Some(json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}})),
                    "200", ok("renamed", json!({"type": "object"}))),
                "delete": op("Terminate (force=true ends it at once)", vec![id_param(), query("force", "true or false")],
                    None, "202", ok("terminating, terminated or cancelled", json!({"type": "object"}))),
            },
            "/v1/sessions/{id}/history": {
                "get": op("Scheduling history", vec![id_param(), query("id", "history row id"),
                    query("phase", "phase name"), query("result", "SUCCESS, FAILURE, STALE, NEED_RETRY, EXPIRED, GIVE_UP, SKIPPED"),
                    query("from_status", "status before"), query("to_status", "status after"),
                    query("error_code", "error code"), query("message", "part of the message"),
                    query("sort", "created_at (default), -created_at, updated_at, -updated_at")],
                    None, "200", ok("history rows with sub-steps", json!({"type": "object"}))),
            },
            "/v1/sessions/{id}/logs": {
                "get": op("Container output per kernel (kept every second while running, whole once ended); follow=true streams it as server-sent events until it ends",
                    vec![id_param(), query("follow", "true: text/event-stream of `log` events, then `end`")], None, "200", ok("logs", json!({"type": "object"}))),
            },
            "/v1/folders": {
                "get": op("My folders", vec![], None, "200", ok("folders", json!({"type": "object"}))),
                "post": op("Create a folder (1 to 64 letters, digits, `_`, `-`, `.`; not starting with `.`)", vec![],
                    Some(json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}})),
                    "201", ok("created", json!({"type": "object"}))),
            },
            "/v1/resources": {"get": op("My limits, my usage in a group, the group's total, used and free",
                vec![query("resource_group", "default: default")], None, "200", ok("summary", json!({"type": "object"})))},
            "/v1/presets": {"get": op("Resource presets", vec![], None, "200", ok("presets", json!({"type": "object"})))},
            "/v1/whoami": {"get": op("The caller", vec![], None, "200", ok("user", json!({"type": "object"})))},
            "/v1/events": {"get": {"summary": "Server-sent events: my sessions' events (every event for superadmins)",
                "security": [{"apiKey": []}],
                "responses": {"200": {"description": "text/event-stream; each event's data is the recorded event as JSON"}}}},
            "/openapi.json": {"get": {"summary": "This document", "responses": {"200": {"description": "OpenAPI 3.1"}}}},
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": {"description": "ok"}}}},
        },
        "components": {
            "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}},
            "schemas": {
                "Error": {"type": "object", "properties": {"error": {"type": "object", "properties": {
                    "code": {"type": "string"}, "field": {"type": ["string", "null"]}, "message": {"type": "string"}}}}},
                "CreateSession": {"type": "object", "required": ["image"], "additionalProperties": false, "properties": {
                    "name": {"type": "string", "description": "4 to 64 letters and digits; random when absent"},
                    "type": {"enum": ["interactive", "batch", "inference", "system"]},
                    "image": {"type": "string"},
                    "environment": {"type": "object", "additionalProperties": {"type": "string"}},
                    "resource_group": {"type": "string"}, "project": {"type": "string"}, "preset": {"type": "string"},
                    "resources": {"type": "object", "properties": {
                        "cpu": {"type": "number"}, "memory": {"type": ["integer", "string"]},
                        "shared_memory": {"type": ["integer", "string"]}, "gpu": {"type": "number"}}},
                    "cluster_mode": {"enum": ["single-node", "multi-node"]},
                    "cluster_size": {"type": "integer", "minimum": 1, "maximum": 32},
                    "agent": {"type": "string"},
                    "preopen_ports": {"type": "array", "items": {"type": "integer", "minimum": 1024, "maximum": 65535}},
                    "mounts": {"type": "array", "items": {"type": "string"}},
                    "startup_command": {"type": "string"}, "starts_at": {"type": "string", "format": "date-time"},
                    "batch_timeout": {"type": "integer", "description": "seconds"},
                    "omp_num_threads": {"type": "integer"}, "count": {"type": "integer", "minimum": 1, "maximum": 100},
                    "owner_email": {"type": "string", "description": "admins: create for this user"}}},
                "Session": {"type": "object", "properties": {
                    "session_id": {"type": "string"}, "name": {"type": "string"}, "status": {"type": "string"},
                    "status_reason": {"type": ["string", "null"]}, "type": {"type": "string"}}},
            }
        }
    })
}
