//! The REST handlers, one module per resource, and what they share: the [`Caller`]
//! extractor, body and query parsing, and the visibility checks. Reads come from the
//! `proj_sessions` projection through [`crate::db`]; commands go through the launcher and the
//! session lifecycle. A caller sees and acts on only their own sessions (a superadmin on all);
//! anyone else's session is a 404, so names do not leak.
//!
//! - [`sessions`]: create, list, detail, rename, terminate.
//! - [`history`]: a session's scheduling history.
//! - [`logs`]: a session's output, whole or followed.
//! - [`resources`]: the resource summary, presets, who am I.
//! - [`folders`]: the caller's data folders.

mod folders;
mod history;
mod logs;
mod resources;
mod sessions;

pub use folders::{create_folder, list_folders};
pub use history::session_history;
pub use logs::session_logs;
pub use resources::{presets, resource_summary, whoami};
pub use sessions::{
    create_session, list_sessions, rename_session, session_detail, terminate_session, CACHE_HEADER,
};

use std::collections::HashMap;

use axum::extract::rejection::BytesRejection;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use bytes::Bytes;
use events::ledger::{self, KeyOwner};
use events::payloads::{Role, SessionStatus};
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::db;
use crate::error::ApiError;
use crate::AppState;

/// The caller, from the `X-API-Key` header (or `Authorization: Bearer <key>`).
pub struct Caller(pub KeyOwner);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let key = header("x-api-key")
            .or_else(|| header("authorization").and_then(|a| a.strip_prefix("Bearer ")))
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthenticated",
                    "send your API key in the X-API-Key header",
                )
                .field("X-API-Key")
            })?;
        state.authenticate(key).await.map(Caller)
    }
}

/// PostgreSQL text cannot hold a NUL character, so no value may carry one.
const NUL_REFUSED: &str = "may not contain a NUL character";

/// The path (`mounts[0]`, `environment.A`) of the first string in `value`, key or value,
/// that holds a NUL character.
fn nul_at(value: &Value, path: &str) -> Option<String> {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::String(s) if s.contains('\0') => Some(if path.is_empty() {
            "body".into()
        } else {
            path.to_owned()
        }),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
            nul_at(
                v,
                &format!("{}[{i}]", if path.is_empty() { "body" } else { path }),
            )
        }),
        Value::Object(fields) => fields.iter().find_map(|(k, v)| {
            if k.contains('\0') {
                Some(join(k))
            } else {
                nul_at(v, &join(k))
            }
        }),
        _ => None,
    }
}

/// Parses a JSON body, naming the field at fault: 413 above the size limit, 400 when it is
/// not JSON, 422 when a field is missing or of the wrong type.
pub fn parse_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|e| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body could not be read: {e}"),
        )
        .field("body")
    })?;
    let mut deserializer = serde_json::Deserializer::from_slice(&body);
    let parsed = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_json",
                format!("the body is not JSON: {inner}"),
            )
            .field("body");
        }
        let field = if path == "." {
            // A missing field is reported at the parent; name it from the message.
            inner
                .to_string()
                .split('`')
                .nth(1)
                .map(str::to_owned)
                .unwrap_or_else(|| "body".into())
        } else {
            path
        };
        ApiError::invalid(field, inner.to_string())
    })?;
    // Only a body that holds an escaped NUL (`\u0000`) needs the second look.
    if body.windows(6).any(|w| w.eq_ignore_ascii_case(b"\\u0000")) {
        let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if let Some(field) = nul_at(&value, "") {
            return Err(ApiError::invalid(field, NUL_REFUSED));
        }
    }
    Ok(parsed)
}

pub(crate) fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| ApiError::not_found(format!("no session {id}")))
}

/// Query parameters, each known by name; an unknown one is refused by name.
pub(crate) struct Params(HashMap<String, String>);

impl Params {
    fn new(query: HashMap<String, String>, known: &[&str]) -> Result<Params, ApiError> {
        if let Some(bad) = query.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(ApiError::invalid(
                bad.clone(),
                format!("unknown parameter; known: {}", known.join(", ")),
            ));
        }
        // `?status=` says nothing: refused, so a client learns it sent an empty value.
        if let Some((name, _)) = query.iter().find(|(_, v)| v.is_empty()) {
            return Err(ApiError::invalid(
                name.clone(),
                "is empty: give a value or leave the parameter out",
            ));
        }
        if let Some((name, _)) = query.iter().find(|(_, v)| v.contains('\0')) {
            return Err(ApiError::invalid(name.clone(), NUL_REFUSED));
        }
        Ok(Params(query))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The integer `name`, `default` when absent, refused outside `range`.
    fn number(
        &self,
        name: &str,
        default: i64,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<i64, ApiError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse::<i64>()
                .ok()
                .filter(|n| range.contains(n))
                .ok_or_else(|| {
                    let (min, max) = (range.start(), range.end());
                    ApiError::invalid(name, format!("must be a number from {min} to {max}"))
                }),
        }
    }

    fn one_of<'a>(&self, name: &str, allowed: &[&'a str]) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => allowed
                .iter()
                .find(|a| a.eq_ignore_ascii_case(v))
                .copied()
                .map(Some)
                .ok_or_else(|| {
                    ApiError::invalid(name, format!("must be one of {}", allowed.join(", ")))
                }),
        }
    }
}

/// Checks that the caller may see session `id` in the views (a 404 otherwise, whoever owns
/// it), waiting for the view when the session was only just created.
async fn check_may_see(state: &AppState, caller: &KeyOwner, id: Uuid) -> Result<(), ApiError> {
    let owner = match db::view_owner(&state.pool, id).await? {
        Some(owner) => Some(owner),
        None => {
            await_view(state, caller, id).await?;
            db::view_owner(&state.pool, id).await?
        }
    };
    match owner {
        Some(owner) if caller.role == Role::Superadmin || owner == caller.user_id => Ok(()),
        _ => Err(ApiError::not_found(format!("no session {id}"))),
    }
}

/// Read-your-writes for the views: the projection lags the log by milliseconds, so a session
/// just created may not be in it yet. When the ledger (exact) has a session the caller may
/// see and the view does not, waits for the view, up to 2 s; 404 when there is no such
/// session of the caller's.
async fn await_view(state: &AppState, caller: &KeyOwner, id: Uuid) -> Result<(), ApiError> {
    check_may_act(state, caller, id).await?;
    for _ in 0..100 {
        if db::view_owner(&state.pool, id).await?.is_some() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "view_lagging",
        format!("session {id} is recorded but its view is not ready yet; try again"),
    ))
}

/// The owner of a session from the ledger (exact, unlike the projection, so a session just
/// created is there), checked against the caller; the session's status.
async fn check_may_act(state: &AppState, caller: &KeyOwner, id: Uuid) -> Result<String, ApiError> {
    match db::ledger_owner_status(&state.pool, id).await? {
        Some((owner, status)) if caller.role == Role::Superadmin || owner == caller.user_id => {
            Ok(status)
        }
        _ => Err(ApiError::not_found(format!("no session {id}"))),
    }
}

/// A session status named in a query parameter (any case).
fn status_param(field: &str, value: &str) -> Result<SessionStatus, ApiError> {
    SessionStatus::parse(&value.to_ascii_uppercase())
        .ok_or_else(|| ApiError::invalid(field, format!("`{value}` is not a session status")))
}

/// Looks a key up in the ledger.
pub async fn lookup_key(state: &AppState, key: &str) -> Result<Option<KeyOwner>, ApiError> {
    let client = state.pool.get().await?;
    Ok(ledger::key_owner(&client, key).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Body {
        #[allow(dead_code)]
        name: String,
        #[allow(dead_code)]
        #[serde(default)]
        mounts: Vec<String>,
    }

    fn parse(text: &str) -> Result<Body, ApiError> {
        parse_body(Ok(Bytes::from(text.to_owned())))
    }

    /// PostgreSQL cannot store a NUL: it is refused as bad input naming its field, never
    /// sent on to fail as a server error.
    #[test]
    fn a_nul_anywhere_in_a_body_is_refused_by_its_field() {
        assert!(parse(r#"{"name": "ok1"}"#).is_ok());
        assert!(
            parse(r#"{"name": "a\\u0000b"}"#).is_ok(),
            "an escaped backslash is text"
        );
        let err = parse(r#"{"name": "a\u0000b"}"#).unwrap_err();
        assert_eq!(
            (err.status, err.field.as_deref()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("name"))
        );
        let err = parse(r#"{"name": "x", "mounts": ["ok", "b\u0000"]}"#).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("mounts[1]"));
    }

    #[test]
    fn query_values_may_be_neither_empty_nor_hold_a_nul() {
        let query = |k: &str, v: &str| HashMap::from([(k.to_owned(), v.to_owned())]);
        let known = &["owner", "limit"];
        assert!(Params::new(query("owner", "a@b.c"), known).is_ok());
        for bad in ["", "a\0b"] {
            let err = Params::new(query("owner", bad), known)
                .err()
                .expect("refused");
            assert_eq!(err.field.as_deref(), Some("owner"));
        }
        let p = Params::new(query("limit", "0"), known).unwrap();
        assert!(p.number("limit", 50, 1..=500).is_err());
        let p = Params::new(query("limit", "500"), known).unwrap();
        assert_eq!(p.number("limit", 50, 1..=500).unwrap(), 500);
    }
}
