#!/bin/sh
# NATS's entry in the compose stack (berth/nats, or upstream nats:*-alpine with this file
# mounted): JetStream, and authorization on as infra/services.sh runs it. The control plane's
# user gets BERTH_NATS_PASSWORD; each admitted agent gets in by its nkey, confined to its own
# subjects, from the fragment berth writes into users.d/ and joins into authorization.conf.
# berth cannot signal a server in another container, so this script reloads the server
# (SIGHUP) when authorization.conf changes, and says so to berth with `reloads-itself`.
set -eu
: "${BERTH_NATS_PASSWORD:?set BERTH_NATS_PASSWORD}"
AUTH=/nats-auth
mkdir -p "$AUTH/users.d" /data
chmod 700 "$AUTH"
printf '{"user":"control","password":"%s"}\n' "$BERTH_NATS_PASSWORD" >"$AUTH/users.d/control.conf"
{ printf 'authorization {\n  users = [\n'; cat "$AUTH"/users.d/*.conf; printf '  ]\n}\n'; } \
  >"$AUTH/authorization.partial"
mv "$AUTH/authorization.partial" "$AUTH/authorization.conf"
cat >"$AUTH/server.conf" <<CONF
listen: 0.0.0.0:4222
http: 127.0.0.1:8222
jetstream { store_dir: "/data" }
include ./authorization.conf
CONF
rm -f "$AUTH/nats.pid"
touch "$AUTH/reloads-itself"
nats-server -c "$AUTH/server.conf" &
server=$!
trap 'kill -TERM "$server"; wait "$server"; exit 0' TERM INT
seen="$(md5sum <"$AUTH/authorization.conf")"
while kill -0 "$server" 2>/dev/null; do
  sleep 1 & wait $!
  now="$(md5sum <"$AUTH/authorization.conf")"
  if [ "$now" != "$seen" ]; then
    kill -HUP "$server"
    seen="$now"
  fi
done
wait "$server"
