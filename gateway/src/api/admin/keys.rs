//! API keys: the list (never the keys), a key issued to a user (for ever, or until an
//! expiry), a key revoked by its prefix.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use events::credentials::key_expiry;
use launcher::access::{self, AccessError};
use launcher::domain::FieldError;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{checked_email, invalid, superadmin_only};
use crate::api::parse_body;
use crate::caller::Caller;
use crate::db;
use crate::error::ApiError;
use crate::model::{ApiKeysListed, IssuedKey};
use crate::state::AppState;

/// Every API key's first characters and owner (berth keeps no key itself).
#[utoipa::path(get, path = "/v1/admin/api-keys", tag = "admin",
    responses((status = 200, description = "the keys, by owner", body = ApiKeysListed)))]
pub async fn admin_list_keys(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<ApiKeysListed>, ApiError> {
    superadmin_only(&caller)?;
    Ok(Json(ApiKeysListed {
        api_keys: db::admin::api_keys(&state.pool).await?,
    }))
}

/// `POST /v1/admin/backendai-keypairs`'s body: whom a keypair is for.
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyFor {
    /// The user to issue it to.
    #[schema(max_length = 254, pattern = "^[!-?A-~]+@[!-?A-~]+$")]
    pub email: String,
}

impl KeyFor {
    /// The email, by its rule.
    pub fn check(&self) -> Result<(), FieldError> {
        checked_email("email", &self.email)
    }
}

/// `POST /v1/admin/api-keys`'s body: whom a key is for, and until when (at most one of
/// `expires_in_secs` and `expires_at`; neither: for ever).
#[derive(Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    /// The user to issue it to.
    #[schema(max_length = 254, pattern = "^[!-?A-~]+@[!-?A-~]+$")]
    pub email: String,
    /// Seconds from now until the key is refused, 1 to ten years.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 315360000)]
    pub expires_in_secs: Option<i64>,
    /// When the key is refused from (RFC 3339), in the future and within ten years.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
}

impl NewKey {
    /// The email, by its rule, and the expiry, by `domain::credentials::key_expiry`, as the
    /// time the key is refused from (none: never).
    pub fn check(&self, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, FieldError> {
        checked_email("email", &self.email)?;
        key_expiry(now, self.expires_in_secs, self.expires_at)
            .map_err(|e| invalid(e.field, e.message))
    }
}

/// Issue another API key to a user, for ever or until an expiry; shown only in this answer
/// (`ApiKeyIssued`). An expired key is answered 401, as an unknown one.
#[utoipa::path(post, path = "/v1/admin/api-keys", tag = "admin", request_body = NewKey,
    responses((status = 201, description = "the new key", body = IssuedKey)))]
pub async fn admin_issue_key(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<IssuedKey>), ApiError> {
    superadmin_only(&caller)?;
    let new_key: NewKey = parse_body(body)?;
    let expires_at = new_key.check(Utc::now())?;
    let NewKey { email, .. } = new_key;
    let api_key = access::issue_key(&state.pool, &email, expires_at).await?;
    let client = state.pool.get().await?;
    let owner = events::ledger::key_owner(&client, &api_key)
        .await?
        .ok_or_else(|| ApiError::internal("a key just issued has no owner"))?;
    Ok((
        StatusCode::CREATED,
        Json(IssuedKey {
            user_id: owner.user_id,
            email,
            api_key,
            expires_at,
        }),
    ))
}

/// A key named in a path by its prefix.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct KeyPrefix {
    /// The key's first 12 characters: `berth_` and 6 hex digits (as listed).
    #[param(pattern = "^berth_[0-9a-f]{6}$")]
    pub prefix: String,
}

impl KeyPrefix {
    /// `berth_` and 6 lower-case hex digits.
    pub fn check(&self) -> Result<(), FieldError> {
        let ok = self.prefix.strip_prefix("berth_").is_some_and(|hex| {
            hex.len() == 6 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        });
        if ok {
            Ok(())
        } else {
            Err(invalid("prefix", "`berth_` and 6 hex digits, as listed"))
        }
    }
}

/// Revoke the API key with this prefix (`ApiKeyRevoked`): from now on it is refused (401) on
/// every gateway, its console sign-ins aside (a password change or disabling the user ends
/// those). Revoking it again changes nothing; 404 for a prefix no key has, 409 for one two
/// keys share (disable their holder instead).
#[utoipa::path(post, path = "/v1/admin/api-keys/{prefix}/revoke", tag = "admin",
    params(KeyPrefix),
    responses((status = 204, description = "revoked")))]
pub async fn admin_revoke_key(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(param): Path<KeyPrefix>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    param.check()?;
    let holder = access::revoke_key(&state.pool, caller.user_id, &param.prefix)
        .await
        .map_err(|e| match e {
            e @ AccessError::Unknown { .. } => ApiError::not_found(e.to_string()).field("prefix"),
            other => other.into(),
        })?;
    // This gateway at once; every other when the relayed event reaches it.
    state.forget_user(holder).await;
    Ok(StatusCode::NO_CONTENT)
}
