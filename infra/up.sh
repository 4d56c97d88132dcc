#!/usr/bin/env bash
# Sets berth up on a fresh machine and runs it: installs and starts PostgreSQL and NATS on
# loopback, builds berth, starts every service (`berth up`) in the background, shows events
# flowing through the log, the relay and the audit chain, runs a batch session end to end
# through the gateway, and leaves the platform running.
#   infra/up.sh          set up, start, demonstrate
#   infra/up.sh stop     stop berth and the servers
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STATE="${BERTH_STATE_DIR:-$ROOT/.berth}"
say() { printf '[up] %s\n' "$*" >&2; }

if [ "${1:-}" = "stop" ]; then
  for p in agent berth; do
    if [ -f "$STATE/$p.pid" ] && kill "$(cat "$STATE/$p.pid")" 2>/dev/null; then say "$p stopped"; fi
    rm -f "$STATE/$p.pid"
  done
  infra/services.sh down
  exit 0
fi

infra/services.sh up
eval "$(infra/services.sh env)"
# The session images are mostly downloads and the build is mostly compiling: the two run side
# by side, and the images' log is shown if they fail.
mkdir -p "$STATE/log"
infra/images.sh all >"$STATE/log/images.log" 2>&1 &
IMAGES=$!
# The test profile (dev: dependencies unoptimised but for the hashing and signing crates, no
# debug information in them; see Cargo.toml):
# `infra/test.sh` after this reuses what it built. Operators build with --release.
say "building berth (the test profile, shared with infra/test.sh)"
cargo build -q -p berth
BERTH="${CARGO_TARGET_DIR:-$ROOT/target}/debug/berth"
if ! wait "$IMAGES"; then
  cat "$STATE/log/images.log" >&2; say "the session images did not build"; exit 1
fi
cat "$STATE/log/images.log" >&2

# berth's runtime, lent to every container: tmux in every terminal, whatever the image holds.
infra/runtime.sh "$STATE/runtime"
export BERTH_AGENT_RUNTIME="$STATE/runtime"

if [ -f "$STATE/berth.pid" ] && kill -0 "$(cat "$STATE/berth.pid")" 2>/dev/null; then
  say "berth already runs (pid $(cat "$STATE/berth.pid"))"
else
  nohup "$BERTH" up >"$STATE/log/berth.log" 2>&1 &
  echo $! >"$STATE/berth.pid"
  say "berth up started (pid $!, log $STATE/log/berth.log)"
fi

# The first superadmin's key is printed once, by the first `berth up` on a fresh database;
# keep it (readable by this user only) so later runs can use it.
KEY_FILE="$STATE/admin.key"
for _ in $(seq 1 100); do
  curl -fsS "http://${BERTH_GATEWAY_LISTEN:-127.0.0.1:8480}/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
if [ ! -s "$KEY_FILE" ]; then
  KEY="$(grep -o 'berth_[0-9a-f]\{40\}' "$STATE/log/berth.log" | head -n1 || true)"
  if [ -z "$KEY" ]; then
    KEY="$("$BERTH" admin issue-key --email admin@berth.local | grep -o 'berth_[0-9a-f]\{40\}')"
  fi
  (umask 077; echo "$KEY" >"$KEY_FILE")
  say "superadmin admin@berth.local; its API key is in $KEY_FILE"
fi
export BERTH_API_KEY="$(cat "$KEY_FILE")"

if [ -f "$STATE/agent.pid" ] && kill -0 "$(cat "$STATE/agent.pid")" 2>/dev/null; then
  say "agent already runs (pid $(cat "$STATE/agent.pid"))"
else
  AGENT_ID="$(hostname -s 2>/dev/null | tr -c 'A-Za-z0-9_\n-' '-' || true)"
  AGENT_ID="${AGENT_ID:-local}"
  # The agent is admitted (its credential kept beside the data, readable by its owner only);
  # it reaches the control plane through NATS alone.
  CREDENTIAL="$STATE/agent.credential"
  if [ ! -s "$CREDENTIAL" ]; then
    "$BERTH" admin agent admit "$AGENT_ID" --group default --credential-out "$CREDENTIAL" >/dev/null
  fi
  # Its NATS address names no user: the control plane's password is not the agent's to hold.
  AGENT_NATS_URL="$(printf '%s' "$BERTH_NATS_URL" | sed -E 's#://[^@/]*@#://#')"
  nohup env BERTH_AGENT_CREDENTIAL="$CREDENTIAL" BERTH_NATS_URL="$AGENT_NATS_URL" \
    "$BERTH" agent --id "$AGENT_ID" \
    --data-dir "$STATE/agent-data" >"$STATE/log/agent.log" 2>&1 &
  echo $! >"$STATE/agent.pid"
  say "agent started (pid $!, log $STATE/log/agent.log)"
fi
sleep 1

say "a batch session, end to end through the gateway:"
SESSION="$("$BERTH" session create --type batch --image berth/shell:latest --cpu 1 --memory 256m \
  --command 'echo hello from berth, inside $(hostname); cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes' \
  | awk '{print $1}')"
say "its container's output, followed while it runs (berth session logs --follow):"
"$BERTH" session logs --follow "$SESSION"
# `session wait` exits as the session did (its exit code), once it has ended.
EXIT=0
"$BERTH" session wait --timeout 60 "$SESSION" || EXIT=$?
STATUS="$("$BERTH" session info -o json "$SESSION" | sed -n 's/^  "status": "\(.*\)",$/\1/p')"
"$BERTH" session info "$SESSION"
"$BERTH" session history "$SESSION"
say "its container's output, as kept after the end:"
"$BERTH" session logs "$SESSION"
say "session $SESSION ended $STATUS"
[ "$STATUS" = "TERMINATED" ] && [ "$EXIT" = 0 ] || { say "the session did not end TERMINATED with exit code 0 ($EXIT)"; exit 1; }

say "running the event demo"
"$BERTH" demo
say "the chain over everything recorded so far:"
"$BERTH" audit verify
say "the streams projection, rebuilt from the log and compared with the live one:"
"$BERTH" replay streams
say "the sessions projection, rebuilt and compared:"
"$BERTH" replay sessions
say "the ledger (what commands decide on), folded again from the log and compared:"
"$BERTH" replay ledger
say "the web console: http://${BERTH_GATEWAY_LISTEN:-127.0.0.1:8480}/console (sign in with the superadmin's API key in $KEY_FILE)"
say "berth keeps running; 'infra/up.sh stop' stops it and the servers"
