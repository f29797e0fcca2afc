#!/bin/sh
# The README's test command, and CI's (.ci/run): builds ushuffle with
# -Werror and runs every test where it checks something, within about 30
# minutes on a 2-core machine with the engines' suites in (README.md has
# the measured time; each pass prints its own). Installs missing
# packages first.
#
#   normal     the shipped build (RelWithDebInfo): what runs once (ONCE
#              below: Python and Dask, the 4x-memory Dask shuffle, the
#              Debian package, the engines' own suites spark and dask),
#              the long end-to-end runs (label e2e) and the checks of
#              what it exports and installs (label api)
#   no_uring   the same build where io_uring is refused (tests/no_uring):
#              the tests of the ring backends (labels unit and net, but
#              the slow ones, whose timeouts and scale sit above the
#              engine) on the plain-syscall engine
#   asan       ASan+UBSan: every C test (unit, net, cli, api) but e2e,
#              with io_uring: the library, the worker and the CLI in
#              instrumented processes; and the Spark plugin's JNI layer
#              in the jobs suite's JVMs, the runtimes preloaded
#              (spark_jni)
#   tsan       TSan: the tests whose processes run threads that share
#              state (label threads) but e2e
#
# So each C test runs once under ASan+UBSan, and the shipped build is
# checked end to end (e2e, Python, Dask, the package, the engines'
# suites) and on the plain-syscall engine. USH_RUN_ALL=1 also runs every
# C test in the normal build with io_uring (about 9 minutes more here).
set -eu
cd "$(dirname "$0")/.."
tests/bootstrap.sh
jobs=$(nproc)
# Jobs that run once, in the normal build: interpreters and package
# tools outside our sanitizers' reach (an uninstrumented Python or JVM,
# dpkg), and limits in RSS that shadow memory would break.
# "large" (test_python_large, a Dask shuffle of 4x the workers' memory)
# is labelled python too, so it runs with them.
ONCE="python|package|spark|dask"
start=$(date +%s)
pass_start=$start
pass() {
	now=$(date +%s)
	echo "== tests/run.sh: $1: $((now - pass_start)) s" \
	     "($((now - start)) s in all)"
	pass_start=$now
}
# build DIR CMAKE ARGS...
build() {
	dir=$1
	shift
	cmake -S . -B "$dir" -DUSH_WERROR=ON "$@" >/dev/null
	cmake --build "$dir" -j "$jobs"
}
# check DIR CTEST ARGS...: each test has its TIMEOUT (600 s, or more
# where it says), the others (scripts) 300 s.
check() {
	dir=$1
	shift
	(cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 300 "$@")
}

# The libraries alone: no CLI, benches or tests, so none of inih, json-c
# or cmocka is looked for.
build build-lib -DUSH_BUILD_CLI=OFF -DUSH_BUILD_BENCH=OFF -DUSH_BUILD_TESTS=OFF \
	-DUSH_BUILD_SPARK=OFF
pass "the libraries alone"

build build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo
pass "normal build"
# The ONCE jobs run here and only here: Python and Dask (python,
# large), the Debian package (package), and the engines' own test
# suites run against ushuffle, Spark's (spark, built with Maven) and
# current Dask's (dask). CI must run them: a missing toolchain fails
# them, it does not skip them.
if [ "${USH_RUN_ALL:-0}" = 1 ]; then
	check build-test
else
	check build-test -L "$ONCE|e2e|api"
fi
pass "normal build: $ONCE, e2e, api"
(cd build-test && tests/no_uring ctest --output-on-failure -j "$jobs" \
	--timeout 300 -L "unit|net" -LE "$ONCE|e2e|slow")
pass "normal build without io_uring: unit, net"

# The sanitizer builds leave out the benches (nothing runs them there).
# The Spark plugin too: its JNI layer's test (spark_jni) runs here.
build build-asan -DCMAKE_BUILD_TYPE=Debug "-DUSH_SANITIZE=address;undefined" \
	-DUSH_BUILD_BENCH=OFF -DUSH_BUILD_SPARK=ON
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	check build-asan -LE "$ONCE|e2e"
pass "ASan+UBSan: the C tests"

build build-tsan -DCMAKE_BUILD_TYPE=Debug -DUSH_SANITIZE=thread \
	-DUSH_BUILD_BENCH=OFF
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp \
	check build-tsan -L threads -LE "$ONCE|e2e"
pass "TSan: threads"
echo "all tests passed (normal build: $ONCE, e2e, api, and without" \
     "io_uring; ASan+UBSan; TSan)"
