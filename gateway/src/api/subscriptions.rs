//! Durable subscriptions to the log, for services that must see every event they want once
//! (billing, audit pipelines): a named subscription of the caller's, with the event stream's
//! filters, whose consumer reads `GET /v1/subscriptions/{name}/events` from where it last
//! acknowledged (`POST .../ack`), so one restarted, or moved to another gateway, goes on from
//! there: every event after the acknowledgement comes again, none at or before it.
//!
//! A superadmin's subscription may also be read over NATS: a durable JetStream consumer of the
//! relay's stream, with a NATS user of its own (an nkey whose seed is answered once) that may
//! only pull from that consumer and acknowledge it (`bus::permissions::reader_permissions`);
//! JetStream keeps its acknowledgements. Its filter is then what subjects can say (categories
//! or streams), since a user's visibility by session owner cannot be written as subjects.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use domain::event_filter::EventFilter;
use domain::subscriptions::{consumer_name, Subscription};
use events::subscriptions::{NewSubscription, SubscriptionError};
use events::LogPosition;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::{parse_body, query};
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{Acknowledged, NatsReader, SubscriptionOut, Subscriptions};
use crate::sse::{self, EventsParams};
use crate::state::AppState;

/// `POST /v1/subscriptions`'s body: a name, and the event stream's filters.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionIn {
    /// 1 to 64 lowercase letters, digits, `-` and `_`, starting with a letter or a digit;
    /// the caller's once at a time.
    #[schema(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$")]
    pub name: String,
    /// Event types, comma-separated; a name ending in `*` is a prefix (`Session*`).
    #[serde(rename = "type")]
    #[schema(pattern = r"^[A-Za-z*,]{1,1000}$")]
    pub event_type: Option<String>,
    /// Stream categories, comma-separated (`session`, `agent`, ...).
    #[schema(pattern = r"^[a-z0-9_,]{1,1000}$")]
    pub category: Option<String>,
    /// One stream, by its id.
    #[schema(pattern = r"^[a-z0-9_]+-[A-Za-z0-9_-]+$")]
    pub stream: Option<String>,
    /// One session's events.
    pub session: Option<Uuid>,
    /// Superadmins: only the events of this user's sessions (their email).
    #[schema(min_length = 1, pattern = r"^[^\u0000]+$")]
    pub owner: Option<String>,
    /// Superadmins: only the events of sessions in this resource group.
    #[schema(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    pub resource_group: Option<String>,
    /// Read from the log's start; otherwise from the subscription's making on.
    #[serde(default)]
    pub from_start: bool,
    /// Superadmins: also read over NATS (a JetStream consumer and a NATS user of its own,
    /// whose seed is answered once); only categories and streams filter it.
    #[serde(default)]
    pub nats: bool,
}

/// `POST /v1/subscriptions/{name}/ack`'s body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AckIn {
    /// The position of the last event the consumer has handled (its `id`, `TX:SEQ`): it and
    /// every event before it are not served again.
    #[schema(pattern = r"^[0-9]{1,19}:[0-9]{1,19}$")]
    pub position: String,
}

/// A subscription named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SubscriptionName {
    /// The subscription's name.
    pub name: String,
}

/// `GET /v1/subscriptions/{name}/events`'s parameters.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SubscriptionRead {
    /// `false`: end the stream at the log's end instead of following it (the default).
    #[param(nullable = false)]
    pub follow: Option<bool>,
}

impl From<SubscriptionError> for ApiError {
    fn from(e: SubscriptionError) -> Self {
        match e {
            SubscriptionError::Invalid { field, message } => ApiError::invalid(field, message),
            e @ SubscriptionError::Exists(_) => {
                ApiError::new(StatusCode::CONFLICT, "name_taken", e.to_string()).field("name")
            }
            e @ SubscriptionError::Unknown(_) => ApiError::not_found(e.to_string()).field("name"),
            SubscriptionError::Ledger(e) => e.into(),
        }
    }
}

/// The subjects a NATS reader of `filter` takes, or why the filter cannot be read so.
fn subjects_of(state: &AppState, filter: &EventFilter) -> Result<Vec<String>, ApiError> {
    if !filter.types.is_empty() || !filter.type_prefixes.is_empty() || filter.needs_session() {
        return Err(ApiError::invalid(
            "nats",
            "a subscription read over NATS filters by category and stream only (types, owners \
             and groups are not subjects); read it over HTTP, or filter in the consumer",
        ));
    }
    let topology = &state.topology;
    let subjects: Vec<String> = match (filter.streams.as_slice(), filter.categories.as_slice()) {
        ([], []) => vec![topology.all_subjects()],
        ([], categories) => categories
            .iter()
            .map(|c| topology.category_subject(c))
            .collect(),
        (streams, categories) => streams
            .iter()
            .filter_map(|s| {
                let category = events::store::category_of(s).ok()?;
                (categories.is_empty() || categories.iter().any(|c| c == category))
                    .then(|| topology.stream_subject(category, s))
            })
            .collect(),
    };
    if subjects.is_empty() {
        // A consumer with no subject would read every subject.
        return Err(ApiError::invalid(
            "nats",
            "its stream is of none of its categories: it would read nothing",
        ));
    }
    Ok(subjects)
}

/// Makes (or makes again, as it was) the durable JetStream consumer of a NATS reader.
async fn make_consumer(
    state: &AppState,
    name: &str,
    subjects: Vec<String>,
    from_start: bool,
) -> Result<(), ApiError> {
    use async_nats::jetstream::consumer;
    let nats = state.bus("a subscription read over NATS cannot be made")?;
    let js = async_nats::jetstream::new(nats.clone());
    let stream = js
        .get_stream(&state.topology.stream)
        .await
        .map_err(|_| ApiError::bus_unavailable("a subscription read over NATS cannot be made"))?;
    stream
        .create_consumer(consumer::pull::Config {
            durable_name: Some(name.to_owned()),
            filter_subjects: subjects,
            deliver_policy: match from_start {
                true => consumer::DeliverPolicy::All,
                false => consumer::DeliverPolicy::New,
            },
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .map_err(ApiError::internal)?;
    Ok(())
}

/// Where `subscription`'s reading goes on: after its acknowledgement, else after its making
/// (the log's start for one made `from_start`).
fn resumes_after(subscription: &Subscription, acknowledged: Option<LogPosition>) -> LogPosition {
    acknowledged.unwrap_or(match subscription.created.from_start {
        true => LogPosition::START,
        false => subscription.created_position,
    })
}

async fn out(
    state: &AppState,
    subscription: Subscription,
    seed: Option<String>,
) -> Result<SubscriptionOut, ApiError> {
    let acknowledged =
        db::subscriptions::acknowledged(&state.pool, subscription.created.subscription_id).await?;
    let resumes = resumes_after(&subscription, acknowledged);
    let created = subscription.created;
    let filter = created.filter;
    let types = filter
        .types
        .into_iter()
        .chain(filter.type_prefixes.into_iter().map(|p| format!("{p}*")))
        .collect();
    let nats = created.nats_key.map(|_| {
        let consumer = consumer_name(created.owner, &created.name);
        NatsReader {
            stream: state.topology.stream.clone(),
            inbox_prefix: bus::permissions::inbox_prefix(&consumer),
            consumer,
            seed,
        }
    });
    Ok(SubscriptionOut {
        name: created.name,
        id: created.subscription_id,
        created_at: subscription.created_at,
        types,
        category: filter.categories,
        stream: filter.streams,
        owner: filter.owner,
        resource_group: filter.resource_group,
        from_start: created.from_start,
        acknowledged: acknowledged.map(|p| p.to_string()),
        resumes_after: resumes.to_string(),
        nats,
    })
}

/// Make a durable subscription of mine to the log, with the event stream's filters (a user's
/// subscription sees their own sessions' events). Its reading starts after its making, or at
/// the log's start (`from_start`). 409 naming `name` for a name I have already.
#[utoipa::path(post, path = "/v1/subscriptions", tag = "events",
    request_body = SubscriptionIn,
    responses((status = 201, description = "made; a NATS reader's seed is answered now only", body = SubscriptionOut),
              (status = 403, description = "`owner`, `resource_group` or `nats` asked by someone not a superadmin", body = crate::error::ErrorBody),
              (status = 404, description = "`owner` names no user", body = crate::error::ErrorBody),
              (status = 409, description = "a subscription of mine has that `name`", body = crate::error::ErrorBody)))]
pub async fn create_subscription(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<SubscriptionOut>), ApiError> {
    let asked = parse_body::<SubscriptionIn>(body)?;
    let params = EventsParams {
        event_type: asked.event_type,
        category: asked.category,
        stream: asked.stream,
        session: asked.session,
        owner: asked.owner,
        resource_group: asked.resource_group,
        ..EventsParams::default()
    };
    let (filter, everything) = params.filter_for(&state, &caller).await?;
    if asked.nats {
        if !everything {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "only superadmins read subscriptions over NATS (its subjects cannot keep a \
                 user to their own sessions)",
            )
            .field("nats"));
        }
        let subjects = subjects_of(&state, &filter)?;
        // A name refused, or taken, is said before anything is made: the consumer is named
        // after it.
        events::subscriptions::check_new(&state.pool, caller.user_id, &asked.name).await?;
        // Made before it is recorded: a subscription recorded has its consumer.
        make_consumer(
            &state,
            &consumer_name(caller.user_id, &asked.name),
            subjects,
            asked.from_start,
        )
        .await?;
    }
    let (made, seed) = events::subscriptions::create(
        &state.pool,
        NewSubscription {
            owner: caller.user_id,
            name: asked.name,
            filter,
            from_start: asked.from_start,
            nats: asked.nats,
        },
        &caller.email,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(out(&state, made, seed).await?)))
}

/// My durable subscriptions, by name, with how far each was acknowledged.
#[utoipa::path(get, path = "/v1/subscriptions", tag = "events",
    responses((status = 200, description = "mine", body = Subscriptions)))]
pub async fn list_subscriptions(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Subscriptions>, ApiError> {
    let mut subscriptions = Vec::new();
    for subscription in events::subscriptions::of_owner(&state.pool, caller.user_id).await? {
        subscriptions.push(out(&state, subscription, None).await?);
    }
    Ok(Json(Subscriptions { subscriptions }))
}

/// One durable subscription of mine. 404 naming `name` for one I do not have.
#[utoipa::path(get, path = "/v1/subscriptions/{name}", tag = "events",
    params(SubscriptionName),
    responses((status = 200, description = "it", body = SubscriptionOut),
              (status = 404, description = "I have no subscription so named", body = crate::error::ErrorBody)))]
pub async fn get_subscription(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SubscriptionName { name }): Path<SubscriptionName>,
) -> Result<Json<SubscriptionOut>, ApiError> {
    let subscription = events::subscriptions::one(&state.pool, caller.user_id, &name).await?;
    Ok(Json(out(&state, subscription, None).await?))
}

/// Delete a durable subscription of mine (`SubscriptionDeleted`): its acknowledgement is
/// forgotten, and a NATS reader's consumer and user are gone. 404 naming `name` for one I do
/// not have.
#[utoipa::path(delete, path = "/v1/subscriptions/{name}", tag = "events",
    params(SubscriptionName),
    responses((status = 204, description = "deleted"),
              (status = 404, description = "I have no subscription so named", body = crate::error::ErrorBody)))]
pub async fn delete_subscription(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SubscriptionName { name }): Path<SubscriptionName>,
) -> Result<StatusCode, ApiError> {
    let gone =
        events::subscriptions::delete(&state.pool, caller.user_id, &name, &caller.email).await?;
    db::subscriptions::forget(&state.pool, gone.created.subscription_id).await?;
    if gone.created.nats_key.is_some() {
        // Its NATS user is gone with the event; the consumer left by a bus away meanwhile is
        // made again as it was if the name is taken again, and reads nothing otherwise.
        if let Ok(nats) = state.bus("") {
            let js = async_nats::jetstream::new(nats.clone());
            if let Ok(stream) = js.get_stream(&state.topology.stream).await {
                let _ = stream
                    .delete_consumer(&consumer_name(caller.user_id, &name))
                    .await;
            }
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Read a durable subscription of mine as server-sent events (each `id` a log position), from
/// after its last acknowledgement (after its making, or the log's start, before any), then
/// live unless `follow=false`. A reconnecting consumer is served from its acknowledgement
/// again, whatever `Last-Event-ID` it sends. 404 naming `name` for one I do not have.
#[utoipa::path(get, path = "/v1/subscriptions/{name}/events", tag = "events",
    params(SubscriptionName, SubscriptionRead),
    responses((status = 200, description = "`text/event-stream` of recorded events",
        content_type = "text/event-stream", body = crate::model::StreamedEvent),
              (status = 404, description = "I have no subscription so named", body = crate::error::ErrorBody),
              (status = 503, description = "NATS is unavailable (`bus_unavailable`); try again after `Retry-After` seconds", body = crate::error::ErrorBody)))]
pub async fn read_subscription(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SubscriptionName { name }): Path<SubscriptionName>,
    RawQuery(raw): RawQuery,
) -> Result<axum::response::Response, ApiError> {
    let read: SubscriptionRead = query::parse(raw.as_deref())?;
    let subscription = events::subscriptions::one(&state.pool, caller.user_id, &name).await?;
    let acknowledged =
        db::subscriptions::acknowledged(&state.pool, subscription.created.subscription_id).await?;
    let after = resumes_after(&subscription, acknowledged);
    let mut filter = subscription.created.filter;
    let everything = events::authorization::lists_everyone(caller.role);
    if !everything {
        // A user demoted since still sees only their own sessions' events.
        filter.owner = Some(caller.user_id);
    }
    sse::serve(&state, filter, Some(after), read.follow.unwrap_or(true)).await
}

/// Acknowledge that my subscription's consumer has handled every event up to `position`:
/// its reading goes on after it from now on. An acknowledgement before the one kept changes
/// nothing. 404 naming `position` past the log's end, `name` for a subscription I do not have.
#[utoipa::path(post, path = "/v1/subscriptions/{name}/ack", tag = "events",
    params(SubscriptionName), request_body = AckIn,
    responses((status = 200, description = "the position kept", body = Acknowledged),
              (status = 404, description = "no such subscription of mine (`name`), or a position past the log's end (`position`)", body = crate::error::ErrorBody)))]
pub async fn acknowledge(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(SubscriptionName { name }): Path<SubscriptionName>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Acknowledged>, ApiError> {
    let ack = parse_body::<AckIn>(body)?;
    let subscription = events::subscriptions::one(&state.pool, caller.user_id, &name).await?;
    let position = sse::resume_after(&state.pool, "position", &ack.position).await?;
    let kept =
        db::subscriptions::acknowledge(&state.pool, subscription.created.subscription_id, position)
            .await?;
    Ok(Json(Acknowledged {
        acknowledged: kept.to_string(),
    }))
}
