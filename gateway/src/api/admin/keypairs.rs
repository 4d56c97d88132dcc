//! Backend.AI keypairs: issued to a user (the secret derived with the gateway's master key, never stored), listed, revoked.

use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use launcher::access::{self, AccessError};
use launcher::domain::FieldError;
use serde::Deserialize;
use utoipa::IntoParams;

use super::keys::KeyFor;
use super::{invalid, superadmin_only};
use crate::api::parse_body;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::handles::BackendAiKeys;
use crate::model::{IssuedKeypair, KeypairListed, KeypairsListed};
use crate::state::AppState;

/// A Backend.AI access key named in a path.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct AccessKeyParam {
    /// 1 to 64 letters and digits (berth issues `AKIA` and 16 more).
    #[param(pattern = "^[A-Za-z0-9]{1,64}$")]
    pub access_key: String,
}

impl AccessKeyParam {
    /// 1 to 64 letters and digits.
    pub fn check(&self) -> Result<(), FieldError> {
        let k = &self.access_key;
        if k.is_empty() || k.len() > 64 || !k.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(invalid("access_key", "1 to 64 letters and digits"));
        }
        Ok(())
    }
}

/// The compatibility router, or 409 when Backend.AI's API is off: a keypair it issued could
/// sign nothing.
fn backendai_on(state: &AppState) -> Result<&BackendAiKeys, ApiError> {
    state.backendai.as_deref().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "backendai_off",
            "Backend.AI's API is switched off on this gateway (BERTH_BACKENDAI=off)",
        )
    })
}

/// Issue a Backend.AI keypair to a user, for Backend.AI's own client
/// (`BackendAiKeypairIssued`). The secret key is derived from the access key with the
/// gateway's master key, never stored: shown in this answer. 409 when Backend.AI's API is off.
#[utoipa::path(post, path = "/v1/admin/backendai-keypairs", tag = "admin", request_body = KeyFor,
    responses((status = 201, description = "the new keypair", body = IssuedKeypair)))]
pub async fn admin_issue_keypair(
    State(state): State<AppState>,
    Caller(caller): Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<IssuedKeypair>), ApiError> {
    superadmin_only(&caller)?;
    let key_for: KeyFor = parse_body(body)?;
    key_for.check()?;
    let KeyFor { email } = key_for;
    let backendai = backendai_on(&state)?;
    let (user_id, access_key) = access::issue_backendai_keypair(&state.pool, &email).await?;
    let secret_key = backendai.secret_of(&access_key);
    Ok((
        StatusCode::CREATED,
        Json(IssuedKeypair {
            user_id,
            email,
            access_key,
            secret_key,
        }),
    ))
}

/// Every Backend.AI keypair and its holder, revoked ones included (never a secret).
#[utoipa::path(get, path = "/v1/admin/backendai-keypairs", tag = "admin",
    responses((status = 200, description = "the keypairs, by access key", body = KeypairsListed)))]
pub async fn admin_list_keypairs(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<KeypairsListed>, ApiError> {
    superadmin_only(&caller)?;
    let client = state.pool.get().await?;
    let keypairs = events::ledger::backendai_keypairs(&client, None, None).await?;
    Ok(Json(KeypairsListed {
        keypairs: keypairs
            .into_iter()
            .map(|k| KeypairListed {
                access_key: k.access_key,
                user_id: k.user_id,
                email: k.email,
                active: k.active,
            })
            .collect(),
    }))
}

/// Revoke a Backend.AI keypair (`BackendAiKeypairRevoked`): from now on a request it signs is
/// refused (401). Revoking it again changes nothing; 404 naming `access_key` for a key never
/// issued.
#[utoipa::path(post, path = "/v1/admin/backendai-keypairs/{access_key}/revoke", tag = "admin",
    params(AccessKeyParam),
    responses((status = 204, description = "revoked")))]
pub async fn admin_revoke_keypair(
    State(state): State<AppState>,
    Caller(caller): Caller,
    Path(param): Path<AccessKeyParam>,
) -> Result<StatusCode, ApiError> {
    superadmin_only(&caller)?;
    param.check()?;
    let AccessKeyParam { access_key } = param;
    let holder = access::revoke_backendai_keypair(&state.pool, &access_key)
        .await
        .map_err(|e| match e {
            e @ AccessError::Unknown { .. } => {
                ApiError::not_found(e.to_string()).field("access_key")
            }
            other => other.into(),
        })?;
    // This gateway forgets the holder's keys at once; every other gateway when the relayed
    // event reaches it (`crate::cache::KeyCache`).
    state.forget_user(holder).await;
    Ok(StatusCode::NO_CONTENT)
}
