#!/bin/sh
# The installed systemd unit passes `systemd-analyze verify` (its
# ExecStart pointed at the ushuffled just built, which must exist), its
# Documentation=man:ushuffled(8) found among the pages just built.
# Without systemd-analyze this says so and exits 77: skipped, not passed.
# Usage: unit.sh UNIT USHUFFLED WORKDIR MANDIR
set -eu
unit=$1 bin=$2 dir=$3 mandir=$4
if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIPPED: systemd-analyze is not installed: the unit $unit was" \
	     "NOT verified (tests/bootstrap.sh installs systemd)" >&2
	exit 77
fi
mkdir -p "$dir/man/man8"
cp "$mandir/ushuffled.8" "$dir/man/man8/"
export MANPATH="$dir/man"
sed "s#^ExecStart=[^ ]*#ExecStart=$bin#" "$unit" > "$dir/ushuffled.service"
grep -q '^Type=notify$' "$dir/ushuffled.service"
grep -q '^WatchdogSec=' "$dir/ushuffled.service"
grep -q '^LimitNOFILE=' "$dir/ushuffled.service"
out=$(systemd-analyze verify "$dir/ushuffled.service" 2>&1) || {
	echo "systemd-analyze verify failed:" >&2
	echo "$out" >&2
	exit 1
}
# verify exits 0 on some warnings: none is expected.
if [ -n "$out" ]; then
	echo "systemd-analyze verify warned:" >&2
	echo "$out" >&2
	exit 1
fi
echo "unit: systemd-analyze verify passed ($(systemd-analyze --version | head -1))"
