//! A Backend.AI keypair as its GraphQL type `KeyPair` shows it: `user_id` is the holder's
//! email (Backend.AI's naming), `is_admin` whether the holder administers berth (an admin or
//! a superadmin; the CLI's `ps` then shows each session's access key), and `secret_key` is
//! always null: berth derives secrets and never shows one again after issuing it.

use async_graphql::{Context, Object, Result, SimpleObject};
use events::payloads::Role;
use uuid::Uuid;

use super::{db_error, Ctx};
use crate::db;

/// Backend.AI's `KeyPair`.
pub struct KeyPair {
    pub access_key: String,
    pub user: Uuid,
    pub email: String,
    pub role: Role,
    pub active: bool,
    /// The holder's resource policy, when known.
    pub resource_policy: Option<String>,
}

/// Backend.AI's `UserInfo`, what a keypair says of its holder.
#[derive(SimpleObject)]
#[graphql(serial, rename_fields = "snake_case")]
pub struct UserInfo {
    email: String,
    /// berth keeps no full names.
    full_name: Option<String>,
}

#[Object(serial, rename_fields = "snake_case", rename_args = "snake_case")]
impl KeyPair {
    /// The holder's email.
    async fn user_id(&self) -> &str {
        &self.email
    }

    /// The holder's id.
    async fn user(&self) -> Uuid {
        self.user
    }

    async fn full_name(&self) -> Option<String> {
        None
    }

    async fn user_info(&self) -> UserInfo {
        UserInfo {
            email: self.email.clone(),
            full_name: None,
        }
    }

    /// The projects the holder belongs to.
    async fn projects(&self, ctx: &Context<'_>) -> Result<Vec<String>> {
        let facts = db::backendai_gql::owner_facts(&ctx.data::<Ctx>()?.state.pool, self.user)
            .await
            .map_err(db_error)?;
        Ok(facts.projects)
    }

    async fn access_key(&self) -> &str {
        &self.access_key
    }

    /// Always null: the secret is shown once, when the keypair is issued.
    async fn secret_key(&self) -> Option<String> {
        None
    }

    async fn is_active(&self) -> bool {
        self.active
    }

    async fn is_admin(&self) -> bool {
        self.role >= Role::Admin
    }

    async fn resource_policy(&self) -> Option<&str> {
        self.resource_policy.as_deref()
    }

    /// How many sessions the holder has live.
    async fn concurrency_used(&self, ctx: &Context<'_>) -> Result<i64> {
        let facts = db::backendai_gql::owner_facts(&ctx.data::<Ctx>()?.state.pool, self.user)
            .await
            .map_err(db_error)?;
        Ok(facts.live_sessions)
    }

    /// berth does not rate-limit keypairs.
    async fn rate_limit(&self) -> Option<i32> {
        None
    }

    async fn num_queries(&self) -> Option<i64> {
        None
    }

    async fn created_at(&self) -> Option<super::session::DateTime> {
        None
    }

    async fn modified_at(&self) -> Option<super::session::DateTime> {
        None
    }

    async fn last_used(&self) -> Option<super::session::DateTime> {
        None
    }

    async fn ssh_public_key(&self) -> Option<String> {
        None
    }

    async fn ssh_private_key(&self) -> Option<String> {
        None
    }

    async fn dotfiles(&self) -> Option<String> {
        None
    }

    async fn bootstrap_script(&self) -> Option<String> {
        None
    }
}
