//! The customized images page (seed `003`, "Utilizing converted images"): my images committed
//! from sessions, each with its reference to copy (what a launch names) and a remove button
//! that asks first.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::auth::SameOrigin;
use super::{render, view, Chrome, PageError, Viewer};
use crate::api;
use crate::caller::Caller;
use crate::state::AppState;

/// One image as the page lists it.
pub struct ImageRow {
    pub name: String,
    pub image: String,
    pub size: String,
    pub created: String,
    /// Where it runs, in words.
    pub runs: &'static str,
    pub session_href: String,
}

#[derive(Template)]
#[template(path = "images.html")]
struct ImagesPage {
    chrome: Chrome,
    images: Vec<ImageRow>,
    /// An image whose removal waits for a yes.
    confirm: Option<String>,
}

/// The page's state: the image whose removal is asked about.
#[derive(Debug, Default, Deserialize)]
pub struct ImagesQuery {
    #[serde(default)]
    pub remove: Option<String>,
}

/// `GET /console/images`.
pub async fn page(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    Query(query): Query<ImagesQuery>,
) -> Result<Response, PageError> {
    let listed = api::images::list_images(State(state.clone()), Caller(me.clone()))
        .await?
        .0;
    let images: Vec<ImageRow> = listed
        .items
        .into_iter()
        .map(|i| ImageRow {
            session_href: format!("/console/sessions?session={}", i.session_id),
            size: view::size(i.size_bytes),
            created: i.created_at.format("%Y-%m-%d %H:%M").to_string(),
            runs: match i.runs_on {
                crate::model::ImageReach::Everywhere => {
                    "on any agent (the stack's registry holds it)"
                }
                crate::model::ImageReach::Agent => "on the agent that committed it",
            },
            name: i.name,
            image: i.image,
        })
        .collect();
    let confirm = query
        .remove
        .filter(|name| images.iter().any(|i| &i.name == name));
    Ok(render(&ImagesPage {
        chrome: Chrome::of(&state, &me, "images").await,
        images,
        confirm,
    }))
}

/// `POST /console/images/{name}/remove`: removed, then back to the list.
pub async fn remove(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    let _ = api::images::remove_image(
        State(state),
        Caller(me),
        Path(api::images::ImageName { name }),
    )
    .await?;
    Ok(Redirect::to("/console/images").into_response())
}
