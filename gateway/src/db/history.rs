//! A session's scheduling history: every phase with its result and sub-steps, from the
//! gateway's own projection (`proj_sessions.history`, written by [`crate::projection`]).

use deadpool_postgres::Pool;
use events::payloads::{SchedulingResult, SessionStatus};
use serde_json::Value;
use uuid::Uuid;

use super::Where;
use crate::error::ApiError;
use crate::model::HistoryEntry;

/// Which scheduling-history rows of one session to show.
#[derive(Debug, Clone, Default)]
pub struct HistoryFilter {
    pub id: Option<Uuid>,
    pub phase: Option<String>,
    pub result: Option<SchedulingResult>,
    pub from_status: Option<SessionStatus>,
    pub to_status: Option<SessionStatus>,
    pub error_code: Option<String>,
    /// Rows whose message contains this text, in any case.
    pub message: Option<String>,
}

/// The order of a history (`sort=`, a leading `-` for descending).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
pub enum HistoryOrder {
    #[default]
    #[serde(rename = "created_at")]
    CreatedAscending,
    #[serde(rename = "-created_at")]
    CreatedDescending,
    #[serde(rename = "updated_at")]
    UpdatedAscending,
    #[serde(rename = "-updated_at")]
    UpdatedDescending,
}

/// Session `session_id`'s scheduling history rows matching `filter`.
pub async fn history(
    pool: &Pool,
    session_id: Uuid,
    filter: &HistoryFilter,
    order: HistoryOrder,
) -> Result<Vec<HistoryEntry>, ApiError> {
    let mut w = Where::default();
    w.add("session_id = ?", session_id);
    if let Some(id) = filter.id {
        w.add("id = ?", id);
    }
    if let Some(phase) = &filter.phase {
        w.add("phase = ?", phase.clone());
    }
    if let Some(result) = filter.result {
        w.add("result = ?", result.as_str().to_owned());
    }
    if let Some(s) = filter.from_status {
        w.add("from_status = ?", s.as_str().to_owned());
    }
    if let Some(s) = filter.to_status {
        w.add("to_status = ?", s.as_str().to_owned());
    }
    if let Some(code) = &filter.error_code {
        w.add("error_code = ?", code.clone());
    }
    if let Some(message) = &filter.message {
        let escaped = message
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        w.add("message ILIKE ?", format!("%{escaped}%"));
    }
    let order = match order {
        // Rows of one append share a time: the event's id (a UUIDv7, in the order of the
        // append) keeps them in the order they were recorded.
        HistoryOrder::CreatedAscending => "created_at ASC, id ASC",
        HistoryOrder::CreatedDescending => "created_at DESC, id DESC",
        HistoryOrder::UpdatedAscending => "updated_at ASC, id ASC",
        HistoryOrder::UpdatedDescending => "updated_at DESC, id DESC",
    };
    let client = pool.get().await?;
    let rows = client
        .query(
            &format!(
                "SELECT id, phase, result, from_status, to_status, attempts, message, error_code,
                        steps, created_at, updated_at
                 FROM proj_sessions.history WHERE {} ORDER BY {order}",
                w.sql()
            ),
            &w.refs(),
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| HistoryEntry {
            id: r.get(0),
            phase: r.get(1),
            result: r.get(2),
            from_status: r.get(3),
            to_status: r.get(4),
            attempts: r.get(5),
            message: r.get(6),
            error_code: r.get(7),
            // Written by the projection from the events' steps: always of this shape.
            sub_steps: serde_json::from_value(r.get::<_, Value>(8)).unwrap_or_default(),
            created_at: r.get(9),
            updated_at: r.get(10),
        })
        .collect())
}
