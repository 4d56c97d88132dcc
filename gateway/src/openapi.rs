//! The OpenAPI 3.1 document served at `/openapi.json`, generated: utoipa derives it from the
//! handlers' `#[utoipa::path]` annotations and from the types they take and answer with
//! ([`crate::model`], the launcher's `CreateSession`, the domain's payloads, the parameter
//! structs that also parse each query). The router registers those same handlers
//! (utoipa-axum), so what is served and what is documented cannot part.
//!
//! [`document`] adds what no derive says: the API key scheme and the error answers of every
//! authenticated operation, the create request's cross-field rules
//! (`launcher::schema::cross_field_rules`), and the links from a created session to what can
//! be done with it.

use std::sync::LazyLock;

use serde_json::{json, Value};
use utoipa::OpenApi;

use crate::error::ErrorBody;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "berth",
        description = "Compute sessions: create, watch, explain and end them."
    ),
    components(schemas(ErrorBody))
)]
pub(crate) struct ApiDoc;

/// The errors an authenticated operation may answer with, each an [`ErrorBody`].
const ERRORS: &[(&str, &str)] = &[
    ("400", "the body is not JSON"),
    ("401", "no or unknown API key"),
    ("403", "the caller may not do this (`field` says what)"),
    (
        "404",
        "no such session (or not yours), or the request names something that does not exist",
    ),
    (
        "409",
        "a conflict: a name taken, a status that does not allow it, more than the group holds",
    ),
    ("413", "the body is too large"),
    (
        "429",
        "too many unknown keys from this address: wait as `Retry-After` says",
    ),
    (
        "422",
        "a field or parameter breaks a rule; `field` names it",
    ),
    ("503", "berth could not complete the request; try again"),
];

/// The document, built once.
pub fn document() -> &'static Value {
    static DOCUMENT: LazyLock<Value> = LazyLock::new(|| {
        let (_, generated) = crate::routes().split_for_parts();
        finish(serde_json::to_value(generated).expect("the document serialises"))
    });
    &DOCUMENT
}

/// What `/v1/events/schema` serves: for each event type, its current schema version and the
/// JSON Schema (2020-12) of its payload (`events::catalogue::payload_schemas`), and the
/// envelope every event is served in (`events::RecordedEvent::wire_schema`).
pub fn events_schema() -> &'static Value {
    static SCHEMA: LazyLock<Value> = LazyLock::new(|| {
        let events: serde_json::Map<String, Value> = events::catalogue::payload_schemas()
            .into_iter()
            .map(|(name, version, payload)| {
                (
                    name.to_owned(),
                    json!({"version": version, "payload": payload}),
                )
            })
            .collect();
        json!({
            "title": "berth's events",
            "description": "Each event type's payload at its current schema version (older \
                versions are upcast before they are served), and the envelope every event is \
                served in on /v1/events and published in on NATS. docs/events.md says what \
                each means.",
            "version": env!("CARGO_PKG_VERSION"),
            "envelope": events::RecordedEvent::wire_schema(),
            "events": events,
        })
    });
    &SCHEMA
}

/// What `/asyncapi.json` serves: the event stream for its consumers, as AsyncAPI 3.0. Two
/// channels carry the same messages: `/v1/events` (server-sent events, each `data` a recorded
/// event) and the relay's NATS subjects (`berth.evt.<category>.<stream id>` under the default
/// prefix); each event type is a message whose payload is the recorded event with that type.
pub fn asyncapi() -> &'static Value {
    static DOCUMENT: LazyLock<Value> = LazyLock::new(|| {
        let mut messages = serde_json::Map::new();
        let mut refs = serde_json::Map::new();
        for (name, version, payload) in events::catalogue::payload_schemas() {
            messages.insert(
                name.to_owned(),
                json!({
                    "name": name,
                    "title": name,
                    "summary": format!("{name}, schema version {version}"),
                    "contentType": "application/json",
                    "payload": {
                        "schemaFormat": "application/schema+json;version=draft-2020-12",
                        "schema": payload,
                    },
                }),
            );
            refs.insert(
                name.to_owned(),
                json!({"$ref": format!("#/components/messages/{name}")}),
            );
        }
        json!({
            "asyncapi": "3.0.0",
            "info": {
                "title": "berth events",
                "version": env!("CARGO_PKG_VERSION"),
                "description": "Every change berth makes is an event of its log. Consumers \
                    follow them as server-sent events (resuming with Last-Event-ID; filters by \
                    type, category, stream, session) or on NATS. Each message's payload here is \
                    the event's payload; the envelope around it is /v1/events/schema's.",
            },
            "channels": {
                "events": {
                    "address": "/v1/events",
                    "description": "server-sent events: `event` the type, `id` the log position, `data` the recorded event",
                    "messages": refs.clone(),
                },
                "nats": {
                    "address": "berth.evt.{category}.{stream_id}",
                    "description": "the relay's subjects (the default prefix), in log order",
                    "parameters": {
                        "category": {"description": "the stream's category: session, agent, ..."},
                        "stream_id": {"description": "the stream's id"},
                    },
                    "messages": refs,
                },
            },
            "operations": {
                "followEvents": {"action": "receive", "channel": {"$ref": "#/channels/events"}},
                "consumeNats": {"action": "receive", "channel": {"$ref": "#/channels/nats"}},
            },
            "components": {"messages": messages},
        })
    });
    &DOCUMENT
}

fn finish(mut doc: Value) -> Value {
    doc["info"]["version"] = json!(env!("CARGO_PKG_VERSION"));
    doc["components"]["securitySchemes"] =
        json!({"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"}});
    let error = json!({"content": {"application/json": {"schema":
        {"$ref": "#/components/schemas/ErrorBody"}}}});
    if let Some(paths) = doc["paths"].as_object_mut() {
        for (path, item) in paths.iter_mut() {
            if !path.starts_with("/v1/") {
                continue;
            }
            for operation in item
                .as_object_mut()
                .into_iter()
                .flat_map(|o| o.values_mut())
            {
                operation["security"] = json!([{"apiKey": []}]);
                let responses = &mut operation["responses"];
                for (status, description) in ERRORS {
                    if responses.get(*status).is_none() {
                        let mut answer = error.clone();
                        answer["description"] = json!(description);
                        responses[*status] = answer;
                    }
                }
            }
        }
    }
    let create = &mut doc["components"]["schemas"]["CreateSession"];
    create["allOf"] = launcher::schema::cross_field_rules();
    // A run is one of its two fields; utoipa 5 writes a struct's `max_properties` but leaves
    // out its `min_properties`.
    doc["components"]["schemas"]["RunRequest"]["minProperties"] = json!(1);
    doc["paths"]["/v1/sessions"]["post"]["responses"]["201"]["links"] = session_links();
    doc
}

/// What a client can do next with the first session a create answers with: the operations
/// on `/v1/sessions/{id}`, each by its operation id (the handler's name).
fn session_links() -> Value {
    let id = json!({"id": "$response.body#/sessions/0/session_id"});
    let mut links = serde_json::Map::new();
    for operation in [
        "session_detail",
        "rename_session",
        "terminate_session",
        "session_history",
        "session_logs",
    ] {
        links.insert(
            operation.to_owned(),
            json!({"operationId": operation, "parameters": id}),
        );
    }
    Value::Object(links)
}
