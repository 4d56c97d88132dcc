//! The console's assets, embedded in the binary at build time: its stylesheet and its script
//! module, and beside them the terminal page's (`crate::proxy::assets`). Served with their
//! type and a day's caching; nothing is read from disk at run time.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// The console's own assets: each name under `/console/assets/`, its type and its bytes (the
/// terminal's, which the app proxy serves, are served here too).
pub const ASSETS: [(&str, &str, &[u8]); 2] = [
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("../../assets/console.css"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/console.js"),
    ),
];

/// The asset named `name`: the console's, or the terminal's.
pub fn asset(name: &str) -> Option<(&'static str, &'static [u8])> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, kind, bytes)| (*kind, *bytes))
        .or_else(|| crate::proxy::assets::terminal_asset(name))
}

/// `GET /console/assets/{name}`.
pub async fn serve(Path(name): Path<String>) -> Response {
    match asset(&name) {
        Some((kind, bytes)) => (
            [
                (header::CONTENT_TYPE, kind),
                (header::CACHE_CONTROL, "public, max-age=86400"),
            ],
            bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}
