//! The console's assets, embedded in the binary at build time: its stylesheet, its script
//! module, the terminal page's script and xterm.js (from PyPI's webssh package, see `gateway/assets/vendor/README.md`).
//! Served with their type and a day's caching; nothing is read from disk at run time.

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// Every asset: its name under `/console/assets/`, its type and its bytes.
pub const ASSETS: [(&str, &str, &[u8]); 7] = [
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
    (
        "terminal.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/terminal.js"),
    ),
    (
        "terminal.css",
        "text/css; charset=utf-8",
        include_bytes!("../../assets/terminal.css"),
    ),
    (
        "xterm.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/vendor/xterm.min.js"),
    ),
    (
        "xterm-addon-fit.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../assets/vendor/xterm-addon-fit.min.js"),
    ),
    (
        "xterm.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../../assets/vendor/xterm.min.css"),
    ),
];

/// The asset named `name`.
pub fn asset(name: &str) -> Option<(&'static str, &'static [u8])> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, kind, bytes)| (*kind, *bytes))
}

/// The assets a terminal circuit's page loads (under `/__berth/` on the circuit's port).
pub fn terminal_asset(name: &str) -> Option<(&'static str, &'static [u8])> {
    const TERMINAL: [&str; 5] = [
        "terminal.js",
        "terminal.css",
        "xterm.min.js",
        "xterm-addon-fit.min.js",
        "xterm.min.css",
    ];
    TERMINAL.contains(&name).then(|| asset(name)).flatten()
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

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    /// The vendored files are the registry package's, byte for byte: the digests the
    /// provenance note records.
    #[test]
    fn the_vendored_files_are_the_packages_own() {
        let note = include_str!("../../assets/vendor/README.md");
        for name in ["xterm.min.js", "xterm-addon-fit.min.js", "xterm.min.css"] {
            let (_, bytes) = super::asset(name).unwrap();
            let digest = hex::encode(Sha256::digest(bytes));
            let line = note
                .lines()
                .find(|l| l.starts_with(&format!("| `{name}`")))
                .unwrap_or_else(|| panic!("{name} has no provenance line"));
            assert!(line.contains(&digest), "{name}: {digest} is not recorded");
        }
    }
}
