//! The header's notifications (seed `001`, "notification"): the list, newest first, with the
//! unread ones marked, and marking them read.

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Redirect, Response};
use bytes::Bytes;

use super::auth::SameOrigin;
use super::{render, Chrome, PageError, Viewer};
use crate::api;
use crate::caller::Caller;
use crate::model::NoticeItem;
use crate::state::AppState;

#[derive(Template)]
#[template(path = "notifications.html")]
struct NotificationsPage {
    chrome: Chrome,
    items: Vec<NoticeItem>,
}

/// `GET /console/notifications`.
pub async fn page(
    State(state): State<AppState>,
    Viewer(me): Viewer,
) -> Result<Response, PageError> {
    let page = api::notifications::list_notifications(
        State(state.clone()),
        Caller(me.clone()),
        RawQuery(Some("limit=100".into())),
    )
    .await?
    .0;
    Ok(render(&NotificationsPage {
        chrome: Chrome::of(&state, &me, "notifications").await,
        items: page.items,
    }))
}

/// `POST /console/notifications`: every notification is marked read.
pub async fn mark_read(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
) -> Result<Response, PageError> {
    let _ = api::notifications::mark_read(
        State(state),
        Caller(me),
        Ok(Bytes::from_static(br#"{"all": true}"#)),
    )
    .await?;
    Ok(Redirect::to("/console/notifications").into_response())
}
