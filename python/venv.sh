#!/bin/sh
# Makes the virtual environment ushuffle.dask and the Python tests run in:
# Debian's /usr/bin/python3 (the interpreter ushuffle._rows is built for)
# with exactly the packages of python/constraints.txt from PyPI.
# Idempotent and fast when the environment already matches the file (a
# stamp holds the file's hash), so CI and every ctest run may call it.
#   python/venv.sh [DIR]     DIR: default $USHUFFLE_VENV, else
#                            /var/tmp/ushuffle-venv
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-${USHUFFLE_VENV:-/var/tmp/ushuffle-venv}}
want=$(sha256sum "$here/constraints.txt" | cut -d' ' -f1)
stamp="$dir/.ushuffle-constraints"
if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
	exit 0
fi
# One maker at a time (ctest -j, two build trees sharing the default).
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
	exit 0
fi
echo "venv.sh: making $dir from python/constraints.txt" >&2
rm -f "$stamp"
/usr/bin/python3 -m venv --clear "$dir" || {
	echo "venv.sh: /usr/bin/python3 -m venv failed in $dir (Debian: apt-get install python3-venv)" >&2
	exit 1
}
"$dir/bin/python" -m pip install -q --disable-pip-version-check \
	--no-deps -r "$here/constraints.txt"
"$dir/bin/python" -m pip check -q >&2
echo "$want" > "$stamp"
