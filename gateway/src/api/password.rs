//! The caller's password, with which they sign in to the web console (an admin may also set
//! it: `berth admin set-password`).

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use bytes::Bytes;

use super::parse_body;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// `PUT /v1/whoami/password`'s body.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordChange {
    /// My password now: required when I have one (a 403 naming `current` when it is missing
    /// or wrong), not looked at when I have none.
    #[schema(pattern = r"^[^\u0000]*$")]
    current: Option<String>,
    /// The new password: 8 to 256 characters.
    #[schema(min_length = 8, max_length = 256, pattern = r"^[^\u0000]*$")]
    new: String,
}

/// Set or change my password (for signing in to the web console with my email).
#[utoipa::path(put, path = "/v1/whoami/password", tag = "resources",
    request_body = PasswordChange,
    responses((status = 204, description = "the password is set"),
              (status = 403, description = "`current` is missing or is not my password",
                  body = crate::error::ErrorBody)))]
pub async fn set_my_password(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let PasswordChange { current, new } = parse_body(body)?;
    launcher::credentials::change_password(&state.pool, caller.user_id, current.as_deref(), &new)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
