//! The scheduling history modal (seed `000` TIP, `001`): the filter bar (id, phase, result,
//! from and to status, error code, message), sorting by created or updated time, expandable
//! sub-steps and result badges in the seeds' colours. The filters are the URL's query, handed
//! to the API as they are (empty fields left out).

use askama::Template;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use events::payloads::{SchedulingResult, SessionStatus};

use super::{render, Chrome, PageError, Viewer};
use crate::api::{self, SessionId};
use crate::caller::Caller;
use crate::model::HistoryEntry;
use crate::state::AppState;

/// The filter fields the modal's form has, as the API names them.
const FILTERS: [&str; 8] = [
    "id",
    "phase",
    "result",
    "from_status",
    "to_status",
    "error_code",
    "message",
    "sort",
];

#[derive(Template)]
#[template(path = "history.html")]
struct HistoryPage {
    chrome: Chrome,
    session_id: String,
    session_name: String,
    /// Each filter's value now, by the form's field name.
    values: Vec<(&'static str, String)>,
    results: Vec<&'static str>,
    statuses: Vec<&'static str>,
    entries: Vec<HistoryEntry>,
    refresh_href: String,
}

impl HistoryPage {
    fn value(&self, field: &str) -> &str {
        self.values
            .iter()
            .find(|(f, _)| *f == field)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The badge colour of a result, as the seeds paint it.
pub fn badge(result: &str) -> &'static str {
    match result {
        "SUCCESS" => "green",
        "FAILURE" | "EXPIRED" | "GIVE_UP" => "red",
        "NEED_RETRY" => "yellow",
        _ => "grey",
    }
}

/// The query with its empty fields and unknown names left out.
fn api_query(raw: Option<&str>) -> (String, Vec<(&'static str, String)>) {
    let mut values = Vec::new();
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (key, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        let Some(field) = FILTERS.iter().find(|f| **f == key) else {
            continue;
        };
        if value.trim().is_empty() {
            continue;
        }
        query.append_pair(field, value.trim());
        values.push((*field, value.trim().to_owned()));
    }
    (query.finish(), values)
}

/// `GET /console/sessions/{id}/history`.
pub async fn page(
    State(state): State<AppState>,
    Viewer(me): Viewer,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, PageError> {
    let session = super::sessions::session(&state, &me, &id).await?;
    let (query, values) = api_query(raw.as_deref());
    let history = api::history::session_history(
        State(state.clone()),
        Caller(me.clone()),
        Path(SessionId { id: id.clone() }),
        RawQuery(Some(query.clone())),
    )
    .await?
    .0;
    let page = HistoryPage {
        chrome: Chrome::of(&state, &me, "sessions").await,
        refresh_href: format!("/console/sessions/{id}/history?{query}"),
        session_id: id,
        session_name: session.name,
        values,
        results: SchedulingResult::ALL.iter().map(|r| r.as_str()).collect(),
        statuses: SessionStatus::ALL.iter().map(|s| s.as_str()).collect(),
        entries: history.history,
    };
    Ok(render(&page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_unknown_filters_are_left_out() {
        let (query, values) = api_query(Some(
            "phase=&result=FAILURE&bogus=1&message=+no+agent+&sort=-updated_at",
        ));
        assert_eq!(query, "result=FAILURE&message=no+agent&sort=-updated_at");
        assert_eq!(values.len(), 3);
    }

    #[test]
    fn badges_take_the_seeds_colours() {
        assert_eq!(badge("SUCCESS"), "green");
        assert_eq!(badge("GIVE_UP"), "red");
        assert_eq!(badge("NEED_RETRY"), "yellow");
        assert_eq!(badge("SKIPPED"), "grey");
    }
}
