#!/bin/sh
# install.sh - installs cmpserve for systemd: the binary, the units
# (cmpserve.service, cmpserve-worker@.service, cmpserve.target), the system
# user (sysusers.d) and the example configuration (only when none exists).
# Called by `make install`; uninstall.sh reverses it.
#
# Usage: deploy/install.sh [--files-only] [BINARY]
#   BINARY        the cmpserve executable (default: build/bin/cmpserve)
#   --files-only  copy files only: no user creation, no daemon-reload
#                 (implied when DESTDIR is set, for packaging and tests)
# Environment (make-style variables, all optional):
#   DESTDIR     staging root prepended to every path (default: empty)
#   PREFIX      /usr/local; the binary goes to PREFIX/bin
#   SYSCONFDIR  /etc; the configuration is SYSCONFDIR/cmpserve/cmpserve.json
#   UNITDIR     /etc/systemd/system
#   SYSUSERSDIR /etc/sysusers.d
# The units name PREFIX/bin/cmpserve and SYSCONFDIR/cmpserve/cmpserve.json.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
FILES_ONLY=0
BINARY=""
for arg in "$@"; do
    case "$arg" in
        --files-only) FILES_ONLY=1 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        -*) echo "install.sh: unknown option $arg" >&2; exit 2 ;;
        *) BINARY=$arg ;;
    esac
done
: "${BINARY:=$HERE/../build/bin/cmpserve}"
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
SYSCONFDIR=${SYSCONFDIR:-/etc}
UNITDIR=${UNITDIR:-/etc/systemd/system}
SYSUSERSDIR=${SYSUSERSDIR:-/etc/sysusers.d}
[ -n "$DESTDIR" ] && FILES_ONLY=1

BINDIR=$PREFIX/bin
CONFDIR=$SYSCONFDIR/cmpserve
UNITS="cmpserve.service cmpserve-worker@.service cmpserve.target"

say() { echo "cmpserve install: $*"; }
fail() { echo "cmpserve install: $*" >&2; exit 1; }

if [ ! -f "$BINARY" ] || [ ! -x "$BINARY" ]; then
    fail "no executable $BINARY (run 'make build' first)"
fi

# escape a path for the right-hand side of a sed s### command
sed_rhs() { printf '%s' "$1" | sed -e 's/[#&\\]/\\&/g'; }

# install_unit NAME: copy deploy/NAME to UNITDIR with the paths of this install
install_unit() {
    bin=$(sed_rhs "$BINDIR/cmpserve")
    conf=$(sed_rhs "$CONFDIR/cmpserve.json")
    sed -e "s#/usr/local/bin/cmpserve#$bin#g" \
        -e "s#/etc/cmpserve/cmpserve.json#$conf#g" \
        "$HERE/$1" > "$DESTDIR$UNITDIR/$1.tmp"
    chmod 0644 "$DESTDIR$UNITDIR/$1.tmp"
    mv -f "$DESTDIR$UNITDIR/$1.tmp" "$DESTDIR$UNITDIR/$1"
}

# create_user: the system user and its GPU groups, on the live system
create_user() {
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers "$SYSUSERSDIR/cmpserve.conf"
        return
    fi
    for g in video render; do
        getent group "$g" >/dev/null || groupadd --system "$g"
    done
    if ! getent passwd cmpserve >/dev/null; then
        useradd --system --user-group --no-create-home --home-dir / \
            --shell /usr/sbin/nologin --comment "cmpserve inference server" cmpserve
    fi
    usermod -a -G video,render cmpserve
}

mkdir -p "$DESTDIR$BINDIR" "$DESTDIR$UNITDIR" "$DESTDIR$SYSUSERSDIR" "$DESTDIR$CONFDIR"
cp -f "$BINARY" "$DESTDIR$BINDIR/cmpserve.tmp"
chmod 0755 "$DESTDIR$BINDIR/cmpserve.tmp"
mv -f "$DESTDIR$BINDIR/cmpserve.tmp" "$DESTDIR$BINDIR/cmpserve"
say "binary $DESTDIR$BINDIR/cmpserve"

for u in $UNITS; do
    install_unit "$u"
done
say "units in $DESTDIR$UNITDIR: $UNITS"

cp -f "$HERE/cmpserve.sysusers" "$DESTDIR$SYSUSERSDIR/cmpserve.conf"
chmod 0644 "$DESTDIR$SYSUSERSDIR/cmpserve.conf"

if [ -e "$DESTDIR$CONFDIR/cmpserve.json" ]; then
    say "kept the existing $DESTDIR$CONFDIR/cmpserve.json"
else
    cp "$HERE/cmpserve.json" "$DESTDIR$CONFDIR/cmpserve.json"
    chmod 0644 "$DESTDIR$CONFDIR/cmpserve.json"
    say "example configuration $DESTDIR$CONFDIR/cmpserve.json (edit \"model\" and \"gpus\")"
fi

[ "$FILES_ONLY" -eq 1 ] && exit 0

[ "$(id -u)" -eq 0 ] || fail "creating the system user needs root (or use DESTDIR / --files-only)"
create_user
say "system user cmpserve (groups video, render)"
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    say "systemd reloaded; enable with: systemctl enable --now cmpserve.target cmpserve-worker@0.service"
else
    say "systemd is not running here; units installed but not loaded"
fi
