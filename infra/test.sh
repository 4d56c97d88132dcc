#!/usr/bin/env bash
# Runs berth's whole test suite on a fresh machine. Formatting is checked first. Then, while
# the tests build (linted by clippy as they compile), it installs what is missing (Debian's
# docker-compose, openssh-client, chromium, chromium-driver and iproute2; cargo-deny from
# crates.io), starts PostgreSQL and NATS on loopback (infra/services.sh), builds the local
# session images (infra/images.sh) and installs schemathesis; then it runs every test of the
# workspace against them and Docker. Ends with the test runner's own summary; nextest's
# per-test limit is in .config/nextest.toml.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

say() { printf '[test] %s\n' "$*" >&2; }

if ! command -v cargo >/dev/null; then
  say "cargo is missing: install a Rust toolchain (rustup) first"; exit 1
fi
# Each install step stops the run when it fails (no `a && b` lists, which `set -e` lets
# through): a missing prerequisite must never turn into a test that passes by skipping.
apt_updated=0
apt_install() {
  say "installing $* from Debian's packages"
  if [ "$apt_updated" -eq 0 ]; then
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
# docker-compose for the compose test; ssh for the app tests' SSH login; Chromium and its
# driver for the console's pages and the terminal's; iproute2 for the agent on a
# host of its own (a network namespace); what infra/images.sh and infra/services.sh would
# otherwise install for themselves (in one apt-get: two at once would wait on each other's
# lock). The compiler needs none of them, so they are installed beside the build (below).
missing=()
command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || missing+=(docker-compose)
command -v ssh >/dev/null || missing+=(openssh-client)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v ip >/dev/null || missing+=(iproute2)
command -v docker-registry >/dev/null || missing+=(docker-registry)
command -v htpasswd >/dev/null || missing+=(apache2-utils)
for p in busybox-static mmdebstrap python3-venv; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ! cargo nextest --version >/dev/null 2>&1; then
  say "installing cargo-nextest (crates.io)"
  cargo install --locked cargo-nextest
fi

# The habits first: formatting and lints fail in seconds, before anything is started.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  say "installing rustfmt and clippy"; rustup component add rustfmt clippy
fi
say "cargo fmt --check"
cargo fmt --all --check
# The servers this run starts, it stops when the tests end; servers that already ran (a
# developer's, or infra/up.sh's) are left as they were.
servers_were_running=0
servers="$(infra/services.sh status)"
if grep -q "^postgres: running" <<<"$servers" && grep -q "^nats: running" <<<"$servers"; then
  servers_were_running=1
fi

# schemathesis (PyPI) for the contract test (tests/e2e/contract.rs), which holds the API to
# its OpenAPI document; a pinned release, so its checks do not change under the tests.
SCHEMATHESIS_RELEASE=4.32.5
VENV="${BERTH_STATE_DIR:-$ROOT/.berth}/venv"
install_schemathesis() {
  if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_RELEASE"; then
    [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "schemathesis==$SCHEMATHESIS_RELEASE"
  fi
}
# Under the lock infra/services.sh makes and fills the venv with (the images' build may be
# installing nats-server into it at the same time).
install_schemathesis_locked() {
  mkdir -p "$(dirname "$VENV")"
  (flock 9 && install_schemathesis) 9>"$VENV.lock"
}
export BERTH_SCHEMATHESIS="$VENV/bin/schemathesis"

# Debian's packages, the servers, schemathesis and the images are made beside the build, each
# into a log of its own that is shown if it fails: the packages first (one apt-get), then the
# servers (and schemathesis) and the images side by side. The session images are the ones the
# container tests run (built locally; no registry is needed), then the compose stack's
# PostgreSQL and NATS images (the compose test adds berth's own, from the binary this run
# builds). (At the lowest priority they only waited for the compiler: the images' builds then
# ran alone after it, 110 s with a core idle.)
LOGS="${BERTH_STATE_DIR:-$ROOT/.berth}/log"
mkdir -p "$LOGS"
# The databases earlier runs' tests made and kept: most tests' own (`test_` and 32 hex digits;
# the e2e harness drops a passing test's itself) and benches' (`berth_bench_` and a process id),
# about 8 MB each and fifty a run. They go here, beside the build (each drop is a checkpoint,
# about a second), so that runs do not pile them up on disk; a failing test's is thereby kept
# for a look until the next run, and one still in use is left.
drop_kept_databases() {
  local maintenance db
  maintenance="$(eval "$(infra/services.sh env)"; echo "${BERTH_DATABASE_URL%/*}/postgres")"
  for db in $(psql "$maintenance" -Atc "SELECT datname FROM pg_database
                 WHERE datname ~ '^(test_[0-9a-f]{32}|berth_bench_[0-9]+)$'"); do
    psql "$maintenance" -qc "DROP DATABASE \"$db\"" || true
  done
}
prepare() {
  if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
  # The servers first: their venv (nats-server) is the one schemathesis goes into.
  (infra/services.sh up >"$LOGS/servers.log" 2>&1 \
    && install_schemathesis_locked >"$LOGS/schemathesis.log" 2>&1 \
    && { drop_kept_databases >"$LOGS/kept-databases.log" 2>&1 || true; }) &
  local servers=$! images=0
  (infra/images.sh all && infra/images.sh servers) >"$LOGS/images.log" 2>&1 || images=$?
  if ! wait "$servers"; then cat "$LOGS/servers.log" "$LOGS/schemathesis.log"; return 1; fi
  if [ "$images" -ne 0 ]; then cat "$LOGS/images.log"; return 1; fi
}
prepare >"$LOGS/prepare.log" 2>&1 &
PREPARE=$!

# cargo-deny (crates.io) holds the dependencies to deny.toml: licences, duplicate versions,
# sources, and RustSec's advisories where its database can be fetched.
DENY_RELEASE=0.20.2
install_cargo_deny() {
  if ! cargo deny --version 2>/dev/null | grep -q "$DENY_RELEASE"; then
    # Unoptimised, without its release profile's fat LTO: half the compiler time (91 s of
    # CPU against 177 s here), and its checks of this workspace still take about 2 s.
    CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_LTO=false \
      CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
      cargo install --locked --quiet "cargo-deny@$DENY_RELEASE"
  fi
}
install_cargo_deny >"$LOGS/cargo-deny.log" 2>&1 &
CARGO_DENY=$!

# kill_tree PID: the process and every one under it, the deepest first (a step still going
# runs subshells of subshells: apt-get, docker build, cargo install).
kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill -TERM "$1" 2>/dev/null || true
}

# The run leaves nothing behind, whether it ends well or a step fails (a build error
# included): the downloads still going are stopped, the hosts the tests made (infra/host.sh)
# go, and the servers go unless they ran before it. Quietly, so that the runner's summary
# stays the run's last lines.
leave_nothing() {
  local pid
  for pid in "$PREPARE" "$CARGO_DENY"; do
    kill_tree "$pid"
  done
  infra/host.sh down-all >/dev/null 2>&1 || true
  # The spares that agents the tests killed (SIGKILL, no chance to clean up) kept made ahead:
  # their sandboxes, then their bridges; one a session's container is on is refused by the
  # engine and stays.
  docker ps -aq --filter label=ai.berth.spare 2>/dev/null \
    | xargs -r docker rm -f >/dev/null 2>&1 || true
  docker network ls -q --filter label=ai.berth.spare 2>/dev/null \
    | xargs -r docker network rm >/dev/null 2>&1 || true
  if [ "$servers_were_running" -eq 0 ]; then
    infra/services.sh down >/dev/null 2>&1 || true
  fi
}
trap leave_nothing EXIT

# Clippy lints the workspace while it compiles for the tests, in one pass: its driver stands in
# for rustc on the workspace's own crates (the way `cargo clippy` runs it, with `-D warnings`),
# so the dependencies are compiled once, not once checked for clippy and again built for the
# tests. `--all-targets` lints what `cargo clippy --workspace --all-targets` does; both cargo
# runs below see the same settings, so the second builds nothing again.
export RUSTC_WORKSPACE_WRAPPER
RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# CI builds from nothing, where incremental compilation only writes what no later build reads.
if [ "${CI:-}" = "true" ]; then
  export CARGO_INCREMENTAL=0
fi
say "building the tests, linted by clippy as they compile (-D warnings)"
cargo nextest run --workspace --all-targets --no-run --cargo-quiet

# waited_for NAME PID LOG: the background step's end, its log shown when it failed.
waited_for() {
  if ! wait "$2"; then
    cat "$3" >&2; say "$1 failed (its log: $3)"; exit 1
  fi
  say "$1 done"
}
waited_for "Debian's packages, the servers, schemathesis $SCHEMATHESIS_RELEASE and the images" \
  "$PREPARE" "$LOGS/prepare.log"
cat "$LOGS/servers.log" >&2
eval "$(infra/services.sh env)"
waited_for "cargo-deny $DENY_RELEASE" "$CARGO_DENY" "$LOGS/cargo-deny.log"

say "cargo deny check (deny.toml)"
cargo deny --log-level error check licenses bans sources
# RustSec's database lives on GitHub; a machine that cannot reach it (this project's CI reaches
# only the package registries) says so instead of failing on what it cannot know.
if timeout 120 cargo deny fetch db >/dev/null 2>&1; then
  cargo deny --log-level error check advisories
else
  say "RustSec's advisory database cannot be fetched from here: advisories not checked"
fi

# Outside CI, a test whose prerequisite this machine lacks is left out by name, so the
# runner's summary counts it as skipped; under CI (CI=true) nothing is left out, and such a
# test fails naming what is missing (berth_tests::missing_prerequisite).
filter=()
if [ "${CI:-}" != "true" ]; then
  skip=()
  if ! command -v chromedriver >/dev/null; then
    skip+=("test(the_terminal_page_runs_what_is_typed_in_a_browser)"
           "test(a_batch_session_is_launched_found_and_explained_in_the_console)"
           "test(an_interactive_sessions_terminal_and_jupyter_open_from_the_console)"
           "test(a_superadmin_sees_the_agents_and_the_queue_in_the_schedulers_order)")
  fi
  probe="berthprobe$$"
  if ip netns add "$probe" 2>/dev/null; then
    ip netns delete "$probe"
  else
    skip+=("test(an_agent_on_a_host_of_its_own_reaches_nats_alone_and_runs_a_session)"
           "test(a_cluster_spans_two_engines_over_an_overlay_that_outlives_its_agents_restart_and_goes_with_the_session)")
  fi
  if [ ${#skip[@]} -gt 0 ]; then
    joined="$(IFS='|'; echo "${skip[*]}")"
    joined="${joined//|/ | }"
    say "prerequisites missing here; left out (counted as skipped): $joined"
    filter=(-E "not ($joined)")
  fi
fi
status=0
cargo nextest run --workspace --no-fail-fast "${filter[@]}" || status=$?
exit "$status"
