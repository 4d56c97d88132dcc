#!/usr/bin/env bash
# Sets berth up on a fresh machine and runs it: installs and starts PostgreSQL and NATS on
# loopback, builds berth, starts every service (`berth up`) in the background, shows events
# flowing through the log, the relay and the audit chain, and leaves the platform running.
#   infra/up.sh          set up, start, demonstrate
#   infra/up.sh stop     stop berth and the servers
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STATE="${BERTH_STATE_DIR:-$ROOT/.berth}"
say() { printf '[up] %s\n' "$*" >&2; }

if [ "${1:-}" = "stop" ]; then
  if [ -f "$STATE/berth.pid" ] && kill "$(cat "$STATE/berth.pid")" 2>/dev/null; then say "berth stopped"; fi
  rm -f "$STATE/berth.pid"
  infra/services.sh down
  exit 0
fi

infra/services.sh up
eval "$(infra/services.sh env)"
say "building berth (release)"
cargo build --release -q -p berth
BERTH="$ROOT/target/release/berth"

if [ -f "$STATE/berth.pid" ] && kill -0 "$(cat "$STATE/berth.pid")" 2>/dev/null; then
  say "berth already runs (pid $(cat "$STATE/berth.pid"))"
else
  nohup "$BERTH" up >"$STATE/log/berth.log" 2>&1 &
  echo $! >"$STATE/berth.pid"
  say "berth up started (pid $!, log $STATE/log/berth.log)"
fi
sleep 1

say "running the demo"
"$BERTH" demo
say "the chain over everything recorded so far:"
"$BERTH" audit verify
say "the streams projection, rebuilt from the log and compared with the live one:"
"$BERTH" replay streams
say "berth keeps running; 'infra/up.sh stop' stops it and the servers"
