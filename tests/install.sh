#!/bin/sh
# Installs the build tree to a fresh prefix, moves it, and checks that an
# outside program builds and runs against it with pkg-config and with
# find_package(ushuffle), statically and shared, and that the installed
# ushuffled runs without LD_LIBRARY_PATH (its RPATH is $ORIGIN-relative).
# The C++ example (examples/shuffle_example.cpp) builds and runs the same
# two ways. Usage: install.sh BUILD_DIR SCRATCH_DIR LIBDIR EXAMPLES_DIR
# [CFLAGS]
set -eu
build=$1
scratch=$2
libdir=$3
examples=$4
cflags=${5:-}
rm -rf "$scratch"
mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/first" >/dev/null
# The unit, config and sysusers file name the prefix installed to (not
# the configured one), and the installed unit verifies as it is.
f=$scratch/first
grep -q "^ExecStart=$f/bin/ushuffled --config=$f/etc/ushuffle/ushuffled.conf " \
	"$f/lib/systemd/system/ushuffled.service" &&
	grep -q "^dir = $f/var/lib/ushuffle\$" "$f/etc/ushuffle/ushuffled.conf" &&
	grep -q "^listen = 127.0.0.1:" "$f/etc/ushuffle/ushuffled.conf" &&
	grep -q "^u ushuffle - .* $f/var/lib/ushuffle\$" \
		"$f/lib/sysusers.d/ushuffle.conf" || {
	echo "install: the unit, config or sysusers file do not follow" \
	     "the prefix $f, or the config listens beyond loopback"; exit 1; }
if command -v systemd-analyze >/dev/null 2>&1; then
	# Documentation=man:ushuffled(8): verify looks it up, in the prefix.
	out=$(MANPATH="$f/share/man" systemd-analyze verify \
		"$f/lib/systemd/system/ushuffled.service" 2>&1) && [ -z "$out" ] || {
		echo "install: systemd-analyze verify on the installed unit:"
		echo "$out"; exit 1; }
fi
# Manuals and completion
for m in man1/ushuffle.1 man8/ushuffled.8 man3/libushuffle.3 \
	 ../bash-completion/completions/ushuffle \
	 ../bash-completion/completions/ushuffled; do
	[ -s "$f/share/man/$m" ] || { echo "install: no $m"; exit 1; }
done
# Moved after install: nothing may point at the first prefix.
mv "$scratch/first" "$scratch/p"
p=$scratch/p
if grep -rq "$scratch/first" "$p/$libdir/pkgconfig" "$p/$libdir/cmake"; then
	echo "install: a file still names the install prefix"
	exit 1
fi
"$p/bin/ushuffled" --help >/dev/null || {
	echo "install: the installed ushuffled does not run"; exit 1; }
"$p/bin/ushuffle" --help >/dev/null 2>&1 || {
	echo "install: the installed ushuffle does not run"; exit 1; }

cat >"$scratch/app.c" <<'C'
#include <ushuffle/ushuffle.h>
#include <ushuffle/worker.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv)
{
	struct ush_worker_opts wo;
	ush_worker_opts_init(&wo);
	wo.listen = "127.0.0.1:0";
	wo.dir = argv[1];
	wo.threads = 1;
	/* The same secret on both sides (docs/security.md). */
	static const char secret[] = "install-test-secret-0123456789";
	wo.secret = secret;
	wo.secret_len = strlen(secret);
	ush_worker *wk;
	if (ush_auth_secret(NULL, secret, strlen(secret)))
		return 1;
	if (argc < 2 || ush_worker_create(&wk, &wo) || ush_worker_start(wk))
		return 1;
	char list[64];
	snprintf(list, sizeof(list), "127.0.0.1:%d", ush_worker_port(wk));
	ush_ring *ring;
	struct ush_writer_opts o = {.size = sizeof(o), .shuffle = 1,
		.partitions = 1, .target = USH_TARGET_NET, .workers = list};
	ush_writer *w;
	struct ush_status st;
	if (ush_ring_create(&ring, NULL) || ush_writer_open(&w, ring, &o) ||
	    ush_writer_write(w, 0, "hello", 5) || ush_writer_commit(w, NULL) ||
	    ush_writer_status(w, &st))
		return 2;
	/* The status is the writer's until it is freed: read before. */
	struct ush_reader_opts ro = {.size = sizeof(ro), .statuses = &st,
		.nstatuses = 1};
	ush_reader *r;
	const void *rec;
	size_t len;
	if (ush_reader_open(&r, &ro) || ush_reader_next(r, &rec, &len) != 1 ||
	    len != 5 || memcmp(rec, "hello", 5))
		return 3;
	ush_reader_free(r);
	ush_writer_free(w);
	ush_ring_free(ring);
	ush_worker_free(wk);
	printf("app: %s ok\n", ush_version_string());
	return 0;
}
C
cd "$scratch"
# pkg-config, shared, with an RPATH to the moved prefix.
PKG_CONFIG_PATH=$p/$libdir/pkgconfig
export PKG_CONFIG_PATH
# shellcheck disable=SC2046
cc $cflags -o app-pc app.c $(pkg-config --cflags --libs ushuffle-worker) \
	-Wl,-rpath,"$p/$libdir"
./app-pc "$scratch/wd-pc"
# pkg-config, static client library.
# shellcheck disable=SC2046
cc $cflags -o app-pc-static app.c $(pkg-config --cflags ushuffle) \
	"$p/$libdir/libushuffle.a" -L"$p/$libdir" -lushuffle_worker \
	$(pkg-config --libs-only-l --static ushuffle | sed 's/-lushuffle //') \
	-Wl,-rpath,"$p/$libdir"
./app-pc-static "$scratch/wd-pc-static"
# The C++ example, pkg-config.
cp "$examples/shuffle_example.cpp" .
# shellcheck disable=SC2046
c++ $cflags -std=c++11 -Wall -Wextra -Werror -o example-cxx-pc \
	shuffle_example.cpp $(pkg-config --cflags --libs ushuffle) \
	-Wl,-rpath,"$p/$libdir"
./example-cxx-pc "$scratch/wd-cxx-pc" >/dev/null
# find_package.
cat >CMakeLists.txt <<'CM'
cmake_minimum_required(VERSION 3.20)
project(app C CXX)
find_package(ushuffle 0.3 REQUIRED)
add_executable(app-cmake app.c)
target_link_libraries(app-cmake PRIVATE ushuffle::worker ushuffle::ushuffle)
add_executable(app-cmake-static app.c)
target_link_libraries(app-cmake-static PRIVATE ushuffle::worker
  ushuffle::ushuffle_static)
add_executable(example-cxx shuffle_example.cpp)
target_link_libraries(example-cxx PRIVATE ushuffle::ushuffle)
add_executable(example-cxx-static shuffle_example.cpp)
target_link_libraries(example-cxx-static PRIVATE ushuffle::ushuffle_static)
CM
cmake -S . -B b -DCMAKE_PREFIX_PATH="$p" -DCMAKE_C_FLAGS="$cflags" \
	-DCMAKE_CXX_FLAGS="$cflags" >/dev/null
cmake --build b >/dev/null
b/app-cmake "$scratch/wd-cmake"
b/app-cmake-static "$scratch/wd-cmake-static"
b/example-cxx "$scratch/wd-cxx-cmake"
b/example-cxx-static "$scratch/wd-cxx-cmake-static"
rm -rf "$scratch"
echo "install: pkg-config and find_package builds, C and C++, run from a moved prefix"
