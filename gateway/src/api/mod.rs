//! The REST handlers, one module per resource (the router in `lib.rs` names each by its
//! path), and what they share: body parsing that names a wrong field and the visibility
//! checks. The caller comes from [`crate::caller`]; reads go through `crate::db` (the
//! sessions view, and the ledger where no view holds what is asked); commands go through the
//! launcher and the session lifecycle. A caller sees and acts on only their own sessions (a
//! superadmin on all); anyone else's session is a 404, so names do not leak.
//!
//! - [`sessions`]: create, list, detail, rename, terminate.
//! - [`history`]: a session's scheduling history.
//! - [`idle`]: a session's idleness, and its exemption.
//! - [`images`]: the caller's images, a session committed to one, one removed.
//! - [`apps`]: a session's apps through the proxy: listed, opened, started, closed.
//! - [`logs`]: a session's output, whole or followed.
//! - [`session_files`]: files in and out of a running session's main kernel (`session cp`).
//! - [`session_exec`]: code and commands run in a running session's main kernel.
//! - [`notifications`]: the caller's notifications, read, streamed, and their webhook.
//! - [`resources`]: the resource summary, presets, who am I.
//! - [`catalogue`]: what a launch may choose from: resource groups, agents, environments.
//! - [`launches`]: the caller's recent launches, renamed and pinned.
//! - [`queue`]: every group's queue in the scheduler's order (superadmins).
//! - [`folders`]: the caller's data folders and their shares.
//! - [`files`]: a folder's files: listed, downloaded, uploaded, directories, removed.
//! - [`uploads`]: resumable uploads (tus) into a folder.
//! - [`password`]: the caller's password, for the web console.
//! - `query`: query strings parsed with the field at fault named.
//! - [`admin`]: administration, superadmins only, one module per resource: users, keys,
//!   Backend.AI keypairs, projects, groups and grants, policies, presets, idle checks, agents.

pub mod admin;
pub mod advice;
pub mod apps;
pub mod catalogue;
pub mod files;
pub mod folders;
pub mod history;
pub mod idle;
pub mod images;
pub mod launches;
pub mod logs;
pub mod notifications;
pub mod password;
pub(crate) mod query;
pub mod queue;
pub mod resources;
pub mod services;
pub mod session_exec;
pub mod session_files;
pub mod sessions;
pub mod subscriptions;
pub mod uploads;
pub mod usage;

use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use bytes::Bytes;
use events::authorization::{Action, Refusal};
use events::ledger::KeyOwner;
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use self::query::NUL_REFUSED;
use crate::db;
use crate::error::ApiError;
use crate::state::AppState;

/// A session named in a path. Any text is taken, so an id that is not a UUID is a 404 like
/// any other unknown session (see [`parse_id`]); the document says it is a UUID.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SessionId {
    /// The session's id.
    #[param(value_type = Uuid)]
    pub id: String,
}

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

/// The most of a refused upload's body read and thrown away before the refusal is sent.
const DRAINED_AT_MOST: usize = 16 * 1024 * 1024;

/// `admitted` as it is; when it is a refusal, what is left of the request's `body` is read
/// and thrown away first (up to [`DRAINED_AT_MOST`] bytes, for up to 5 s). Answered with its
/// body unread, the connection is closed with the client's bytes still arriving, and a socket
/// closed with bytes unread sends a reset, which can reach the client before it has read the
/// refusal: it then sees a broken pipe instead of the reason (seen with `berth folder upload`
/// into a read-only share).
pub(crate) async fn body_drained_if_refused<T>(
    admitted: Result<T, ApiError>,
    body: &mut axum::body::Body,
) -> Result<T, ApiError> {
    use http_body_util::BodyExt;
    if admitted.is_err() {
        let drained = async {
            let mut read = 0;
            while let Some(Ok(frame)) = body.frame().await {
                read += frame.data_ref().map_or(0, |data| data.len());
                if read > DRAINED_AT_MOST {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), drained).await;
    }
    admitted
}

/// Parses a JSON body, naming the field at fault: 413 above the size limit, 400 when it is
/// not JSON, 422 when it is not an object, a field is missing or of the wrong type, or a
/// string holds a NUL.
/// A number with no fraction (`95.0`) is read as the integer it is, as JSON Schema's
/// `integer` (and so the document) allows.
pub fn parse_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let body = body.map_err(|e| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body could not be read: {e}"),
        )
        .field("body")
    })?;
    let mut value: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_json",
            format!("the body is not JSON: {e}"),
        )
        .field("body")
    })?;
    if let Some(field) = nul_at(&value, "") {
        return Err(ApiError::invalid(field, NUL_REFUSED));
    }
    // Every body the document describes is an object; serde would read a struct from an
    // array too, field by field in order, so one is refused here.
    if !value.is_object() {
        return Err(ApiError::invalid("body", "must be a JSON object"));
    }
    integral_floats_as_integers(&mut value);
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
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
    })
}

/// Every number in `value` that has no fraction and fits a 64-bit integer, as that integer.
fn integral_floats_as_integers(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            // 2^63 and 2^64 are exact doubles; below them every integral double fits.
            if f.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&f) {
                *value = Value::from(f as u64);
            } else if f.fract() == 0.0 && (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(fields) => fields.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

pub(crate) fn parse_id(id: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(id).map_err(|_| ApiError::not_found(format!("no session {id}")))
}

/// Checks that the caller may see session `id` in the views (a 404 otherwise, whoever owns
/// it), waiting for the view when the session was only just created.
async fn check_may_see(state: &AppState, caller: &KeyOwner, id: Uuid) -> Result<(), ApiError> {
    let owner = match db::sessions::view_owner(&state.pool, id).await? {
        Some(owner) => Some(owner),
        None => {
            await_view(state, caller, id).await?;
            db::sessions::view_owner(&state.pool, id).await?
        }
    };
    match owner {
        Some(owner) => allowed(state, caller, Action::See, owner, id).await,
        None => Err(ApiError::not_found(format!("no session {id}"))),
    }
}

/// The one authorization rule's answer for `caller` doing `action` with session `id` of
/// `owner`: what they may not see is answered as a session that does not exist.
pub(crate) async fn allowed(
    state: &AppState,
    caller: &KeyOwner,
    action: Action,
    owner: Uuid,
    id: Uuid,
) -> Result<(), ApiError> {
    match crate::authorize::may(state, caller, action, owner).await? {
        Ok(()) => Ok(()),
        Err(Refusal::Hidden) => Err(ApiError::not_found(format!("no session {id}"))),
        Err(Refusal::Forbidden(why)) => Err(ApiError::new(StatusCode::FORBIDDEN, "forbidden", why)),
    }
}

/// Read-your-writes for the views: the projection lags the log by milliseconds, so a session
/// just created may not be in it yet. When the ledger (exact) has a session the caller may
/// see and the view does not, waits for the view, up to 2 s; 404 when there is no such
/// session of the caller's.
pub(crate) async fn await_view(
    state: &AppState,
    caller: &KeyOwner,
    id: Uuid,
) -> Result<(), ApiError> {
    check_in_ledger(state, caller, Action::See, id).await?;
    for _ in 0..100 {
        if db::sessions::view_owner(&state.pool, id).await?.is_some() {
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
/// created is there), checked against the caller for a change; the session's status.
async fn check_may_act(state: &AppState, caller: &KeyOwner, id: Uuid) -> Result<String, ApiError> {
    check_in_ledger(state, caller, Action::Act, id).await
}

/// The owner of session `id` from the ledger, checked against the caller for `action`; the
/// session's status.
pub(crate) async fn check_in_ledger(
    state: &AppState,
    caller: &KeyOwner,
    action: Action,
    id: Uuid,
) -> Result<String, ApiError> {
    match db::sessions::ledger_owner_status(&state.pool, id).await? {
        Some((owner, status)) => {
            allowed(state, caller, action, owner, id).await?;
            Ok(status)
        }
        None => Err(ApiError::not_found(format!("no session {id}"))),
    }
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

    /// A struct reads from a JSON array too (its fields in order); the document says every
    /// body is an object, so nothing else is taken.
    #[test]
    fn a_body_that_is_not_an_object_is_refused() {
        #[derive(Debug, serde::Deserialize)]
        struct Optional {
            #[allow(dead_code)]
            label: Option<String>,
        }
        for text in ["[null]", "[\"a\"]", "null", "3", "\"x\""] {
            let err = parse_body::<Optional>(Ok(Bytes::from(text))).unwrap_err();
            assert_eq!(
                (err.status, err.field.as_deref()),
                (StatusCode::UNPROCESSABLE_ENTITY, Some("body")),
                "{text}"
            );
        }
        assert!(parse_body::<Optional>(Ok(Bytes::from_static(b"{}"))).is_ok());
    }

    /// JSON Schema counts `95.0` as an integer, so the server reads it as one; a fraction
    /// is still refused by the field's name.
    #[test]
    fn a_number_without_a_fraction_is_an_integer() {
        #[derive(Debug, serde::Deserialize)]
        struct Counted {
            count: u32,
            ports: Vec<u16>,
            cpu: f64,
        }
        let ok: Counted = parse_body(Ok(Bytes::from_static(
            br#"{"count": 95.0, "ports": [8080.0], "cpu": 2.0}"#,
        )))
        .unwrap();
        assert_eq!((ok.count, ok.ports, ok.cpu), (95, vec![8080], 2.0));
        let err = parse_body::<Counted>(Ok(Bytes::from_static(
            br#"{"count": 9.5, "ports": [], "cpu": 1}"#,
        )))
        .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("count"));
    }
}
