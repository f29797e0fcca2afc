#!/bin/sh
# Builds ushuffle with -Werror and runs every test twice: in a normal
# build and under ASan+UBSan. Installs missing packages first.
set -eu
cd "$(dirname "$0")/.."
tests/bootstrap.sh
jobs=$(nproc)
run() {
	dir=$1
	shift
	cmake -S . -B "$dir" -DUSH_WERROR=ON "$@" >/dev/null
	cmake --build "$dir" -j "$jobs"
	(cd "$dir" && ctest --output-on-failure -j "$jobs")
}
run build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	run build-asan -DCMAKE_BUILD_TYPE=Debug "-DUSH_SANITIZE=address;undefined"
echo "all tests passed (normal and ASan+UBSan builds)"
