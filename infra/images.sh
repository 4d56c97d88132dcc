#!/usr/bin/env bash
# Builds the local session images used by the demo and the tests, without a registry:
#   berth/shell:latest   FROM scratch with Debian's busybox-static (sh, cat, sleep, nc, wget ...)
#   berth/python:latest  a Debian minbase root file system with python3 (debootstrap), imported
# Idempotent: an image that exists is kept (BERTH_REBUILD_IMAGES=1 rebuilds).
#   infra/images.sh [shell|python|all]   (default: all)
set -euo pipefail
say() { printf '[images] %s\n' "$*" >&2; }
WHICH="${1:-all}"
REBUILD="${BERTH_REBUILD_IMAGES:-0}"

have() { [ "$REBUILD" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; }

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
LABEL ai.berth.image="shell"
CMD ["/bin/sh"]
DOCKERFILE
  say "building berth/shell:latest"
  docker build -q -t berth/shell:latest "$dir" >/dev/null
  rm -rf "$dir"
}

python_image() {
  if have berth/python:latest; then return 0; fi
  apt_install debootstrap
  local root; root="$(mktemp -d)"
  say "building berth/python:latest (debootstrap bookworm minbase + python3; a few minutes)"
  debootstrap --variant=minbase --include=python3-minimal,python3 bookworm "$root" \
    "${BERTH_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >/dev/null
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  mkdir -p "$root/home/work"
  tar -C "$root" -c . | docker import \
    -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/work' -c 'WORKDIR /home/work' \
    -c 'LABEL ai.berth.image="python"' -c 'CMD ["/usr/bin/python3"]' - berth/python:latest >/dev/null
  rm -rf "$root"
}

case "$WHICH" in
  shell) shell_image ;;
  python) python_image ;;
  all) shell_image; python_image ;;
  *) say "usage: infra/images.sh [shell|python|all]"; exit 2 ;;
esac
say "ready: $(docker image ls --format '{{.Repository}}:{{.Tag}}' 'berth/*' | tr '\n' ' ')"
