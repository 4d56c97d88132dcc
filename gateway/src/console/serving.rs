//! The Serving page (seed `003`'s inference sessions as people deploy them): my model-serving
//! endpoints with their status, replicas and calls, and one endpoint's replicas with their
//! health, its autoscaling and its scaling history, with a form to scale it.

use askama::Template;
use axum::extract::{Form, Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use bytes::Bytes;
use serde::Deserialize;

use super::auth::SameOrigin;
use super::{render, Chrome, PageError, Viewer};
use crate::api;
use crate::caller::Caller;
use crate::model::ServiceOut;
use crate::state::AppState;

/// One endpoint as the page lists it.
pub struct EndpointRow {
    pub id: String,
    pub name: String,
    pub status: String,
    pub replicas: String,
    /// Calls per second over every gateway's last seconds, and calls under way.
    pub calls: String,
    pub under_way: String,
    pub url: String,
    pub public: &'static str,
}

/// A replica of the endpoint shown.
pub struct ReplicaRow {
    pub session: String,
    pub session_href: String,
    pub health: String,
    pub revision: u32,
    pub since: String,
    pub reason: String,
}

/// A change of the wanted replicas.
pub struct ScalingRow {
    pub at: String,
    pub change: String,
    pub reason: String,
    pub figures: String,
}

/// The endpoint shown in full.
pub struct Shown {
    pub id: String,
    pub name: String,
    pub status: String,
    pub degraded: Option<String>,
    pub model: String,
    pub replicas: u32,
    pub autoscaling: String,
    pub routes: Vec<ReplicaRow>,
    pub history: Vec<ScalingRow>,
}

#[derive(Template)]
#[template(path = "serving.html")]
struct ServingPage {
    chrome: Chrome,
    endpoints: Vec<EndpointRow>,
    shown: Option<Shown>,
}

/// The page's state: the endpoint shown.
#[derive(Debug, Default, Deserialize)]
pub struct ServingQuery {
    #[serde(default)]
    pub endpoint: Option<String>,
}

fn shown(s: ServiceOut) -> Shown {
    let autoscaling = match &s.autoscaling {
        None => "none".to_owned(),
        Some(a) => {
            let rules: Vec<String> = a
                .rules
                .iter()
                .map(|r| {
                    let metric = serde_json::to_value(r.metric).unwrap_or_default();
                    let comparator = serde_json::to_value(r.comparator).unwrap_or_default();
                    format!(
                        "{} {} {} → {:+} (cooldown {} s)",
                        metric.as_str().unwrap_or(""),
                        comparator.as_str().unwrap_or(""),
                        r.threshold,
                        r.step,
                        r.cooldown_secs
                    )
                })
                .collect();
            format!(
                "{}–{} replicas; {}",
                a.min_replicas,
                a.max_replicas,
                rules.join("; ")
            )
        }
    };
    Shown {
        id: s.id.to_string(),
        name: s.name,
        status: s.status,
        degraded: s.degraded_reason,
        model: format!(
            "{} from folder {} on port {}, health {} ({})",
            s.model_name, s.model_folder, s.port, s.health_check_path, s.image
        ),
        replicas: s.replicas,
        autoscaling,
        routes: s
            .routes
            .into_iter()
            .map(|r| ReplicaRow {
                session: r.session_id.to_string()[..8].to_owned(),
                session_href: format!("/console/sessions?session={}", r.session_id),
                health: r.health,
                revision: r.revision,
                since: r.since.format("%H:%M:%S").to_string(),
                reason: r.reason.unwrap_or_default(),
            })
            .collect(),
        history: s
            .scaling_history
            .into_iter()
            .rev()
            .map(|h| ScalingRow {
                at: h.at.format("%Y-%m-%d %H:%M:%S").to_string(),
                change: format!("{} → {}", h.previous, h.replicas),
                reason: h.reason,
                figures: h
                    .figures
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            })
            .collect(),
    }
}

/// `GET /console/serving`.
pub async fn page(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    Query(query): Query<ServingQuery>,
) -> Result<Response, PageError> {
    let listed = api::services::list_services(State(state.clone()), Caller(me.clone()))
        .await?
        .0;
    let traffic = crate::db::serving::traffic(&state.pool, crate::serving::TRAFFIC_FRESH)
        .await
        .unwrap_or_default();
    let endpoints = listed
        .services
        .iter()
        .map(|s| {
            let (rate, under_way) = traffic.get(&s.id).copied().unwrap_or_default();
            EndpointRow {
                id: s.id.to_string(),
                name: s.name.clone(),
                status: s.status.clone(),
                replicas: format!("{}/{}", s.healthy_replicas, s.replicas),
                calls: format!("{rate:.1}"),
                under_way: format!("{under_way:.0}"),
                url: s.url.clone(),
                public: if s.open_to_public { "public" } else { "token" },
            }
        })
        .collect();
    let shown = query.endpoint.and_then(|id| {
        listed
            .services
            .into_iter()
            .find(|s| s.id.to_string() == id)
            .map(shown)
    });
    Ok(render(&ServingPage {
        chrome: Chrome::of(&state, &me, "serving").await,
        endpoints,
        shown,
    }))
}

/// The scale form.
#[derive(Debug, Deserialize)]
pub struct ScaleForm {
    pub replicas: u32,
}

/// `POST /console/serving/{id}/scale`: scaled, then back to the endpoint.
pub async fn scale(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Path(id): Path<String>,
    Form(form): Form<ScaleForm>,
) -> Result<Response, PageError> {
    let body = Bytes::from(serde_json::json!({ "replicas": form.replicas }).to_string());
    let _ = api::services::scale_service(
        State(state),
        Caller(me),
        Path(api::services::ServiceId { id: id.clone() }),
        Ok(body),
    )
    .await?;
    Ok(Redirect::to(&format!("/console/serving?endpoint={id}")).into_response())
}
