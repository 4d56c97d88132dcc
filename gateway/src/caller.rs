//! Who is calling, every way the gateway identifies a caller of its API: an API key in the
//! `X-API-Key` header (or `Authorization: Bearer <key>`), looked up in the ledger and kept a
//! little while ([`authenticate`]; a lookup of a key not kept counts against its address's
//! budget, `crate::throttle`), or the web console's sign-in cookie on a same-origin
//! request ([`console_caller`]). [`Caller`] is the extractor the REST handlers and the event
//! stream take; the console's pages read the same cookie (`crate::console::auth::Viewer`).
//! Backend.AI's signed requests are identified by `crate::backendai::auth::BackendAiCaller`,
//! whose refusals are Backend.AI's own problem JSON.

use std::net::IpAddr;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use events::ledger::{self, KeyOwner};

use crate::error::ApiError;
use crate::state::AppState;

/// The console's cookie (`__Host-berth_console` when the gateway serves TLS:
/// [`crate::headers::CookiePolicy`]).
pub const COOKIE: &str = "berth_console";

/// The caller, from the `X-API-Key` header (or `Authorization: Bearer <key>`), or from the
/// console's cookie on a same-origin request ([`console_caller`]).
pub struct Caller(pub KeyOwner);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let key = header("x-api-key")
            .or_else(|| header("authorization").and_then(|a| a.strip_prefix("Bearer ")));
        if key.is_none() {
            // The console's own pages call the API with its cookie (same origin only).
            if let Some(owner) = console_caller(state, &parts.headers).await? {
                return Ok(Caller(owner));
            }
        }
        let key = key.ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "send your API key in the X-API-Key header",
            )
            .field("X-API-Key")
        })?;
        let from = crate::throttle::source(&parts.extensions);
        authenticate(state, key, from).await.map(Caller)
    }
}

/// Whether NATS is connected now, so the key cache hears of every account event.
pub(crate) fn bus_connected(state: &AppState) -> bool {
    state
        .nats
        .as_ref()
        .is_some_and(|c| c.connection_state() == async_nats::connection::State::Connected)
}

/// The owner of API key `key`: from the state's cache while fresh, else from the ledger
/// (and then kept); 401 `unauthenticated` for a key nobody owns (or revoked, expired, its
/// owner disabled), 429 when `from` caused too many lookups lately.
async fn authenticate(state: &AppState, key: &str, from: IpAddr) -> Result<KeyOwner, ApiError> {
    let digest = events::ledger::key_digest(key);
    if let Some(owner) = state.keys.fresh(&digest, bus_connected(state)) {
        return Ok(owner);
    }
    state
        .throttle
        .key_lookup(from)
        .map_err(|t| ApiError::too_many("an API key", t.retry_after_secs()).field("X-API-Key"))?;
    let client = state.pool.get().await?;
    let (owner, expires) = ledger::live_key(&client, key).await?.ok_or_else(|| {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "unknown, revoked or expired API key, or its holder is disabled",
        )
        .field("X-API-Key")
    })?;
    state.keys.keep(digest, owner.clone(), expires);
    Ok(owner)
}

/// Looks a key up in the ledger.
pub async fn lookup_key(state: &AppState, key: &str) -> Result<Option<KeyOwner>, ApiError> {
    let client = state.pool.get().await?;
    Ok(ledger::key_owner(&client, key).await?)
}

/// Whether the browser says a page of the same origin made the request
/// (`Sec-Fetch-Site: same-origin`, which no script can set).
pub(crate) fn fetched_from_same_origin(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"same-origin")
}

/// The console token a request's cookies carry, under the name the gateway hands it out by
/// (with TLS, only the `__Host-` one: a plain cookie any page of the host could have set is
/// not read).
pub fn token_in<'h>(state: &AppState, headers: &'h HeaderMap) -> Option<&'h str> {
    state.cookies().read(headers, COOKIE)
}

/// The caller a same-origin request's console cookie speaks for, for the JSON API: `None`
/// without the cookie, and without `Sec-Fetch-Site: same-origin` (a page of another origin,
/// an app on a proxy port among them, never borrows the cookie).
pub async fn console_caller(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<KeyOwner>, ApiError> {
    match token_in(state, headers) {
        Some(token) if fetched_from_same_origin(headers) => console_owner(state, token).await,
        _ => Ok(None),
    }
}

/// The user a console token was handed to, while the sign-in lasts (the ledger's
/// `console_sign_ins`; a sign-out or its twelve hours end it).
pub(crate) async fn console_owner(
    state: &AppState,
    token: &str,
) -> Result<Option<KeyOwner>, ApiError> {
    let client = state.pool.get().await?;
    Ok(events::ledger::console_owner(&client, token).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn the_token_is_read_from_among_other_cookies() {
        let policy = crate::headers::CookiePolicy::default();
        let h = headers(&[("cookie", "a=1; berth_console=abc; b=2")]);
        assert_eq!(policy.read(&h, COOKIE), Some("abc"));
        let empty = headers(&[("cookie", "berth_console=")]);
        assert_eq!(policy.read(&empty, COOKIE), None);
        let other = headers(&[("cookie", "xberth_console=1")]);
        assert_eq!(policy.read(&other, COOKIE), None);
    }
}
