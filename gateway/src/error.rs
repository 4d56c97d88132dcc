//! Errors as the API answers them: a status and `{"error": {"code", "field", "message"}}`.
//! Bad input is a 4xx naming the field; only a failure of berth itself is a 5xx. Every 503
//! says when to try again (`Retry-After`), and one caused by an outage names what is away:
//! `database_unavailable` (PostgreSQL), `bus_unavailable` (NATS), `busy` (too many creates
//! waiting). A request answered so wrote nothing.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use events::ledger::LedgerError;
use events::lifecycle::{CommandError, TransitionError};
use launcher::access::AccessError;
use launcher::domain::FieldError;
use launcher::launch::LaunchError;

/// What a 503 asks a client to wait before trying again, in seconds.
pub const RETRY_AFTER_SECS: &str = "2";

/// The code of a 503 for PostgreSQL away.
const DATABASE_UNAVAILABLE: &str = "database_unavailable";

/// Marks a response answered `database_unavailable`, so the layer that refuses writes while
/// PostgreSQL is down (`crate::ready`) learns of an outage a handler met between two checks.
#[derive(Clone, Copy, Debug)]
pub struct DatabaseUnavailable;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub field: Option<String>,
    pub message: String,
    /// Seconds a 429 asks the client to wait (`Retry-After`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            field: None,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 429 `too_many_attempts`: `what` was tried too often from here; try again after
    /// `retry_after` seconds (`Retry-After`).
    pub fn too_many(what: &str, retry_after: u64) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_attempts",
            format!("{what} was tried too often; try again in {retry_after} s"),
        );
        e.retry_after = Some(retry_after);
        e
    }

    pub fn field(mut self, field: impl Into<String>) -> ApiError {
        self.field = Some(field.into());
        self
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", message).field(field)
    }

    pub fn not_found(what: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    /// PostgreSQL is away (restarting, unreachable): nothing was written.
    pub fn database_unavailable() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            DATABASE_UNAVAILABLE,
            "PostgreSQL is unavailable; nothing was written, try again",
        )
    }

    /// NATS is away (or not configured): what needs the bus cannot be done now.
    pub fn bus_unavailable(what: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "bus_unavailable",
            format!("NATS is unavailable, so {what}; try again"),
        )
    }

    pub fn internal(e: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %e, "request failed inside berth");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "berth could not complete the request; try again",
        )
    }
}

/// Every error's body: `{"error": {"code", "field", "message"}}`.
#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// What went wrong, for programs: `invalid`, `not_found`, `forbidden`, `conflict`,
    /// `name_taken`, `unauthenticated`, `bad_json`, `too_large`, `unavailable`,
    /// `database_unavailable`, `bus_unavailable`, `busy`, ...
    pub code: String,
    /// The field or parameter at fault (`resources.cpu`, `mounts[0]`, `limit`), when one is.
    pub field: Option<String>,
    /// What went wrong, for people.
    pub message: String,
}

/// berth's answer to a path it does not serve (the router's fallback, and Backend.AI's for a
/// path outside its own).
pub(crate) async fn no_such_route() -> ApiError {
    ApiError::not_found("no such route; see /openapi.json")
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                field: self.field,
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        if self.code == DATABASE_UNAVAILABLE {
            response.extensions_mut().insert(DatabaseUnavailable);
        }
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        response
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        ApiError::invalid(e.field, e.message)
    }
}

impl From<LaunchError> for ApiError {
    fn from(e: LaunchError) -> Self {
        match e {
            LaunchError::Invalid(f) => f.into(),
            LaunchError::Forbidden(f) => {
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", f.message).field(f.field)
            }
            LaunchError::NotFound(f) => ApiError::not_found(f.message).field(f.field),
            LaunchError::Conflict(f) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", f.message).field(f.field)
            }
            LaunchError::NameTaken(f) => {
                ApiError::new(StatusCode::CONFLICT, "name_taken", f.message).field(f.field)
            }
            LaunchError::Ledger(e) => e.into(),
        }
    }
}

impl From<AccessError> for ApiError {
    fn from(e: AccessError) -> Self {
        match e {
            AccessError::Invalid { field, message } => ApiError::invalid(field, message),
            AccessError::Forbidden { field, message } => {
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", message).field(field)
            }
            e @ AccessError::NoSuchUser(_) => ApiError::not_found(e.to_string()).field("email"),
            e @ AccessError::Unknown { what, .. } => {
                let field = what.replace(' ', "_");
                ApiError::not_found(e.to_string()).field(field)
            }
            AccessError::Ambiguous { field, message } => {
                ApiError::new(StatusCode::CONFLICT, "ambiguous", message).field(field)
            }
            AccessError::Ledger(e) => e.into(),
        }
    }
}

impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::NameTaken(name) => ApiError::new(
                StatusCode::CONFLICT,
                "name_taken",
                format!("you already have a live session named `{name}`"),
            )
            .field("name"),
            LedgerError::Exists {
                what: "image",
                name,
            } => ApiError::new(
                StatusCode::CONFLICT,
                "name_taken",
                format!("an image `{name}` exists or is being committed; remove it first"),
            )
            .field("name"),
            e @ LedgerError::LimitReached { .. } => {
                ApiError::new(StatusCode::FORBIDDEN, "forbidden", e.to_string()).field("name")
            }
            e if e.is_conflict() => ApiError::new(
                StatusCode::CONFLICT,
                "conflict",
                "the session changed meanwhile; try again",
            ),
            e if e.is_unavailable() => ApiError::database_unavailable(),
            other => ApiError::internal(other),
        }
    }
}

impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> Self {
        match e {
            CommandError::NotFound(id) => ApiError::not_found(format!("no session {id}")),
            CommandError::Refused(t @ TransitionError::Ended(_)) => {
                ApiError::new(StatusCode::CONFLICT, "ended", t.to_string()).field("status")
            }
            CommandError::Refused(t) => {
                ApiError::new(StatusCode::CONFLICT, "refused", t.to_string()).field("status")
            }
            CommandError::Ledger(e) => e.into(),
        }
    }
}

impl From<tokio_postgres::Error> for ApiError {
    fn from(e: tokio_postgres::Error) -> Self {
        if events::fault::postgres_unavailable(&e) {
            return ApiError::database_unavailable();
        }
        ApiError::internal(events::fault::described(&e))
    }
}

impl From<deadpool_postgres::PoolError> for ApiError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        if events::fault::pool_unavailable(&e) {
            return ApiError::database_unavailable();
        }
        ApiError::internal(e)
    }
}

impl From<events::StoreError> for ApiError {
    fn from(e: events::StoreError) -> Self {
        if e.is_unavailable() {
            return ApiError::database_unavailable();
        }
        ApiError::internal(e)
    }
}
