//! The assets a terminal circuit's page (`terminal.html`) loads under `/__berth/` on the
//! circuit's port: its script and style, and xterm.js (from PyPI's webssh package, see
//! `gateway/assets/vendor/README.md`), embedded in the binary at build time.

/// The terminal's assets: each name, its type and its bytes.
const TERMINAL: [(&str, &str, &[u8]); 5] = [
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

/// The terminal's asset named `name`.
pub fn terminal_asset(name: &str) -> Option<(&'static str, &'static [u8])> {
    TERMINAL
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, kind, bytes)| (*kind, *bytes))
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
            let (_, bytes) = super::terminal_asset(name).unwrap();
            let digest = hex::encode(Sha256::digest(bytes));
            let line = note
                .lines()
                .find(|l| l.starts_with(&format!("| `{name}`")))
                .unwrap_or_else(|| panic!("{name} has no provenance line"));
            assert!(line.contains(&digest), "{name}: {digest} is not recorded");
        }
    }
}
