#!/bin/sh
# berth/postgres's entry: Debian's PostgreSQL 15, initialized on first start the way the
# upstream image is (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB), password required from
# other hosts, then run in the foreground as `postgres` (SIGTERM is a fast, clean stop).
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
# coreutils' chroot into / drops to the postgres user (minbase has no runuser or su).
as_postgres() { /usr/sbin/chroot --userspec=postgres:postgres --skip-chdir / "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  as_postgres pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    as_postgres createdb -U "$POSTGRES_USER" "$POSTGRES_DB"
  fi
  as_postgres pg_ctl -D "$PGDATA" -w stop >/dev/null
fi
exec /usr/sbin/chroot --userspec=postgres:postgres --skip-chdir / postgres -D "$PGDATA"
