//! The Sessions page (seed `000`): the resource panels, the list with its type filter,
//! Running / Finished tabs, columns and paging, the detail panel of the session named in the
//! URL, the toast of a session just launched, and the session actions (rename, terminate,
//! force-terminate, exempt from the idle checks, commit), each a form that comes back to the
//! page.

use askama::Template;
use axum::extract::{Path, Query, RawQuery, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use events::payloads::{Role, SessionStatus};
use serde::Deserialize;

use super::auth::SameOrigin;
use super::view::{self, Bar};
use super::{json_body, render, Chrome, PageError, Viewer};
use crate::api::{self, SessionId};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::model::{SessionDetail, SessionSummary};
use crate::state::AppState;

/// Rows a page of the list holds.
pub const PAGE_SIZE: i64 = 20;

/// The columns a user may hide or show; name and status are always shown.
pub const COLUMNS: [(&str, &str); 7] = [
    ("type", "Type"),
    ("accelerators", "Accelerators"),
    ("cpu", "CPU"),
    ("memory", "Memory"),
    ("elapsed", "Elapsed"),
    ("agent", "Agent"),
    ("owner", "Owner"),
];

/// The page's state, all of it in the URL.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SessionsQuery {
    /// `running` (default) or `finished`.
    #[serde(default)]
    pub tab: Option<String>,
    /// `all` (default), `interactive`, `batch` or `inference`.
    #[serde(default, rename = "type")]
    pub session_type: Option<String>,
    /// 1-based.
    #[serde(default)]
    pub page: Option<u32>,
    /// Which resource panel: `limit` (default), `group` or `total`.
    #[serde(default)]
    pub panel: Option<String>,
    /// The resource group the panels are about.
    #[serde(default)]
    pub group: Option<String>,
    /// The shown optional columns, comma separated (default: all a role sees).
    #[serde(default)]
    pub cols: Option<String>,
    /// The session whose detail panel is open.
    #[serde(default)]
    pub session: Option<String>,
    /// A session whose termination waits for a yes (the confirmation dialog); with `force`,
    /// a force-termination.
    #[serde(default)]
    pub confirm: Option<String>,
    #[serde(default)]
    pub force: Option<String>,
    /// A session just launched: its toast.
    #[serde(default)]
    pub launched: Option<String>,
}

impl SessionsQuery {
    pub fn tab(&self) -> &str {
        match self.tab.as_deref() {
            Some(t @ ("finished" | "errors")) => t,
            _ => "running",
        }
    }

    pub fn kind(&self) -> &str {
        match self.session_type.as_deref() {
            Some(t @ ("interactive" | "batch" | "inference" | "system")) => t,
            _ => "all",
        }
    }

    pub fn panel(&self) -> &str {
        match self.panel.as_deref() {
            Some(p @ ("group" | "total")) => p,
            _ => "limit",
        }
    }

    pub fn page(&self) -> u32 {
        self.page.unwrap_or(1).max(1)
    }

    /// The optional columns shown, in the table's order; owner and agent only for
    /// superadmins, as the seeds have it.
    pub fn columns(&self, superadmin: bool) -> Vec<&'static str> {
        let chosen: Option<Vec<&str>> = self.cols.as_deref().map(|c| c.split(',').collect());
        COLUMNS
            .iter()
            .map(|(key, _)| *key)
            .filter(|key| superadmin || !matches!(*key, "agent" | "owner"))
            .filter(|key| chosen.as_ref().is_none_or(|c| c.contains(key)))
            .collect()
    }

    /// This view's URL with some of its parameters changed (`None` drops one).
    pub fn with(&self, changes: &[(&str, Option<&str>)]) -> String {
        let mut pairs: Vec<(&str, String)> = [
            ("tab", self.tab.clone()),
            ("type", self.session_type.clone()),
            ("page", self.page.map(|p| p.to_string())),
            ("panel", self.panel.clone()),
            ("group", self.group.clone()),
            ("cols", self.cols.clone()),
            ("session", self.session.clone()),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect();
        for (key, value) in changes {
            pairs.retain(|(k, _)| k != key);
            if let Some(value) = value {
                pairs.push((key, (*value).to_owned()));
            }
        }
        let query = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        if query.is_empty() {
            "/console/sessions".into()
        } else {
            format!("/console/sessions?{query}")
        }
    }

    /// The API's list query for this view.
    fn api_query(&self) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        // Errors (Backend.AI's "Others"): the ended sessions that failed.
        match self.tab() {
            "errors" => {
                query.append_pair("state", "finished");
                query.append_pair("status", SessionStatus::Error.as_str());
            }
            tab => {
                query.append_pair("state", tab);
            }
        }
        if self.kind() != "all" {
            query.append_pair("type", self.kind());
        }
        query.append_pair("limit", &PAGE_SIZE.to_string());
        query.append_pair(
            "offset",
            &(i64::from(self.page() - 1) * PAGE_SIZE).to_string(),
        );
        query.finish()
    }
}

/// One row of the list, as the page writes it.
pub struct Row {
    pub id: String,
    pub name: String,
    pub status: String,
    pub kind: String,
    pub accelerators: String,
    pub cpu: String,
    pub memory: String,
    pub elapsed: String,
    pub agent: String,
    pub owner: String,
    /// The detail panel's link.
    pub href: String,
    /// Whether it may still be terminated (and its apps and terminal reached, once running).
    pub live: bool,
    pub running: bool,
    /// The confirmation dialog of its termination.
    pub terminate_href: String,
}

impl Row {
    fn of(s: &SessionSummary, view: &SessionsQuery) -> Row {
        let id = s.session_id.to_string();
        let status = SessionStatus::parse(&s.status);
        Row {
            href: view.with(&[("session", Some(&id))]),
            live: status.is_some_and(SessionStatus::is_live),
            running: status == Some(SessionStatus::Running),
            terminate_href: view.with(&[("confirm", Some(&id))]),
            id,
            name: s.name.clone(),
            status: s.status.clone(),
            kind: s.session_type.clone(),
            accelerators: if s.allocated.gpu > 0.0 {
                format!("{} GPU", view::number(s.allocated.gpu, 3))
            } else {
                "-".into()
            },
            cpu: format!("{} cores", view::number(s.allocated.cpu, 3)),
            memory: view::size(s.allocated.memory_bytes),
            elapsed: s.elapsed_secs.map_or("-".into(), view::duration),
            agent: s.agent_id.clone().unwrap_or_else(|| "-".into()),
            owner: s.owner.email.clone(),
        }
    }
}

/// A page link.
pub struct PageLink {
    pub number: u32,
    pub href: String,
    pub current: bool,
}

/// A detail field, as a label and its value.
pub struct Field {
    pub label: &'static str,
    pub value: String,
}

/// What the detail panel shows.
pub struct Detail {
    pub d: SessionDetail,
    pub fields: Vec<Field>,
    /// Why it waits or ended, for PENDING, TERMINATED, CANCELLED (and ERROR).
    pub info: Option<String>,
    pub kernels: Vec<KernelRow>,
    pub idle: Option<IdleView>,
    pub running: bool,
    pub ended: bool,
    pub close_href: String,
    /// The confirmation dialogs of its termination and force-termination.
    pub terminate_href: String,
    pub force_href: String,
}

/// The dialog that asks before a session is terminated: which, and what is lost.
pub struct Confirm {
    pub id: String,
    pub name: String,
    pub force: bool,
    /// Where both answers go back to (the view without the dialog).
    pub back: String,
}

pub struct KernelRow {
    pub index: u32,
    pub hostname: String,
    pub agent: String,
}

pub struct IdleView {
    pub exempt: bool,
    pub rows: Vec<IdleRow>,
}

pub struct IdleRow {
    pub checker: String,
    pub figures: String,
    pub remaining: String,
    /// `ok`, `warn` (under a minute left) or `fires`.
    pub level: &'static str,
    pub explanation: String,
}

#[derive(Template)]
#[template(path = "sessions.html")]
struct SessionsPage {
    chrome: Chrome,
    view: SessionsQuery,
    tabs: Vec<(&'static str, &'static str, String, bool)>,
    kinds: Vec<(&'static str, &'static str, String, bool)>,
    panels: Vec<(&'static str, &'static str, String, bool)>,
    bars: Vec<Bar>,
    panel_title: String,
    columns: Vec<&'static str>,
    column_choices: Vec<(&'static str, &'static str, bool)>,
    rows: Vec<Row>,
    total: i64,
    pages: Vec<PageLink>,
    detail: Option<Detail>,
    toast: Option<Toast>,
    confirm: Option<Confirm>,
}

impl SessionsPage {
    fn shows(&self, column: &str) -> bool {
        self.columns.contains(&column)
    }
}

/// The launched session's toast: its status now and its four buttons.
pub struct Toast {
    pub id: String,
    pub name: String,
    pub status: String,
    pub reason: Option<String>,
    pub detail_href: String,
    pub terminate_href: String,
}

/// `GET /console/sessions`.
pub async fn page(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    Query(view): Query<SessionsQuery>,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    // The column settings' form sends a `col` per column shown: kept in the URL as `cols`.
    let raw = raw.unwrap_or_default();
    if form_urlencoded::parse(raw.as_bytes()).any(|(k, _)| k == "columns_chosen") {
        let chosen: Vec<String> = form_urlencoded::parse(raw.as_bytes())
            .filter(|(k, _)| k == "col")
            .map(|(_, v)| v.into_owned())
            .collect();
        let cols = if chosen.is_empty() {
            "none".to_owned()
        } else {
            chosen.join(",")
        };
        return Ok(Redirect::to(&view.with(&[("cols", Some(&cols))])).into_response());
    }
    let superadmin = me.role == Role::Superadmin;
    let caller = || Caller(me.clone());
    let list = api::sessions::list_sessions(
        State(state.clone()),
        caller(),
        RawQuery(Some(view.api_query())),
    )
    .await?
    .0;
    let group = view.group.clone().unwrap_or_else(|| "default".into());
    let summary_query = form_urlencoded::Serializer::new(String::new())
        .append_pair("resource_group", &group)
        .finish();
    let summary = api::resources::resource_summary(
        State(state.clone()),
        caller(),
        RawQuery(Some(summary_query)),
    )
    .await?
    .0;
    let (panel_title, bars) = panel(&summary, view.panel());
    let detail = match view.session.as_deref() {
        Some(id) => Some(detail(&state, &me, id, &view).await?),
        None => None,
    };
    let confirm = match view.confirm.as_deref() {
        Some(id) => {
            let d = session(&state, &me, id).await?;
            Some(Confirm {
                id: d.session_id.to_string(),
                name: d.name,
                force: view.force.is_some(),
                back: view.with(&[("confirm", None), ("force", None)]),
            })
        }
        None => None,
    };
    let toast = match view.launched.as_deref() {
        Some(id) => session(&state, &me, id).await.ok().map(|d| Toast {
            id: d.session_id.to_string(),
            detail_href: view.with(&[("session", Some(&d.session_id.to_string()))]),
            terminate_href: view.with(&[("confirm", Some(&d.session_id.to_string()))]),
            name: d.name,
            status: d.status,
            reason: d.status_reason,
        }),
        None => None,
    };
    let link = |key: &str, value: &str| view.with(&[(key, Some(value)), ("page", None)]);
    let choose = |key: &'static str, current: &str, options: &[(&'static str, &'static str)]| {
        options
            .iter()
            .map(|(value, label)| (*value, *label, link(key, value), *value == current))
            .collect::<Vec<_>>()
    };
    let pages = (list.total.max(1) + PAGE_SIZE - 1) / PAGE_SIZE;
    let page = SessionsPage {
        chrome: Chrome::of(&state, &me, "sessions").await,
        tabs: choose(
            "tab",
            view.tab(),
            &[
                ("running", "Running"),
                ("finished", "Finished"),
                ("errors", "Errors"),
            ],
        ),
        kinds: choose(
            "type",
            view.kind(),
            &[
                ("all", "All"),
                ("interactive", "Interactive"),
                ("batch", "Batch"),
                ("inference", "Inference"),
                // System sessions are the upload sessions (SFTP), as the seeds' filter says.
                ("system", "Upload Sessions"),
            ],
        ),
        panels: choose(
            "panel",
            view.panel(),
            &[
                ("limit", "My total resources limit"),
                ("group", "My resources in resource group"),
                ("total", "Total resources in resource group"),
            ],
        ),
        bars,
        panel_title,
        columns: view.columns(superadmin),
        column_choices: COLUMNS
            .iter()
            .filter(|(key, _)| superadmin || !matches!(*key, "agent" | "owner"))
            .map(|(key, label)| (*key, *label, view.columns(superadmin).contains(key)))
            .collect(),
        rows: list.sessions.iter().map(|s| Row::of(s, &view)).collect(),
        total: list.total,
        pages: (1..=pages as u32)
            .map(|number| PageLink {
                number,
                href: view.with(&[("page", Some(&number.to_string()))]),
                current: number == view.page(),
            })
            .collect(),
        detail,
        toast,
        confirm,
        view,
    };
    Ok(render(&page))
}

/// The panel chosen: its title and its bars (CPU, memory, GPU).
fn panel(s: &crate::model::ResourceSummary, which: &str) -> (String, Vec<Bar>) {
    let mine = &s.my_usage.resources;
    match which {
        "group" => {
            // What I hold in the group, of what I could hold there: my own use plus the
            // group's free resources, capped by my policy's total.
            let cap = &s.my_limits.max_total;
            let free = &s.group.free;
            (
                format!("My resources in resource group {}", s.resource_group),
                vec![
                    Bar::cores("CPU", mine.cpu, (mine.cpu + free.cpu).min(cap.cpu)),
                    Bar::memory(
                        "Memory",
                        mine.memory_bytes,
                        (mine.memory_bytes + free.memory_bytes).min(cap.memory_bytes),
                    ),
                    Bar::gpus("GPU", mine.gpu, (mine.gpu + free.gpu).min(cap.gpu)),
                ],
            )
        }
        "total" => {
            let (used, total) = (&s.group.used, &s.group.total);
            (
                format!(
                    "Total resources in resource group {} ({} agents)",
                    s.resource_group, s.group.agents
                ),
                vec![
                    Bar::cores("CPU", used.cpu, total.cpu),
                    Bar::memory("Memory", used.memory_bytes, total.memory_bytes),
                    Bar::gpus("GPU", used.gpu, total.gpu),
                ],
            )
        }
        _ => {
            let cap = &s.my_limits.max_total;
            (
                format!(
                    "My total resources limit (policy {}, {} of {} sessions)",
                    s.my_limits.resource_policy,
                    s.my_usage.sessions,
                    s.my_limits.max_concurrent_sessions
                ),
                vec![
                    Bar::cores("CPU", mine.cpu, cap.cpu),
                    Bar::memory("Memory", mine.memory_bytes, cap.memory_bytes),
                    Bar::gpus("GPU", mine.gpu, cap.gpu),
                ],
            )
        }
    }
}

/// One session as the API details it to `me`.
pub async fn session(
    state: &AppState,
    me: &events::ledger::KeyOwner,
    id: &str,
) -> Result<SessionDetail, ApiError> {
    let (_, body) = api::sessions::session_detail(
        State(state.clone()),
        Caller(me.clone()),
        Path(SessionId { id: id.to_owned() }),
    )
    .await?;
    serde_json::from_slice(&body).map_err(ApiError::internal)
}

async fn detail(
    state: &AppState,
    me: &events::ledger::KeyOwner,
    id: &str,
    view: &SessionsQuery,
) -> Result<Detail, ApiError> {
    let d = session(state, me, id).await?;
    let status = SessionStatus::parse(&d.status);
    let running = status == Some(SessionStatus::Running);
    let ended = status.is_some_and(SessionStatus::is_terminal);
    let idle = if ended {
        None
    } else {
        // The idle-reaper may be away; the panel then says nothing of idleness.
        api::idle::session_idle(
            State(state.clone()),
            Caller(me.clone()),
            Path(SessionId { id: id.to_owned() }),
        )
        .await
        .ok()
        .map(|readings| idle_view(&readings.0))
    };
    let r = &d.resources;
    let mut info = match d.status.as_str() {
        "PENDING" | "TERMINATED" | "CANCELLED" | "ERROR" => Some(
            d.status_reason
                .clone()
                .unwrap_or_else(|| "no reason was recorded".into()),
        ),
        _ => None,
    };
    // A waiting session says when the scheduler expected it to start, at its first wait.
    if d.status == "PENDING" {
        if let Ok(Some((estimate, at))) =
            crate::db::estimates::of_session(&state.pool, d.session_id).await
        {
            let expected = match estimate.wait_secs {
                Some(_) => format!(
                    " Expected to start {} from {} (berth's estimate at its first wait).",
                    estimate.words(),
                    at.format("%H:%M UTC")
                ),
                None => format!(" {} (berth's estimate).", estimate.words()),
            };
            info = info.map(|i| format!("{i}.{expected}"));
        }
    }
    let usage = d.usage.as_ref();
    let fields = vec![
        Field {
            label: "Session ID",
            value: d.session_id.to_string(),
        },
        Field {
            label: "User",
            value: d.owner.email.clone(),
        },
        Field {
            label: "Status",
            value: d.status.clone(),
        },
        Field {
            label: "Type",
            value: d.session_type.clone(),
        },
        Field {
            label: "Environment",
            value: d.image.clone(),
        },
        Field {
            label: "Resource group",
            value: d.resource_group.clone(),
        },
        Field {
            label: "Priority",
            value: d.priority.to_string(),
        },
        Field {
            label: "Mounts",
            value: if d.request.mounts.is_empty() {
                "none".into()
            } else {
                d.request.mounts.join(", ")
            },
        },
        Field {
            label: "Resources (per kernel)",
            value: format!(
                "{} cores, {} memory, {} shared memory{}",
                view::number(r.cpu_milli as f64 / 1000.0, 3),
                view::size(r.memory_bytes as i64),
                view::size(d.shared_memory_bytes),
                if r.gpu_milli > 0 {
                    format!(", {} GPU", view::number(r.gpu_milli as f64 / 1000.0, 3))
                } else {
                    String::new()
                }
            ),
        },
        Field {
            label: "Reserved",
            value: d.reserved_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        },
        Field {
            label: "Started",
            value: d.started_at.map_or("-".into(), |t| {
                t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
            }),
        },
        Field {
            label: "Elapsed",
            value: d.elapsed_secs.map_or("-".into(), view::duration),
        },
        Field {
            label: "Agent",
            value: d.agent_id.clone().unwrap_or_else(|| "-".into()),
        },
        Field {
            label: "Cluster",
            value: format!("{} x{}", d.cluster_mode, d.cluster_size),
        },
        Field {
            label: "Usage",
            value: usage.map_or("no sample yet".into(), |u| {
                // A session holding GPUs shows theirs too (measured where the agent can).
                let gpu = match (u.gpu_percent, u.gpu_memory_percent) {
                    (None, None) => String::new(),
                    (used, memory) => format!(
                        ", GPU {}% (memory {}%)",
                        used.map_or("-".into(), |p| view::number(p, 1)),
                        memory.map_or("-".into(), |p| view::number(p, 1))
                    ),
                };
                format!(
                    "CPU {}%, memory {}{gpu}, network in {} / out {}",
                    u.cpu_percent.map_or("-".into(), |p| view::number(p, 1)),
                    view::size(u.memory_bytes),
                    view::size(u.network_rx_bytes),
                    view::size(u.network_tx_bytes)
                )
            }),
        },
        Field {
            label: "Exit code",
            value: d.exit_code.map_or("-".into(), |c| c.to_string()),
        },
    ];
    let kernels = d
        .kernels
        .iter()
        .enumerate()
        .map(|(i, k)| KernelRow {
            index: i as u32,
            hostname: d
                .containers
                .iter()
                .find(|c| c.kernel == i as u32)
                .and_then(|c| c.hostname.clone())
                .unwrap_or_else(|| "-".into()),
            agent: k.agent_id.clone(),
        })
        .collect();
    Ok(Detail {
        fields,
        info,
        kernels,
        idle,
        running,
        ended,
        close_href: view.with(&[("session", None)]),
        terminate_href: view.with(&[("confirm", Some(id))]),
        force_href: view.with(&[("confirm", Some(id)), ("force", Some("1"))]),
        d,
    })
}

fn idle_view(r: &events::idleness::SessionReadings) -> IdleView {
    IdleView {
        exempt: r.exempt,
        rows: r
            .readings
            .iter()
            .map(|reading| {
                let level = match reading.alarm() {
                    events::idleness::Alarm::Due => "fires",
                    events::idleness::Alarm::Near => "warn",
                    events::idleness::Alarm::Calm => "ok",
                };
                IdleRow {
                    checker: format!("{:?}", reading.checker).to_lowercase(),
                    figures: reading
                        .measures
                        .iter()
                        .map(|m| {
                            format!(
                                "{} {} (threshold {})",
                                m.name,
                                view::number(m.value, 1),
                                view::number(m.threshold, 1)
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; "),
                    remaining: reading.remaining_secs.map_or("-".into(), view::duration),
                    level,
                    explanation: reading.explanation.clone(),
                }
            })
            .collect(),
    }
}

/// What a session action's form sends: the field its action reads, and the page to return to.
#[derive(Debug, Default, Deserialize)]
pub struct ActionForm {
    /// A new name (`rename`), or the image's (`commit`).
    #[serde(default)]
    name: String,
    /// Why it is exempt (`exempt`).
    #[serde(default)]
    reason: String,
    /// Present: terminate at once (`terminate`).
    #[serde(default)]
    force: Option<String>,
    #[serde(default)]
    back: String,
}

/// Where an action returns: the page it was sent from, a console page only.
fn back_to(back: &str, id: &str) -> String {
    if back.starts_with("/console/") && !back.starts_with("//") {
        back.to_owned()
    } else {
        format!("/console/sessions?session={id}")
    }
}

/// `POST /console/sessions/{id}/{action}`: `rename`, `terminate` (`force` ends it at once),
/// `exempt` from the idle checks (saying why) or `commit` to an image (its progress is on the
/// event stream and in the notifications), each through the API's handler, then back to the
/// page it was sent from.
pub async fn act(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Result<Response, PageError> {
    let (state, caller) = (State(state), Caller(me));
    let session = Path(SessionId { id: id.clone() });
    match action.as_str() {
        "rename" => {
            let body = json_body(&serde_json::json!({ "name": form.name }));
            let _ = api::sessions::rename_session(state, caller, session, body).await?;
        }
        "terminate" => {
            let query = RawQuery(form.force.is_some().then(|| "force=true".to_owned()));
            let _ = api::sessions::terminate_session(state, caller, session, query).await?;
        }
        "exempt" => {
            let body = json_body(&serde_json::json!({ "reason": form.reason.trim() }));
            let _ = api::idle::exempt_session(state, caller, session, body).await?;
        }
        "commit" => {
            let body = json_body(&serde_json::json!({ "name": form.name }));
            let _ = api::images::commit_session(state, caller, session, body).await?;
        }
        _ => return Err(ApiError::not_found(format!("no session action `{action}`")).into()),
    }
    Ok(Redirect::to(&back_to(&form.back, &id)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_keeps_its_state_in_the_url() {
        let view = SessionsQuery {
            tab: Some("finished".into()),
            session_type: Some("batch".into()),
            page: Some(2),
            ..SessionsQuery::default()
        };
        assert_eq!(
            view.with(&[("page", None)]),
            "/console/sessions?tab=finished&type=batch"
        );
        assert_eq!(
            view.api_query(),
            "state=finished&type=batch&limit=20&offset=20"
        );
        let unknown = SessionsQuery {
            tab: Some("nonsense".into()),
            session_type: Some("upload".into()),
            ..SessionsQuery::default()
        };
        assert_eq!((unknown.tab(), unknown.kind()), ("running", "all"));
    }

    #[test]
    fn owner_and_agent_columns_are_for_superadmins() {
        let view = SessionsQuery::default();
        assert!(!view.columns(false).contains(&"owner"));
        assert!(view.columns(true).contains(&"owner"));
        let chosen = SessionsQuery {
            cols: Some("elapsed,owner".into()),
            ..SessionsQuery::default()
        };
        assert_eq!(chosen.columns(false), vec!["elapsed"]);
    }
}
