#!/bin/sh
# Install the Debian packages cmpserve builds against, when missing.
# As root it runs apt-get; otherwise it names what is missing and fails.
set -eu
PKGS="build-essential cmake ninja-build pkg-config git python3 python3-venv python3-pip
      libzmq3-dev libmsgpack-dev libcjson-dev libuv1-dev libpcre2-dev libutf8proc-dev
      libhttp-parser-dev clang libclang-rt-14-dev curl systemd"
missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "cmpserve: missing Debian packages:$missing" >&2
    echo "cmpserve: run 'sudo deploy/install-deps.sh' (or 'sudo apt-get install$missing')" >&2
    exit 1
fi
echo "cmpserve: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
