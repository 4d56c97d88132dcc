#!/usr/bin/env bash
# Another host on this machine, for the tests that cross hosts and for the walkthrough in
# docs/many-hosts.md: a network namespace of its own, joined to this machine by a veth pair,
# and a Docker engine inside it with its own data root, socket, containerd and bridge. Its
# containers reach other engines' only through the pair and this machine's forwarding, as
# another host's would. The file system is this machine's: a directory both engines
# bind-mount stands in for a shared volume (NFS, CephFS).
#
#   infra/host.sh up N      starts host N (2 to 99): namespace berth-hN, the address
#                           10.254.N.2 on the pair (this machine is 10.254.N.1), its engine
#                           at $BERTH_STATE_DIR/hosts/hN/docker.sock
#   infra/host.sh env N     its settings, to eval: BERTH_HOST_NETNS, BERTH_HOST_ADDRESS,
#                           BERTH_HOST_GATEWAY and DOCKER_HOST
#   infra/host.sh load N IMAGE...   copies the images of this machine's engine that host
#                           N's lacks into it
#   infra/host.sh swarm N M...      starts hosts N, M... and joins their engines in one
#                           Docker swarm, every one a manager (so any may make a cluster's
#                           overlay network), N the first
#   infra/host.sh down N    stops its engine (its containers with it), removes the namespace
#   infra/host.sh down-all  every host that is up, down
#   infra/host.sh status    the hosts that are up
#
# Tests run this at once from several processes: each command holds a lock while it works.
#
# Root only (namespaces, veth, iptables). The engine is entered into the namespace with
# nsenter, not `ip netns exec`, which remounts /sys and hides the cgroups Docker needs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${BERTH_STATE_DIR:-$ROOT/.berth}/hosts"

say() { printf '[host] %s\n' "$*" >&2; }
mkdir -p "$STATE"
exec 9>"$STATE/.lock"
flock 9
die() { say "$*"; exit 1; }

host_number() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 2 ] && [ "$1" -le 99 ] ||
    die "a host is a number from 2 to 99 (1 is this machine), not '${1:-}'"
}

# Names and addresses of host $1.
names() {
  netns="berth-h$1"
  near="bh$1n"
  far="bh$1f"
  near_address="10.254.$1.1"
  far_address="10.254.$1.2"
  dir="$STATE/h$1"
  socket="$dir/docker.sock"
  # Its engine's default bridge, and the pool its networks are made from: apart from this
  # machine's engine's and every other host's.
  bridge="172.29.$1.1/24"
  pool="172.30.$(( $1 * 2 )).0/23"
}

engine_up() { docker -H "unix://$socket" version >/dev/null 2>&1; }

up() {
  host_number "$1"; names "$1"
  if engine_up; then say "host $1 is already up ($far_address)"; return; fi
  command -v nsenter >/dev/null || die "nsenter (util-linux) is missing"
  command -v dockerd >/dev/null || die "dockerd is missing"
  mkdir -p "$dir"
  if ! ip netns list | grep -qw "$netns"; then
    ip netns add "$netns"
    ip link add "$near" type veth peer name "$far"
    ip link set "$far" netns "$netns"
    ip addr add "$near_address/24" dev "$near"
    ip link set "$near" up
    ip netns exec "$netns" ip addr add "$far_address/24" dev "$far"
    ip netns exec "$netns" ip link set "$far" up
    ip netns exec "$netns" ip link set lo up
    # Every other address is reached through this machine: the other hosts' pairs.
    ip netns exec "$netns" ip route add default via "$near_address"
  fi
  # This machine forwards between the hosts' pairs (Docker's FORWARD policy drops the rest).
  sysctl -qw net.ipv4.ip_forward=1
  iptables -C FORWARD -i "$near" -j ACCEPT 2>/dev/null || iptables -I FORWARD 1 -i "$near" -j ACCEPT
  iptables -C FORWARD -o "$near" -j ACCEPT 2>/dev/null || iptables -I FORWARD 1 -o "$near" -j ACCEPT
  # The engine's own settings (none of this machine's /etc/docker/daemon.json): the storage
  # driver this machine's engine uses, which works where the machine is itself a container.
  local driver
  driver="$(docker info --format '{{.Driver}}' 2>/dev/null || echo overlay2)"
  cat >"$dir/daemon.json" <<EOF
{"storage-driver": "$driver", "bip": "$bridge",
 "default-address-pools": [{"base": "$pool", "size": 28}],
 "log-driver": "json-file", "log-opts": {"max-size": "10m", "max-file": "2"}}
EOF
  nsenter --net="/var/run/netns/$netns" setsid dockerd \
    --config-file "$dir/daemon.json" --data-root "$dir/data" --exec-root "$dir/exec" \
    --pidfile "$dir/docker.pid" -H "unix://$socket" >"$dir/dockerd.log" 2>&1 </dev/null 9>&- &
  for _ in $(seq 1 300); do
    engine_up && { say "host $1 is up: $far_address, engine unix://$socket"; return; }
    sleep 0.1
  done
  tail -5 "$dir/dockerd.log" >&2
  die "host $1's engine did not start (its log: $dir/dockerd.log)"
}

env_of() {
  host_number "$1"; names "$1"
  printf 'export BERTH_HOST_NETNS=%s BERTH_HOST_ADDRESS=%s BERTH_HOST_GATEWAY=%s DOCKER_HOST=unix://%s\n' \
    "$netns" "$far_address" "$near_address" "$socket"
}

load() {
  local n="${1:-}"
  host_number "$n"; names "$n"; shift
  engine_up || die "host $n is not up"
  local image missing=()
  for image in "$@"; do
    docker -H "unix://$socket" image inspect "$image" >/dev/null 2>&1 || missing+=("$image")
  done
  [ ${#missing[@]} -eq 0 ] && return
  docker save "${missing[@]}" | docker -H "unix://$socket" load -q >/dev/null
  say "host $n has ${missing[*]}"
}

# The engine's state in a swarm, once settled: an engine that was in one comes back
# `pending` for a while after its start, until it reaches the others.
swarm_state() {
  local state
  for _ in $(seq 1 300); do
    state="$(docker -H "unix://$socket" info --format '{{.Swarm.LocalNodeState}}' 2>/dev/null)"
    [ "$state" != pending ] && break
    sleep 0.1
  done
  echo "$state"
}

swarm() {
  local first="${1:-}" n token manager
  host_number "$first"
  for n in "$@"; do up "$n"; done
  names "$first"
  if [ "$(swarm_state)" != active ]; then
    docker -H "unix://$socket" swarm init --advertise-addr "$far_address" >/dev/null
    say "host $first made a swarm"
  fi
  token="$(docker -H "unix://$socket" swarm join-token -q manager)"
  manager="$far_address:2377"
  for n in "${@:2}"; do
    names "$n"
    if [ "$(swarm_state)" != active ]; then
      docker -H "unix://$socket" swarm join --advertise-addr "$far_address" --token "$token" "$manager" >/dev/null
      say "host $n joined the swarm of host $first"
    fi
  done
  # One that had joined as a worker becomes a manager too.
  names "$first"
  docker -H "unix://$socket" node ls --filter role=worker -q | xargs -r docker -H "unix://$socket" node promote >/dev/null
  # Managers that start again elect a leader first: until then the swarm makes no network.
  for _ in $(seq 1 300); do
    [ "$(docker -H "unix://$socket" node ls --filter role=manager --format '{{.Status}}' 2>/dev/null | grep -c Ready)" -eq "$#" ] && return 0
    sleep 0.1
  done
  die "the swarm of hosts $* has no leader, or not every engine is ready, after 30 s"
}

down() {
  host_number "$1"; names "$1"
  if [ -f "$dir/docker.pid" ]; then
    local pid; pid="$(cat "$dir/docker.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      # Its containers first, so that no shim outlives the engine.
      docker -H "unix://$socket" ps -aq 2>/dev/null | xargs -r docker -H "unix://$socket" rm -f >/dev/null 2>&1 || true
      kill "$pid"
      for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/docker.pid"
  fi
  # What the engine mounted under its roots, deepest first.
  awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  iptables -D FORWARD -i "$near" -j ACCEPT 2>/dev/null || true
  iptables -D FORWARD -o "$near" -j ACCEPT 2>/dev/null || true
  ip netns del "$netns" 2>/dev/null || true
  ip link del "$near" 2>/dev/null || true
  rm -rf "$dir/exec"
  say "host $1 is down"
}

down_all() {
  local d
  for d in "$STATE"/h*; do
    [ -d "$d" ] && down "${d##*/h}"
  done
  return 0
}

status() {
  local d n
  for d in "$STATE"/h*; do
    [ -d "$d" ] || continue
    n="${d##*/h}"; names "$n"
    if engine_up; then echo "host $n: up ($far_address)"; else echo "host $n: down"; fi
  done
}

case "${1:-}" in
  up) up "${2:-}" ;;
  env) env_of "${2:-}" ;;
  load) load "${@:2}" ;;
  swarm) swarm "${@:2}" ;;
  down-all) down_all ;;
  down) down "${2:-}" ;;
  status) status ;;
  *) sed -n '2,/^set -e/{/^#/p}' "$0" >&2; exit 2 ;;
esac
