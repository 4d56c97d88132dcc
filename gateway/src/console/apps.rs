//! A session's apps (seed `001`, "Use Jupyter Notebook", "Use web terminal"): the app
//! launcher dialog (the terminal, the image's apps, the preopen ports, with "open app to
//! public" and "try preferred port"), the session's SSH key to download, opening one
//! (started first when berth serves it, then a circuit, then the browser sent to the
//! circuit's single-use link), and the log viewer, kept whole on the page and followed live
//! by the script.

use askama::Template;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use bytes::Bytes;
use domain::apps::AppProtocol;
use serde::Deserialize;

use super::auth::SameOrigin;
use super::{json_body, render, Chrome, PageError, Viewer};
use crate::api::{self, apps::SessionApp, SessionId};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::model::KernelLog;
use crate::state::AppState;

/// An app as the dialog lists it.
pub struct AppRow {
    pub name: String,
    pub label: String,
    pub protocol: &'static str,
    pub ports: String,
    /// Whether a browser opens it (a raw TCP app gives an address instead).
    pub http: bool,
}

#[derive(Template)]
#[template(path = "apps.html")]
struct AppsDialog {
    chrome: Chrome,
    session_id: String,
    session_name: String,
    apps: Vec<AppRow>,
    preopen: Vec<AppRow>,
}

fn label(name: &str, protocol: AppProtocol) -> String {
    match (name, protocol) {
        (domain::apps::TERMINAL, _) => "Terminal".into(),
        (domain::apps::SSH, _) => "SSH / SFTP".into(),
        ("jupyter", _) => "Jupyter".into(),
        (_, AppProtocol::Preopen) => format!("Port {name}"),
        _ => name.to_owned(),
    }
}

fn protocol_name(protocol: AppProtocol) -> &'static str {
    match protocol {
        AppProtocol::Http => "http",
        AppProtocol::Preopen => "preopen",
        AppProtocol::Pty => "terminal",
        _ => "tcp",
    }
}

/// `GET /console/sessions/{id}/apps`.
pub async fn dialog(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let session = super::sessions::session(&state, &me, &id).await?;
    let listed = api::apps::list_apps(
        State(state.clone()),
        Caller(me.clone()),
        Path(SessionId { id: id.clone() }),
    )
    .await?
    .0;
    let rows = listed.apps.iter().map(|a| AppRow {
        name: a.name.clone(),
        label: label(&a.name, a.protocol),
        protocol: protocol_name(a.protocol),
        ports: a
            .ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        http: a.protocol.is_http(),
    });
    let (preopen, apps): (Vec<_>, Vec<_>) = rows.partition(|a| a.protocol == "preopen");
    Ok(render(&AppsDialog {
        chrome: Chrome::of(&state, &me, "sessions").await,
        session_id: id,
        session_name: session.name,
        apps,
        preopen,
    }))
}

/// `GET /console/sessions/{id}/ssh-key`: the session's SSH key as a file to save, as
/// `GET /v1/sessions/{id}/ssh-key` answers it.
pub async fn ssh_key(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    Ok(
        api::apps::ssh_key(State(state), Caller(me), Path(SessionId { id }))
            .await?
            .into_response(),
    )
}

#[derive(Debug, Default, Deserialize)]
pub struct OpenForm {
    #[serde(default)]
    public: Option<String>,
    #[serde(default)]
    allowed_ips: String,
    #[serde(default)]
    try_preferred: Option<String>,
    #[serde(default)]
    preferred_port: String,
}

#[derive(Template)]
#[template(path = "app_address.html")]
struct AppAddress {
    chrome: Chrome,
    app: String,
    url: String,
    session_id: String,
}

/// `POST /console/sessions/{id}/apps/{app}`: starts the app where berth serves it, opens a
/// circuit to it and sends the browser there (a raw TCP app: a page with its address).
pub async fn open(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Path((id, app)): Path<(String, String)>,
    headers: HeaderMap,
    Form(form): Form<OpenForm>,
) -> Result<Response, PageError> {
    let preferred_port = if form.try_preferred.is_some() && !form.preferred_port.is_empty() {
        Some(form.preferred_port.trim().parse::<u16>().map_err(|_| {
            ApiError::invalid("preferred_port", "a port is a number from 1 to 65535")
        })?)
    } else {
        None
    };
    let allowed_ips: Vec<&str> = form
        .allowed_ips
        .split([',', ' '])
        .filter(|s| !s.is_empty())
        .collect();
    let path = || {
        Path(SessionApp {
            id: id.clone(),
            app: app.clone(),
        })
    };
    let _ = api::apps::start_app(
        State(state.clone()),
        Caller(me.clone()),
        path(),
        Ok(Bytes::from_static(b"{}")),
    )
    .await?;
    let body = serde_json::json!({
        "public": form.public.is_some(),
        "allowed_ips": allowed_ips,
        "preferred_port": preferred_port,
    });
    let opened = api::apps::open_app(
        State(state.clone()),
        Caller(me.clone()),
        path(),
        headers,
        json_body(&body),
    )
    .await?
    .0;
    if opened.protocol.is_http() {
        return Ok(Redirect::to(&opened.url).into_response());
    }
    Ok(render(&AppAddress {
        chrome: Chrome::of(&state, &me, "sessions").await,
        app,
        url: opened.url,
        session_id: id,
    }))
}

#[derive(Template)]
#[template(path = "logs.html")]
struct LogsPage {
    chrome: Chrome,
    session_id: String,
    session_name: String,
    status: String,
    kernels: Vec<KernelLog>,
}

/// `GET /console/sessions/{id}/logs` (`kernel=N`: that kernel's only).
pub async fn logs(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    let session = super::sessions::session(&state, &me, &id).await?;
    let kernel: Option<i32> = form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "kernel")
        .and_then(|(_, v)| v.parse().ok());
    let response = api::logs::session_logs(
        State(state.clone()),
        Caller(me.clone()),
        Path(SessionId { id: id.clone() }),
        RawQuery(None),
    )
    .await?;
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .map_err(ApiError::internal)?;
    let logs: crate::model::Logs = serde_json::from_slice(&body).map_err(ApiError::internal)?;
    Ok(render(&LogsPage {
        chrome: Chrome::of(&state, &me, "sessions").await,
        session_id: id,
        session_name: session.name,
        status: logs.status,
        kernels: logs
            .kernels
            .into_iter()
            .filter(|k| kernel.is_none_or(|n| n == k.kernel))
            .collect(),
    }))
}
