//! The launcher (seeds `001`, `003`): five steps (session type and name; environment and
//! resources; data and storage; network; confirm and launch), a step menu and "Skip to
//! review", an error card for each field a launch would refuse (the launcher's own checks,
//! run without writing), the no-folder warning, creating a folder that is selected at once,
//! and Recent History (the five last launches, renamed, pinned and relaunched through the
//! review step).
//!
//! Every field travels in the URL (each step is a GET form carrying the others as hidden
//! fields), so a step can be refreshed or shared; the launch itself is a POST.

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use bytes::Bytes;
use events::ledger::KeyOwner;
use events::payloads::Role;
use launcher::launch::CreateSession;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::auth::SameOrigin;
use super::{json_body, render, Chrome, PageError, Viewer};
use crate::api;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::model::{Agent, Environment, Folder, Launch, Preset, ResourceGroup};
use crate::state::AppState;

/// The steps, by number.
pub const STEPS: [&str; 5] = [
    "Session type",
    "Environment & resources",
    "Data & storage",
    "Network",
    "Confirm and launch",
];

/// The fields each step asks for; the review shows them under its step's card.
const STEP_FIELDS: [&[&str]; 4] = [
    &[
        "type",
        "name",
        "owner_email",
        "project",
        "startup_command",
        "starts_at",
        "batch_timeout",
    ],
    &[
        "environment",
        "image",
        "env",
        "resource_group",
        "preset",
        "cpu",
        "memory",
        "shared_memory",
        "gpu",
        "count",
        "agent",
        "cluster_mode",
        "cluster_size",
        "omp_num_threads",
    ],
    &["mount"],
    &["preopen_ports"],
];

/// The API's field names that a form field feeds, for placing an error card on its step.
fn step_of_api_field(field: &str) -> usize {
    let root = field
        .split(['.', '['])
        .next()
        .unwrap_or(field)
        .trim_start_matches("resources.");
    match root {
        "type" | "name" | "owner_email" | "project" | "startup_command" | "starts_at"
        | "batch_timeout" => 1,
        "mounts" => 3,
        "preopen_ports" => 4,
        _ => 2,
    }
}

/// The launcher's fields as the form sends them: each text as typed, the folders as a list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaunchForm {
    /// Every single-valued field, by its form name.
    pub fields: Vec<(String, String)>,
    pub mounts: Vec<String>,
    pub confirm_no_folder: bool,
    /// The review comes back from "notify me when it fits": the shape is watched.
    pub watching: bool,
}

impl LaunchForm {
    /// Reads a form or a query string (`mount` may repeat).
    pub fn parse(text: &str) -> LaunchForm {
        let mut form = LaunchForm::default();
        for (key, value) in form_urlencoded::parse(text.as_bytes()) {
            match key.as_ref() {
                "mount"
                    if !value.trim().is_empty()
                        && !form.mounts.contains(&value.trim().to_owned()) =>
                {
                    form.mounts.push(value.trim().to_owned())
                }
                "confirm_no_folder" => form.confirm_no_folder = true,
                "watching" => form.watching = true,
                "step" | "mount" | "from" => {}
                key if STEP_FIELDS.iter().any(|fields| fields.contains(&key)) => {
                    form.fields.retain(|(k, _)| k != key);
                    if !value.is_empty() {
                        form.fields.push((key.to_owned(), value.into_owned()));
                    }
                }
                _ => {}
            }
        }
        form
    }

    /// The form a kept create request fills (Recent History's relaunch).
    pub fn from_request(request: &Value) -> LaunchForm {
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let mut form = LaunchForm::default();
        let mut set = |field: &str, value: String| form.fields.push((field.to_owned(), value));
        for field in [
            "type",
            "name",
            "owner_email",
            "project",
            "startup_command",
            "image",
            "resource_group",
            "preset",
            "agent",
            "cluster_mode",
            "batch_timeout",
            "count",
            "cluster_size",
            "omp_num_threads",
        ] {
            if let Some(v) = request.get(field).filter(|v| !v.is_null()) {
                set(field, text(v));
            }
        }
        if let Some(at) = request.get("starts_at").and_then(Value::as_str) {
            set("starts_at", at.to_owned());
        }
        if let Some(resources) = request.get("resources").and_then(Value::as_object) {
            for (field, v) in resources.iter().filter(|(_, v)| !v.is_null()) {
                set(field, text(v));
            }
        }
        if let Some(env) = request.get("environment").and_then(Value::as_object) {
            let lines: Vec<String> = env
                .iter()
                .map(|(k, v)| format!("{k}={}", text(v)))
                .collect();
            if !lines.is_empty() {
                set("env", lines.join("\n"));
            }
        }
        if let Some(ports) = request.get("preopen_ports").and_then(Value::as_array) {
            let ports: Vec<String> = ports.iter().map(text).collect();
            if !ports.is_empty() {
                set("preopen_ports", ports.join(" "));
            }
        }
        form.mounts = request
            .get("mounts")
            .and_then(Value::as_array)
            .map(|m| {
                m.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        form
    }

    pub fn get(&self, field: &str) -> &str {
        self.fields
            .iter()
            .find(|(k, _)| k == field)
            .map_or("", |(_, v)| v.as_str())
    }

    /// Every field as (name, value) pairs, folders repeated: hidden inputs and links.
    pub fn pairs(&self) -> Vec<(String, String)> {
        let mut pairs = self.fields.clone();
        pairs.extend(self.mounts.iter().map(|m| ("mount".to_owned(), m.clone())));
        pairs
    }

    /// The pairs of every step but `step`: the hidden inputs of that step's form.
    pub fn hidden_for(&self, step: usize) -> Vec<(String, String)> {
        let own: &[&str] = STEP_FIELDS
            .get(step.wrapping_sub(1))
            .copied()
            .unwrap_or(&[]);
        self.pairs()
            .into_iter()
            .filter(|(k, _)| !own.contains(&k.as_str()))
            .collect()
    }

    /// This form as a launcher URL at `step`.
    pub fn url(&self, step: usize) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        query.append_pair("step", &step.to_string());
        query.extend_pairs(self.pairs());
        format!("/console/launch?{}", query.finish())
    }

    /// The image: one typed by name, else the environment chosen (`repository:tag`).
    pub fn image(&self) -> &str {
        match self.get("image").trim() {
            "" => self.get("environment").trim(),
            typed => typed,
        }
    }

    /// The create request this form asks for, as the API's JSON body; a field that is not
    /// even of the right kind (a word where a number goes) is refused here by its API name.
    pub fn request(&self) -> Result<Value, ApiError> {
        let mut body = Map::new();
        let text = |field: &str| Some(self.get(field).trim()).filter(|v| !v.is_empty());
        let number = |field: &str, api: &str| -> Result<Option<Value>, ApiError> {
            match text(field) {
                None => Ok(None),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite())
                    .map(|n| Some(json!(n)))
                    .ok_or_else(|| ApiError::invalid(api, format!("`{v}` is not a number"))),
            }
        };
        // None chosen: the group's default (`launcher::launch::launch_defaults`).
        if !self.image().is_empty() {
            body.insert("image".into(), json!(self.image()));
        }
        for (field, api) in [
            ("type", "type"),
            ("name", "name"),
            ("owner_email", "owner_email"),
            ("project", "project"),
            ("startup_command", "startup_command"),
            ("resource_group", "resource_group"),
            ("preset", "preset"),
            ("agent", "agent"),
            ("cluster_mode", "cluster_mode"),
        ] {
            if let Some(v) = text(field) {
                body.insert(api.into(), json!(v));
            }
        }
        if let Some(v) = text("starts_at") {
            // A datetime-local input gives no zone: berth's times are UTC.
            let stamped = if v.len() == 16 {
                format!("{v}:00Z")
            } else {
                v.to_owned()
            };
            body.insert("starts_at".into(), json!(stamped));
        }
        for (field, api) in [
            ("batch_timeout", "batch_timeout"),
            ("count", "count"),
            ("cluster_size", "cluster_size"),
            ("omp_num_threads", "omp_num_threads"),
        ] {
            if let Some(n) = number(field, api)? {
                body.insert(api.into(), n);
            }
        }
        let mut resources = Map::new();
        if let Some(n) = number("cpu", "resources.cpu")? {
            resources.insert("cpu".into(), n);
        }
        if let Some(n) = number("gpu", "resources.gpu")? {
            resources.insert("gpu".into(), n);
        }
        for field in ["memory", "shared_memory"] {
            if let Some(v) = text(field) {
                resources.insert(field.into(), json!(v));
            }
        }
        if !resources.is_empty() {
            body.insert("resources".into(), Value::Object(resources));
        }
        let mut environment = Map::new();
        for (i, line) in self.get("env").lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let (name, value) = line.split_once('=').ok_or_else(|| {
                ApiError::invalid("environment", format!("line {} is not NAME=value", i + 1))
            })?;
            environment.insert(name.trim().to_owned(), json!(value));
        }
        if !environment.is_empty() {
            body.insert("environment".into(), Value::Object(environment));
        }
        if !self.mounts.is_empty() {
            body.insert("mounts".into(), json!(self.mounts));
        }
        if let Some(ports) = text("preopen_ports") {
            let ports = ports
                .split([',', ' '])
                .filter(|p| !p.is_empty())
                .map(|p| {
                    p.parse::<u32>().map_err(|_| {
                        ApiError::invalid("preopen_ports", format!("`{p}` is not a port number"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            body.insert("preopen_ports".into(), json!(ports));
        }
        Ok(Value::Object(body))
    }
}

/// A field a launch would refuse, as the review's error card shows it.
pub struct ErrorCard {
    pub field: String,
    pub message: String,
    pub step: usize,
}

impl From<ApiError> for ErrorCard {
    fn from(e: ApiError) -> ErrorCard {
        let field = e.field.unwrap_or_else(|| "request".into());
        ErrorCard {
            step: step_of_api_field(&field),
            field,
            message: e.message,
        }
    }
}

/// One of Recent History's launches, as the launcher lists it.
pub struct Recent {
    pub id: String,
    pub title: String,
    pub label: String,
    pub pinned: bool,
    pub when: String,
    pub relaunch: String,
}

impl Recent {
    fn of(launch: &Launch) -> Recent {
        let request = &launch.request;
        Recent {
            id: launch.launch_id.to_string(),
            title: launch.label.clone().unwrap_or_else(|| {
                format!(
                    "{} {}",
                    request.name.as_deref().unwrap_or("(random name)"),
                    request.image
                )
            }),
            label: launch.label.clone().unwrap_or_default(),
            pinned: launch.pinned,
            when: launch.created_at.format("%Y-%m-%d %H:%M UTC").to_string(),
            relaunch: format!("/console/launch?step=5&from={}", launch.launch_id),
        }
    }
}

/// One step's card on the review: its number, its title, its fields as label and value.
pub struct ReviewCard {
    pub number: usize,
    pub title: &'static str,
    pub fields: Vec<(String, String)>,
}

/// The launcher page at one step.
#[derive(Template)]
#[template(path = "launch.html")]
struct LaunchPage {
    chrome: Chrome,
    step: usize,
    form: LaunchForm,
    hidden: Vec<(String, String)>,
    admin: bool,
    /// A superadmin's first step: every user's email (the owner's search) and every project.
    owner_emails: Vec<String>,
    projects: Vec<String>,
    presets: Vec<Preset>,
    folders: Vec<Folder>,
    environments: Vec<Environment>,
    groups: Vec<ResourceGroup>,
    agents: Vec<Agent>,
    recent: Vec<Recent>,
    errors: Vec<ErrorCard>,
    warn_no_folder: bool,
    cards: Vec<ReviewCard>,
    /// When the launch is expected to start, and what would start sooner (the review).
    advice: Option<AdviceView>,
}

/// The scheduler's advice as the review shows it.
pub struct AdviceView {
    pub when: String,
    /// The sessions expected to start first: the caller's own by name.
    pub ahead: Vec<String>,
    /// What would start sooner: its words, and when.
    pub sooner: Vec<(String, String)>,
}

/// The scheduler's advice on the form's launch, when it answers: a review shows the launch
/// without it otherwise.
async fn advice_on(state: &AppState, me: &KeyOwner, form: &LaunchForm) -> Option<AdviceView> {
    let request = form.request().ok()?;
    let advice = api::advice::advise(
        State(state.clone()),
        Caller(me.clone()),
        json_body(&request),
    )
    .await
    .ok()?
    .0;
    // The caller's own sessions by name; another user's only to a superadmin.
    let known = crate::db::sessions::owners_and_names(&state.pool, &advice.estimate.ahead)
        .await
        .unwrap_or_default();
    let superadmin = me.role == Role::Superadmin;
    let named = |id: &uuid::Uuid| match known.get(id) {
        Some((owner, name)) if superadmin || *owner == me.user_id => name.clone(),
        _ => "another user's session".to_owned(),
    };
    Some(AdviceView {
        when: advice.estimate.words(),
        ahead: advice.estimate.ahead.iter().map(named).collect(),
        sooner: advice
            .alternatives
            .iter()
            .map(|a| {
                let shape =
                    crate::console::view::amounts(&crate::model::Amounts::of(a.shape.per_kernel));
                (format!("{} ({shape})", a.label), a.estimate.words())
            })
            .collect(),
    })
}

impl LaunchPage {
    fn value(&self, field: &str) -> &str {
        self.form.get(field)
    }

    fn mounted(&self, folder: &str) -> bool {
        self.form.mounts.iter().any(|m| m == folder)
    }

    fn error_on(&self, step: impl std::borrow::Borrow<usize>) -> bool {
        self.errors.iter().any(|e| e.step == *step.borrow())
    }
}

fn step_of(raw: Option<&str>) -> usize {
    form_urlencoded::parse(raw.unwrap_or("").as_bytes())
        .filter(|(k, _)| k == "step")
        .last()
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .filter(|s| (1..=5).contains(s))
        .unwrap_or(1)
}

/// What a launch of `form` would be refused for: the form's own reading, the API's body
/// rules, then the launcher's checks against what the platform holds now.
async fn review(state: &AppState, me: &KeyOwner, form: &LaunchForm) -> Vec<ErrorCard> {
    let request = match form.request() {
        Ok(body) => body,
        Err(e) => return vec![e.into()],
    };
    let parsed: CreateSession = match api::parse_body(json_body(&request)) {
        Ok(parsed) => parsed,
        Err(e) => return vec![e.into()],
    };
    match launcher::launch::check(&state.pool, me, &parsed).await {
        Ok(_) => vec![],
        Err(e) => vec![ApiError::from(e).into()],
    }
}

async fn render_step(
    state: &AppState,
    me: &KeyOwner,
    step: usize,
    form: LaunchForm,
    errors: Vec<ErrorCard>,
    warn_no_folder: bool,
) -> Result<Response, PageError> {
    // Each step reads only what it offers: the choices of step 2, the folders of step 3.
    let (mut presets, mut environments, mut groups, mut agents, mut folders) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut owner_emails, mut projects) = (vec![], vec![]);
    if step == 1 && me.role == Role::Superadmin {
        owner_emails =
            api::admin::users::admin_list_users(State(state.clone()), Caller(me.clone()))
                .await?
                .0
                .users
                .into_iter()
                .filter(|u| !u.disabled)
                .map(|u| u.email)
                .collect();
        projects =
            api::admin::projects::admin_list_projects(State(state.clone()), Caller(me.clone()))
                .await?
                .0
                .projects
                .into_iter()
                .map(|p| p.name)
                .collect();
    }
    if step == 2 {
        presets = api::resources::presets(State(state.clone()), Caller(me.clone()))
            .await?
            .0
            .presets;
        environments = api::catalogue::list_environments(
            State(state.clone()),
            Caller(me.clone()),
            RawQuery(None),
        )
        .await?
        .0
        .environments;
        groups = api::catalogue::list_resource_groups(State(state.clone()), Caller(me.clone()))
            .await?
            .0
            .resource_groups;
        agents =
            api::catalogue::list_agents(State(state.clone()), Caller(me.clone()), RawQuery(None))
                .await?
                .0
                .agents
                .into_iter()
                .filter(|a| a.lost.is_none())
                .collect();
    }
    if step == 3 {
        folders = api::folders::list_folders(State(state.clone()), Caller(me.clone()))
            .await?
            .0
            .folders;
    }
    // The review names the defaults a launch of this form gets, and why.
    let mut defaulted = Vec::new();
    if step == 5 {
        let owner = Some(form.get("owner_email").trim())
            .filter(|e| !e.is_empty())
            .unwrap_or(&me.email);
        let group = Some(form.get("resource_group").trim()).filter(|g| !g.is_empty());
        let defaults = launcher::launch::launch_defaults(&state.pool, owner, group)
            .await
            .map_err(ApiError::from)?;
        let said = |c: &::domain::defaults::Chosen| {
            format!("{} (the group's default: {})", c.value, c.why.words())
        };
        if form.image().is_empty() {
            if let Some(image) = &defaults.image {
                defaulted.push(("environment".to_owned(), said(image)));
            }
        }
        let unsized_form =
            form.get("cpu").trim().is_empty() || form.get("memory").trim().is_empty();
        if form.get("preset").trim().is_empty() && unsized_form {
            if let Some(preset) = &defaults.preset {
                defaulted.push(("preset".to_owned(), said(preset)));
            }
        }
    }
    let recent = api::launches::list_launches(State(state.clone()), Caller(me.clone()))
        .await?
        .0
        .launches
        .iter()
        .map(Recent::of)
        .collect();
    let cards = STEP_FIELDS
        .iter()
        .enumerate()
        .map(|(i, fields)| {
            let shown = fields
                .iter()
                .filter_map(|f| {
                    let value = if *f == "mount" {
                        form.mounts.join(", ")
                    } else {
                        form.get(f).to_owned()
                    };
                    (!value.is_empty()).then(|| (f.replace('_', " "), value))
                })
                .collect();
            let mut fields: Vec<(String, String)> = shown;
            // Step 2's card: the environment and resources chosen, or the defaults.
            if i == 1 {
                fields.extend(defaulted.iter().cloned());
            }
            ReviewCard {
                number: i + 1,
                title: STEPS[i],
                fields,
            }
        })
        .collect();
    let advice = if step == 5 && errors.is_empty() && !warn_no_folder {
        advice_on(state, me, &form).await
    } else {
        None
    };
    let page = LaunchPage {
        chrome: Chrome::of(state, me, "launch").await,
        hidden: if step == 5 {
            form.pairs()
        } else {
            form.hidden_for(step)
        },
        step,
        admin: matches!(me.role, Role::Admin | Role::Superadmin),
        owner_emails,
        projects,
        presets,
        folders,
        environments,
        groups,
        agents,
        recent,
        errors,
        warn_no_folder,
        advice,
        cards,
        form,
    };
    Ok(render(&page))
}

/// `GET /console/launch?step=N&...`.
pub async fn page(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    let step = step_of(raw.as_deref());
    let from = form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "from")
        .map(|(_, v)| v.into_owned());
    let form = match from {
        // Recent History's relaunch: the kept request fills the form, at the review.
        Some(id) => {
            let not_mine = || ApiError::not_found(format!("no launch {id} of yours")).field("from");
            let launch_id = uuid::Uuid::parse_str(&id).map_err(|_| not_mine())?;
            let launch = crate::db::launches::launch(&state.pool, me.user_id, launch_id)
                .await?
                .ok_or_else(not_mine)?;
            LaunchForm::from_request(&launch.request.kept())
        }
        None => LaunchForm::parse(raw.as_deref().unwrap_or("")),
    };
    let errors = if step == 5 {
        review(&state, &me, &form).await
    } else {
        vec![]
    };
    render_step(&state, &me, step, form, errors, false).await
}

/// `POST /console/fit-watches`: "notify me when it fits" for the review's launch (the shape it
/// would launch, in its group); back to the review, which says the shape is watched.
pub async fn watch_fit(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    body: Bytes,
) -> Result<Response, PageError> {
    let form = LaunchForm::parse(&String::from_utf8_lossy(&body));
    let request = form.request()?;
    let _watching = api::advice::watch_fit(State(state), Caller(me), json_body(&request)).await?;
    Ok(Redirect::to(&format!("{}&watching=1", form.url(5))).into_response())
}

/// `POST /console/launch`: the sessions are created and the Sessions page shows the first
/// one's toast; a refused field, or no folder without the user's go-ahead, comes back to the
/// review step saying so, with nothing created.
pub async fn launch(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    body: Bytes,
) -> Result<Response, PageError> {
    let form = LaunchForm::parse(&String::from_utf8_lossy(&body));
    if form.mounts.is_empty() && !form.confirm_no_folder {
        return render_step(&state, &me, 5, form, vec![], true).await;
    }
    let request = match form.request() {
        Ok(body) => body,
        Err(e) => return render_step(&state, &me, 5, form, vec![e.into()], false).await,
    };
    let created = api::sessions::create_session(
        State(state.clone()),
        Caller(me.clone()),
        json_body(&request),
    )
    .await;
    match created {
        Ok((_, created)) => {
            let first = created.0.sessions.first().map(|s| s.session_id.to_string());
            let mut url = "/console/sessions?tab=running".to_owned();
            if let Some(id) = first {
                url.push_str(&format!("&launched={id}"));
            }
            Ok(Redirect::to(&url).into_response())
        }
        Err(e) if e.status.is_client_error() => {
            let mut page = render_step(&state, &me, 5, form, vec![e.into()], false).await?;
            *page.status_mut() = axum::http::StatusCode::UNPROCESSABLE_ENTITY;
            Ok(page)
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Deserialize)]
pub struct NewFolderForm {
    name: String,
    #[serde(default)]
    back: String,
}

/// `POST /console/folders`: a folder is created and the launcher comes back at step 3 with
/// it selected.
pub async fn create_folder(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Form(form): Form<NewFolderForm>,
) -> Result<Response, PageError> {
    let name = form.name.trim().to_owned();
    let _ = api::folders::create_folder(
        State(state),
        Caller(me),
        json_body(&json!({ "name": name })),
    )
    .await?;
    let mut launch = LaunchForm::parse(form.back.split_once('?').map_or("", |(_, q)| q));
    launch.mounts.push(name);
    Ok(Redirect::to(&launch.url(3)).into_response())
}

#[derive(Debug, Deserialize)]
pub struct LaunchEdit {
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    pinned: Option<String>,
}

/// `POST /console/launches/{id}`: rename (`label`) or pin (`pinned=true|false`) one of
/// Recent History's launches, and back to the launcher.
pub async fn edit_launch(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    axum::extract::Path(id): axum::extract::Path<String>,
    Form(form): Form<LaunchEdit>,
) -> Result<Response, PageError> {
    let mut change = Map::new();
    if let Some(label) = form.label {
        change.insert("label".into(), json!(label.trim()));
    }
    if let Some(pinned) = form.pinned {
        change.insert("pinned".into(), json!(pinned == "true"));
    }
    let _ = api::launches::update_launch(
        State(state),
        Caller(me),
        axum::extract::Path(api::launches::LaunchId { id }),
        json_body(&Value::Object(change)),
    )
    .await?;
    Ok(Redirect::to("/console/launch").into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_reads_into_the_form_and_back() {
        let form = LaunchForm::parse(
            "step=2&type=batch&image=berth%2Fshell%3Alatest&cpu=0.5&mount=data&mount=data&mount=more&bogus=1",
        );
        assert_eq!(form.get("type"), "batch");
        assert_eq!(form.mounts, vec!["data", "more"]);
        assert_eq!(
            form.url(5),
            "/console/launch?step=5&type=batch&image=berth%2Fshell%3Alatest&cpu=0.5&mount=data&mount=more"
        );
        // Step 2's form carries the other steps' fields, not its own.
        let hidden = form.hidden_for(2);
        assert!(hidden.iter().any(|(k, _)| k == "type"));
        assert!(!hidden.iter().any(|(k, _)| k == "cpu"));
    }

    #[test]
    fn the_form_becomes_the_apis_request() {
        let form = LaunchForm::parse(
            "type=batch&environment=berth%2Fshell%3Alatest&cpu=0.5&memory=256m&env=A%3D1%0AB%3Dx%3Dy&preopen_ports=8080+9000&starts_at=2026-11-25T10%3A00&mount=data",
        );
        assert_eq!(
            form.request().unwrap(),
            json!({
                "image": "berth/shell:latest", "type": "batch",
                "starts_at": "2026-11-25T10:00:00Z",
                "resources": {"cpu": 0.5, "memory": "256m"},
                "environment": {"A": "1", "B": "x=y"},
                "mounts": ["data"], "preopen_ports": [8080, 9000],
            })
        );
        let typed = LaunchForm::parse("environment=a%3A1&image=b%3A2");
        assert_eq!(typed.image(), "b:2", "an image typed by name wins");
    }

    #[test]
    fn a_field_of_the_wrong_kind_is_refused_by_its_api_name() {
        let err = LaunchForm::parse("cpu=lots").request().unwrap_err();
        assert_eq!(err.field.as_deref(), Some("resources.cpu"));
        let err = LaunchForm::parse("preopen_ports=80x")
            .request()
            .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("preopen_ports"));
        let card = ErrorCard::from(LaunchForm::parse("env=NOEQUALS").request().unwrap_err());
        assert_eq!((card.field.as_str(), card.step), ("environment", 2));
        assert_eq!(step_of_api_field("mounts[0]"), 3);
        assert_eq!(step_of_api_field("name"), 1);
    }

    #[test]
    fn the_step_is_one_to_five() {
        assert_eq!(step_of(Some("step=3")), 3);
        assert_eq!(
            step_of(Some("step=2&step=5")),
            5,
            "the button pressed comes last"
        );
        assert_eq!(step_of(Some("step=9")), 1);
        assert_eq!(step_of(None), 1);
    }
}
