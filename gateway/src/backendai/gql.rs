//! `POST /admin/gql`: the GraphQL subset Backend.AI's client asks (`backend.ai ps`, `session
//! info`, `admin session list`, `vfolder list`): root fields `compute_session(id)`,
//! `compute_session_list`, `keypair`, `vfolder_list`, `vfolder_own_list`, and the model
//! endpoints' `endpoint` and `endpoint_list` (`service list`, `info`, `get-endpoint`). The client's queries are templates over a field list the user chooses, and
//! its console tables zip headers with each item's values by position, so any subset of the
//! fields must come back in the order selected with no other keys: a GraphQL executor
//! (async-graphql) does that, where answering fixed query texts would not.
//!
//! The order needs care: async-graphql 7 resolves an object's fields concurrently and keeps
//! them in the order they finish, so every object type here resolves its fields serially
//! (`#[Object(serial)]`; nearly all their fields read a row already fetched: only a list's
//! items and count, and a keypair's projects and live sessions, read the database), and the root fields, always resolved concurrently, are put back
//! in the order of the query's text ([`root_keys`]).
//!
//! Names are snake_case (graphene's with auto camel case off), ids a scalar named `UUID`,
//! times ISO 8601 (`DateTime`); introspection is off, depth and complexity limited. Errors of
//! a query are answered as graphene answers them, HTTP 200 with `{"data", "errors"}` (the
//! client turns any into a `graphql-error`); a request that is not signed, or whose body is
//! not a GraphQL request, is a problem (`401`, `400`).
//!
//! A caller sees what berth's own API shows them: their own sessions, every session for a
//! superadmin. Another's session is null or not listed, never an error that tells it exists.
//! A page is one statement for its sessions and one for the count, each only when selected.
//!
//! - `args`: the status filter and the order expression.
//! - `session`: the `ComputeSession` and `ComputeContainer` types.
//! - `keypair`: the `KeyPair` type.
//! - `vfolder`: the `VirtualFolder` type and its pages.
//! - `endpoint`: the `Endpoint` and `Routing` types and their pages.

mod args;
mod endpoint;
mod keypair;
mod session;
mod vfolder;

use std::sync::OnceLock;

use async_graphql::{
    Context, EmptyMutation, EmptySubscription, Error, Object, Result, Schema, Variables,
};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use events::authorization::{self, Action};
use events::payloads::Role;
use serde::Deserialize;
use uuid::Uuid;

#[cfg(test)]
use super::stream::kernel_id;
use super::{BackendAiCaller, Problem};
use crate::db;
use crate::db::backendai_gql::{GqlFilter, GqlSession};
use crate::error::ApiError;
use crate::state::AppState;
use keypair::KeyPair;
use session::ComputeSession;
use vfolder::VirtualFolderList;

/// The deepest a query may nest (`compute_session { containers { id } }` is 3; this leaves
/// room for `dependencies { containers { ... } }`).
pub const MAX_DEPTH: usize = 5;

/// The most fields a query may select in all (the client's whole session catalogue with
/// every container field is about 70).
pub const MAX_COMPLEXITY: usize = 250;

/// The page sizes Backend.AI's client allows (and so does berth).
pub const PAGE_SIZES: std::ops::RangeInclusive<i32> = 1..=100;

/// How long `compute_session` waits for a session the log has and the view not yet (the
/// view lags the log by milliseconds): as long as berth's own detail waits.
const VIEW_WAIT_POLLS: u32 = 100;
const VIEW_WAIT_STEP: std::time::Duration = std::time::Duration::from_millis(20);

pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/admin/gql", post(gql))
}

/// What each query executes with: the state, who asks, and the host they reached the
/// gateway at (an endpoint's URL is on it).
pub(crate) struct Ctx {
    pub state: AppState,
    pub caller: BackendAiCaller,
    pub host: Option<String>,
}

type GqlSchema = Schema<Query, EmptyMutation, EmptySubscription>;

/// The schema, built once.
fn schema() -> &'static GqlSchema {
    static SCHEMA: OnceLock<GqlSchema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        Schema::build(Query, EmptyMutation, EmptySubscription)
            .disable_introspection()
            .limit_depth(MAX_DEPTH)
            .limit_complexity(MAX_COMPLEXITY)
            .limit_recursive_depth(16)
            .limit_directives(4)
            .finish()
    })
}

/// A GraphQL request as the client posts it.
#[derive(Deserialize)]
struct Body {
    query: String,
    #[serde(default)]
    variables: Option<serde_json::Value>,
    #[serde(default, rename = "operationName")]
    operation_name: Option<String>,
}

/// Runs a query for the signed caller.
async fn gql(
    State(state): State<AppState>,
    caller: BackendAiCaller,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    let body = body.map_err(|e| Problem::invalid("body", e.body_text()))?;
    let Body {
        query,
        variables,
        operation_name,
    } = serde_json::from_slice(&body).map_err(|e| {
        Problem::invalid(
            "body",
            format!("must be a GraphQL request {{query, variables}}: {e}"),
        )
    })?;
    // The order the root fields are answered in (see the module's doc).
    let roots = root_keys(&query, operation_name.as_deref());
    let mut request = async_graphql::Request::new(query)
        .variables(Variables::from_json(variables.unwrap_or_default()))
        .data(Ctx {
            state,
            caller,
            host,
        });
    if let Some(name) = operation_name {
        request = request.operation_name(name);
    }
    let mut response = schema().execute(request).await;
    reorder(&mut response.data, &roots);
    // Serialized straight from the executor's ordered maps: the selection's order is kept.
    let text = serde_json::to_vec(&response).map_err(|e| {
        Problem::from(ApiError::internal(format_args!(
            "the GraphQL answer cannot be written: {e}"
        )))
    })?;
    Ok(([(header::CONTENT_TYPE, "application/json")], text).into_response())
}

/// The response keys the root of `query`'s operation (`operation`, or its only one) selects,
/// in the order of the text, each once (fragments' in their place); none when it cannot be
/// read (the executor then answers the error).
pub fn root_keys(query: &str, operation: Option<&str>) -> Vec<String> {
    use async_graphql::parser::types::DocumentOperations;
    let Ok(document) = async_graphql::parser::parse_query(query) else {
        return Vec::new();
    };
    let chosen = match (&document.operations, operation) {
        (DocumentOperations::Single(op), _) => Some(op),
        (DocumentOperations::Multiple(ops), Some(name)) => ops.get(name),
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => ops.values().next(),
        _ => None,
    };
    let mut keys = Vec::new();
    if let Some(op) = chosen {
        collect_keys(&document, &op.node.selection_set.node, &mut keys, 0);
    }
    keys
}

fn collect_keys(
    document: &async_graphql::parser::types::ExecutableDocument,
    set: &async_graphql::parser::types::SelectionSet,
    keys: &mut Vec<String>,
    depth: usize,
) {
    use async_graphql::parser::types::Selection;
    // Fragments that spread each other are refused by validation; this only bounds the walk.
    if depth > MAX_DEPTH {
        return;
    }
    for item in &set.items {
        match &item.node {
            Selection::Field(field) => {
                let key = field.node.response_key().node.as_str();
                if !keys.iter().any(|k| k == key) {
                    keys.push(key.to_owned());
                }
            }
            Selection::FragmentSpread(spread) => {
                if let Some(fragment) = document.fragments.get(&spread.node.fragment_name.node) {
                    collect_keys(document, &fragment.node.selection_set.node, keys, depth + 1);
                }
            }
            Selection::InlineFragment(inline) => {
                collect_keys(document, &inline.node.selection_set.node, keys, depth + 1);
            }
        }
    }
}

/// Puts an object's `keys` first, in that order, and the rest after them as they are.
fn reorder(data: &mut async_graphql::Value, keys: &[String]) {
    if let async_graphql::Value::Object(map) = data {
        let mut rest = std::mem::take(map);
        for key in keys {
            if let Some((name, value)) = rest.shift_remove_entry(key.as_str()) {
                map.insert(name, value);
            }
        }
        map.extend(rest);
    }
}

/// A page of `items` as the client asks for one: ordered by `order` (`[+|-]column`,
/// `default` when absent; `sort` orders by a column, or names the columns it knows), then
/// `offset` skipped and `limit` kept; with how many there are in all. A `filter` expression is
/// refused, as the sessions' is.
pub(crate) fn page_of<T>(
    mut items: Vec<T>,
    order: Option<&str>,
    default: &str,
    filter: Option<&str>,
    (limit, offset): (i32, i32),
    sort: impl Fn(&mut Vec<T>, &str) -> std::result::Result<(), String>,
) -> Result<(Vec<T>, i64)> {
    if filter.is_some_and(|f| !f.is_empty()) {
        return Err(Error::new("filter expressions are not supported"));
    }
    if !PAGE_SIZES.contains(&limit) || offset < 0 {
        return Err(Error::new(format!(
            "limit must be {} to {} and offset 0 or more",
            PAGE_SIZES.start(),
            PAGE_SIZES.end()
        )));
    }
    let order = order.unwrap_or(default).trim();
    let (descending, column) = match order.strip_prefix('-') {
        Some(column) => (true, column),
        None => (false, order.trim_start_matches('+')),
    };
    sort(&mut items, column).map_err(Error::new)?;
    if descending {
        items.reverse();
    }
    let total_count = items.len() as i64;
    let items = items
        .into_iter()
        .skip(offset as usize)
        .take(limit as usize)
        .collect();
    Ok((items, total_count))
}

/// A read's failure as a GraphQL error (the database's message, which names no data).
pub(crate) fn db_error(e: ApiError) -> Error {
    Error::new(e.message)
}

/// The root of the subset.
pub struct Query;

#[Object(rename_fields = "snake_case", rename_args = "snake_case")]
impl Query {
    /// Session `id`: null when there is none the caller may see.
    async fn compute_session(&self, ctx: &Context<'_>, id: Uuid) -> Result<Option<ComputeSession>> {
        let Ctx { state, caller, .. } = ctx.data::<Ctx>()?;
        let mut row = db::backendai_gql::session(&state.pool, id)
            .await
            .map_err(db_error)?;
        if row.is_none() {
            // Read your writes: just created, the log has it and the view may not yet.
            let owner = db::sessions::ledger_owner(&state.pool, id)
                .await
                .map_err(db_error)?;
            let seen = match owner {
                Some(o) => may_see(state, caller, o).await?,
                None => false,
            };
            if seen {
                for _ in 0..VIEW_WAIT_POLLS {
                    tokio::time::sleep(VIEW_WAIT_STEP).await;
                    row = db::backendai_gql::session(&state.pool, id)
                        .await
                        .map_err(db_error)?;
                    if row.is_some() {
                        break;
                    }
                }
            }
        }
        match row {
            Some(r) if may_see(state, caller, r.owner).await? => Ok(Some(shown(r, caller, None))),
            _ => Ok(None),
        }
    }

    /// A page of the caller's sessions (anyone's for a superadmin, or the holder's of
    /// `access_key`), in the statuses of `status` (a comma list), ordered by `order`
    /// (`[+|-]created_at|name|status|status_changed`, newest first by default).
    #[allow(clippy::too_many_arguments)] // the client's arguments, as it names them
    async fn compute_session_list(
        &self,
        ctx: &Context<'_>,
        limit: i32,
        offset: i32,
        status: Option<String>,
        access_key: Option<String>,
        filter: Option<String>,
        order: Option<String>,
        domain_name: Option<String>,
    ) -> Result<SessionList> {
        let Ctx { state, caller, .. } = ctx.data::<Ctx>()?;
        if !PAGE_SIZES.contains(&limit) {
            return Err(Error::new(format!(
                "limit must be {} to {}, not {limit}",
                PAGE_SIZES.start(),
                PAGE_SIZES.end()
            )));
        }
        if offset < 0 {
            return Err(Error::new(format!(
                "offset must be 0 or more, not {offset}"
            )));
        }
        if filter.is_some() {
            return Err(Error::new("filter expressions are not supported"));
        }
        if let Some(domain) = domain_name.filter(|d| d != "default") {
            return Err(Error::new(format!(
                "berth has one domain, `default`; there is no domain `{domain}`"
            )));
        }
        let statuses = status
            .as_deref()
            .map(args::statuses)
            .transpose()
            .map_err(Error::new)?;
        let order = args::order(order.as_deref().unwrap_or_default()).map_err(Error::new)?;
        let everyone = authorization::lists_everyone(caller.owner.role);
        let owner = match access_key.filter(|k| !k.is_empty()) {
            None if everyone => None,
            None => Some((caller.owner.user_id, caller.access_key.clone())),
            Some(key) if key == caller.access_key => Some((caller.owner.user_id, key)),
            Some(key) if authorization::may_name_others(caller.owner.role) => {
                match keypair_holder(state, &key).await? {
                    Some(holder) if may_see(state, caller, holder).await? => Some((holder, key)),
                    // Nobody holds it, or nobody the caller may see: nobody's sessions.
                    _ => return Ok(SessionList::empty()),
                }
            }
            Some(_) => {
                return Err(Error::new(
                    "insufficient privilege: only admins list another keypair's sessions",
                ))
            }
        };
        Ok(SessionList {
            filter: GqlFilter {
                owner: owner.as_ref().map(|(id, _)| *id),
                statuses,
            },
            named: owner,
            order,
            limit: i64::from(limit),
            offset: i64::from(offset),
            empty: false,
        })
    }

    /// A page of the caller's own folders (`vfolder list`).
    async fn vfolder_own_list(
        &self,
        ctx: &Context<'_>,
        limit: i32,
        offset: i32,
        filter: Option<String>,
        order: Option<String>,
    ) -> Result<VirtualFolderList> {
        let folders = reached_folders(ctx, true).await?;
        vfolder::page(folders, order.as_deref(), filter.as_deref(), limit, offset)
    }

    /// A page of the folders the caller reaches: theirs and those shared with them. berth's
    /// folders are users'; a project's (`group_id`) reaches them through shares, so a page of
    /// a project's own folders is empty.
    async fn vfolder_list(
        &self,
        ctx: &Context<'_>,
        limit: i32,
        offset: i32,
        group_id: Option<Uuid>,
        filter: Option<String>,
        order: Option<String>,
    ) -> Result<VirtualFolderList> {
        let folders = match group_id {
            Some(_) => Vec::new(),
            None => reached_folders(ctx, false).await?,
        };
        vfolder::page(folders, order.as_deref(), filter.as_deref(), limit, offset)
    }

    /// Endpoint `endpoint_id`: null when there is none the caller may see.
    async fn endpoint(
        &self,
        ctx: &Context<'_>,
        endpoint_id: Uuid,
    ) -> Result<Option<endpoint::Endpoint>> {
        let Ctx {
            state,
            caller,
            host,
        } = ctx.data::<Ctx>()?;
        let id = endpoint_id.to_string();
        match crate::api::services::seen(state, &caller.owner, &id).await {
            Ok(served) => Ok(Some(shown_endpoint(state, host.as_deref(), &served))),
            Err(e) if e.status == axum::http::StatusCode::NOT_FOUND => Ok(None),
            Err(e) => Err(db_error(e)),
        }
    }

    /// A page of the caller's endpoints (everyone's for a superadmin, or the holder's of
    /// `access_key`), ordered by `order` (`[+|-]name|created_at`, by name by default).
    #[allow(clippy::too_many_arguments)] // the client's arguments, as it names them
    async fn endpoint_list(
        &self,
        ctx: &Context<'_>,
        limit: i32,
        offset: i32,
        filter: Option<String>,
        order: Option<String>,
        domain_name: Option<String>,
        group_id: Option<String>,
        access_key: Option<String>,
        project: Option<Uuid>,
    ) -> Result<endpoint::EndpointList> {
        let Ctx {
            state,
            caller,
            host,
        } = ctx.data::<Ctx>()?;
        if let Some(domain) = domain_name.filter(|d| d != "default") {
            return Err(Error::new(format!(
                "berth has one domain, `default`; there is no domain `{domain}`"
            )));
        }
        if group_id.is_some() || project.is_some() {
            return Err(Error::new(
                "berth's endpoints belong to users, not projects: list them without a project",
            ));
        }
        let holder = match access_key.filter(|k| !k.is_empty() && *k != caller.access_key) {
            None => None,
            Some(key) if authorization::may_name_others(caller.owner.role) => {
                match keypair_holder(state, &key).await? {
                    Some(holder) if may_see(state, caller, holder).await? => Some(holder),
                    _ => return endpoint::page(Vec::new(), None, None, limit, offset),
                }
            }
            Some(_) => {
                return Err(Error::new(
                    "insufficient privilege: only admins list another keypair's endpoints",
                ))
            }
        };
        let endpoints = crate::api::services::visible(state, &caller.owner)
            .await
            .map_err(db_error)?
            .iter()
            .filter(|e| holder.is_none_or(|h| e.created.owner.user_id == h))
            .map(|e| shown_endpoint(state, host.as_deref(), e))
            .collect();
        endpoint::page(
            endpoints,
            order.as_deref(),
            filter.as_deref(),
            limit,
            offset,
        )
    }

    /// The caller's keypair, or for a superadmin the one of `access_key`.
    async fn keypair(
        &self,
        ctx: &Context<'_>,
        domain_name: Option<String>,
        access_key: Option<String>,
    ) -> Result<Option<KeyPair>> {
        let _ = domain_name;
        let Ctx { state, caller, .. } = ctx.data::<Ctx>()?;
        match access_key.filter(|k| !k.is_empty() && *k != caller.access_key) {
            None => Ok(Some(KeyPair {
                access_key: caller.access_key.clone(),
                user: caller.owner.user_id,
                email: caller.owner.email.clone(),
                role: caller.owner.role,
                active: true,
                resource_policy: Some(caller.owner.resource_policy.clone()),
            })),
            Some(key) if caller.owner.role == Role::Superadmin => {
                let client = state.pool.get().await.map_err(|e| db_error(e.into()))?;
                let found = events::ledger::backendai_keypairs(&client, None, Some(&key))
                    .await
                    .map_err(|e| db_error(e.into()))?;
                Ok(found.into_iter().next().map(|k| KeyPair {
                    access_key: k.access_key,
                    user: k.user_id,
                    email: k.email,
                    role: k.role,
                    active: k.active,
                    resource_policy: None,
                }))
            }
            Some(_) => Err(Error::new(
                "insufficient privilege: only superadmins read another keypair",
            )),
        }
    }
}

/// Endpoint `served` as GraphQL shows it to a caller who reached the gateway at `host`.
fn shown_endpoint(
    state: &AppState,
    host: Option<&str>,
    served: &domain::serving::Endpoint,
) -> endpoint::Endpoint {
    let created = &served.created;
    endpoint::endpoint(
        served,
        super::services::endpoint_url(state, host, created.endpoint_id),
        super::folders::folder_id(created.owner.user_id, &created.model_folder),
    )
}

/// The folders the caller reaches (only their own when `own`), as GraphQL shows them.
async fn reached_folders(ctx: &Context<'_>, own: bool) -> Result<Vec<vfolder::VirtualFolder>> {
    let Ctx { state, caller, .. } = ctx.data::<Ctx>()?;
    let user = caller.owner.user_id;
    let folders = db::folders::folders(&state.pool, user)
        .await
        .map_err(db_error)?;
    Ok(folders
        .iter()
        .filter(|f| !own || f.permission == "owner")
        .map(|f| {
            let mine = (f.permission == "owner").then_some(user);
            vfolder::virtual_folder(f, mine, super::folders::folder_id(user, &f.name))
        })
        .collect())
}

/// The holder of Backend.AI access key `key` (revoked or not), if it was ever issued.
async fn keypair_holder(state: &AppState, key: &str) -> Result<Option<Uuid>> {
    let client = state.pool.get().await.map_err(|e| db_error(e.into()))?;
    let found = events::ledger::backendai_keypairs(&client, None, Some(key))
        .await
        .map_err(|e| db_error(e.into()))?;
    Ok(found.first().map(|k| k.user_id))
}

/// Whether `caller` may see a session of `owner`, by the one authorization rule.
async fn may_see(state: &AppState, caller: &BackendAiCaller, owner: Uuid) -> Result<bool> {
    Ok(
        crate::authorize::may(state, &caller.owner, Action::See, owner)
            .await
            .map_err(|e| db_error(e.into()))?
            .is_ok(),
    )
}

/// `row` as `caller` is shown it: the owner's access key is the one the list named, the
/// caller's own for their sessions, else one the owner holds.
fn shown(
    row: GqlSession,
    caller: &BackendAiCaller,
    named: Option<&(Uuid, String)>,
) -> ComputeSession {
    let access_key = match named {
        Some((owner, key)) if *owner == row.owner => Some(key.clone()),
        _ if row.owner == caller.owner.user_id => Some(caller.access_key.clone()),
        _ => row.owner_access_key.clone(),
    };
    ComputeSession::new(row, access_key)
}

/// A page of sessions: its items and the count of all that match, each read only when
/// selected.
pub struct SessionList {
    filter: GqlFilter,
    /// The owner the list is limited to, and the access key to show for them.
    named: Option<(Uuid, String)>,
    order: Vec<db::backendai_gql::OrderBy>,
    limit: i64,
    offset: i64,
    /// Nothing can match (an access key nobody holds).
    empty: bool,
}

impl SessionList {
    fn empty() -> SessionList {
        SessionList {
            filter: GqlFilter::default(),
            named: None,
            order: Vec::new(),
            limit: 0,
            offset: 0,
            empty: true,
        }
    }
}

#[Object(serial, rename_fields = "snake_case", rename_args = "snake_case")]
impl SessionList {
    async fn items(&self, ctx: &Context<'_>) -> Result<Vec<ComputeSession>> {
        if self.empty {
            return Ok(Vec::new());
        }
        let Ctx { state, caller, .. } = ctx.data::<Ctx>()?;
        let rows = db::backendai_gql::session_page(
            &state.pool,
            &self.filter,
            &self.order,
            self.limit,
            self.offset,
        )
        .await
        .map_err(db_error)?;
        // The list's owner was weighed by the authorization rule when the list was made (and
        // a list of nobody in particular is a superadmin's): rows of anyone else never show.
        Ok(rows
            .into_iter()
            .filter(|r| self.filter.owner.is_none_or(|o| o == r.owner))
            .map(|r| shown(r, caller, self.named.as_ref()))
            .collect())
    }

    async fn total_count(&self, ctx: &Context<'_>) -> Result<i64> {
        if self.empty {
            return Ok(0);
        }
        let Ctx { state, .. } = ctx.data::<Ctx>()?;
        db::backendai_gql::count_sessions(&state.pool, &self.filter)
            .await
            .map_err(db_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::backendai_gql::LastTry;
    use async_graphql::Value;
    use serde_json::json;

    /// The query `backend.ai session info` sends (23.09.10), as captured: note `id` twice
    /// among the containers' fields.
    pub const INFO_QUERY: &str = "query($id: UUID!) {  compute_session(id: $id) {    name id main_kernel_id image tag created_at terminated_at status status_info status_data occupying_slots idle_checks containers { id cluster_role cluster_idx cluster_hostname session_id image registry status status_info status_data status_changed agent container_id resource_opts occupied_slots preopen_ports live_stat last_stat id } dependencies { name id }  }}";

    fn session_id() -> Uuid {
        Uuid::parse_str("0190b4e2-8f3a-7c11-9a2b-3c4d5e6f7a8b").unwrap()
    }

    fn at(text: &str) -> chrono::DateTime<chrono::Utc> {
        text.parse().unwrap()
    }

    /// A two-kernel batch session that ended with exit code 3 on one agent.
    fn row() -> GqlSession {
        GqlSession {
            session_id: session_id(),
            name: "bai-sess1".into(),
            owner: Uuid::from_u128(7),
            owner_email: "u@x".into(),
            requested_by: None,
            requested_by_email: None,
            project: None,
            session_type: "batch".into(),
            status: "TERMINATED".into(),
            status_reason: Some("finished".into()),
            image: "berth/shell:latest".into(),
            resource_group: "default".into(),
            resources: json!({"cpu_milli": 500, "memory_bytes": 268435456, "gpu_milli": 0}),
            shared_memory_bytes: 67108864,
            cluster_mode: "single-node".into(),
            cluster_size: 2,
            kernels: json!([
                {"agent_id": "a1", "resources": {"cpu_milli": 500, "memory_bytes": 268435456, "gpu_milli": 0}},
                {"agent_id": "a1", "resources": {"cpu_milli": 500, "memory_bytes": 268435456, "gpu_milli": 0}}]),
            containers: json!([
                {"kernel": 0, "agent_id": "a1", "container_id": "c0", "hostname": "main1",
                 "ports": [{"container": 8080, "host": 30001}], "address": null},
                {"kernel": 1, "agent_id": "a1", "container_id": "c1", "hostname": "sub1",
                 "ports": [], "address": null}]),
            request: json!({"startup_command": "exit 3", "mounts": ["data"],
                "preopen_ports": [8080], "starts_at": null,
                "apps": [{"name": "8080", "protocol": "preopen", "ports": [8080]}]}),
            created_at: at("2026-11-22T08:00:00Z"),
            status_changed_at: at("2026-11-22T08:04:25.809865Z"),
            scheduled_at: Some(at("2026-11-22T08:00:01Z")),
            started_at: Some(at("2026-11-22T08:00:02Z")),
            ended_at: Some(at("2026-11-22T08:04:25.809865Z")),
            exit_code: Some(3),
            owner_access_key: Some("AKIAOWNER".into()),
            last_try: None,
        }
    }

    /// A root answering one session, for what the types show without a database.
    struct One(GqlSession);

    #[Object(rename_fields = "snake_case", rename_args = "snake_case")]
    impl One {
        async fn compute_session(&self, id: Uuid) -> Option<ComputeSession> {
            (id == self.0.session_id).then(|| ComputeSession::new(self.0.clone(), None))
        }
    }

    async fn info(row: GqlSession) -> async_graphql::Response {
        let id = row.session_id;
        Schema::new(One(row), EmptyMutation, EmptySubscription)
            .execute(
                async_graphql::Request::new(INFO_QUERY)
                    .variables(Variables::from_json(json!({"id": id}))),
            )
            .await
    }

    fn keys(value: &Value) -> Vec<&str> {
        match value {
            Value::Object(map) => map.keys().map(|k| k.as_str()).collect(),
            other => panic!("not an object: {other}"),
        }
    }

    fn text(value: &Value) -> &str {
        match value {
            Value::String(s) => s,
            other => panic!("not a string: {other}"),
        }
    }

    #[tokio::test]
    async fn the_info_query_answers_in_the_order_selected_with_json_strings() {
        let response = info(row()).await;
        assert!(response.errors.is_empty(), "{:?}", response.errors);
        let Value::Object(data) = &response.data else {
            panic!("no data")
        };
        let session = &data["compute_session"];
        assert_eq!(
            keys(session),
            [
                "name",
                "id",
                "main_kernel_id",
                "image",
                "tag",
                "created_at",
                "terminated_at",
                "status",
                "status_info",
                "status_data",
                "occupying_slots",
                "idle_checks",
                "containers",
                "dependencies"
            ]
        );
        let Value::Object(s) = session else { panic!() };
        assert_eq!(s["main_kernel_id"], s["id"]);
        assert_eq!(text(&s["created_at"]), "2026-11-22T08:00:00.000000+00:00");
        let status_data: serde_json::Value = serde_json::from_str(text(&s["status_data"])).unwrap();
        assert_eq!(status_data, json!({"kernel": {"exit_code": 3}}));
        let slots: serde_json::Value = serde_json::from_str(text(&s["occupying_slots"])).unwrap();
        assert_eq!(slots, json!({"cpu": "1", "mem": "536870912"}));
        assert_eq!(s["idle_checks"], Value::Null);
        assert_eq!(s["dependencies"], Value::List(Vec::new()));

        let Value::List(containers) = &s["containers"] else {
            panic!("containers are a list")
        };
        assert_eq!(containers.len(), 2);
        // `id`, selected twice, is answered once, where it was first selected.
        assert_eq!(
            keys(&containers[0]),
            [
                "id",
                "cluster_role",
                "cluster_idx",
                "cluster_hostname",
                "session_id",
                "image",
                "registry",
                "status",
                "status_info",
                "status_data",
                "status_changed",
                "agent",
                "container_id",
                "resource_opts",
                "occupied_slots",
                "preopen_ports",
                "live_stat",
                "last_stat"
            ]
        );
        let (Value::Object(main), Value::Object(sub)) = (&containers[0], &containers[1]) else {
            panic!()
        };
        assert_eq!(main["id"], s["id"]);
        assert_eq!(text(&sub["id"]), kernel_id(session_id(), 1).to_string());
        assert_eq!(
            [text(&main["cluster_role"]), text(&sub["cluster_role"])],
            ["main", "sub"]
        );
        assert_eq!(
            [
                text(&main["cluster_hostname"]),
                text(&sub["cluster_hostname"])
            ],
            ["main1", "sub1"]
        );
        assert_eq!(main["cluster_idx"], Value::from(1));
        assert_eq!(text(&sub["container_id"]), "c1");
        assert_eq!(text(&main["registry"]), "docker.io");
        for field in ["status_data", "resource_opts", "occupied_slots"] {
            let parsed: serde_json::Value = serde_json::from_str(text(&main[field]))
                .unwrap_or_else(|e| panic!("{field} is not JSON text: {e}"));
            assert!(parsed.is_object(), "{field}: {parsed}");
        }
        let opts: serde_json::Value = serde_json::from_str(text(&main["resource_opts"])).unwrap();
        assert_eq!(opts, json!({"shmem": 67108864}));
        assert_eq!(main["preopen_ports"], Value::List(vec![Value::from(8080)]));
        assert_eq!(main["live_stat"], Value::Null);
    }

    #[tokio::test]
    async fn any_subset_comes_back_in_the_order_asked() {
        let id = session_id();
        let schema = Schema::new(One(row()), EmptyMutation, EmptySubscription);
        let query = "query($id: UUID!) { compute_session(id: $id) { result type service_ports \
                     status_changed user_email access_key agent_ids resource_opts name } }";
        let response = schema
            .execute(
                async_graphql::Request::new(query)
                    .variables(Variables::from_json(json!({"id": id}))),
            )
            .await;
        assert!(response.errors.is_empty(), "{:?}", response.errors);
        let Value::Object(data) = &response.data else {
            panic!()
        };
        let Value::Object(s) = &data["compute_session"] else {
            panic!()
        };
        assert_eq!(
            s.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            [
                "result",
                "type",
                "service_ports",
                "status_changed",
                "user_email",
                "access_key",
                "agent_ids",
                "resource_opts",
                "name"
            ]
        );
        assert_eq!(text(&s["result"]), "FAILURE");
        assert_eq!(text(&s["type"]), "BATCH");
        assert_eq!(
            text(&s["status_changed"]),
            "2026-11-22T08:04:25.809865+00:00"
        );
        let ports: serde_json::Value = serde_json::from_str(text(&s["service_ports"])).unwrap();
        assert_eq!(
            ports,
            json!({"8080": {"protocol": "preopen", "container_ports": [8080],
                "host_ports": [30001]}})
        );
        assert_eq!(s["agent_ids"], Value::List(vec![Value::from("a1")]));
        let opts: serde_json::Value = serde_json::from_str(text(&s["resource_opts"])).unwrap();
        assert_eq!(
            opts,
            json!({"main1": {"shmem": 67108864}, "sub1": {"shmem": 67108864}})
        );
        // Another id: null, not an error.
        let other = schema
            .execute(
                async_graphql::Request::new(query)
                    .variables(Variables::from_json(json!({"id": Uuid::nil()}))),
            )
            .await;
        assert!(other.errors.is_empty());
        assert_eq!(
            other.data,
            Value::from_json(json!({"compute_session": null})).unwrap()
        );
    }

    #[tokio::test]
    async fn a_waiting_session_s_status_data_is_its_latest_attempt() {
        let mut waiting = row();
        waiting.status = "PENDING".into();
        waiting.scheduled_at = None;
        waiting.exit_code = None;
        waiting.containers = json!([]);
        waiting.last_try = Some(LastTry {
            attempts: 4,
            at: at("2026-11-22T08:01:00Z"),
            message: "no agent has room".into(),
        });
        let response = info(waiting).await;
        let Value::Object(data) = &response.data else {
            panic!("{:?}", response.errors)
        };
        let Value::Object(s) = &data["compute_session"] else {
            panic!()
        };
        let status_data: serde_json::Value = serde_json::from_str(text(&s["status_data"])).unwrap();
        assert_eq!(
            status_data,
            json!({"scheduler": {"retries": 4, "last_try": "2026-11-22T08:01:00.000000+00:00",
                "msg": "no agent has room"}})
        );
        // Nothing held yet; each kernel shows what it asks for.
        assert_eq!(text(&s["occupying_slots"]), "{}");
        let Value::List(containers) = &s["containers"] else {
            panic!()
        };
        let Value::Object(main) = &containers[0] else {
            panic!()
        };
        assert_eq!(main["agent"], Value::Null);
        let asked: serde_json::Value = serde_json::from_str(text(&main["occupied_slots"])).unwrap();
        assert_eq!(asked, json!({"cpu": "0.5", "mem": "268435456"}));
    }

    #[test]
    fn root_fields_are_put_back_in_the_order_of_the_text() {
        let query = "query Q { keypair { user_id } ...F compute_session(id: \"x\") { id } } \
                     fragment F on Query { list: compute_session_list(limit: 1, offset: 0) \
                     { total_count } keypair { access_key } }";
        assert_eq!(
            root_keys(query, None),
            ["keypair", "list", "compute_session"]
        );
        assert_eq!(root_keys(query, Some("Q")), root_keys(query, None));
        assert_eq!(root_keys(query, Some("R")), Vec::<String>::new());
        assert_eq!(root_keys("{ broken", None), Vec::<String>::new());
        let mut data = Value::from_json(json!({"compute_session": null, "extra": 1,
            "keypair": {"user_id": "u"}, "list": {"total_count": 0}}))
        .unwrap();
        reorder(&mut data, &root_keys(query, None));
        let Value::Object(map) = &data else { panic!() };
        assert_eq!(
            map.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["keypair", "list", "compute_session", "extra"]
        );
    }

    /// Every field of the client's session catalogue, with every container field.
    const WHOLE_CATALOGUE: &str = "query($limit:Int!, $offset:Int!) { compute_session_list(\
        limit:$limit, offset:$offset) { items { id main_kernel_id tag name type image registry \
        cluster_template cluster_mode cluster_size domain_name group_name group_id agent_ids \
        user_email user_id access_key created_user_email created_user_id status status_info \
        status_data status_changed created_at terminated_at starts_at scheduled_at \
        startup_command result resource_opts scaling_group service_ports mounts \
        occupying_slots containers { id cluster_role cluster_idx cluster_hostname session_id \
        image registry status status_info status_data status_changed agent container_id \
        resource_opts occupied_slots preopen_ports live_stat last_stat } dependencies { name id } \
        abusing_reports idle_checks } total_count } }";

    #[tokio::test]
    async fn the_whole_catalogue_is_within_the_limits() {
        let response = schema()
            .execute(
                async_graphql::Request::new(WHOLE_CATALOGUE)
                    .variables(Variables::from_json(json!({"limit": 20, "offset": 0}))),
            )
            .await;
        // It reaches the resolver, which finds no caller in this test's context.
        let messages: Vec<&str> = response.errors.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(messages[0].contains("Ctx"), "{messages:?}");
    }

    #[tokio::test]
    async fn the_schema_refuses_introspection_depth_and_unknown_fields_before_any_read() {
        // Introspection answers nothing.
        let introspection = "{ __schema { types { name } } }";
        let response = schema().execute(introspection).await;
        assert_eq!(
            response.data,
            Value::from_json(json!({"__schema": null})).unwrap(),
            "{:?}",
            response.errors
        );
        // No caller in the context: a query that reached a resolver would fail on that,
        // so each error here is the schema's own.
        for (query, says) in [
            (
                "query($id: UUID!) { compute_session(id: $id) { dependencies { dependencies \
                 { dependencies { dependencies { dependencies { id } } } } } } }",
                "nested too deep",
            ),
            ("{ keypair { password } }", "password"),
            ("{ computeSession(id: \"x\") { id } }", "computeSession"),
            ("mutation { x }", "mutation"),
        ] {
            let response = schema().execute(query).await;
            let message = response
                .errors
                .first()
                .map(|e| e.message.to_lowercase())
                .unwrap_or_else(|| panic!("{query}: no error"));
            assert!(message.contains(&says.to_lowercase()), "{query}: {message}");
        }
    }
}
