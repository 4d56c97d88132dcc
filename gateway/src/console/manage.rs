//! The superadmins' administration pages: users (create with a password, role, disable and
//! enable, a new password), API keys (issue, shown once; revoke), projects and their members,
//! resource groups (create, their queue policy, grants, defaults), resource policies, presets
//! and the image catalogue's listings. Each is a list and forms
//! over the admin API: a form's fields become the API's own request body and go to its own
//! handler (`api::admin`), so a page refuses exactly what the API refuses, naming the same
//! field, and records the same events. One template draws every section
//! (`templates/manage.html`) from what this module describes: a table whose rows carry their
//! actions, and the forms that create.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde_json::{json, Value};

use super::admin::superadmins_only;
use super::auth::SameOrigin;
use super::{json_body, render, view, Chrome, PageError, Viewer};
use crate::api::admin::{self as admin_api, ObjectName};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The sections, in the order the tabs show them: path segment and title.
const SECTIONS: [(&str, &str); 7] = [
    ("users", "Users"),
    ("keys", "API keys"),
    ("projects", "Projects"),
    ("groups", "Resource groups"),
    ("policies", "Resource policies"),
    ("presets", "Presets"),
    ("images", "Images"),
];

/// What kind of control a field is.
pub enum Kind {
    Text,
    Email,
    Password,
    /// A number with this step.
    Number(&'static str),
    /// A choice among `(value, label)`.
    Select(Vec<(String, String)>),
}

/// One labelled control of a form.
pub struct Field {
    pub name: &'static str,
    pub label: &'static str,
    pub kind: Kind,
    pub required: bool,
    pub placeholder: &'static str,
    /// The value it holds now (a select's chosen option).
    pub value: String,
}

impl Field {
    fn new(name: &'static str, label: &'static str, kind: Kind) -> Field {
        Field {
            name,
            label,
            kind,
            required: true,
            placeholder: "",
            value: String::new(),
        }
    }

    fn holding(mut self, value: &str) -> Field {
        self.value = value.to_owned();
        self
    }

    fn optional(mut self, placeholder: &'static str) -> Field {
        self.required = false;
        self.placeholder = placeholder;
        self
    }

    pub fn input_type(&self) -> &'static str {
        match self.kind {
            Kind::Email => "email",
            Kind::Password => "password",
            Kind::Number(_) => "number",
            Kind::Text | Kind::Select(_) => "text",
        }
    }

    pub fn step(&self) -> &'static str {
        match self.kind {
            Kind::Number(step) => step,
            _ => "",
        }
    }

    pub fn options(&self) -> &[(String, String)] {
        match &self.kind {
            Kind::Select(options) => options,
            _ => &[],
        }
    }
}

/// A form that creates or changes something, posted to `action`.
pub struct AdminForm {
    pub id: &'static str,
    pub title: &'static str,
    pub action: String,
    pub fields: Vec<Field>,
    pub submit: &'static str,
}

/// A button on a row: posts the row's `hidden` values, and `input` when it has one.
pub struct RowAction {
    pub label: &'static str,
    pub action: String,
    pub hidden: Vec<(&'static str, String)>,
    pub input: Option<Field>,
    pub danger: bool,
}

/// One row of a section's table.
pub struct Row {
    /// What the row is (an email, a name, a key's prefix): its `data-row`.
    pub key: String,
    pub cells: Vec<String>,
    pub actions: Vec<RowAction>,
}

#[derive(Template)]
#[template(path = "manage.html")]
struct ManagePage {
    chrome: Chrome,
    section: &'static str,
    title: &'static str,
    sections: &'static [(&'static str, &'static str)],
    intro: &'static str,
    headers: Vec<&'static str>,
    rows: Vec<Row>,
    forms: Vec<AdminForm>,
    /// What the last change did, in words.
    done: Option<String>,
    /// A key shown once: whose, and the key.
    issued: Option<(String, String)>,
}

/// A section's state: what the change before the redirect did.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ManageQuery {
    #[serde(default)]
    pub done: Option<String>,
}

fn unknown_section(section: &str) -> PageError {
    PageError(ApiError::not_found(format!(
        "no administration page `{section}`"
    )))
}

/// `GET /console/admin/{section}`.
pub async fn page(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    Path(section): Path<String>,
    Query(query): Query<ManageQuery>,
) -> Result<Response, PageError> {
    superadmins_only(&me)?;
    let done = query.done;
    Ok(render(
        &section_page(&state, &me, &section, done, None).await?,
    ))
}

/// The page of `section`, as it stands, with what the last change did.
async fn section_page(
    state: &AppState,
    me: &events::ledger::KeyOwner,
    section: &str,
    done: Option<String>,
    issued: Option<(String, String)>,
) -> Result<ManagePage, PageError> {
    let (section, title) = SECTIONS
        .iter()
        .find(|(s, _)| *s == section)
        .copied()
        .ok_or_else(|| unknown_section(section))?;
    let caller = || Caller(me.clone());
    let st = || State(state.clone());
    let action = |verb: &str| format!("/console/admin/{section}/{verb}");
    let (intro, headers, rows, forms) =
        match section {
            "users" => {
                let users = admin_api::users::admin_list_users(st(), caller())
                    .await?
                    .0
                    .users;
                let policies = policy_options(state, me).await?;
                let rows = users
                    .into_iter()
                    .map(|u| Row {
                        key: u.email.clone(),
                        cells: vec![
                            u.email.clone(),
                            u.role.clone(),
                            u.resource_policy.clone(),
                            u.projects.join(", "),
                            if u.disabled { "disabled" } else { "active" }.into(),
                            if u.has_password { "yes" } else { "no" }.into(),
                        ],
                        actions: vec![
                            RowAction {
                                label: "Set role",
                                action: action("role"),
                                hidden: vec![("email", u.email.clone())],
                                input: Some(
                                    Field::new("role", "Role", role_select()).holding(&u.role),
                                ),
                                danger: false,
                            },
                            RowAction {
                                label: "Set password",
                                action: action("password"),
                                hidden: vec![("email", u.email.clone())],
                                input: Some(Field::new("password", "New password", Kind::Password)),
                                danger: false,
                            },
                            if u.disabled {
                                RowAction {
                                    label: "Enable",
                                    action: action("enable"),
                                    hidden: vec![("email", u.email)],
                                    input: None,
                                    danger: false,
                                }
                            } else {
                                RowAction {
                                    label: "Disable",
                                    action: action("disable"),
                                    hidden: vec![("email", u.email)],
                                    input: None,
                                    danger: true,
                                }
                            },
                        ],
                    })
                    .collect();
                let forms = vec![AdminForm {
                    id: "new-user",
                    title: "Create a user",
                    action: action("create"),
                    fields: vec![
                        Field::new("email", "Email", Kind::Email),
                        Field::new("password", "Password", Kind::Password)
                            .optional("none: an API key alone"),
                        Field::new("role", "Role", role_select()),
                        Field::new("resource_policy", "Resource policy", Kind::Select(policies)),
                        Field::new("projects", "Projects, comma separated", Kind::Text)
                            .optional("default"),
                    ],
                    submit: "Create",
                }];
                (
                    "Who may use berth: a disabled user's keys, sign-ins and circuits are refused \
                 (their sessions run on). A new user gets an API key, shown once.",
                    vec!["Email", "Role", "Policy", "Projects", "Status", "Password"],
                    rows,
                    forms,
                )
            }
            "keys" => {
                let keys = admin_api::keys::admin_list_keys(st(), caller())
                    .await?
                    .0
                    .api_keys;
                let rows = keys
                    .into_iter()
                    .map(|k| Row {
                        key: k.key_prefix.clone(),
                        cells: vec![
                            k.key_prefix.clone(),
                            k.email,
                            k.expires_at.map_or("never".into(), |at| {
                                at.format("%Y-%m-%d %H:%M").to_string()
                            }),
                            if k.revoked { "revoked" } else { "valid" }.into(),
                        ],
                        actions: if k.revoked {
                            Vec::new()
                        } else {
                            vec![RowAction {
                                label: "Revoke",
                                action: action("revoke"),
                                hidden: vec![("prefix", k.key_prefix)],
                                input: None,
                                danger: true,
                            }]
                        },
                    })
                    .collect();
                let forms = vec![AdminForm {
                    id: "new-key",
                    title: "Issue a key",
                    action: action("issue"),
                    fields: vec![
                        Field::new("email", "For the user", Kind::Email),
                        Field::new("expires_in_days", "Expires in days", Kind::Number("1"))
                            .optional("never"),
                    ],
                    submit: "Issue",
                }];
                (
                    "API keys speak for their user to the API, the CLI and Backend.AI's client; \
                 only a prefix is kept in view. A revoked key is refused at once.",
                    vec!["Prefix", "User", "Expires", "Status"],
                    rows,
                    forms,
                )
            }
            "projects" => {
                let projects = admin_api::projects::admin_list_projects(st(), caller())
                    .await?
                    .0
                    .projects;
                let rows = projects
                    .into_iter()
                    .map(|p| Row {
                        key: p.name.clone(),
                        cells: vec![
                            p.name.clone(),
                            p.description,
                            p.members.join(", "),
                            p.resource_groups.join(", "),
                        ],
                        actions: vec![RowAction {
                            label: "Add member",
                            action: action("member"),
                            hidden: vec![("name", p.name)],
                            input: Some(Field::new("email", "Member's email", Kind::Email)),
                            danger: false,
                        }],
                    })
                    .collect();
                let forms = vec![AdminForm {
                    id: "new-project",
                    title: "Create a project",
                    action: action("create"),
                    fields: vec![
                        Field::new("name", "Name", Kind::Text),
                        Field::new("description", "Description", Kind::Text).optional(""),
                    ],
                    submit: "Create",
                }];
                (
                    "Projects group users and open resource groups to them; a session is \
                 launched in one of its owner's projects.",
                    vec!["Name", "Description", "Members", "Resource groups"],
                    rows,
                    forms,
                )
            }
            "groups" => {
                let groups = admin_api::groups::admin_list_groups(st(), caller())
                    .await?
                    .0
                    .resource_groups;
                let names: Vec<(String, String)> = groups
                    .iter()
                    .map(|g| (g.name.clone(), g.name.clone()))
                    .collect();
                let rows = groups
                    .into_iter()
                    .map(|g| Row {
                        key: g.name.clone(),
                        cells: vec![
                            g.name.clone(),
                            g.queue_policy.clone(),
                            g.agent_selection.clone(),
                            g.projects.join(", "),
                        ],
                        actions: vec![
                            RowAction {
                                label: "Set policy",
                                action: action("policy"),
                                hidden: vec![("name", g.name.clone())],
                                input: Some(
                                    Field::new("queue_policy", "Queue policy", queue_policies())
                                        .holding(&g.queue_policy),
                                ),
                                danger: false,
                            },
                            RowAction {
                                label: "Grant",
                                action: action("grant"),
                                hidden: vec![("name", g.name)],
                                input: Some(Field::new("project", "Project to grant", Kind::Text)),
                                danger: false,
                            },
                        ],
                    })
                    .collect();
                let forms = vec![
                    AdminForm {
                        id: "new-group",
                        title: "Create a resource group",
                        action: action("create"),
                        fields: vec![
                            Field::new("name", "Name", Kind::Text),
                            Field::new("queue_policy", "Queue policy", queue_policies()),
                            Field::new(
                                "agent_selection",
                                "Agent selection",
                                Kind::Select(
                                    ["concentrated", "dispersed"]
                                        .iter()
                                        .map(|s| (s.to_string(), s.to_string()))
                                        .collect(),
                                ),
                            ),
                        ],
                        submit: "Create",
                    },
                    AdminForm {
                        id: "group-defaults",
                        title: "Defaults of a group (what a launch that names none gets)",
                        action: action("defaults"),
                        fields: vec![
                            Field::new("name", "Resource group", Kind::Select(names)),
                            Field::new("image", "Default image", Kind::Text)
                                .optional("the group's most used"),
                            Field::new("preset", "Default preset", Kind::Text)
                                .optional("the smallest that fits"),
                        ],
                        submit: "Set defaults",
                    },
                ];
                (
                    "Resource groups are the agents a session may go to, each with the order its \
                 queue is served in; a project may use the groups granted to it.",
                    vec!["Name", "Queue policy", "Agent selection", "Projects"],
                    rows,
                    forms,
                )
            }
            "policies" => {
                let policies = admin_api::policies::admin_list_policies(st(), caller())
                    .await?
                    .0
                    .policies;
                let rows = policies
                    .into_iter()
                    .map(|p| Row {
                        key: p.name.clone(),
                        cells: vec![
                            p.name,
                            p.max_concurrent_sessions.to_string(),
                            view::amounts(&p.max_total),
                            p.max_session_lifetime_secs
                                .map_or("-".into(), |s| view::duration(s as f64)),
                            p.max_folder_bytes.map_or("-".into(), view::size),
                            p.users.to_string(),
                        ],
                        actions: Vec::new(),
                    })
                    .collect();
                let forms = vec![AdminForm {
                    id: "set-policy",
                    title: "Create or change a policy",
                    action: action("set"),
                    fields: vec![
                        Field::new("name", "Name", Kind::Text),
                        Field::new("max_sessions", "Most sessions at once", Kind::Number("1")),
                        Field::new("max_cpu", "Most cores in all", Kind::Number("0.001")),
                        Field::new(
                            "max_memory_gib",
                            "Most memory in all, GiB",
                            Kind::Number("0.001"),
                        ),
                        Field::new("max_gpu", "Most GPUs in all", Kind::Number("0.001"))
                            .optional("0"),
                        Field::new(
                            "max_lifetime_secs",
                            "Longest life, seconds",
                            Kind::Number("1"),
                        )
                        .optional("none"),
                        Field::new("max_folder_gib", "Folder quota, GiB", Kind::Number("0.001"))
                            .optional("none"),
                    ],
                    submit: "Save",
                }];
                (
                "A user's policy bounds what their sessions hold in all, how many run at once, \
                 how long one lives and how much each folder keeps.",
                vec!["Name", "Sessions", "In all", "Lifetime", "Folder quota", "Users"],
                rows,
                forms,
            )
            }
            "presets" => {
                let presets = crate::api::resources::presets(st(), caller())
                    .await?
                    .0
                    .presets;
                let rows = presets
                    .into_iter()
                    .map(|p| Row {
                        key: p.name.clone(),
                        cells: vec![
                            p.name,
                            view::amounts(&p.resources),
                            view::size(p.shared_memory_bytes),
                        ],
                        actions: Vec::new(),
                    })
                    .collect();
                let forms = vec![AdminForm {
                    id: "save-preset",
                    title: "Create or change a preset",
                    action: action("save"),
                    fields: vec![
                        Field::new("name", "Name", Kind::Text),
                        Field::new("cpu", "Cores", Kind::Number("0.001")),
                        Field::new("memory_gib", "Memory, GiB", Kind::Number("0.001")),
                        Field::new("gpu", "GPUs", Kind::Number("0.001")).optional("0"),
                        Field::new("shared_memory_mib", "Shared memory, MiB", Kind::Number("1"))
                            .optional("64"),
                    ],
                    submit: "Save",
                }];
                (
                    "Presets are the launcher's named shapes: a user picks one instead of typing \
                 cores and memory.",
                    vec!["Name", "Resources", "Shared memory"],
                    rows,
                    forms,
                )
            }
            _ => {
                let images = admin_api::images::admin_list_images(st(), caller())
                    .await?
                    .0
                    .images;
                let rows = images
                    .into_iter()
                    .map(|i| Row {
                        key: i.image.clone(),
                        cells: vec![
                            i.image.clone(),
                            i.resource_groups.join(", "),
                            if i.session_image { "yes" } else { "no" }.into(),
                            listing_word(i.listing).into(),
                            if i.offered { "offered" } else { "not offered" }.into(),
                        ],
                        actions: vec![RowAction {
                            label: "List",
                            action: action("listing"),
                            hidden: vec![("image", i.image)],
                            input: Some(
                                Field::new("listing", "Listing", listing_select())
                                    .holding(listing_word(i.listing)),
                            ),
                            danger: false,
                        }],
                    })
                    .collect();
                (
                    "The images the live agents hold. The launcher offers session images (berth's \
                 ai.berth.image label, or Backend.AI's ai.backend.*), never the stack's own \
                 servers; show an image the labels leave out, or hide one (a launch naming a \
                 hidden image is refused).",
                    vec![
                        "Image",
                        "Resource groups",
                        "Session labels",
                        "Listing",
                        "Catalogue",
                    ],
                    rows,
                    Vec::new(),
                )
            }
        };
    Ok(ManagePage {
        chrome: Chrome::of(state, me, "admin").await,
        section,
        title,
        sections: &SECTIONS,
        intro,
        headers,
        rows,
        forms,
        done,
        issued,
    })
}

fn queue_policies() -> Kind {
    Kind::Select(
        ["fifo", "backfill", "lifo", "drf", "fair-share"]
            .iter()
            .map(|p| (p.to_string(), p.to_string()))
            .collect(),
    )
}

fn role_select() -> Kind {
    Kind::Select(
        ["user", "admin", "superadmin"]
            .iter()
            .map(|r| (r.to_string(), r.to_string()))
            .collect(),
    )
}

fn listing_word(listing: domain::images::ImageListing) -> &'static str {
    match listing {
        domain::images::ImageListing::Labels => "labels",
        domain::images::ImageListing::Shown => "shown",
        domain::images::ImageListing::Hidden => "hidden",
    }
}

fn listing_select() -> Kind {
    Kind::Select(
        [
            ("labels", "as its labels say"),
            ("shown", "shown"),
            ("hidden", "hidden"),
        ]
        .iter()
        .map(|(v, l)| (v.to_string(), l.to_string()))
        .collect(),
    )
}

async fn policy_options(
    state: &AppState,
    me: &events::ledger::KeyOwner,
) -> Result<Vec<(String, String)>, PageError> {
    let policies =
        admin_api::policies::admin_list_policies(State(state.clone()), Caller(me.clone()))
            .await?
            .0
            .policies;
    Ok(policies
        .into_iter()
        .map(|p| (p.name.clone(), p.name))
        .collect())
}

/// A form's fields, read as the API's body needs them.
struct Fields(HashMap<String, String>);

impl Fields {
    /// The field, trimmed; empty when absent.
    fn text(&self, name: &str) -> String {
        self.0
            .get(name)
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    }

    /// The field as a number, `None` when left empty; a 422 naming `field` (the API's name
    /// for it) when it is no number.
    fn number(&self, name: &str, field: &str) -> Result<Option<f64>, PageError> {
        let text = self.text(name);
        if text.is_empty() {
            return Ok(None);
        }
        text.parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .map(Some)
            .ok_or_else(|| {
                PageError(ApiError::invalid(
                    field.to_owned(),
                    format!("`{text}` is no number"),
                ))
            })
    }

    /// A required number.
    fn required(&self, name: &str, field: &str) -> Result<f64, PageError> {
        self.number(name, field)?.ok_or_else(|| {
            PageError(ApiError::invalid(
                field.to_owned(),
                "must be given".to_owned(),
            ))
        })
    }
}

/// Whole bytes of `gib` GiB (what the API takes), rounded.
fn gib_bytes(gib: f64) -> Value {
    json!((gib * f64::from(1u32 << 30)).round())
}

/// `POST /console/admin/{section}/{verb}`: the change, through the API's handler; then back
/// to the section saying what was done (or, for a new key, the page showing it once).
pub async fn act(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Path((section, verb)): Path<(String, String)>,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, PageError> {
    superadmins_only(&me)?;
    let f = Fields(form);
    let st = || State(state.clone());
    let caller = || Caller(me.clone());
    let email_path = |email: String| Path(admin_api::users::UserEmail { email });
    let done: String = match (section.as_str(), verb.as_str()) {
        ("users", "create") => {
            let email = f.text("email");
            let mut body = json!({"email": email, "role": f.text("role"),
                                  "resource_policy": f.text("resource_policy")});
            let projects: Vec<String> = f
                .text("projects")
                .split(',')
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty())
                .collect();
            if !projects.is_empty() {
                body["projects"] = json!(projects);
            }
            let password = f.0.get("password").cloned().unwrap_or_default();
            if !password.is_empty() {
                // Checked before the user is made, so a refused password creates nobody.
                admin_api::users::PasswordSet {
                    email: email.clone(),
                    password: password.clone(),
                }
                .check()?;
            }
            let (_, issued) =
                admin_api::users::admin_create_user(st(), caller(), json_body(&body)).await?;
            if !password.is_empty() {
                admin_api::users::admin_set_password(
                    st(),
                    caller(),
                    json_body(&json!({"email": email, "password": password})),
                )
                .await?;
            }
            let shown = Some((issued.0.email.clone(), issued.0.api_key.clone()));
            let page = section_page(
                &state,
                &me,
                "users",
                Some(format!("user {email} created")),
                shown,
            )
            .await?;
            let mut response = render(&page);
            *response.status_mut() = StatusCode::CREATED;
            return Ok(response);
        }
        ("users", "role") => {
            let (email, role) = (f.text("email"), f.text("role"));
            admin_api::users::admin_set_role(
                st(),
                caller(),
                email_path(email.clone()),
                json_body(&json!({ "role": role })),
            )
            .await?;
            format!("{email} is now {role}")
        }
        ("users", "password") => {
            let email = f.text("email");
            let password = f.0.get("password").cloned().unwrap_or_default();
            admin_api::users::admin_set_password(
                st(),
                caller(),
                json_body(&json!({"email": email, "password": password})),
            )
            .await?;
            format!("{email} has a new password")
        }
        ("users", "disable") => {
            let email = f.text("email");
            admin_api::users::admin_disable_user(st(), caller(), email_path(email.clone())).await?;
            format!("{email} disabled")
        }
        ("users", "enable") => {
            let email = f.text("email");
            admin_api::users::admin_enable_user(st(), caller(), email_path(email.clone())).await?;
            format!("{email} enabled")
        }
        ("keys", "issue") => {
            let mut body = json!({ "email": f.text("email") });
            if let Some(days) = f.number("expires_in_days", "expires_in_secs")? {
                body["expires_in_secs"] = json!((days * 86_400.0).round());
            }
            let (_, issued) =
                admin_api::keys::admin_issue_key(st(), caller(), json_body(&body)).await?;
            let who = issued.0.email.clone();
            let page = section_page(
                &state,
                &me,
                "keys",
                Some(format!("a key issued to {who}")),
                Some((who, issued.0.api_key.clone())),
            )
            .await?;
            let mut response = render(&page);
            *response.status_mut() = StatusCode::CREATED;
            return Ok(response);
        }
        ("keys", "revoke") => {
            let prefix = f.text("prefix");
            admin_api::keys::admin_revoke_key(
                st(),
                caller(),
                Path(admin_api::keys::KeyPrefix {
                    prefix: prefix.clone(),
                }),
            )
            .await?;
            format!("key {prefix} revoked")
        }
        ("projects", "create") => {
            let name = f.text("name");
            admin_api::projects::admin_create_project(
                st(),
                caller(),
                json_body(&json!({"name": name, "description": f.text("description")})),
            )
            .await?;
            format!("project {name} created")
        }
        ("projects", "member") => {
            let (name, email) = (f.text("name"), f.text("email"));
            admin_api::projects::admin_add_member(
                st(),
                caller(),
                Path(ObjectName { name: name.clone() }),
                json_body(&json!({ "email": email })),
            )
            .await?;
            format!("{email} joined {name}")
        }
        ("groups", "create") => {
            let name = f.text("name");
            admin_api::groups::admin_create_group(
                st(),
                caller(),
                json_body(
                    &json!({"name": name, "queue_policy": f.text("queue_policy"),
                                  "agent_selection": f.text("agent_selection")}),
                ),
            )
            .await?;
            format!("resource group {name} created")
        }
        ("groups", "policy") => {
            let (name, policy) = (f.text("name"), f.text("queue_policy"));
            admin_api::groups::admin_set_group_scheduling(
                st(),
                caller(),
                Path(ObjectName { name: name.clone() }),
                json_body(&json!({ "queue_policy": policy })),
            )
            .await?;
            format!("{name} serves its queue by {policy}")
        }
        ("groups", "grant") => {
            let (name, project) = (f.text("name"), f.text("project"));
            admin_api::groups::admin_grant_group(
                st(),
                caller(),
                Path(ObjectName { name: name.clone() }),
                json_body(&json!({ "project": project })),
            )
            .await?;
            format!("{project} may use {name}")
        }
        ("groups", "defaults") => {
            let name = f.text("name");
            let some = |v: String| (!v.is_empty()).then_some(v);
            admin_api::groups::admin_set_group_defaults(
                st(),
                caller(),
                Path(ObjectName { name: name.clone() }),
                json_body(
                    &json!({"image": some(f.text("image")), "preset": some(f.text("preset"))}),
                ),
            )
            .await?;
            format!("defaults of {name} set")
        }
        ("policies", "set") => {
            let name = f.text("name");
            let mut body = json!({
                "max_concurrent_sessions": f.required("max_sessions", "max_concurrent_sessions")?,
                "max_total": {
                    "cpu": f.required("max_cpu", "max_total.cpu")?,
                    "memory_bytes": gib_bytes(f.required("max_memory_gib", "max_total.memory_bytes")?),
                    "gpu": f.number("max_gpu", "max_total.gpu")?.unwrap_or(0.0),
                },
            });
            if let Some(secs) = f.number("max_lifetime_secs", "max_session_lifetime_secs")? {
                body["max_session_lifetime_secs"] = json!(secs);
            }
            if let Some(gib) = f.number("max_folder_gib", "max_folder_bytes")? {
                body["max_folder_bytes"] = gib_bytes(gib);
            }
            admin_api::policies::admin_set_policy(
                st(),
                caller(),
                Path(ObjectName { name: name.clone() }),
                json_body(&body),
            )
            .await?;
            format!("policy {name} saved")
        }
        ("presets", "save") => {
            let name = f.text("name");
            let mut body = json!({"resources": {
                "cpu": f.required("cpu", "resources.cpu")?,
                "memory_bytes": gib_bytes(f.required("memory_gib", "resources.memory_bytes")?),
                "gpu": f.number("gpu", "resources.gpu")?.unwrap_or(0.0),
            }});
            if let Some(mib) = f.number("shared_memory_mib", "shared_memory_bytes")? {
                body["shared_memory_bytes"] = json!((mib * 1_048_576.0).round());
            }
            admin_api::presets::admin_save_preset(
                st(),
                caller(),
                Path(ObjectName { name: name.clone() }),
                json_body(&body),
            )
            .await?;
            format!("preset {name} saved")
        }
        ("images", "listing") => {
            let (image, listing) = (f.text("image"), f.text("listing"));
            admin_api::images::admin_set_image_listing(
                st(),
                caller(),
                json_body(&json!({"image": image, "listing": listing})),
            )
            .await?;
            format!("{image} listed as {listing}")
        }
        _ => return Err(unknown_section(&format!("{section}/{verb}"))),
    };
    let back = format!(
        "/console/admin/{section}?done={}",
        form_urlencoded::byte_serialize(done.as_bytes()).collect::<String>()
    );
    Ok(Redirect::to(&back).into_response())
}
