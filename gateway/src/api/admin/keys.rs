//! API keys: the list (never the keys), a key issued to a user.

use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use launcher::access;
use launcher::domain::FieldError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{checked_email, superadmin_only};
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

/// `POST /v1/admin/api-keys`'s body.
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

/// Issue another API key to a user; shown only in this answer (`ApiKeyIssued`).
#[utoipa::path(post, path = "/v1/admin/api-keys", tag = "admin", request_body = KeyFor,
    responses((status = 201, description = "the new key", body = IssuedKey)))]
pub async fn admin_issue_key(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<IssuedKey>), ApiError> {
    superadmin_only(&caller)?;
    let key_for: KeyFor = parse_body(body)?;
    key_for.check()?;
    let KeyFor { email } = key_for;
    let api_key = access::issue_key(&state.pool, &email).await?;
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
        }),
    ))
}
