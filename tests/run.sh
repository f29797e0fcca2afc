#!/bin/sh
# Builds ushuffle with -Werror and runs the tests four ways: every test
# in a normal build and under ASan+UBSan, the multi-threaded ones
# (writer threads, CLI jobs, worker threads) under TSan, and every test
# of the normal build again where io_uring is refused. Installs missing
# packages first.
set -eu
cd "$(dirname "$0")/.."
tests/bootstrap.sh
jobs=$(nproc)
# run DIR "CTEST ARGS" CMAKE ARGS...
run() {
	dir=$1
	sel=$2
	shift 2
	cmake -S . -B "$dir" -DUSH_WERROR=ON "$@" >/dev/null
	cmake --build "$dir" -j "$jobs"
	# shellcheck disable=SC2086
	(cd "$dir" && ctest --output-on-failure -j "$jobs" $sel)
}
# The libraries alone: no CLI, benches or tests, so none of inih, json-c
# or cmocka is looked for.
cmake -S . -B build-lib -DUSH_WERROR=ON -DUSH_BUILD_CLI=OFF \
	-DUSH_BUILD_BENCH=OFF -DUSH_BUILD_TESTS=OFF -DUSH_BUILD_SPARK=OFF >/dev/null
cmake --build build-lib -j "$jobs"
run build-test "" -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The Debian package test (label package) builds from the source tree,
# not from the build directory, and the "large" test (4x the Dask
# workers' memory) has RSS limits, which the sanitizers' shadow memory
# inflates: the normal pass runs both, once.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	run build-asan "-LE package|large" -DCMAKE_BUILD_TYPE=Debug "-DUSH_SANITIZE=address;undefined"
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp \
	run build-tsan "-R roundtrip|cli_run|net_" -DCMAKE_BUILD_TYPE=Debug -DUSH_SANITIZE=thread
# The normal build's suite again where io_uring is refused (a seccomp
# filter, as Docker's default profile): the rings' plain-syscall backend.
(cd build-test && tests/no_uring ctest --output-on-failure -j "$jobs" -LE "package|large|spark")
echo "all tests passed (normal, ASan+UBSan, TSan builds, without io_uring)"
