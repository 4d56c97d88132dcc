//! Errors as Backend.AI answers them: `application/problem+json` with `type`
//! (`https://api.backend.ai/probs/<slug>`), `title`, `msg` and `data` (the field at fault, as
//! `{field: message}`). Backend.AI's client prints `title` and then `msg` or `data`; an error
//! of any other shape crashes it, so every answer of the compatibility router that is not a
//! success is one of these, whatever went wrong.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::error::ApiError;

/// Where Backend.AI's problem types live; a type is this and a slug.
pub const PROBLEM_BASE: &str = "https://api.backend.ai/probs/";

/// The header that repeats a problem's slug and message.
pub const PROBLEM_HEADER: &str = "x-backendai-problem";

/// One error of the compatibility router.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub status: StatusCode,
    /// The problem's slug: `auth-failed`, `invalid-api-params`, `object-not-found`, ...
    pub slug: &'static str,
    pub title: String,
    pub msg: Option<String>,
    /// `{field: message}` when a field is at fault; other details otherwise.
    pub data: Option<Value>,
    /// Seconds a 429 asks the client to wait (`Retry-After`).
    pub retry_after: Option<u64>,
}

impl Problem {
    pub fn new(status: StatusCode, slug: &'static str, title: impl Into<String>) -> Problem {
        Problem {
            status,
            slug,
            title: title.into(),
            msg: None,
            data: None,
            retry_after: None,
        }
    }

    /// 429 `too-many-requests`: failed too often; try again after `retry_after` seconds.
    pub fn too_many(retry_after: u64) -> Problem {
        let mut p = Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too-many-requests",
            "Too many failed authentication attempts.",
        )
        .msg(format!("try again in {retry_after} s"));
        p.retry_after = Some(retry_after);
        p
    }

    pub fn msg(mut self, msg: impl Into<String>) -> Problem {
        self.msg = Some(msg.into());
        self
    }

    pub fn data(mut self, data: Value) -> Problem {
        self.data = Some(data);
        self
    }

    /// `field` is at fault, for `message`: `data` becomes `{field: message}`.
    pub fn field(self, field: &str, message: &str) -> Problem {
        self.data(json!({ field: message }))
    }

    /// 400 `invalid-api-params`: `field` is missing or wrong.
    pub fn invalid(field: &str, message: impl Into<String>) -> Problem {
        let message = message.into();
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-api-params",
            "Missing or invalid API parameters.",
        )
        .msg(format!("{field}: {message}"))
        .field(field, &message)
    }

    /// 401 `auth-failed`.
    pub fn auth_failed(msg: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "auth-failed",
            "Credential/signature mismatch.",
        )
        .msg(msg)
    }

    /// 400 `invalid-auth-params`: the Authorization or Date header cannot be read or is out
    /// of range.
    pub fn invalid_auth(header: &str, msg: impl Into<String>) -> Problem {
        let msg = msg.into();
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-auth-params",
            "Missing or invalid authorization parameters.",
        )
        .msg(msg.clone())
        .field(header, &msg)
    }

    /// 404 `object-not-found`, titled as Backend.AI titles a missing session.
    pub fn no_such_session(reference: &str) -> Problem {
        Problem::new(
            StatusCode::NOT_FOUND,
            "object-not-found",
            "No such session.",
        )
        .msg(format!("no session `{reference}` of yours"))
    }

    /// 403 `insufficient-privilege`.
    pub fn forbidden(field: &str, msg: impl Into<String>) -> Problem {
        let msg = msg.into();
        Problem::new(
            StatusCode::FORBIDDEN,
            "insufficient-privilege",
            "Insufficient privilege.",
        )
        .msg(msg.clone())
        .field(field, &msg)
    }

    /// 501 `not-implemented`: a call of Backend.AI's API that berth does not take.
    pub fn not_implemented(what: impl Into<String>) -> Problem {
        Problem::new(
            StatusCode::NOT_IMPLEMENTED,
            "not-implemented",
            "This API is not implemented.",
        )
        .msg(format!(
            "berth does not implement {} in its Backend.AI-compatible API; see docs/api.md",
            what.into()
        ))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        // Also in a header: a client that reads no body (a refused WebSocket handshake, which
        // Backend.AI's client reports with the response's headers) still shows what is wrong.
        let summary: String = format!(
            "{}: {}",
            self.slug,
            self.msg.as_deref().unwrap_or(&self.title)
        )
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(512)
        .collect();
        let mut body = json!({
            "type": format!("{PROBLEM_BASE}{}", self.slug),
            "title": self.title,
        });
        if let Some(msg) = self.msg {
            body["msg"] = Value::String(msg);
        }
        if let Some(data) = self.data {
            body["data"] = data;
        }
        let mut response = (self.status, body.to_string()).into_response();
        if let Ok(value) = HeaderValue::from_str(&summary) {
            response.headers_mut().insert(PROBLEM_HEADER, value);
        }
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(crate::error::RETRY_AFTER_SECS),
            );
        }
        response
    }
}

/// Every error of berth's own API, in Backend.AI's words: the same status (a 422 is 400, as
/// Backend.AI answers bad parameters), the field as `data`.
impl From<ApiError> for Problem {
    fn from(e: ApiError) -> Problem {
        let field = e.field.clone();
        let (status, slug, title) = match e.status {
            StatusCode::UNAUTHORIZED => (e.status, "auth-failed", "Authentication failed."),
            StatusCode::FORBIDDEN => (
                e.status,
                "insufficient-privilege",
                "Insufficient privilege.",
            ),
            StatusCode::NOT_FOUND => (e.status, "object-not-found", "No such object."),
            StatusCode::CONFLICT => (e.status, "generic-bad-request", "Bad request."),
            StatusCode::PAYLOAD_TOO_LARGE => (e.status, "invalid-api-params", "Request too large."),
            s if s == StatusCode::UNPROCESSABLE_ENTITY || s == StatusCode::BAD_REQUEST => (
                StatusCode::BAD_REQUEST,
                "invalid-api-params",
                "Missing or invalid API parameters.",
            ),
            s if s.is_client_error() => (s, "generic-bad-request", "Bad request."),
            s => (s, "service-unavailable", "Service unavailable."),
        };
        let problem = Problem::new(status, slug, title).msg(match &field {
            Some(f) => format!("{f}: {}", e.message),
            None => e.message.clone(),
        });
        match field {
            Some(f) => problem.field(&f, &e.message),
            None => problem,
        }
    }
}

impl From<deadpool_postgres::PoolError> for Problem {
    fn from(e: deadpool_postgres::PoolError) -> Problem {
        ApiError::from(e).into()
    }
}

impl From<events::ledger::LedgerError> for Problem {
    fn from(e: events::ledger::LedgerError) -> Problem {
        ApiError::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(problem: Problem) -> (StatusCode, String, Value) {
        let response = problem.into_response();
        let status = response.status();
        let kind = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, kind, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_problem_has_the_shape_backend_ai_s_client_prints() {
        let (status, kind, value) = body(Problem::invalid("image", "is required")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(kind, "application/problem+json");
        let response = Problem::not_implemented("GET /stream/session/x/execute").into_response();
        let header = response.headers()[PROBLEM_HEADER].to_str().unwrap();
        assert!(
            header.starts_with("not-implemented: berth does not implement GET"),
            "{header}"
        );
        assert_eq!(
            value,
            json!({
                "type": "https://api.backend.ai/probs/invalid-api-params",
                "title": "Missing or invalid API parameters.",
                "msg": "image: is required",
                "data": {"image": "is required"},
            })
        );
    }

    #[tokio::test]
    async fn berth_s_own_errors_keep_their_status_and_field() {
        let api = ApiError::invalid("resources.cpu", "must be above 0");
        let (status, _, value) = body(api.into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(value["data"], json!({"resources.cpu": "must be above 0"}));
        let (status, _, value) = body(ApiError::not_found("no session x").into()).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(value["title"].is_string() && value.get("error").is_none());
        let (status, _, value) = body(ApiError::database_unavailable().into()).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            value["type"],
            "https://api.backend.ai/probs/service-unavailable"
        );
    }
}
