#!/usr/bin/env bash
# Makes berth's runtime, which every agent lends each container read-only at /opt/berth
# (BERTH_AGENT_RUNTIME): tmux with its own dynamic loader and libraries, so that the terminal
# is tmux in any image with a /bin/sh (busybox, musl or glibc, whatever the image holds); the
# host's `sleep` beside it and `lib/loader`, the loader by a name that does not change, which
# the agent's network sandboxes run in a root file system of nothing (services/agent's
# docker/spares.rs); the
# terminfo entries it and the programs under it need, and its configuration (the seeds'
# habits: Ctrl-B as the prefix, the mouse on, a long history; a user's ~/.tmux.conf read
# last). Built from this host's tmux (Debian's, installed when missing), for this host's
# architecture, which is the containers'. Idempotent: a runtime made from the same tmux and
# this recipe is kept.
#   infra/runtime.sh DIR
set -euo pipefail
say() { printf '[runtime] %s\n' "$*" >&2; }
DIR="${1:?usage: infra/runtime.sh DIR}"
RECIPE=2
# Where the runtime is mounted in a container: the wrapper and the configuration name it.
MOUNTED=/opt/berth

if ! command -v tmux >/dev/null; then
  say "installing tmux (Debian's)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q tmux >/dev/null 2>&1 || { apt-get update -q >/dev/null; apt-get install -y -q tmux >/dev/null; }
fi
TMUX_BIN="$(command -v tmux)"
STAMP="$RECIPE $(sha256sum "$TMUX_BIN" | cut -c1-16)"
if [ -f "$DIR/RECIPE" ] && [ "$(cat "$DIR/RECIPE")" = "$STAMP" ] && [ -x "$DIR/bin/tmux" ]; then
  exit 0
fi

WORK="$(mktemp -d "${DIR%/}.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/bin" "$WORK/lib" "$WORK/terminfo"
cp "$TMUX_BIN" "$WORK/lib/tmux"
SLEEP_BIN="$(command -v sleep)"
cp "$SLEEP_BIN" "$WORK/lib/sleep"
# The loader and every library tmux and sleep link, as this host resolves them.
ldd "$TMUX_BIN" "$SLEEP_BIN" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | while read -r lib; do
  cp -L "$lib" "$WORK/lib/"
done
LOADER="$(ldd "$TMUX_BIN" | awk '$1 ~ /^\/.*ld-linux/ {print $1}' | xargs -r basename)"
[ -n "$LOADER" ] && [ -f "$WORK/lib/$LOADER" ] || { say "no dynamic loader found for $TMUX_BIN"; exit 1; }
ln -s "$LOADER" "$WORK/lib/loader"
for entry in xterm-256color xterm screen screen-256color tmux tmux-256color linux vt100; do
  found="$(find /usr/share/terminfo /lib/terminfo /etc/terminfo -name "$entry" 2>/dev/null | head -1)"
  if [ -n "$found" ]; then
    mkdir -p "$WORK/terminfo/${entry:0:1}"
    cp -L "$found" "$WORK/terminfo/${entry:0:1}/"
  fi
done
# tmux wants a UTF-8 locale, which an image may lack (busybox has none): its libc's own
# C.UTF-8, found through LOCPATH, which the shells under it do not keep (tmux.conf).
mkdir -p "$WORK/locale"
cp -r /usr/lib/locale/C.utf8 "$WORK/locale/"
cat >"$WORK/bin/tmux" <<WRAPPER
#!/bin/sh
# berth's tmux: run by its own loader with its own libraries, whatever the image holds.
TERMINFO_DIRS="$MOUNTED/terminfo:\${TERMINFO_DIRS:-/usr/share/terminfo:/lib/terminfo:/etc/terminfo}"
LOCPATH="$MOUNTED/locale"
LC_CTYPE=C.UTF-8
export TERMINFO_DIRS LOCPATH LC_CTYPE
exec "$MOUNTED/lib/$LOADER" --library-path "$MOUNTED/lib" "$MOUNTED/lib/tmux" -f "$MOUNTED/tmux.conf" "\$@"
WRAPPER
chmod 755 "$WORK/bin/tmux"
cat >"$WORK/tmux.conf" <<'CONF'
# berth's terminal (seed 003, "Advanced web terminal usage"): Ctrl-B is the prefix, the mouse
# scrolls (Ctrl-B :set -g mouse off to select text for the browser's clipboard), Ctrl-B c opens
# a shell, Ctrl-B w lists them, Ctrl-B PageUp pages back through the history.
set -g mouse on
set -g history-limit 10000
set -g default-terminal screen-256color
set -g default-shell /bin/sh
set -g default-command "unset LOCPATH; if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"
# A user's own configuration, read last, has the last word.
if-shell "test -f ~/.tmux.conf" "source-file ~/.tmux.conf"
CONF
"$TMUX_BIN" -V >"$WORK/VERSION"
echo "$STAMP" >"$WORK/RECIPE"
rm -rf "$DIR"
mv "$WORK" "$DIR"
trap - EXIT
chmod -R a+rX "$DIR"
say "made $DIR ($(cat "$DIR/VERSION"), loader $LOADER)"
