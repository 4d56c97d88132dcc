//! The web console under `/console`: the seeds' pages (Sessions, the launcher, the detail
//! panel, the scheduling history, apps, Data, my customized images, Serving, notifications, and for
//! superadmins the agents, the queue and the administration pages), rendered on the server from askama templates compiled into the binary, with
//! one stylesheet and one script module served from the binary too. Every view's state is
//! in its URL, so a refresh or a shared link shows the same view.
//!
//! The console is a client of the API's own handlers: a page calls them with the signed-in
//! user as the caller and renders what they answer, so the console can show nothing the API
//! would not, and a rule lives in one place. Writes are HTML forms (POST, checked against
//! the gateway's own origin, then a redirect); the script only keeps pages live over the
//! SSE stream and draws the usage charts.
//!
//! - `auth`: sign-in (API key or email and password), the `berth_console` cookie, sign-out,
//!   the origin check, and [`Viewer`], the signed-in user of a page.
//! - `sessions`: the Sessions page, its detail panel and the session actions.
//! - `history`: the scheduling history modal.
//! - `launcher`: the five-step launcher and Recent History.
//! - `apps`: the app launcher dialog (the terminal among its apps) and the log viewer.
//! - `data`: the Data page, my folders and their shares, and each folder's explorer (upload,
//!   download, directories, removal).
//! - `images`: my customized images, their references to copy, and their removal.
//! - `serving`: my model-serving endpoints, one's replicas, autoscaling and scaling history.
//! - `notifications`, `admin`: the header's list; the agents page and the queue.
//! - `manage`: the superadmins' administration pages (users, keys, projects, policies,
//!   presets, the image catalogue's listings), forms over the admin API's own handlers.
//! - `view`: pure formatting (sizes, durations, bars), unit-tested.
//! - `assets`: the stylesheet, the script and xterm.js, embedded.

mod admin;
mod apps;
pub mod assets;
pub mod auth;
mod data;
mod history;
mod images;
mod launcher;
mod manage;
mod notifications;
mod serving;
mod sessions;
mod view;

pub use auth::{Viewer, SIGN_IN_LASTS};

use askama::Template;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::error::ApiError;
use crate::state::AppState;

/// The console's content security policy: every script, style, image and connection from
/// the gateway itself; no inline script or style; never framed. Forms may post anywhere the
/// console redirects them (an app opens on a circuit's own port).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; frame-ancestors 'none'";

/// Whether a request to the gateway's root comes from a browser (it accepts HTML), which is
/// sent to the console; a program (Backend.AI's client, `curl`) gets the root's JSON.
pub fn wants_page(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let html = parts
                .next()
                .is_some_and(|t| t.eq_ignore_ascii_case("text/html"));
            // `q=0` says "not this".
            html && !parts.any(|p| p.replace(' ', "") == "q=0")
        })
}

/// Where the gateway's root sends a browser.
pub fn front_door() -> Redirect {
    Redirect::to("/console/sessions")
}

/// Every console route.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::to("/console/sessions") }),
        )
        .route(
            "/console/",
            get(|| async { Redirect::to("/console/sessions") }),
        )
        .route("/console/sign-in", get(auth::form).post(auth::sign_in))
        .route("/console/sign-out", post(auth::sign_out))
        .route("/console/sessions", get(sessions::page))
        .route("/console/sessions/{id}/{action}", post(sessions::act))
        .route("/console/sessions/{id}/history", get(history::page))
        .route("/console/sessions/{id}/apps", get(apps::dialog))
        .route("/console/sessions/{id}/ssh-key", get(apps::ssh_key))
        .route("/console/sessions/{id}/apps/{app}", post(apps::open))
        .route("/console/sessions/{id}/logs", get(apps::logs))
        .route(
            "/console/launch",
            get(launcher::page).post(launcher::launch),
        )
        .route("/console/launches/{id}", post(launcher::edit_launch))
        .route("/console/fit-watches", post(launcher::watch_fit))
        .route("/console/folders", post(launcher::create_folder))
        .route("/console/data", get(data::page).post(data::create))
        .route("/console/folder-shares", post(data::share))
        .route("/console/folder-steps", post(data::folder_step))
        .route("/console/upload-sessions", post(data::start_upload_session))
        .route("/console/data/{folder}", get(data::folder))
        .route("/console/data/{folder}/download", get(data::download))
        .route(
            "/console/data/{folder}/directories",
            post(data::make_directory),
        )
        .route("/console/data/{folder}/remove", post(data::remove))
        .route("/console/data/{folder}/move", post(data::move_entry))
        .route(
            "/console/notifications",
            get(notifications::page).post(notifications::mark_read),
        )
        .route("/console/serving", get(serving::page))
        .route("/console/serving/{id}/scale", post(serving::scale))
        .route("/console/images", get(images::page))
        .route("/console/images/{name}/remove", post(images::remove))
        .route("/console/agents", get(admin::agents))
        .route("/console/queue", get(admin::queue))
        .route("/console/admin/{section}", get(manage::page))
        .route("/console/admin/{section}/{verb}", post(manage::act))
        .route("/console/assets/{name}", get(assets::serve))
        .layer(axum::middleware::map_response(secure))
}

/// The console's headers on every answer: the content security policy, no sniffing, no
/// framing, no referrer beyond the gateway, and nothing kept by shared caches.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// `value` as the body an API handler takes: the console hands the handlers what a client
/// would send them.
fn json_body(
    value: &serde_json::Value,
) -> Result<bytes::Bytes, axum::extract::rejection::BytesRejection> {
    Ok(bytes::Bytes::from(value.to_string()))
}

/// A page, rendered; a template that fails to render is berth's failure, never the user's.
fn render(page: &impl Template) -> Response {
    match page.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => ApiError::internal(format!("a console template failed: {e}")).into_response(),
    }
}

/// What a page could not show: the API's error (its status kept), as a page that says so.
pub struct PageError(pub ApiError);

impl<E: Into<ApiError>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError(e.into())
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    status: u16,
    message: &'a str,
    field: Option<&'a str>,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let ApiError {
            status,
            message,
            field,
            ..
        } = &self.0;
        let page = ErrorPage {
            status: status.as_u16(),
            message,
            field: field.as_deref(),
        };
        let mut response = render(&page);
        *response.status_mut() = if response.status() == StatusCode::OK {
            *status
        } else {
            response.status()
        };
        response
    }
}

/// What every page's header shows: who is signed in, the navigation (the superadmins'
/// pages for them only) and the unread notifications.
pub struct Chrome {
    pub email: String,
    pub superadmin: bool,
    pub unread: i64,
    /// The page the navigation marks as current.
    pub nav: &'static str,
}

impl Chrome {
    async fn of(state: &AppState, me: &events::ledger::KeyOwner, nav: &'static str) -> Chrome {
        // The count is a courtesy: a page still shows when it cannot be read.
        let unread = crate::db::notifications::unread_count(&state.pool, me.user_id)
            .await
            .unwrap_or(0);
        Chrome {
            email: me.email.clone(),
            superadmin: me.role == events::payloads::Role::Superadmin,
            unread,
            nav,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    fn accepting(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_browser_is_sent_to_the_console_and_a_program_is_not() {
        // What Chromium and Firefox send for a page.
        assert!(wants_page(&accepting(
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        )));
        assert!(wants_page(&accepting("TEXT/HTML")));
        // aiohttp (Backend.AI's client), curl, and a client refusing HTML.
        assert!(!wants_page(&accepting("*/*")));
        assert!(!wants_page(&accepting("application/json")));
        assert!(!wants_page(&accepting("text/html;q=0, application/json")));
        assert!(!wants_page(&HeaderMap::new()));
    }
}
