#!/bin/sh
# Installs the Debian packages ushuffle builds, tests and benchmarks with,
# only those that are missing. Needs root (or sudo) when it installs.
set -eu
PKGS="build-essential cmake pkg-config liburing-dev liblz4-dev libzstd-dev
libcmocka-dev libisal-dev libinih-dev libjson-c-dev libssl-dev iproute2
libsystemd-dev systemd curl
python3 python3-dev python3-venv python3-cffi python3-numpy python3-pandas
python3-psutil python3-pytest
groff-base debhelper dh-python lintian mmdebstrap fio python3-six
openjdk-17-jdk-headless maven"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "bootstrap: installing$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
