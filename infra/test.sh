#!/usr/bin/env bash
# Runs berth's whole test suite on a fresh machine: installs what is missing (Debian's
# docker-compose, openssh-client, chromium, chromium-driver and libjs-term.js), starts
# PostgreSQL and NATS on loopback (infra/services.sh), builds the local session images
# (infra/images.sh) and installs schemathesis, then runs every test of the workspace against
# them and Docker. Formatting and clippy are checked first. Ends with the test runner's own summary; nextest's per-test
# limit is in .config/nextest.toml.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf '[test] %s\n' "$*" >&2; }

if ! command -v cargo >/dev/null; then
  say "cargo is missing: install a Rust toolchain (rustup) first"; exit 1
fi
if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
  say "installing docker-compose from Debian's packages"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
fi
# The app tests log in to a session's SSH server with its own key, and drive the terminal's
# page in a headless Chromium, drawn by Debian's term.js.
missing=()
command -v ssh >/dev/null || missing+=(openssh-client)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
[ -f /usr/share/javascript/term.js/term.js ] || missing+=(libjs-term.js)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} from Debian's packages"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The habits first: formatting and lints fail in seconds, before anything is started.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  say "installing rustfmt and clippy"; rustup component add rustfmt clippy
fi
say "cargo fmt --check"
cargo fmt --all --check
say "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

infra/services.sh up
eval "$(infra/services.sh env)"
# The session images the container tests run (built locally; no registry is needed).
infra/images.sh all

# schemathesis (PyPI) for the contract test (tests/e2e/contract.rs), which holds the API to
# its OpenAPI document; a pinned release, so its checks do not change under the tests.
SCHEMATHESIS_RELEASE=4.32.5
VENV="${BERTH_STATE_DIR:-$ROOT/.berth}/venv"
if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_RELEASE"; then
  say "installing schemathesis $SCHEMATHESIS_RELEASE (PyPI) into $VENV"
  [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "schemathesis==$SCHEMATHESIS_RELEASE"
fi
export BERTH_SCHEMATHESIS="$VENV/bin/schemathesis"

if cargo nextest --version >/dev/null 2>&1; then
  exec cargo nextest run --workspace --no-fail-fast
else
  say "cargo-nextest not found; using cargo test"
  exec cargo test --workspace --no-fail-fast
fi
