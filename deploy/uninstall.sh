#!/bin/sh
# uninstall.sh - reverses install.sh: stops and disables the cmpserve units,
# removes the binary, the units and the sysusers.d file. The configuration
# (SYSCONFDIR/cmpserve) and the system user stay unless --purge, which also
# removes the cache and runtime directories. Called by `make uninstall`.
#
# Usage: deploy/uninstall.sh [--files-only] [--purge]
#   --files-only  remove files only: no systemctl, no userdel
#                 (implied when DESTDIR is set)
#   --purge       also remove SYSCONFDIR/cmpserve and the cmpserve user
# Environment: DESTDIR, PREFIX, SYSCONFDIR, UNITDIR, SYSUSERSDIR as for
# install.sh (the same values must be given to both).
set -eu

FILES_ONLY=0
PURGE=0
for arg in "$@"; do
    case "$arg" in
        --files-only) FILES_ONLY=1 ;;
        --purge) PURGE=1 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) echo "uninstall.sh: unknown argument $arg" >&2; exit 2 ;;
    esac
done
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
SYSCONFDIR=${SYSCONFDIR:-/etc}
UNITDIR=${UNITDIR:-/etc/systemd/system}
SYSUSERSDIR=${SYSUSERSDIR:-/etc/sysusers.d}
[ -n "$DESTDIR" ] && FILES_ONLY=1

CONFDIR=$SYSCONFDIR/cmpserve
UNITS="cmpserve.service cmpserve-worker@.service cmpserve.target"
say() { echo "cmpserve uninstall: $*"; }

# stop_units: stop the group and disable the target, coordinator and every
# enabled worker instance, on the live system
stop_units() {
    [ -d /run/systemd/system ] || return 0
    systemctl stop cmpserve.target cmpserve.service 'cmpserve-worker@*.service' || true
    for link in "$UNITDIR"/cmpserve.target.wants/cmpserve-worker@*.service; do
        [ -e "$link" ] || [ -L "$link" ] || continue
        systemctl disable "$(basename "$link")" || true
    done
    systemctl disable cmpserve.target cmpserve.service || true
}

if [ "$FILES_ONLY" -eq 0 ]; then
    [ "$(id -u)" -eq 0 ] || { echo "cmpserve uninstall: needs root (or DESTDIR / --files-only)" >&2; exit 1; }
    stop_units
fi

rm -f "$DESTDIR$PREFIX/bin/cmpserve"
for u in $UNITS; do
    rm -f "$DESTDIR$UNITDIR/$u"
done
rmdir "$DESTDIR$UNITDIR/cmpserve.target.wants" 2>/dev/null || true
rm -f "$DESTDIR$SYSUSERSDIR/cmpserve.conf"
say "removed the binary, the units and the sysusers.d entry"

if [ "$PURGE" -eq 1 ]; then
    rm -rf "$DESTDIR$CONFDIR"
    say "removed $DESTDIR$CONFDIR"
else
    [ -d "$DESTDIR$CONFDIR" ] && say "kept $DESTDIR$CONFDIR (--purge removes it)"
fi

[ "$FILES_ONLY" -eq 1 ] && exit 0

if [ "$PURGE" -eq 1 ]; then
    rm -rf /var/cache/cmpserve /run/cmpserve
    if getent passwd cmpserve >/dev/null; then
        userdel cmpserve && say "removed the system user cmpserve"
    fi
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl reset-failed 'cmpserve*' 2>/dev/null || true
fi
