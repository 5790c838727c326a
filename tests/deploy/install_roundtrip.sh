#!/bin/sh
# install_roundtrip.sh - proves that deploy/install.sh and deploy/uninstall.sh
# round-trip in a DESTDIR: install puts the binary, the three units (paths
# rewritten for PREFIX), the sysusers.d file and the example configuration
# in place with the right modes; a second install keeps an edited
# configuration; uninstall removes everything but the configuration;
# uninstall --purge leaves exactly the files that were there before.
# Pre-existing files in the DESTDIR (another unit, another config) survive.
# Usage: install_roundtrip.sh SOURCE_DIR WORK_DIR
set -u
SRC=$1
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK/root/etc/systemd/system" "$WORK/root/opt/cs/bin"
D="$WORK/root"
echo "[Unit]" > "$D/etc/systemd/system/other.service"
echo "other" > "$D/opt/cs/bin/other-tool"
printf '#!/bin/sh\necho stand-in cmpserve\n' > "$WORK/cmpserve"
chmod 0755 "$WORK/cmpserve"

fails=0
check() { # check DESCRIPTION COMMAND...
    desc=$1; shift
    if "$@"; then echo "ok   $desc"; else echo "FAIL $desc"; fails=$((fails + 1)); fi
}
mode_of() { stat -c %a "$1" 2>/dev/null; }
listing() { (cd "$D" && find . \( -type f -o -type l \) | sort); }

listing > "$WORK/before.txt"
export DESTDIR="$D" PREFIX=/opt/cs
sh "$SRC/deploy/install.sh" "$WORK/cmpserve" > "$WORK/install1.log" 2>&1
check "install.sh exits 0" test $? -eq 0

check "binary installed, mode 755" test "$(mode_of "$D/opt/cs/bin/cmpserve")" = 755
check "binary is the given one" cmp -s "$WORK/cmpserve" "$D/opt/cs/bin/cmpserve"
for u in cmpserve.service cmpserve-worker@.service cmpserve.target; do
    check "unit $u installed, mode 644" test "$(mode_of "$D/etc/systemd/system/$u")" = 644
done
check "coordinator ExecStart uses PREFIX" \
    grep -q '^ExecStart=/opt/cs/bin/cmpserve serve --config /etc/cmpserve/cmpserve.json --attach' \
    "$D/etc/systemd/system/cmpserve.service"
check "worker ExecStart uses PREFIX and the GPU instance" \
    grep -q '^ExecStart=/opt/cs/bin/cmpserve worker --config /etc/cmpserve/cmpserve.json --gpu %i' \
    "$D/etc/systemd/system/cmpserve-worker@.service"
check "no /usr/local path left in the units' settings" \
    sh -c "! grep -q '^[^#]*/usr/local' '$D/etc/systemd/system/cmpserve.service' '$D/etc/systemd/system/cmpserve-worker@.service'"
check "sysusers.d file installed" cmp -s "$SRC/deploy/cmpserve.sysusers" "$D/etc/sysusers.d/cmpserve.conf"
check "example config installed" cmp -s "$SRC/deploy/cmpserve.json" "$D/etc/cmpserve/cmpserve.json"
check "install did not touch other files" test "$(cat "$D/etc/systemd/system/other.service")" = "[Unit]"

# an edited configuration survives a re-install (upgrade)
echo '{"port": 9000}' > "$D/etc/cmpserve/cmpserve.json"
sh "$SRC/deploy/install.sh" "$WORK/cmpserve" > "$WORK/install2.log" 2>&1
check "second install exits 0" test $? -eq 0
check "second install keeps the edited config" test "$(cat "$D/etc/cmpserve/cmpserve.json")" = '{"port": 9000}'

sh "$SRC/deploy/install.sh" "$WORK/no-such-binary" > "$WORK/install3.log" 2>&1
check "install without a binary fails" test $? -ne 0

sh "$SRC/deploy/uninstall.sh" > "$WORK/uninstall1.log" 2>&1
check "uninstall.sh exits 0" test $? -eq 0
(cat "$WORK/before.txt"; echo ./etc/cmpserve/cmpserve.json) | sort > "$WORK/expect1.txt"
listing > "$WORK/after1.txt"
check "uninstall leaves only the configuration" cmp -s "$WORK/expect1.txt" "$WORK/after1.txt"

sh "$SRC/deploy/uninstall.sh" --purge > "$WORK/uninstall2.log" 2>&1
check "uninstall --purge exits 0" test $? -eq 0
listing > "$WORK/after2.txt"
check "uninstall --purge leaves exactly the files there before" cmp -s "$WORK/before.txt" "$WORK/after2.txt"
check "uninstall --purge removes /etc/cmpserve" test ! -e "$D/etc/cmpserve"

if [ $fails -ne 0 ]; then
    echo "--- files before"; cat "$WORK/before.txt"
    echo "--- files after uninstall"; cat "$WORK/after1.txt"
    echo "--- files after purge"; cat "$WORK/after2.txt"
    echo "--- logs"; cat "$WORK"/*.log
    exit 1
fi
