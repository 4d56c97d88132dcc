//! The model endpoints as GraphQL's `Endpoint` shows them (`service list`: `endpoint_list`;
//! `service info` and `get-endpoint`: `endpoint`), from the endpoints' streams as `/v1/services`
//! reads them. A replica is a `Routing` whose id is its session's (berth keeps no other id for
//! a route). A page is cut from the caller's endpoints (they are few); `filter` is refused as
//! the sessions' is, `order` takes `[+|-]name` and `[+|-]created_at`.

use async_graphql::{Result, SimpleObject};
use domain::serving::{Endpoint as Served, RouteHealth};
use uuid::Uuid;

use super::session::DateTime;

/// Backend.AI's `Endpoint`: the fields its client reads.
#[derive(SimpleObject, Clone)]
#[graphql(serial, rename_fields = "snake_case")]
pub struct Endpoint {
    endpoint_id: Uuid,
    image: String,
    domain: String,
    project: Option<String>,
    resource_group: String,
    /// Each replica's resources, as JSON text (graphene's `JSONString`).
    resource_slots: String,
    url: String,
    /// The model folder's id, as Backend.AI's folder calls name it.
    model: Uuid,
    /// Backend.AI's spelling. berth mounts the model folder at `/home/work/<folder>`.
    model_mount_destiation: String,
    created_user: Uuid,
    created_user_email: String,
    created_user_id: Uuid,
    session_owner: Uuid,
    session_owner_email: String,
    session_owner_id: Uuid,
    tag: Option<String>,
    /// The model definition's start command.
    startup_command: String,
    bootstrap_script: Option<String>,
    callback_url: Option<String>,
    environ: String,
    name: String,
    resource_opts: String,
    desired_session_count: i32,
    cluster_mode: String,
    cluster_size: i32,
    open_to_public: bool,
    created_at: DateTime,
    destroyed_at: Option<DateTime>,
    routings: Vec<Routing>,
    /// Replicas that left without serving since one last served.
    retries: i32,
    /// berth's status of the endpoint (`healthy`, `degraded`, ...).
    status: String,
    lifecycle_stage: String,
}

/// Backend.AI's `Routing`: one replica.
#[derive(SimpleObject, Clone)]
#[graphql(serial, rename_fields = "snake_case")]
pub struct Routing {
    routing_id: Uuid,
    endpoint: String,
    session: Uuid,
    /// `provisioning`, `healthy` or `unhealthy` (a draining replica is, as Backend.AI's
    /// terminating route is).
    status: String,
    /// 1 for a replica that takes calls as they come, 0 for a draining one.
    traffic_ratio: f64,
    created_at: DateTime,
}

/// A page of endpoints, with how many there are in all.
#[derive(SimpleObject)]
#[graphql(serial, rename_fields = "snake_case")]
pub struct EndpointList {
    items: Vec<Endpoint>,
    total_count: i64,
}

/// `served` as GraphQL shows it: answering at `url`, its model folder known to Backend.AI's
/// client as `folder`.
pub fn endpoint(served: &Served, url: String, folder: Uuid) -> Endpoint {
    let created = &served.created;
    let owner = created.owner.user_id;
    let routings = served
        .routes
        .values()
        .map(|r| Routing {
            routing_id: r.session_id,
            endpoint: created.endpoint_id.to_string(),
            session: r.session_id,
            status: match r.health {
                RouteHealth::Starting => "provisioning",
                RouteHealth::Healthy => "healthy",
                RouteHealth::Unhealthy | RouteHealth::Draining => "unhealthy",
            }
            .into(),
            traffic_ratio: match r.health {
                RouteHealth::Draining => 0.0,
                _ => 1.0,
            },
            created_at: DateTime(r.added_at),
        })
        .collect();
    let slots = &created.resources;
    Endpoint {
        endpoint_id: created.endpoint_id,
        image: created.image.clone(),
        domain: "default".into(),
        project: created.owner.project.clone(),
        resource_group: created.resource_group.clone(),
        resource_slots: serde_json::json!({
            "cpu": format!("{}", slots.cpu_milli as f64 / 1000.0),
            "mem": slots.memory_bytes.to_string(),
            "cuda.shares": format!("{}", slots.gpu_milli as f64 / 1000.0),
        })
        .to_string(),
        url,
        model: folder,
        model_mount_destiation: format!("/home/work/{}", created.model_folder),
        created_user: owner,
        created_user_email: created.owner.email.clone(),
        created_user_id: owner,
        session_owner: owner,
        session_owner_email: created.owner.email.clone(),
        session_owner_id: owner,
        tag: None,
        startup_command: created.model.start_command.clone(),
        bootstrap_script: None,
        callback_url: None,
        environ: "{}".into(),
        name: created.name.clone(),
        resource_opts: "{}".into(),
        desired_session_count: served.replicas as i32,
        cluster_mode: "single-node".into(),
        cluster_size: 1,
        open_to_public: created.open_to_public,
        created_at: DateTime(served.created_at),
        destroyed_at: None,
        routings,
        retries: served.failed_in_a_row as i32,
        status: served.status().to_owned(),
        lifecycle_stage: if served.destroyed {
            "destroying"
        } else {
            "created"
        }
        .into(),
    }
}

/// A page of `endpoints`: ordered by `order` (`[+|-]name|created_at`, by name by default),
/// `offset` skipped, `limit` kept.
pub fn page(
    endpoints: Vec<Endpoint>,
    order: Option<&str>,
    filter: Option<&str>,
    limit: i32,
    offset: i32,
) -> Result<EndpointList> {
    let sort = |endpoints: &mut Vec<Endpoint>, column: &str| {
        match column {
            "name" => endpoints.sort_by(|a, b| a.name.cmp(&b.name)),
            "created_at" => endpoints.sort_by_key(|e| e.created_at.0),
            other => return Err(format!("cannot order by `{other}`: name or created_at")),
        }
        Ok(())
    };
    let (items, total_count) =
        super::page_of(endpoints, order, "name", filter, (limit, offset), sort)?;
    Ok(EndpointList { items, total_count })
}
