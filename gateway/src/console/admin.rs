//! The superadmins' pages: the agents (each one's group, capacity, what is free, how long
//! since it was heard, its sessions) and the queue (each resource group's pending sessions in
//! the order the scheduler will try them, each with the reason it waits and its figures),
//! both kept live by the script. Anyone else is refused as the API refuses them.

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use events::payloads::Role;

use super::view;
use super::{render, Chrome, PageError, Viewer};
use crate::api;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::model::{Agent, GroupQueue};
use crate::state::AppState;

pub(super) fn superadmins_only(me: &events::ledger::KeyOwner) -> Result<(), PageError> {
    if me.role == Role::Superadmin {
        Ok(())
    } else {
        Err(PageError(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only superadmins see this page",
        )))
    }
}

/// An agent as its row shows it.
pub struct AgentRow {
    pub a: Agent,
    pub capacity: String,
    pub free: String,
    pub heard: String,
}

#[derive(Template)]
#[template(path = "agents.html")]
struct AgentsPage {
    chrome: Chrome,
    agents: Vec<AgentRow>,
}

/// `GET /console/agents`.
pub async fn agents(
    State(state): State<AppState>,
    Viewer(me): Viewer,
) -> Result<Response, PageError> {
    superadmins_only(&me)?;
    let agents =
        api::catalogue::list_agents(State(state.clone()), Caller(me.clone()), RawQuery(None))
            .await?
            .0
            .agents;
    Ok(render(&AgentsPage {
        chrome: Chrome::of(&state, &me, "agents").await,
        agents: agents
            .into_iter()
            .map(|a| AgentRow {
                capacity: view::amounts(&a.capacity),
                free: view::amounts(&a.free),
                heard: a
                    .heartbeat_age_secs
                    .map_or("-".into(), |s| format!("{} ago", view::duration(s))),
                a,
            })
            .collect(),
    }))
}

#[derive(Template)]
#[template(path = "queue.html")]
struct QueuePage {
    chrome: Chrome,
    groups: Vec<GroupQueue>,
}

/// `GET /console/queue`.
pub async fn queue(
    State(state): State<AppState>,
    Viewer(me): Viewer,
) -> Result<Response, PageError> {
    superadmins_only(&me)?;
    let groups = api::queue::list_queue(State(state.clone()), Caller(me.clone()), RawQuery(None))
        .await?
        .0
        .resource_groups;
    Ok(render(&QueuePage {
        chrome: Chrome::of(&state, &me, "queue").await,
        groups,
    }))
}
