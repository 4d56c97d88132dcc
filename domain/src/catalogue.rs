//! The event catalogue: every event berth records, with its stored name and schema version.
//!
//! The catalogue is the one serialised boundary of berth. An event is stored as
//! `(event_type, schema_version, payload)`; `Event::decode` turns that back into the typed
//! enum, upcasting payloads written by older schema versions on the way (stored events are
//! never rewritten). `docs/events.md` documents every type listed here.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::payloads::*;

/// Why a stored or proposed event could not be understood.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CatalogueError {
    #[error("unknown event type `{0}`")]
    UnknownEventType(String),
    #[error(
        "event type `{event_type}` has schema version {current}; version {given} is not {what}"
    )]
    WrongSchemaVersion {
        event_type: String,
        given: i32,
        current: i32,
        what: &'static str,
    },
    #[error("payload of `{event_type}` v{schema_version} does not match its schema: {reason}")]
    BadPayload {
        event_type: String,
        schema_version: i32,
        reason: String,
    },
}

/// Declares the catalogue: one line per event type gives the variant, its payload type, the
/// stored name and the current schema version. Generates the `Event` enum and its codec.
macro_rules! catalogue {
    ($( $(#[$doc:meta])* $variant:ident($payload:ty) = $name:literal v $version:literal ),+ $(,)?) => {
        /// Every event berth records. The variant decides the stored `event_type`.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Event {
            $( $(#[$doc])* $variant($payload), )+
        }

        /// Stored name and current schema version of every event type, in catalogue order.
        pub const EVENT_TYPES: &[(&str, i32)] = &[ $( ($name, $version), )+ ];

        /// Every event type's payload at its current schema version as a JSON Schema (draft
        /// 2020-12), generated from its Rust type: `(name, version, schema)`, in catalogue
        /// order. A payload stored at an older version is upcast before anyone reads it, so
        /// these are the only shapes served.
        #[cfg(feature = "schema")]
        pub fn payload_schemas() -> Vec<(&'static str, i32, Value)> {
            vec![ $( ($name, $version, serde_json::to_value(schemars::schema_for!($payload))
                .expect("a schema serialises")), )+ ]
        }

        impl Event {
            /// The name stored in the `event_type` column.
            pub fn event_type(&self) -> &'static str {
                match self { $( Event::$variant(_) => $name, )+ }
            }

            /// The schema version this build writes for the event's type.
            pub fn schema_version(&self) -> i32 {
                match self { $( Event::$variant(_) => $version, )+ }
            }

            /// The payload as JSON, in the current schema version.
            pub fn to_payload(&self) -> Value {
                match self {
                    $( Event::$variant(p) => serde_json::to_value(p)
                        .expect("catalogue payloads always serialise"), )+
                }
            }

            /// Serialises the payload, in the current schema version, as its own type does.
            fn serialize_payload<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    $( Event::$variant(p) => p.serialize(serializer), )+
                }
            }

            /// The payload as JSON text, in the current schema version (serialised once).
            pub fn to_payload_text(&self) -> String {
                match self {
                    $( Event::$variant(p) => serde_json::to_string(p)
                        .expect("catalogue payloads always serialise"), )+
                }
            }

            /// Decodes a stored payload given as JSON text. The fast path for reads: payloads
            /// already in the current version go straight from text to the typed event.
            pub fn decode_str(event_type: &str, schema_version: i32, payload: &str) -> Result<Event, CatalogueError> {
                let current = current_schema_version(event_type)?;
                if schema_version == current {
                    return match event_type {
                        $( $name => serde_json::from_str::<$payload>(payload)
                            .map(Event::$variant)
                            .map_err(|e| bad_payload(event_type, schema_version, e)), )+
                        _ => unreachable!("current_schema_version knows every name"),
                    };
                }
                let value: Value = serde_json::from_str(payload)
                    .map_err(|e| bad_payload(event_type, schema_version, e))?;
                Event::decode(event_type, schema_version, value)
            }

            /// Decodes a stored payload, upcasting it first when it was written by an older
            /// schema version.
            pub fn decode(event_type: &str, schema_version: i32, payload: Value) -> Result<Event, CatalogueError> {
                let current = current_schema_version(event_type)?;
                if schema_version < 1 || schema_version > current {
                    return Err(CatalogueError::WrongSchemaVersion {
                        event_type: event_type.to_owned(), given: schema_version, current,
                        what: "known",
                    });
                }
                let mut payload = payload;
                for from in schema_version..current {
                    payload = upcast(event_type, from, payload)
                        .map_err(|reason| CatalogueError::BadPayload {
                            event_type: event_type.to_owned(), schema_version: from,
                            reason: reason.to_string(),
                        })?;
                }
                match event_type {
                    $( $name => serde_json::from_value::<$payload>(payload)
                        .map(Event::$variant)
                        .map_err(|e| bad_payload(event_type, schema_version, e)), )+
                    _ => unreachable!("current_schema_version knows every name"),
                }
            }
        }

        /// The current schema version of a stored event type.
        pub fn current_schema_version(event_type: &str) -> Result<i32, CatalogueError> {
            match event_type {
                $( $name => Ok($version), )+
                other => Err(CatalogueError::UnknownEventType(other.to_owned())),
            }
        }
    };
}

fn bad_payload(event_type: &str, schema_version: i32, e: serde_json::Error) -> CatalogueError {
    CatalogueError::BadPayload {
        event_type: event_type.to_owned(),
        schema_version,
        reason: e.to_string(),
    }
}

catalogue! {
    /// An agent joined a resource group with the capacity it offers.
    AgentRegistered(AgentRegistered) = "AgentRegistered" v 1,
    /// An agent is alive. No longer recorded (liveness is kept outside the log); read for
    /// the logs that have it. v1 carried the time as epoch milliseconds in `at_ms`.
    AgentHeartbeated(AgentHeartbeated) = "AgentHeartbeated" v 2,
    /// An agent stopped heartbeating and is no longer offered to the scheduler.
    AgentLost(AgentLost) = "AgentLost" v 1,
    /// A lost agent was heard from again.
    AgentReturned(AgentReturned) = "AgentReturned" v 1,
    /// The scheduler's bus connection was broken for a while: it missed the wake-ups.
    SchedulerWakeupsMissed(SchedulerWakeupsMissed) = "SchedulerWakeupsMissed" v 1,
    /// An agent said it is leaving; nothing is placed on it until it registers again.
    AgentDeparted(AgentDeparted) = "AgentDeparted" v 1,
    /// An operator admitted an agent into a resource group, up to a capacity, with its key.
    AgentAdmitted(AgentAdmitted) = "AgentAdmitted" v 1,
    /// An operator revoked an agent's admission.
    AgentRevoked(AgentRevoked) = "AgentRevoked" v 1,
    /// A user asked for a session; the launcher validated the request.
    SessionRequested(Box<SessionRequested>) = "SessionRequested" v 1,
    /// The scheduler tried to place a session; one row of its scheduling history.
    SchedulingAttempted(SchedulingAttempted) = "SchedulingAttempted" v 1,
    /// The scheduler placed a session on an agent and reserved its resources there.
    SessionScheduled(SessionScheduled) = "SessionScheduled" v 1,
    /// A session moved from one status to another, with a reason a person can read.
    SessionStatusChanged(SessionStatusChanged) = "SessionStatusChanged" v 1,
    /// A session got a new name.
    SessionRenamed(SessionRenamed) = "SessionRenamed" v 1,
    /// An admin changed a queued session's priority.
    SessionPriorityChanged(SessionPriorityChanged) = "SessionPriorityChanged" v 1,
    /// Somebody asked to terminate a session (gracefully or by force).
    SessionTerminationRequested(SessionTerminationRequested) = "SessionTerminationRequested" v 1,
    /// What a session held on its agent was given back. Recorded exactly once per session.
    SessionResourcesReleased(SessionResourcesReleased) = "SessionResourcesReleased" v 1,
    /// A user account was created.
    UserCreated(UserCreated) = "UserCreated" v 1,
    /// An API key was issued to a user (only its hash is kept).
    ApiKeyIssued(ApiKeyIssued) = "ApiKeyIssued" v 1,
    /// An API key was revoked.
    ApiKeyRevoked(ApiKeyRevoked) = "ApiKeyRevoked" v 1,
    /// A user was disabled (keys, keypairs, sign-ins and circuits refused; sessions run on).
    UserDisabled(UserDisabled) = "UserDisabled" v 1,
    /// A disabled user was enabled again.
    UserEnabled(UserEnabled) = "UserEnabled" v 1,
    /// A user's role changed.
    UserRoleChanged(UserRoleChanged) = "UserRoleChanged" v 1,
    /// A Backend.AI keypair was issued to a user (only its access key is kept; the secret is
    /// derived from it with a master key outside the log).
    BackendAiKeypairIssued(BackendAiKeypairIssued) = "BackendAiKeypairIssued" v 1,
    /// A Backend.AI keypair was revoked.
    BackendAiKeypairRevoked(BackendAiKeypairRevoked) = "BackendAiKeypairRevoked" v 1,
    /// A user's password was set (only its Argon2id hash is kept).
    UserPasswordSet(UserPasswordSet) = "UserPasswordSet" v 2,
    /// A person signed in to the web console (only the SHA-256 of its token is kept).
    ConsoleSignedIn(ConsoleSignedIn) = "ConsoleSignedIn" v 1,
    /// A person signed out of the web console.
    ConsoleSignedOut(ConsoleSignedOut) = "ConsoleSignedOut" v 1,
    /// Every console sign-in of a user ended (a password change, the user disabled).
    ConsoleSignedOutEverywhere(ConsoleSignedOutEverywhere) = "ConsoleSignedOutEverywhere" v 1,
    /// A project was created.
    ProjectCreated(ProjectCreated) = "ProjectCreated" v 1,
    /// A user became a member of a project.
    UserJoinedProject(UserJoinedProject) = "UserJoinedProject" v 1,
    /// A resource group was created with its scheduling settings.
    ResourceGroupCreated(ResourceGroupCreated) = "ResourceGroupCreated" v 1,
    /// A project was allowed to use a resource group.
    ResourceGroupGranted(ResourceGroupGranted) = "ResourceGroupGranted" v 1,
    /// An admin set how a resource group's queue is ordered (policy, fair share, starvation
    /// bound).
    ResourceGroupSchedulingSet(ResourceGroupSchedulingSet) = "ResourceGroupSchedulingSet" v 1,
    /// An operator set the environment and preset a launch in a resource group gets when it
    /// names none.
    ResourceGroupDefaultsSet(ResourceGroupDefaultsSet) = "ResourceGroupDefaultsSet" v 1,
    /// A resource policy was created or changed.
    ResourcePolicySet(ResourcePolicySet) = "ResourcePolicySet" v 1,
    /// A resource preset was created or changed.
    PresetSaved(PresetSaved) = "PresetSaved" v 1,
    /// A kernel's container started on its agent, with the ports published on the host.
    KernelStarted(KernelStarted) = "KernelStarted" v 1,
    /// A user created a named folder to mount into sessions.
    FolderCreated(FolderCreated) = "FolderCreated" v 1,
    /// An owner shared a folder with a user or a project (read-only or read-write).
    FolderShared(FolderShared) = "FolderShared" v 1,
    /// An owner took a folder's share back.
    FolderUnshared(FolderUnshared) = "FolderUnshared" v 1,
    /// An owner renamed a folder.
    FolderRenamed(FolderRenamed) = "FolderRenamed" v 1,
    /// An owner moved a folder to the trash.
    FolderTrashed(FolderTrashed) = "FolderTrashed" v 1,
    /// An owner restored a folder from the trash.
    FolderRestored(FolderRestored) = "FolderRestored" v 1,
    /// An owner purged a folder from the trash (its files removed).
    FolderPurged(FolderPurged) = "FolderPurged" v 1,
    /// An operator set the idle checks of a resource group or a resource policy.
    IdleChecksSet(IdleChecksSet) = "IdleChecksSet" v 1,
    /// An owner or an admin exempted a session from the idle checks.
    SessionIdleExempted(SessionIdleExempted) = "SessionIdleExempted" v 1,
    /// The idle-reaper found a session idle: the checker and the figures that decided it
    /// (its termination follows in the same append).
    SessionIdleReaped(SessionIdleReaped) = "SessionIdleReaped" v 1,
    /// Somebody asked to commit a running session to a customized image.
    SessionCommitRequested(SessionCommitRequested) = "SessionCommitRequested" v 1,
    /// A commit went a step further (started, layer written, pushed).
    SessionCommitProgressed(SessionCommitProgressed) = "SessionCommitProgressed" v 1,
    /// How far an agent's pull of a session's image has come (at most once a second).
    SessionPullProgressed(SessionPullProgressed) = "SessionPullProgressed" v 1,
    /// A user asked to be told when a shape fits in a group.
    FitWatchRequested(FitWatchRequested) = "FitWatchRequested" v 1,
    /// A watched shape would be placed at once: its owner is told, once.
    FitWatchFired(FitWatchFired) = "FitWatchFired" v 1,
    /// The scheduler estimated when a waiting session starts (at its first wait).
    SessionStartEstimated(SessionStartEstimated) = "SessionStartEstimated" v 1,
    /// A commit ended: the image made, or why not.
    SessionCommitEnded(SessionCommitEnded) = "SessionCommitEnded" v 1,
    /// An owner removed a customized image.
    CustomImageRemoved(CustomImageRemoved) = "CustomImageRemoved" v 1,
    /// An admin stored the credential a registry's images are pulled with (the password is
    /// not in the event).
    RegistryCredentialSet(RegistryCredentialSet) = "RegistryCredentialSet" v 1,
    /// An admin removed a registry's credential.
    RegistryCredentialRemoved(RegistryCredentialRemoved) = "RegistryCredentialRemoved" v 1,
    /// An admin listed an image in the catalogue (as its labels say, shown, or hidden).
    ImageListingSet(ImageListingSet) = "ImageListingSet" v 1,
    /// A user set (or removed) the webhook their notifications are delivered to.
    NotificationWebhookSet(NotificationWebhookSet) = "NotificationWebhookSet" v 1,
    /// A new secret signs a user's webhook deliveries (the secret is not in the event).
    NotificationWebhookSecretSet(NotificationWebhookSecretSet) = "NotificationWebhookSecretSet" v 1,
    /// A user marked notifications read.
    NotificationsRead(NotificationsRead) = "NotificationsRead" v 1,
    /// A circuit of the app proxy opened: a proxy port leads to an app of a session.
    AppCircuitOpened(AppCircuitOpened) = "AppCircuitOpened" v 1,
    /// A circuit of the app proxy closed (on request, with its session, or idle).
    AppCircuitClosed(AppCircuitClosed) = "AppCircuitClosed" v 1,
    /// Somebody asked for an app of a session to be started in its main kernel.
    AppStartRequested(AppStartRequested) = "AppStartRequested" v 1,
    /// An app's start ended: its port accepts connections, or why not.
    AppStartEnded(AppStartEnded) = "AppStartEnded" v 2,
    /// A user's create request was taken; kept whole among their recent launches.
    LaunchRecorded(LaunchRecorded) = "LaunchRecorded" v 1,
    /// A user named (or unnamed) one of their launches.
    LaunchRenamed(LaunchRenamed) = "LaunchRenamed" v 1,
    /// A user pinned or unpinned one of their launches.
    LaunchPinned(LaunchPinned) = "LaunchPinned" v 1,
    /// A user made a durable subscription to the log.
    SubscriptionCreated(SubscriptionCreated) = "SubscriptionCreated" v 1,
    /// A user deleted a durable subscription.
    SubscriptionDeleted(SubscriptionDeleted) = "SubscriptionDeleted" v 1,
    /// A user made a model-serving endpoint.
    EndpointCreated(EndpointCreated) = "EndpointCreated" v 1,
    /// An endpoint's wanted number of replicas changed.
    EndpointScaled(EndpointScaled) = "EndpointScaled" v 1,
    /// A replica (an inference session) was started for an endpoint.
    EndpointReplicaAdded(EndpointReplicaAdded) = "EndpointReplicaAdded" v 1,
    /// A replica left an endpoint.
    EndpointReplicaRemoved(EndpointReplicaRemoved) = "EndpointReplicaRemoved" v 1,
    /// A replica passed its health check and receives traffic.
    EndpointRouteHealthy(EndpointRouteHealthy) = "EndpointRouteHealthy" v 1,
    /// A replica failed its health checks and receives no traffic.
    EndpointRouteUnhealthy(EndpointRouteUnhealthy) = "EndpointRouteUnhealthy" v 1,
    /// An endpoint's owner made a token for it (its digest is not in the event).
    EndpointTokenIssued(EndpointTokenIssued) = "EndpointTokenIssued" v 1,
    /// An endpoint's autoscaling rules were set.
    EndpointAutoscalingSet(EndpointAutoscalingSet) = "EndpointAutoscalingSet" v 1,
    /// An endpoint's replicas are to run a new revision (a rolling update).
    EndpointUpdated(EndpointUpdated) = "EndpointUpdated" v 1,
    /// A replica gets no new calls and ends once those under way finish.
    EndpointRouteDraining(EndpointRouteDraining) = "EndpointRouteDraining" v 1,
    /// An endpoint was destroyed.
    EndpointDestroyed(EndpointDestroyed) = "EndpointDestroyed" v 1,
}

/// An event's payload, serialised in place (a recorded event's wire form borrows it).
pub struct PayloadOf<'a>(pub &'a Event);

impl Serialize for PayloadOf<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_payload(serializer)
    }
}

/// Why a stored payload could not be upcast (said as the reason of a
/// [`CatalogueError::BadPayload`]).
#[derive(Debug, thiserror::Error)]
enum UpcastError {
    #[error("payload is not an object")]
    NotAnObject,
    #[error("v1 payload has no integer `at_ms`")]
    NoAtMs,
    #[error("`at_ms` is out of range")]
    AtMsOutOfRange,
    #[error("no upcaster from version {0}")]
    NoUpcaster(i32),
}

/// Upcasters: pure functions turning a payload of version `from` into version `from + 1`.
fn upcast(event_type: &str, from: i32, payload: Value) -> Result<Value, UpcastError> {
    match (event_type, from) {
        ("AgentHeartbeated", 1) => {
            let Value::Object(mut fields) = payload else {
                return Err(UpcastError::NotAnObject);
            };
            let at_ms = fields
                .remove("at_ms")
                .and_then(|v| v.as_i64())
                .ok_or(UpcastError::NoAtMs)?;
            let at: DateTime<Utc> =
                DateTime::from_timestamp_millis(at_ms).ok_or(UpcastError::AtMsOutOfRange)?;
            fields.insert(
                "at".into(),
                serde_json::to_value(at).expect("a time serialises"),
            );
            Ok(Value::Object(fields))
        }
        // Secrets leave the log's readers: the hash is dropped (it lives in
        // `secrets.password_hashes`), the token becomes whether one was kept.
        ("UserPasswordSet", 1) => {
            let Value::Object(mut fields) = payload else {
                return Err(UpcastError::NotAnObject);
            };
            fields.remove("password_hash");
            Ok(Value::Object(fields))
        }
        ("AppStartEnded", 1) => {
            let Value::Object(mut fields) = payload else {
                return Err(UpcastError::NotAnObject);
            };
            if let Some(Value::Object(outcome)) = fields.get_mut("outcome") {
                if let Some(token) = outcome.remove("token") {
                    outcome.insert("token_kept".into(), Value::Bool(!token.is_null()));
                }
            }
            Ok(Value::Object(fields))
        }
        _ => Err(UpcastError::NoUpcaster(from)),
    }
}

/// The id of the aggregate an event belongs to, used to build stream ids.
pub fn stream_id(category: &str, id: Uuid) -> String {
    format!("{category}-{}", id.simple())
}

/// Metadata every event carries next to its payload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Metadata {
    /// The event or command that caused this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<Uuid>,
    /// Shared by every event of one request's journey.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<Uuid>,
    /// Who did it: a user's id, or a service name such as `scheduler`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// W3C trace context of the operation that recorded the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every type's payload schema names the fields its example carries, and its example
    /// carries every field the schema requires (the whole check, by a validator, is the e2e
    /// suite's, against the schema the gateway serves).
    #[cfg(feature = "schema")]
    #[test]
    fn every_event_type_has_a_payload_schema_that_fits_its_example() {
        let schemas = payload_schemas();
        assert_eq!(schemas.len(), EVENT_TYPES.len());
        for event in one_of_each() {
            let name = event.event_type();
            let (_, version, schema) = schemas.iter().find(|(n, ..)| *n == name).unwrap();
            assert_eq!(*version, event.schema_version(), "{name}");
            let payload = event.to_payload();
            let fields = payload.as_object().expect("payloads are objects");
            let properties = schema["properties"]
                .as_object()
                .unwrap_or_else(|| panic!("{name}: {schema:#}"));
            for field in fields.keys() {
                assert!(properties.contains_key(field), "{name}.{field}: {schema:#}");
            }
            for required in schema["required"].as_array().into_iter().flatten() {
                let required = required.as_str().unwrap();
                assert!(fields.contains_key(required), "{name} lacks {required}");
            }
        }
    }

    /// One event of every type, with every optional field set, so a field that does not
    /// survive the stored form shows.
    fn one_of_each() -> Vec<Event> {
        let id = Uuid::now_v7();
        let at = DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
        let slots = ResourceSlots {
            cpu_milli: 1500,
            memory_bytes: 1 << 30,
            gpu_milli: 250,
        };
        let kernels = vec![KernelPlacement {
            agent_id: "a1".into(),
            resources: slots,
        }];
        vec![
            Event::AgentRegistered(AgentRegistered {
                unlabelled_images: Vec::new(),
                agent_id: "a1".into(),
                resource_group: "default".into(),
                capacity: slots,
                images: vec!["berth/shell:latest".into()],
                address: Some("10.0.0.1:6001".into()),
                image_apps: Default::default(),
                network_scope: None,
                volumes: vec!["shared".into()],
            }),
            Event::AgentHeartbeated(AgentHeartbeated {
                agent_id: "a1".into(),
                at,
            }),
            Event::AgentLost(AgentLost {
                agent_id: "a1".into(),
                reason: "no heartbeat for 30 s".into(),
                last_heard: Some(at),
            }),
            Event::SchedulerWakeupsMissed(SchedulerWakeupsMissed {
                from: at,
                until: at + chrono::TimeDelta::seconds(9),
            }),
            Event::SubscriptionCreated(SubscriptionCreated {
                subscription_id: id,
                owner: id,
                name: "billing".into(),
                filter: crate::event_filter::EventFilter::default().with_types("Session*"),
                from_start: false,
                nats_key: Some("UA1".into()),
            }),
            Event::SubscriptionDeleted(SubscriptionDeleted {
                subscription_id: id,
                name: "billing".into(),
            }),
            Event::EndpointCreated(crate::serving::example_created(id)),
            Event::EndpointScaled(EndpointScaled {
                endpoint_id: id,
                replicas: 3,
                previous: 2,
                reason: "rule 1: requests_per_second 12.5 > 5".into(),
                figures: [("requests_per_second".to_string(), 12.5)].into(),
            }),
            Event::EndpointReplicaAdded(EndpointReplicaAdded {
                endpoint_id: id,
                session_id: id,
                revision: 1,
            }),
            Event::EndpointAutoscalingSet(EndpointAutoscalingSet {
                endpoint_id: id,
                min_replicas: 0,
                max_replicas: 3,
                rules: vec![ScalingRule {
                    metric: ScalingMetric::RequestsPerSecond,
                    comparator: Comparator::Gt,
                    threshold: 5.0,
                    step: 1,
                    cooldown_secs: 30,
                }],
            }),
            Event::EndpointUpdated({
                let created = crate::serving::example_created(id);
                EndpointUpdated {
                    endpoint_id: id,
                    revision: 1,
                    image: created.image,
                    model_folder: created.model_folder,
                    resources: created.resources,
                    model: created.model,
                    reason: "user a@b.c".into(),
                }
            }),
            Event::EndpointRouteDraining(EndpointRouteDraining {
                endpoint_id: id,
                session_id: id,
                reason: "scaled down to 1".into(),
            }),
            Event::EndpointReplicaRemoved(EndpointReplicaRemoved {
                endpoint_id: id,
                session_id: id,
                reason: "scaled down".into(),
                failed: false,
            }),
            Event::EndpointRouteHealthy(EndpointRouteHealthy {
                endpoint_id: id,
                session_id: id,
            }),
            Event::EndpointRouteUnhealthy(EndpointRouteUnhealthy {
                endpoint_id: id,
                session_id: id,
                reason: "GET /health answered 503, 3 times in a row".into(),
            }),
            Event::EndpointTokenIssued(EndpointTokenIssued {
                endpoint_id: id,
                token_id: id,
                expires_at: at,
            }),
            Event::EndpointDestroyed(EndpointDestroyed { endpoint_id: id }),
            Event::SessionRequested(Box::new(SessionRequested {
                shared_mounts: Default::default(),
                session_id: id,
                name: "job1".into(),
                owner: Owner {
                    user_id: id,
                    email: "a@b.c".into(),
                    project: Some("research".into()),
                },
                requested_by: Some(id),
                session_type: SessionType::Batch,
                resource_group: "default".into(),
                image: "berth/python:latest".into(),
                environment: [("A".to_string(), "1".to_string())].into(),
                resources: slots,
                shared_memory_bytes: 64 << 20,
                cluster_mode: ClusterMode::MultiNode,
                cluster_size: 2,
                agent_id: Some("a1".into()),
                preopen_ports: vec![8080],
                mounts: vec!["data".into()],
                startup_command: Some("echo hi".into()),
                starts_at: Some(at),
                batch_timeout_secs: Some(60),
                omp_num_threads: 2,
                max_lifetime_secs: Some(3600),
                network_idle_timeout_secs: None,
                apps: Vec::new(),
                priority: 20,
                pids_limit: Some(4096),
                log_limit_bytes: Some(1 << 20),
                volumes: std::collections::BTreeMap::from([("data".into(), "shared".into())]),
            })),
            Event::SchedulingAttempted(SchedulingAttempted {
                read: None,
                session_id: id,
                phase: "schedule".into(),
                result: SchedulingResult::NeedRetry,
                status_before: SessionStatus::Pending,
                status_after: SessionStatus::Pending,
                attempts: 2,
                message: "no agent has 1.5 cores free".into(),
                error_code: Some("NO_CAPACITY".into()),
                steps: vec![SchedulingStep {
                    step: "agent".into(),
                    result: SchedulingResult::Failure,
                    message: "a1 is full".into(),
                    error_code: Some("AGENT_FULL".into()),
                    started_at: at,
                    ended_at: at,
                }],
            }),
            Event::SessionScheduled(SessionScheduled {
                session_id: id,
                agent_id: "a1".into(),
                resources: slots,
                kernels: kernels.clone(),
            }),
            Event::SessionStatusChanged(SessionStatusChanged {
                session_id: id,
                from: SessionStatus::Running,
                to: SessionStatus::Terminated,
                reason: Some("the startup command failed with exit code 3".into()),
                exit_code: Some(3),
                occurred_at: Some(at),
            }),
            Event::SessionRenamed(SessionRenamed {
                session_id: id,
                old_name: "job1".into(),
                new_name: "job2".into(),
            }),
            Event::SessionPriorityChanged(SessionPriorityChanged {
                session_id: id,
                from: 10,
                to: 50,
            }),
            Event::SessionTerminationRequested(SessionTerminationRequested {
                session_id: id,
                forced: true,
                reason: "force-terminated by a@b.c".into(),
            }),
            Event::SessionResourcesReleased(SessionResourcesReleased {
                session_id: id,
                agent_id: "a1".into(),
                resources: slots,
                kernels,
            }),
            Event::UserCreated(UserCreated {
                user_id: id,
                email: "a@b.c".into(),
                role: Role::Admin,
                resource_policy: "default".into(),
            }),
            Event::ApiKeyIssued(ApiKeyIssued {
                user_id: id,
                key_prefix: "berth_012345".into(),
                key_sha256: "ab".repeat(32),
                expires_at: Some(at),
            }),
            Event::ApiKeyRevoked(ApiKeyRevoked {
                user_id: id,
                key_prefix: "berth_012345".into(),
                key_sha256: "ab".repeat(32),
            }),
            Event::UserDisabled(UserDisabled { user_id: id }),
            Event::UserEnabled(UserEnabled { user_id: id }),
            Event::UserRoleChanged(UserRoleChanged {
                user_id: id,
                from: Role::User,
                to: Role::Admin,
            }),
            Event::BackendAiKeypairIssued(BackendAiKeypairIssued {
                user_id: id,
                access_key: "AKIAEXAMPLEKEY000001".into(),
            }),
            Event::BackendAiKeypairRevoked(BackendAiKeypairRevoked {
                user_id: id,
                access_key: "AKIAEXAMPLEKEY000001".into(),
            }),
            Event::UserPasswordSet(UserPasswordSet { user_id: id }),
            Event::ConsoleSignedIn(ConsoleSignedIn {
                user_id: id,
                token_sha256: "cd".repeat(32),
                expires_at: at,
                how: SignInMethod::Password,
            }),
            Event::ConsoleSignedOut(ConsoleSignedOut {
                user_id: id,
                token_sha256: "cd".repeat(32),
            }),
            Event::ConsoleSignedOutEverywhere(ConsoleSignedOutEverywhere {
                user_id: id,
                reason: SignOutReason::PasswordChanged,
            }),
            Event::ProjectCreated(ProjectCreated {
                name: "research".into(),
                description: "the lab".into(),
            }),
            Event::UserJoinedProject(UserJoinedProject {
                user_id: id,
                project: "research".into(),
            }),
            Event::ResourceGroupCreated(ResourceGroupCreated {
                name: "gpu".into(),
                queue_policy: QueuePolicy::Backfill,
                agent_selection: AgentSelection::Dispersed,
                max_attempts: 5,
                skip_after: 3,
                pending_timeout_secs: 600,
            }),
            Event::ResourceGroupGranted(ResourceGroupGranted {
                resource_group: "gpu".into(),
                project: "research".into(),
            }),
            Event::ResourceGroupSchedulingSet(ResourceGroupSchedulingSet {
                name: "gpu".into(),
                queue_policy: QueuePolicy::FairShare,
                half_life_secs: 86_400,
                lookback_secs: 7 * 86_400,
                weight_cpu_per_core: 1.0,
                weight_memory_per_gib: 0.5,
                weight_gpu_per_device: 8.0,
                starve_after_secs: 3_600,
            }),
            Event::ResourceGroupDefaultsSet(ResourceGroupDefaultsSet {
                name: "gpu".into(),
                image: Some("berth/python:latest".into()),
                preset: None,
            }),
            Event::ResourcePolicySet(ResourcePolicySet {
                name: "default".into(),
                max_concurrent_sessions: 8,
                max_total: slots,
                max_session_lifetime_secs: Some(86_400),
                max_custom_images: Some(3),
                max_session_priority: Some(50),
                max_pids: Some(512),
                max_log_bytes: Some(1 << 20),
                max_folder_bytes: None,
            }),
            Event::PresetSaved(PresetSaved {
                name: "small".into(),
                resources: slots,
                shared_memory_bytes: 64 << 20,
            }),
            Event::KernelStarted(KernelStarted {
                session_id: id,
                kernel: 1,
                agent_id: "a1".into(),
                container_id: "c0ffee".into(),
                ports: vec![PublishedPort {
                    container: 8080,
                    host: 32768,
                }],
                hostname: Some("sub1".into()),
                address: None,
                started_at: Some(at),
            }),
            Event::FolderCreated(FolderCreated {
                owner: id,
                name: "data".into(),
                volume: Some("shared".into()),
                usage_mode: crate::folders::UsageMode::Model,
                cloned_from: Some(format!("{}/models", id.simple())),
            }),
            Event::FolderRenamed(FolderRenamed {
                owner: id,
                name: "data".into(),
                to: "dataset".into(),
            }),
            Event::FolderTrashed(FolderTrashed {
                owner: id,
                name: "dataset".into(),
            }),
            Event::FolderRestored(FolderRestored {
                owner: id,
                name: "dataset".into(),
            }),
            Event::FolderPurged(FolderPurged {
                owner: id,
                name: "dataset".into(),
            }),
            Event::FolderShared(FolderShared {
                owner: id,
                name: "data".into(),
                grantee: crate::sharing::Grantee::Project("ml".into()),
                permission: crate::sharing::FolderPermission::ReadOnly,
            }),
            Event::FolderUnshared(FolderUnshared {
                owner: id,
                name: "data".into(),
                grantee: crate::sharing::Grantee::User(id),
            }),
            Event::AgentAdmitted(AgentAdmitted {
                agent_id: "a1".into(),
                resource_group: "default".into(),
                max_capacity: ResourceSlots {
                    cpu_milli: 4000,
                    memory_bytes: 8 << 30,
                    gpu_milli: 0,
                },
                public_key: "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGS7SAGJHIUPP33NRZ33S".into(),
            }),
            Event::AgentRevoked(AgentRevoked {
                agent_id: "a1".into(),
                reason: "host retired".into(),
            }),
            Event::AgentReturned(AgentReturned {
                agent_id: "a1".into(),
            }),
            Event::AgentDeparted(AgentDeparted {
                agent_id: "a1".into(),
                reason: "stopped (SIGTERM)".into(),
            }),
            Event::IdleChecksSet(IdleChecksSet {
                scope: crate::idleness::IdleScope::ResourceGroup("default".into()),
                checks: crate::idleness::IdleChecks {
                    max_lifetime_secs: Some(3600),
                    network_idle_timeout_secs: Some(600),
                    utilization: Some(crate::idleness::UtilizationCheck {
                        grace_period_secs: 300,
                        window_secs: 600,
                        thresholds: crate::idleness::Thresholds {
                            cpu_percent: Some(5.0),
                            memory_percent: Some(10.0),
                            gpu_percent: Some(1.0),
                            gpu_memory_percent: Some(2.5),
                        },
                        combine: crate::idleness::Combine::Any,
                    }),
                },
            }),
            Event::SessionIdleExempted(SessionIdleExempted {
                session_id: id,
                by: id,
                reason: "a long training run".into(),
            }),
            Event::SessionCommitRequested(SessionCommitRequested {
                session_id: id,
                commit_id: id,
                owner: id,
                name: "my-env".into(),
                image: crate::images::custom_image(id, "my-env"),
                agent_id: Some("a1".into()),
            }),
            Event::SessionCommitProgressed(SessionCommitProgressed {
                session_id: id,
                commit_id: id,
                step: CommitStep::LayerWritten,
                detail: "sha256:abc".into(),
            }),
            Event::FitWatchRequested(FitWatchRequested {
                watch_id: id,
                owner: id,
                resource_group: "default".into(),
                shape: crate::advice::Shape {
                    per_kernel: ResourceSlots {
                        cpu_milli: 2000,
                        memory_bytes: 1 << 30,
                        gpu_milli: 0,
                    },
                    cluster_size: 1,
                },
                label: "2 cores, 1 GiB".into(),
            }),
            Event::FitWatchFired(FitWatchFired {
                watch_id: id,
                owner: id,
                resource_group: "default".into(),
                label: "2 cores, 1 GiB".into(),
            }),
            Event::SessionStartEstimated(SessionStartEstimated {
                session_id: id,
                estimate: crate::advice::Estimate {
                    wait_secs: Some(2400),
                    ahead: vec![id],
                    never: None,
                },
                typical_hold_secs: 3600,
            }),
            Event::SessionPullProgressed(SessionPullProgressed {
                session_id: id,
                image: "berth/python:latest".into(),
                current_bytes: 12 << 20,
                total_bytes: 48 << 20,
                layers_done: 2,
                layers: 5,
            }),
            Event::SessionCommitEnded(SessionCommitEnded {
                session_id: id,
                commit_id: id,
                owner: id,
                image: crate::images::custom_image(id, "my-env"),
                agent_id: Some("a1".into()),
                outcome: CommitOutcome::Done {
                    image_id: "sha256:abc".into(),
                    size_bytes: 1 << 20,
                    pushed: false,
                },
            }),
            Event::CustomImageRemoved(CustomImageRemoved {
                owner: id,
                image: crate::images::custom_image(id, "my-env"),
                session_id: Some(id),
                agent_id: Some("a1".into()),
            }),
            Event::RegistryCredentialSet(RegistryCredentialSet {
                registry: "cr.example.com:5000".into(),
                username: "puller".into(),
            }),
            Event::RegistryCredentialRemoved(RegistryCredentialRemoved {
                registry: "cr.example.com:5000".into(),
            }),
            Event::ImageListingSet(ImageListingSet {
                image: "berth/base:latest".into(),
                listing: crate::images::ImageListing::Hidden,
            }),
            Event::NotificationWebhookSet(NotificationWebhookSet {
                user_id: id,
                url: Some("http://hooks.example.com/berth".into()),
            }),
            Event::NotificationWebhookSecretSet(NotificationWebhookSecretSet {
                user_id: id,
                rotated: true,
            }),
            Event::NotificationsRead(NotificationsRead {
                user_id: id,
                notice_ids: vec![id],
                all: false,
            }),
            Event::AppCircuitOpened(AppCircuitOpened {
                circuit_id: id,
                session_id: id,
                owner: id,
                opened_by: id,
                app: "jupyter".into(),
                protocol: crate::apps::AppProtocol::Http,
                container_port: 8888,
                port: 10205,
                admission: crate::apps::Admission {
                    public: false,
                    allowed: vec!["10.0.0.0/8".to_owned().try_into().unwrap()],
                },
            }),
            Event::AppStartRequested(AppStartRequested {
                session_id: id,
                start_id: id,
                app: "jupyter".into(),
                port: 8888,
                by: id,
            }),
            Event::AppStartEnded(AppStartEnded {
                session_id: id,
                start_id: id,
                app: "jupyter".into(),
                outcome: AppStartEnd::Started { token_kept: true },
            }),
            Event::AppCircuitClosed(AppCircuitClosed {
                circuit_id: id,
                session_id: id,
                port: 10205,
                reason: crate::apps::CircuitCloseReason::SessionEnded,
            }),
            Event::LaunchRecorded(LaunchRecorded {
                launch_id: id,
                user_id: id,
                request: json!({"image": "berth/shell:latest", "count": 2}),
                sessions: vec![id],
            }),
            Event::LaunchRenamed(LaunchRenamed {
                launch_id: id,
                user_id: id,
                label: Some("nightly training".into()),
            }),
            Event::LaunchPinned(LaunchPinned {
                launch_id: id,
                user_id: id,
                pinned: true,
            }),
            Event::SessionIdleReaped(SessionIdleReaped {
                session_id: id,
                reading: crate::idleness::IdleReading {
                    checker: crate::idleness::IdleChecker::Utilization,
                    measures: vec![crate::idleness::IdleMeasure {
                        name: "cpu_percent".into(),
                        value: 0.25,
                        threshold: 5.0,
                    }],
                    remaining_secs: Some(0.0),
                    fires: true,
                    explanation: "average over the last 600 s: cpu_percent 0.2% (threshold 5%)"
                        .into(),
                },
            }),
        ]
    }

    #[test]
    fn every_event_type_round_trips_through_its_stored_form() {
        let events = one_of_each();
        let covered: Vec<&str> = events.iter().map(Event::event_type).collect();
        for (name, _) in EVENT_TYPES {
            assert!(covered.contains(name), "no sample of {name}: add one above");
        }
        for event in events {
            let stored = event.to_payload();
            let back = Event::decode(event.event_type(), event.schema_version(), stored.clone())
                .expect("decodes");
            assert_eq!(back, event);
            let text = stored.to_string();
            let fast =
                Event::decode_str(event.event_type(), event.schema_version(), &text).unwrap();
            assert_eq!(fast, event);
        }
    }

    /// Events written before `hostname` existed still decode, with no host name.
    #[test]
    fn a_kernel_started_written_without_a_hostname_decodes() {
        let old = json!({"session_id": Uuid::nil(), "kernel": 0, "agent_id": "a1",
                         "container_id": "c0ffee", "ports": []});
        let Event::KernelStarted(k) = Event::decode("KernelStarted", 1, old).unwrap() else {
            panic!("wrong variant")
        };
        assert_eq!(k.hostname, None);
        assert_eq!(k.agent_id, "a1");
    }

    #[test]
    fn secrets_of_version_1_payloads_never_reach_a_reader() {
        let id = Uuid::nil();
        let v1 = serde_json::json!({"user_id": id, "password_hash": "$argon2id$v=19$secret"});
        let event = Event::decode_str("UserPasswordSet", 1, &v1.to_string()).unwrap();
        assert_eq!(
            event,
            Event::UserPasswordSet(UserPasswordSet { user_id: id })
        );
        assert!(!event.to_payload_text().contains("argon2"));

        let v1 = serde_json::json!({"session_id": id, "start_id": id, "app": "jupyter",
                                    "outcome": {"result": "started", "token": "s3cret"}});
        let event = Event::decode_str("AppStartEnded", 1, &v1.to_string()).unwrap();
        let Event::AppStartEnded(ended) = &event else {
            panic!("{event:?}")
        };
        assert_eq!(ended.outcome, AppStartEnd::Started { token_kept: true });
        assert!(!event.to_payload_text().contains("s3cret"));
        let v1 = serde_json::json!({"session_id": id, "start_id": id, "app": "sshd",
                                    "outcome": {"result": "started", "token": null}});
        let Event::AppStartEnded(ended) =
            Event::decode_str("AppStartEnded", 1, &v1.to_string()).unwrap()
        else {
            panic!()
        };
        assert_eq!(ended.outcome, AppStartEnd::Started { token_kept: false });
    }

    #[test]
    fn version_one_heartbeats_are_upcast_on_read() {
        let v1 = json!({"agent_id": "a1", "at_ms": 1_700_000_000_000i64});
        let event = Event::decode_str("AgentHeartbeated", 1, &v1.to_string()).unwrap();
        let Event::AgentHeartbeated(hb) = event else {
            panic!("wrong variant")
        };
        assert_eq!(hb.agent_id, "a1");
        assert_eq!(hb.at.timestamp_millis(), 1_700_000_000_000);
    }

    #[test]
    fn unknown_types_and_versions_are_typed_errors() {
        assert_eq!(
            Event::decode("NoSuchThing", 1, json!({})),
            Err(CatalogueError::UnknownEventType("NoSuchThing".into()))
        );
        assert!(matches!(
            Event::decode("AgentLost", 2, json!({})),
            Err(CatalogueError::WrongSchemaVersion {
                given: 2,
                current: 1,
                ..
            })
        ));
        assert!(matches!(
            Event::decode("AgentLost", 0, json!({})),
            Err(CatalogueError::WrongSchemaVersion { given: 0, .. })
        ));
        assert!(matches!(
            Event::decode("AgentLost", 1, json!({"agent": 1})),
            Err(CatalogueError::BadPayload { .. })
        ));
    }
}
