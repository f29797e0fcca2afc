#!/bin/sh
# Which library a test program runs (tests/CMakeLists.txt). A public test
# (before "--") needs libushuffle.so and defines none of the library's
# functions, so that its in-process worker reaches the core through
# libushuffle.so, as in a user's program; an internal test (after "--")
# carries both libraries statically and needs neither shared one. A mix
# (a static core beside the shared worker library) binds the worker's
# calls to the test program's copy and fails here.
# Usage: linkage.sh PUBLIC_TEST... -- INTERNAL_TEST...
set -eu
fail=0
bad() { echo "$*"; fail=1; }
# The library's functions a program defines itself, global (the header's
# static inline ones are local copies).
own() { nm --defined-only "$1" | awk '$2 == "T" && $3 ~ /^ushi?_/ { print $3 }'; }
needs() { objdump -p "$1" | awk '$1 == "NEEDED" { print $2 }'; }
npub=0 nint=0
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	t=$1
	shift
	npub=$((npub + 1))
	needs "$t" | grep -q '^libushuffle\.so' ||
		bad "$(basename "$t"): a public test that does not link libushuffle.so"
	o=$(own "$t" | head -5 | tr '\n' ' ')
	[ -z "$o" ] || bad "$(basename "$t"): a public test with its own copy of" \
		"the library: $o..."
done
[ $# -gt 0 ] && shift
for t in "$@"; do
	nint=$((nint + 1))
	n=$(needs "$t" | grep '^libushuffle' | tr '\n' ' ')
	[ -z "$n" ] || bad "$(basename "$t"): an internal test (static core)" \
		"that also loads $n"
done
[ "$npub" -gt 0 ] || bad "no public test"
[ $fail -eq 0 ] && echo "linkage: $npub tests run the shared libraries," \
	"$nint internal ones a static copy of both, none a mix"
exit $fail
