#!/bin/sh
# sysusers.sh - proves that deploy/cmpserve.sysusers creates the system user
# the units run as: systemd-sysusers applied to an empty root directory must
# create user cmpserve (system uid, nologin shell, own group) and make it a
# member of video and render. Nothing on the host is touched (--root).
# Exits 77 (skip) without systemd-sysusers, or when not root (it must chown).
# Usage: sysusers.sh SOURCE_DIR WORK_DIR
set -u
SRC=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK/root/etc"
if ! command -v systemd-sysusers >/dev/null 2>&1; then
    echo "SKIP: systemd-sysusers not installed (Debian package systemd)"
    exit 77
fi
if ! systemd-sysusers --root="$WORK/root" "$SRC/deploy/cmpserve.sysusers" >"$WORK/log" 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: systemd-sysusers --root needs root here:"; cat "$WORK/log"; exit 77
    fi
    echo "FAIL: systemd-sysusers rejected deploy/cmpserve.sysusers:"; cat "$WORK/log"; exit 1
fi
fails=0
pw=$(grep '^cmpserve:' "$WORK/root/etc/passwd")
uid=$(echo "$pw" | cut -d: -f3)
shell=$(echo "$pw" | cut -d: -f7)
[ -n "$pw" ] || { echo "FAIL: no cmpserve user"; fails=1; }
if [ -z "$uid" ] || [ "$uid" -le 0 ] || [ "$uid" -ge 1000 ]; then
    echo "FAIL: uid '$uid' is not a system uid"; fails=1
fi
case "$shell" in */nologin|*/false) ;; *) echo "FAIL: shell '$shell' allows logins"; fails=1 ;; esac
grep -q '^cmpserve:' "$WORK/root/etc/group" || { echo "FAIL: no cmpserve group"; fails=1; }
for g in video render; do
    grep "^$g:" "$WORK/root/etc/group" | cut -d: -f4 | tr ',' '\n' | grep -qx cmpserve \
        || { echo "FAIL: cmpserve is not a member of $g"; fails=1; }
done
[ $fails -eq 0 ] && echo "ok   user cmpserve (uid $uid, $shell) in video and render"
exit $fails
