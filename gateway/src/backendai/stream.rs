//! Backend.AI's event stream (`GET /events/session`) (filled in by its own change).

use axum::Router;

use crate::state::AppState;

pub(super) fn routes() -> Router<AppState> {
    Router::new()
}
