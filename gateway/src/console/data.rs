//! The Data page (seed "Data", with Sessions the most visited): my folders with their volume
//! and what each held when last measured, whom I shared each with, the folders shared with
//! me, a new folder made (with its usage mode), a folder shared or a share taken back, renamed,
//! moved to the trash, and the trash's folders restored or purged, an upload session (SFTP)
//! started for a folder; and each folder's explorer:
//! browse its directories, download a file, make a directory, rename or move an entry, remove
//! one, and upload by
//! the file picker or by dropping files on the page (the script sends them to the API itself,
//! with a progress bar). Like every page, a client of the API's handlers.

use askama::Template;
use axum::extract::{Path, Query, Request, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use serde_json::json;

use super::auth::SameOrigin;
use super::{json_body, render, view, Chrome, PageError, Viewer};
use crate::api::{self, files::FolderName};
use crate::caller::Caller;
use crate::state::AppState;

/// A folder as the list shows it.
pub struct FolderRow {
    pub name: String,
    pub volume: String,
    pub size: String,
    pub files: String,
    /// `owner`, or the share's `rw` or `ro`.
    pub permission: String,
    /// Whose it is, when it is another's.
    pub from: Option<String>,
    /// Mine: whom I shared it with.
    pub shares: Vec<crate::model::FolderShare>,
    /// `general`, `model` or `data`.
    pub usage_mode: String,
    /// Mine, in the trash: since when.
    pub trashed: Option<String>,
}

#[derive(Template)]
#[template(path = "data.html")]
struct DataPage {
    chrome: Chrome,
    folders: Vec<FolderRow>,
    /// My folders in the trash.
    trash: Vec<FolderRow>,
}

/// `GET /console/data`.
pub async fn page(
    State(state): State<AppState>,
    Viewer(me): Viewer,
) -> Result<Response, PageError> {
    let listed = api::folders::list_folders(State(state.clone()), Caller(me.clone()))
        .await?
        .0;
    let (trash, folders): (Vec<FolderRow>, Vec<FolderRow>) = listed
        .folders
        .into_iter()
        .map(|f| FolderRow {
            trashed: f
                .trashed_at
                .map(|at| at.format("%Y-%m-%d %H:%M").to_string()),
            usage_mode: f.usage_mode,
            size: {
                let used = f
                    .usage
                    .as_ref()
                    .map_or("not measured yet".into(), |u| view::size(u.bytes as i64));
                match f.quota_bytes {
                    Some(quota) => format!("{used} of {}", view::size(quota as i64)),
                    None => used,
                }
            },
            files: f.usage.as_ref().map_or("–".into(), |u| u.files.to_string()),
            from: (f.permission != "owner").then_some(f.owner),
            permission: f.permission,
            shares: f.shares,
            name: f.name,
            volume: f.volume,
        })
        .partition(|f| f.trashed.is_some());
    Ok(render(&DataPage {
        chrome: Chrome::of(&state, &me, "data").await,
        folders,
        trash,
    }))
}

#[derive(Debug, Deserialize)]
pub struct NewFolderForm {
    name: String,
    #[serde(default)]
    volume: String,
    #[serde(default)]
    usage_mode: String,
}

/// `POST /console/data`: a folder made, and its explorer opened.
pub async fn create(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Form(form): Form<NewFolderForm>,
) -> Result<Response, PageError> {
    let name = form.name.trim().to_owned();
    let mut body = json!({ "name": name });
    if !form.volume.trim().is_empty() {
        body["volume"] = json!(form.volume.trim());
    }
    if !form.usage_mode.is_empty() {
        body["usage_mode"] = json!(form.usage_mode);
    }
    let _ = api::folders::create_folder(State(state), Caller(me), json_body(&body)).await?;
    Ok(Redirect::to(&format!("/console/data/{}", encoded(&name))).into_response())
}

#[derive(Debug, Deserialize)]
pub struct ShareForm {
    folder: String,
    /// `user` or `project`.
    kind: String,
    /// The user's email or the project's name.
    with: String,
    /// `ro` or `rw`; absent: the share is taken back.
    #[serde(default)]
    permission: Option<String>,
}

/// `POST /console/folder-shares`: one of my folders shared with a user or a project (or the
/// share's permission changed), or, without a permission, a share taken back.
pub async fn share(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Form(form): Form<ShareForm>,
) -> Result<Response, PageError> {
    use crate::api::folders::{ProjectShare, UserShare};
    let (name, with) = (form.folder, form.with.trim().to_owned());
    let caller = Caller(me);
    match (form.kind.as_str(), form.permission) {
        ("project", Some(permission)) => {
            let _shared = api::folders::share_with_project(
                State(state),
                caller,
                Path(ProjectShare::new(name, with)),
                json_body(&json!({ "permission": permission })),
            )
            .await?;
        }
        ("project", None) => {
            api::folders::unshare_with_project(
                State(state),
                caller,
                Path(ProjectShare::new(name, with)),
            )
            .await?;
        }
        (_, Some(permission)) => {
            let _shared = api::folders::share_with_user(
                State(state),
                caller,
                Path(UserShare::new(name, with)),
                json_body(&json!({ "permission": permission })),
            )
            .await?;
        }
        (_, None) => {
            api::folders::unshare_with_user(State(state), caller, Path(UserShare::new(name, with)))
                .await?;
        }
    }
    Ok(Redirect::to("/console/data").into_response())
}

#[derive(Debug, Deserialize)]
pub struct FolderStepForm {
    folder: String,
    /// `rename`, `trash`, `restore` or `purge`.
    step: String,
    /// A rename's new name.
    #[serde(default)]
    to: String,
}

/// `POST /console/folder-steps`: one of my folders renamed, moved to the trash, restored from
/// it or purged.
pub async fn folder_step(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Form(form): Form<FolderStepForm>,
) -> Result<Response, PageError> {
    use launcher::launch::FolderStep;
    let step = match form.step.as_str() {
        "rename" => FolderStep::Rename {
            to: form.to.trim().to_owned(),
        },
        "trash" => FolderStep::Trash,
        "restore" => FolderStep::Restore,
        "purge" => FolderStep::Purge,
        _ => {
            return Err(crate::error::ApiError::invalid(
                "step",
                "must be rename, trash, restore or purge",
            )
            .into())
        }
    };
    api::folders::folder_step(&state, &me, &form.folder, step).await?;
    Ok(Redirect::to("/console/data").into_response())
}

#[derive(Debug, Deserialize)]
pub struct UploadSessionForm {
    folder: String,
}

/// `POST /console/upload-sessions`: an upload session (SFTP) started for one of the folders I
/// reach, then the Sessions page's Upload Sessions, where it shows.
pub async fn start_upload_session(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Form(form): Form<UploadSessionForm>,
) -> Result<Response, PageError> {
    let _started = api::folders::start_upload_session(
        State(state),
        Caller(me),
        json_body(&json!({ "folders": [form.folder] })),
    )
    .await?;
    Ok(Redirect::to("/console/sessions?type=system").into_response())
}

/// An entry as the explorer shows it.
pub struct EntryRow {
    pub name: String,
    /// Its path inside the folder.
    pub path: String,
    pub kind: &'static str,
    pub size: String,
    pub modified: String,
}

/// One step of the path above the listed directory.
pub struct Crumb {
    pub name: String,
    pub path: String,
}

#[derive(Template)]
#[template(path = "data_folder.html")]
struct FolderPage {
    chrome: Chrome,
    folder: String,
    /// The directory listed (`""`: the folder itself).
    path: String,
    crumbs: Vec<Crumb>,
    entries: Vec<EntryRow>,
    total: u64,
}

#[derive(Debug, Default, Deserialize)]
pub struct AtPath {
    #[serde(default)]
    path: String,
}

/// `text` for a URL's path or query: every byte but letters, digits and `-._~/`
/// percent-encoded (a path inside a folder keeps its slashes).
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET /console/data/{folder}?path=`: the explorer at a directory of the folder.
pub async fn folder(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    Path(folder): Path<String>,
    Query(at): Query<AtPath>,
) -> Result<Response, PageError> {
    let query = (!at.path.is_empty()).then(|| format!("path={}", encoded(&at.path)));
    let listed = api::files::list_files(
        State(state.clone()),
        Caller(me.clone()),
        Path(FolderName {
            name: folder.clone(),
        }),
        axum::extract::RawQuery(query),
    )
    .await?
    .0;
    let mut crumbs = Vec::new();
    let mut so_far = String::new();
    for part in listed.path.split('/').filter(|p| !p.is_empty()) {
        if !so_far.is_empty() {
            so_far.push('/');
        }
        so_far.push_str(part);
        crumbs.push(Crumb {
            name: part.to_owned(),
            path: so_far.clone(),
        });
    }
    let entries = listed
        .entries
        .into_iter()
        .map(|e| {
            let path = if listed.path.is_empty() {
                e.name.clone()
            } else {
                format!("{}/{}", listed.path, e.name)
            };
            EntryRow {
                kind: match e.kind {
                    crate::model::EntryKind::File => "file",
                    crate::model::EntryKind::Directory => "directory",
                    crate::model::EntryKind::Link => "link",
                    crate::model::EntryKind::Other => "other",
                },
                size: match e.kind {
                    crate::model::EntryKind::File => view::size(e.size as i64),
                    _ => String::new(),
                },
                modified: e
                    .modified
                    .map(|m| m.format("%Y-%m-%d %H:%M").to_string())
                    .unwrap_or_default(),
                name: e.name,
                path,
            }
        })
        .collect();
    Ok(render(&FolderPage {
        chrome: Chrome::of(&state, &me, "data").await,
        folder,
        path: listed.path,
        crumbs,
        entries,
        total: listed.total,
    }))
}

impl FolderPage {
    /// `text` for a URL (askama's escaping is for HTML, not for URLs).
    fn url(&self, text: &str) -> String {
        encoded(text)
    }
}

/// `GET /console/data/{folder}/download?path=`: the file, as `GET /v1/folders/{name}/download`
/// answers it (ranges too).
pub async fn download(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    Path(folder): Path<String>,
    Query(at): Query<AtPath>,
    request: Request,
) -> Result<Response, PageError> {
    Ok(api::files::download_file(
        State(state),
        Caller(me),
        Path(FolderName { name: folder }),
        axum::extract::RawQuery(Some(format!("path={}", encoded(&at.path)))),
        request,
    )
    .await?)
}

#[derive(Debug, Deserialize)]
pub struct DirectoryForm {
    /// The directory it is made in.
    #[serde(default)]
    at: String,
    name: String,
}

/// `POST /console/data/{folder}/directories`: a directory made in the one shown.
pub async fn make_directory(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Path(folder): Path<String>,
    Form(form): Form<DirectoryForm>,
) -> Result<Response, PageError> {
    let path = match form.at.is_empty() {
        true => form.name.trim().to_owned(),
        false => format!("{}/{}", form.at, form.name.trim()),
    };
    api::files::make_directory(
        State(state),
        Caller(me),
        Path(FolderName {
            name: folder.clone(),
        }),
        json_body(&json!({ "path": path })),
    )
    .await?;
    Ok(back_to(&folder, &form.at))
}

#[derive(Debug, Deserialize)]
pub struct RemoveForm {
    path: String,
    /// The directory the explorer goes back to.
    #[serde(default)]
    at: String,
}

/// `POST /console/data/{folder}/remove`: an entry removed (a directory with all it holds).
pub async fn remove(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Path(folder): Path<String>,
    Form(form): Form<RemoveForm>,
) -> Result<Response, PageError> {
    api::files::remove_file(
        State(state),
        Caller(me),
        Path(FolderName {
            name: folder.clone(),
        }),
        axum::extract::RawQuery(Some(format!("path={}", encoded(&form.path)))),
    )
    .await?;
    Ok(back_to(&folder, &form.at))
}

#[derive(Debug, Deserialize)]
pub struct MoveForm {
    path: String,
    /// Its new path inside the folder.
    to: String,
    /// The directory the explorer goes back to.
    #[serde(default)]
    at: String,
}

/// `POST /console/data/{folder}/move`: an entry renamed or moved inside the folder.
pub async fn move_entry(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    _: SameOrigin,
    Path(folder): Path<String>,
    Form(form): Form<MoveForm>,
) -> Result<Response, PageError> {
    api::files::move_file(
        State(state),
        Caller(me),
        Path(FolderName {
            name: folder.clone(),
        }),
        json_body(&json!({ "from": form.path, "to": form.to.trim() })),
    )
    .await?;
    Ok(back_to(&folder, &form.at))
}

/// The explorer at `at` of `folder`.
fn back_to(folder: &str, at: &str) -> Response {
    let mut url = format!("/console/data/{}", encoded(folder));
    if !at.is_empty() {
        url.push_str(&format!("?path={}", encoded(at)));
    }
    Redirect::to(&url).into_response()
}
