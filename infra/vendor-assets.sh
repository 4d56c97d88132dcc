#!/usr/bin/env bash
# Fetches the console's third-party browser assets from their registry package again (PyPI's
# webssh 1.6.3, which carries xterm.js 4 and its fit add-on) into gateway/assets/vendor/,
# and checks each against the digest recorded in gateway/assets/vendor/README.md.
#   infra/vendor-assets.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENDOR="$ROOT/gateway/assets/vendor"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
python3 -m pip download --no-deps --no-binary :all: -q -d "$work" webssh==1.6.3
tar -xzf "$work"/webssh-1.6.3.tar.gz -C "$work"
static="$work/webssh-1.6.3/webssh/static"
cp "$static/js/xterm.min.js" "$static/css/xterm.min.css" "$static/js/xterm-addon-fit.min.js" "$VENDOR/"
cd "$VENDOR"
grep -o '^| `[^`]*` |.*| `[0-9a-f]\{64\}` |$' README.md \
  | sed -E 's/^\| `([^`]*)` \|.*\| `([0-9a-f]{64})` \|$/\2  \1/' | sha256sum -c -
