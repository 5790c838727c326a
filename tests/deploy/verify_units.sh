#!/bin/sh
# verify_units.sh - proves that every systemd unit cmpserve installs passes
# `systemd-analyze verify` with no warning at all: the units are installed by
# deploy/install.sh into a throwaway prefix (so ExecStart names an existing
# executable and the paths are the rewritten ones), then the coordinator, the
# worker template, one worker instance and the target are verified. A unit
# that verify dislikes (unknown key, bad value, missing binary) fails the test.
# Exits 77 (skip) when systemd-analyze is absent or cannot verify a trivial
# unit in this environment.
# Usage: verify_units.sh SOURCE_DIR WORK_DIR
set -u
SRC=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"

if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "SKIP: systemd-analyze not installed (Debian package systemd; deploy/install-deps.sh)"
    exit 77
fi

# can verify work here at all? (a known-good unit)
mkdir -p "$WORK/probe"
cat > "$WORK/probe/probe.service" <<UNIT
[Unit]
Description=probe
[Service]
ExecStart=/bin/sh -c true
UNIT
if ! systemd-analyze verify --man=no "$WORK/probe/probe.service" >"$WORK/probe.log" 2>&1; then
    echo "SKIP: systemd-analyze verify does not work in this environment:"
    cat "$WORK/probe.log"
    exit 77
fi

# a stand-in executable for the binary (verify only checks it exists and is executable)
printf '#!/bin/sh\nexit 0\n' > "$WORK/cmpserve"
chmod 0755 "$WORK/cmpserve"
PREFIX="$WORK/prefix" SYSCONFDIR="$WORK/etc" UNITDIR="$WORK/units" SYSUSERSDIR="$WORK/sysusers.d" \
    sh "$SRC/deploy/install.sh" --files-only "$WORK/cmpserve" >"$WORK/install.log" 2>&1 || {
    echo "FAIL: install.sh into $WORK failed:"; cat "$WORK/install.log"; exit 1; }

# the installed units must name the installed binary and configuration
grep -q "^ExecStart=$WORK/prefix/bin/cmpserve serve --config $WORK/etc/cmpserve/cmpserve.json" \
    "$WORK/units/cmpserve.service" || { echo "FAIL: ExecStart of cmpserve.service not rewritten"; exit 1; }
grep -q "^ExecStart=$WORK/prefix/bin/cmpserve worker --config $WORK/etc/cmpserve/cmpserve.json --gpu %i" \
    "$WORK/units/cmpserve-worker@.service" || { echo "FAIL: ExecStart of the worker not rewritten"; exit 1; }

status=0
for unit in cmpserve.service cmpserve-worker@.service cmpserve-worker@0.service cmpserve.target; do
    systemd-analyze verify --man=no "$WORK/units/$unit" >"$WORK/verify.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || [ -s "$WORK/verify.log" ]; then
        echo "FAIL: systemd-analyze verify $unit (rc $rc):"
        cat "$WORK/verify.log"
        status=1
    else
        echo "ok   systemd-analyze verify $unit"
    fi
done
exit $status
