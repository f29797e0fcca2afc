#!/bin/sh
# The Debian packages: built from this tree with dpkg-buildpackage -us -uc
# -b, lintian-clean at its default level (no error, no warning), then
# installed with apt into a fresh Debian chroot made by mmdebstrap (their
# dependencies from Debian's mirror), where the packaged ushuffled is
# started and one ushuffle job runs against it, every record verified.
# Needs root (mmdebstrap's root mode), the network to the mirror, and
# minutes: ctest label "package". Without the tools it says so, exit 77.
# Usage: deb.sh SOURCE_DIR SCRATCH_DIR [MIRROR]
set -eu
src=$1 scratch=$2 mirror=${3:-http://deb.debian.org/debian}
skip() {
	echo "SKIPPED: $*: the Debian packages were NOT built and tested" \
	     "(tests/bootstrap.sh installs the tools)" >&2
	exit 77
}
for tool in dpkg-buildpackage dh lintian mmdebstrap git; do
	command -v "$tool" >/dev/null 2>&1 || skip "$tool is not installed"
done
[ "$(id -u)" -eq 0 ] || skip "mmdebstrap's root mode needs root"
t0=$(date +%s)
rm -rf "$scratch"
mkdir -p "$scratch/src"
# The tree as it is, committed or not (what git does not ignore).
git -C "$src" ls-files -z --cached --others --exclude-standard |
	(cd "$src" && xargs -0 sh -c 'for f; do [ -e "$f" ] &&
		printf "%s\0" "$f"; done' sh) |
	tar -C "$src" --null -T - -cf - | tar -C "$scratch/src" -xf -
(cd "$scratch/src" && dpkg-buildpackage -us -uc -b -j"$(nproc)") \
	>"$scratch/build.log" 2>&1 || {
	tail -40 "$scratch/build.log" >&2
	echo "deb: dpkg-buildpackage failed ($scratch/build.log)" >&2
	exit 1
}
t1=$(date +%s)
for p in libushuffle0.4 libushuffle-worker0.4 libushuffle-dev ushuffled \
	 ushuffle python3-ushuffle; do
	ls "$scratch/${p}_"*.deb >/dev/null
done
out=$(lintian --fail-on error,warning "$scratch"/*.changes 2>&1) || {
	echo "$out" >&2
	echo "deb: lintian: errors or warnings" >&2
	exit 1
}
t2=$(date +%s)
# In the chroot: the system user, its storage, the config on loopback,
# a secret; the packaged daemon on a free port, a job pushed to it and
# read back; the Python package imports the packaged library.
cat >"$scratch/job.sh" <<'JOB'
set -eu
pid=
# On failure: what the worker logged; never leave it running (mmdebstrap
# would wait for it).
trap 'st=$?; [ -z "$pid" ] || kill $pid 2>/dev/null || :; [ $st -eq 0 ] ||
	{ echo "deb: the job in the chroot failed; the worker logged:"
	  cat /tmp/ushuffled.log; } >&2' EXIT
id ushuffle
[ "$(stat -c %U:%a /var/lib/ushuffle)" = ushuffle:700 ]
grep -q '^listen = 127.0.0.1:' /etc/ushuffle/ushuffled.conf
[ "$(stat -c %U:%a /etc/ushuffle/secret)" = root:600 ]
[ -f /lib/systemd/system/ushuffled.service ]
ushuffled --config=/etc/ushuffle/ushuffled.conf \
	--secret-file=/etc/ushuffle/secret --listen=127.0.0.1:0 \
	--metrics=127.0.0.1:0 >/tmp/ushuffled.log 2>&1 &
pid=$!
port=
for i in $(seq 300); do
	port=$(sed -n 's/^ushuffled: port \([0-9]*\).*/\1/p' /tmp/ushuffled.log)
	[ -n "$port" ] && break
	kill -0 $pid
	sleep 0.1
done
[ -n "$port" ]
ushuffle --target=net --workers=127.0.0.1:$port \
	--secret-file=/etc/ushuffle/secret --dir=/tmp --size=4m --numjobs=2 \
	--partitions=16 --eta=never --output-format=json >/tmp/job.json
kill -TERM $pid
wait $pid
pid=
python3 - <<'PY'
import json, ushuffle, ushuffle._rows
jobs = json.load(open("/tmp/job.json"))["jobs"]
assert jobs and all(j["verify"]["status"] == "ok" for j in jobs), jobs
print("deb: the packaged ushuffled served one job:",
      sum(j["verify"]["records"] for j in jobs), "records verified; python",
      "imports", ushuffle.__file__)
PY
JOB
mkdir "$scratch/debs"
for d in "$scratch"/*.deb; do
	case $d in *-dbgsym_*) ;; *) cp "$d" "$scratch/debs/" ;; esac
done
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
# apt installs the packages inside the chroot, their dependencies from
# the mirror; eatmydata spares the bootstrap's fsyncs.
mmdebstrap --variant=apt --format=null \
	--hook-dir=/usr/share/mmdebstrap/hooks/eatmydata \
	--customize-hook="copy-in $scratch/debs $scratch/job.sh /tmp" \
	--customize-hook='chroot "$1" sh -c "apt-get install -y --no-install-recommends /tmp/debs/*.deb"' \
	--customize-hook='chroot "$1" sh /tmp/job.sh' \
	"$suite" - "$mirror" >"$scratch/chroot.log" 2>&1 || {
	tail -40 "$scratch/chroot.log" >&2
	echo "deb: installing or running in the chroot failed" \
	     "($scratch/chroot.log)" >&2
	exit 1
}
grep '^deb: ' "$scratch/chroot.log"
t3=$(date +%s)
echo "deb: build $((t1 - t0)) s, lintian $((t2 - t1)) s, chroot and job" \
     "$((t3 - t2)) s"
rm -rf "$scratch"
