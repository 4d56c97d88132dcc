//! A user's notifications: the list with the unread count (the notification service's
//! projection), marking them read (an event that service folds), and new ones live as
//! server-sent events (pushed by that service on NATS).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::Json;
use bytes::Bytes;
use events::catalogue::{Event, Metadata};
use events::notices::Notice;
use events::payloads::{NotificationWebhookSecretSet, NotificationWebhookSet, NotificationsRead};
use events::store::ExpectedVersion;
use futures::{Stream, StreamExt};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::{parse_body, query};
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{NoticePage, Unread, Webhook, WebhookSecret};
use crate::state::AppState;

/// `GET /v1/notifications`'s parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NoticeParams {
    /// Only those not read yet.
    #[param(nullable = false)]
    unread: Option<bool>,
    /// How many a page holds, newest first (default 50).
    #[param(nullable = false, minimum = 1, maximum = 500)]
    limit: Option<i64>,
}

/// My notifications, newest first, and how many I have not read.
#[utoipa::path(get, path = "/v1/notifications", tag = "notifications", params(NoticeParams),
    responses((status = 200, description = "a page of notifications", body = NoticePage)))]
pub async fn list_notifications(
    State(state): State<AppState>,
    Caller(caller): Caller,
    RawQuery(raw): RawQuery,
) -> Result<Json<NoticePage>, ApiError> {
    let p: NoticeParams = query::parse(raw.as_deref())?;
    let page = db::notifications::notices(
        &state.pool,
        caller.user_id,
        p.unread.unwrap_or(false),
        p.limit.unwrap_or(50),
    )
    .await?;
    Ok(Json(page))
}

/// Which notifications to mark read.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MarkRead {
    /// These notifications (mine; others' are ignored).
    #[serde(default)]
    #[schema(max_items = 500)]
    ids: Vec<Uuid>,
    /// Every notification I have now.
    #[serde(default)]
    all: bool,
}

/// How long marking read waits for the notification service to have folded it.
const READ_SETTLES: Duration = Duration::from_secs(2);

/// Mark notifications read; answers with what is left unread once the mark is applied.
#[utoipa::path(post, path = "/v1/notifications/read", tag = "notifications",
    request_body = MarkRead,
    responses((status = 200, description = "marked read", body = Unread)))]
pub async fn mark_read(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Unread>, ApiError> {
    let MarkRead { ids, all } = parse_body(body)?;
    if ids.len() > 500 {
        return Err(ApiError::invalid("ids", "at most 500 at once"));
    }
    if ids.is_empty() && !all {
        return Ok(Json(Unread {
            unread: db::notifications::unread_count(&state.pool, caller.user_id).await?,
        }));
    }
    let event = Event::NotificationsRead(NotificationsRead {
        user_id: caller.user_id,
        notice_ids: ids.clone(),
        all,
    });
    let asked_at = chrono::Utc::now();
    record_for(&state, caller.user_id, event).await?;
    // Read your own writes: wait until the service has folded the mark.
    let deadline = tokio::time::Instant::now() + READ_SETTLES;
    loop {
        let pending =
            db::notifications::unread(&state.pool, caller.user_id, &ids, all.then_some(asked_at))
                .await?;
        if pending == 0 || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(Json(Unread {
        unread: db::notifications::unread_count(&state.pool, caller.user_id).await?,
    }))
}

/// My new notifications, live, as server-sent events named by their kind
/// (`session_started`, ...), each with the notification's id and its JSON.
#[utoipa::path(get, path = "/v1/notifications/stream", tag = "notifications",
    responses((status = 200, description = "`text/event-stream` of new notifications",
        content_type = "text/event-stream", body = crate::model::StreamedEvent),
              (status = 503, description = "NATS is unavailable (`bus_unavailable`); try again after `Retry-After` seconds", body = crate::error::ErrorBody)))]
pub async fn notification_stream(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let nats = state
        .bus("the notification stream cannot be followed")?
        .clone();
    let subscriber = nats
        .subscribe(state.agent_bus.notices(caller.user_id))
        .await
        .map_err(ApiError::internal)?;
    // Once the server has the subscription, the response starts: nothing pushed after the
    // client has the response's headers is missed.
    nats.flush().await.map_err(ApiError::internal)?;
    let stream = subscriber.filter_map(|message| async move {
        let notice: Notice = serde_json::from_slice(&message.payload).ok()?;
        let event = SseEvent::default()
            .event(notice.kind.as_str())
            .id(notice.notice_id.to_string())
            .data(String::from_utf8_lossy(&message.payload));
        Some(Ok(event))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Where my notifications are also delivered.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookRequest {
    /// An `http://` or `https://` URL (POSTed each new notification as JSON, with its id as
    /// `Idempotency-Key`, signed as Standard Webhooks say, retried with backoff until it
    /// answers 2xx; redirects are not followed), or null to stop. Loopback, private,
    /// link-local and other special addresses are refused unless the operator admits them
    /// (`BERTH_WEBHOOK_ALLOW`).
    #[schema(
        max_length = 2048,
        pattern = r"^https?://[^/?#\s\u0000-\u001f\u007f-\u009f]+[^\s\u0000-\u001f\u007f-\u009f]*$"
    )]
    url: Option<String>,
}

/// Set (or, with null, remove) the webhook my notifications are delivered to. The answer
/// carries the secret deliveries are signed with (`whsec_...`, made with my first webhook and
/// kept when I change its URL; `POST /v1/notifications/webhook/secret` replaces it).
#[utoipa::path(put, path = "/v1/notifications/webhook", tag = "notifications",
    request_body = WebhookRequest,
    responses((status = 200, description = "set", body = Webhook)))]
pub async fn set_webhook(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Webhook>, ApiError> {
    let WebhookRequest { url } = parse_body(body)?;
    if let Some(url) = &url {
        events::notices::check_webhook_url(url)
            .map_err(|e| ApiError::invalid("url", e.to_string()))?;
        // An address written in the URL is refused at once; a name is checked after each
        // lookup, when the notification service delivers.
        if let Some(ip) = literal_address(url) {
            state
                .webhook_policy
                .check(ip)
                .map_err(|e| ApiError::invalid("url", e.to_string()))?;
        }
    }
    let user = caller.user_id;
    let set = Event::NotificationWebhookSet(NotificationWebhookSet {
        user_id: user,
        url: url.clone(),
    });
    if url.is_none() {
        record_for(&state, user, set).await?;
        return Ok(Json(Webhook {
            delivering: false,
            secret: None,
        }));
    }
    let secret =
        db::notifications::record_with_secret(&state.pool, user, rand::random(), false, |made| {
            let mut events = vec![set];
            if made {
                events.push(Event::NotificationWebhookSecretSet(
                    NotificationWebhookSecretSet {
                        user_id: user,
                        rotated: false,
                    },
                ));
            }
            events
        })
        .await?;
    Ok(Json(Webhook {
        delivering: true,
        secret: Some(shown_secret(&secret)),
    }))
}

/// Replace the secret my webhook deliveries are signed with: a new one signs every delivery
/// sent from now on (retries of earlier notifications too), and the old one none.
#[utoipa::path(post, path = "/v1/notifications/webhook/secret", tag = "notifications",
    responses((status = 200, description = "the new secret", body = WebhookSecret)))]
pub async fn rotate_webhook_secret(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<WebhookSecret>, ApiError> {
    let user = caller.user_id;
    let secret =
        db::notifications::record_with_secret(&state.pool, user, rand::random(), true, |_| {
            vec![Event::NotificationWebhookSecretSet(
                NotificationWebhookSecretSet {
                    user_id: user,
                    rotated: true,
                },
            )]
        })
        .await?;
    Ok(Json(WebhookSecret {
        secret: shown_secret(&secret),
    }))
}

/// A secret as Standard Webhooks show one: `whsec_` and its bytes in base64.
fn shown_secret(secret: &[u8]) -> String {
    use base64::Engine;
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(secret)
    )
}

/// The address `url`'s host is written as, if it is one (`http://127.0.0.1/`,
/// `http://[::1]/`, and the forms a URL parser reads as one, such as `http://2130706433/`).
fn literal_address(url: &str) -> Option<std::net::IpAddr> {
    match url::Url::parse(url).ok()?.host()? {
        url::Host::Ipv4(v4) => Some(v4.into()),
        url::Host::Ipv6(v6) => Some(v6.into()),
        url::Host::Domain(_) => None,
    }
}

/// Records `event` of `user`'s notifications (their `notice-<user>` stream), as done by them.
async fn record_for(state: &AppState, user: Uuid, event: Event) -> Result<(), ApiError> {
    let stream = events::catalogue::stream_id("notice", user);
    let metadata: Metadata = events::trace::metadata(&user.to_string(), None);
    events::ledger::record_now(
        &state.pool,
        &stream,
        ExpectedVersion::Any,
        &[event],
        &metadata,
    )
    .await?;
    Ok(())
}
