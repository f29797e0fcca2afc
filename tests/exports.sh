#!/bin/sh
# What the libraries export. libushuffle: the ush_* functions of
# ushuffle.h, versioned USHUFFLE_0.x or USHUFFLE_UNSTABLE, and the ushi_*
# core functions libushuffle_worker calls, versioned USHUFFLE_PRIVATE_<this
# release> and exactly those the worker imports, at that version;
# libushuffle_worker: the ush_worker_* functions of worker.h, versioned USHUFFLE_WORKER_*, and no copy of the
# core. Every export is named in its map file; every USH_API function of
# the headers is exported; the static libushuffle.a defines no global but
# the public ones.
# Usage: exports.sh LIB WORKERLIB STATICLIB SRCDIR
set -eu
lib=$1 wlib=$2 alib=$3 src=$4
# Defined dynamic symbols as "name version".
defined() {
	objdump -T "$1" | awk '$4 != "*UND*" && $2 == "g" && NF >= 7 && $NF !~ /^USHUFFLE/ {
		print $NF, $(NF-1) }'
}
# The USH_API functions a header declares.
declared() {
	tr '\n' ' ' <"$1" | grep -o 'USH_API[^;]*(' | sed 's/ *($//; s/.*[ *]//'
}
# The names a map file lists.
listed() {
	sed -n 's/^[[:space:]]*\(ush[a-z0-9_]*\);.*/\1/p' "$1"
}
names() { cut -d' ' -f1; }
# The private node carries this release's version (ushuffle.h's).
ver=$(for p in MAJOR MINOR PATCH; do
	sed -n "s/^#define USH_VERSION_$p \([0-9]*\)$/\1/p" "$src/include/ushuffle/ushuffle.h"
done | paste -sd.)
priv="USHUFFLE_PRIVATE_$ver"
fail=0
bad() { echo "$*"; fail=1; }
l=$(defined "$lib")
w=$(defined "$wlib")
[ -n "$l" ] && [ -n "$w" ] || { echo "no symbols read"; exit 1; }
echo "$l" | awk -v priv="$priv" '!($1 ~ /^ush_/ && $1 !~ /^ush_worker_/ &&
		  $2 ~ /^\(?USHUFFLE_(0\.|UNSTABLE)/) &&
		 !($1 ~ /^ushi_/ && ($2 == priv || $2 == "(" priv ")")) {
	print "libushuffle exports", $0; bad=1 } END { exit bad }' || fail=1
echo "$w" | awk '$1 !~ /^ush_worker_/ || $2 !~ /^\(?USHUFFLE_WORKER_/ {
	print "libushuffle_worker exports", $0; bad=1 } END { exit bad }' || fail=1

# Exports, map lists and header declarations agree.
lmap=$(listed "$src/src/libushuffle.map")
wmap=$(listed "$src/src/worker/libushuffle_worker.map")
lpub=$(echo "$l" | names | grep -v '^ushi_' | sort)
wpub=$(echo "$w" | names | sort)
for s in $(echo "$l" | names); do
	echo "$lmap" | grep -qx "$s" || bad "libushuffle exports $s, not in libushuffle.map"
done
for s in $wpub; do
	echo "$wmap" | grep -qx "$s" || bad "libushuffle_worker exports $s, not in its map"
done
hl=$(declared "$src/include/ushuffle/ushuffle.h" | sort -u)
hw=$(declared "$src/include/ushuffle/worker.h" | sort -u)
for s in $hl; do
	echo "$lpub" | grep -qx "$s" || bad "ushuffle.h declares $s, libushuffle does not export it"
done
for s in $lpub; do
	echo "$hl" | grep -qx "$s" || bad "libushuffle exports $s, ushuffle.h does not declare it"
done
for s in $hw; do
	echo "$wpub" | grep -qx "$s" || bad "worker.h declares $s, libushuffle_worker does not export it"
done
for s in $wpub; do
	echo "$hw" | grep -qx "$s" || bad "libushuffle_worker exports $s, worker.h does not declare it"
done

# One core: the worker imports the core from libushuffle, exactly what
# the private node exports, at this release's node, and defines none of it.
lpriv=$(echo "$l" | names | grep '^ushi_' | sort)
wimp=$(objdump -T "$wlib" | awk '$3 == "*UND*" && $NF ~ /^ushi_/ { print $NF }' | sort -u)
wother=$(objdump -T "$wlib" | awk -v priv="$priv" '$3 == "*UND*" && $NF ~ /^ushi_/ &&
	$(NF-1) != priv && $(NF-1) != "(" priv ")" { print $NF, $(NF-1) }')
[ -z "$wother" ] || bad "libushuffle_worker imports the core at another node than $priv:" \
	"$(echo "$wother" | tr '\n' ' ')"
[ "$lpriv" = "$wimp" ] || bad "$priv is not what libushuffle_worker imports:" \
	"$(echo "$lpriv" | tr '\n' ' ') vs $(echo "$wimp" | tr '\n' ' ')"
objdump -p "$wlib" | grep -q 'NEEDED *libushuffle\.so' ||
	bad "libushuffle_worker does not link libushuffle"
for s in ushi_fail ush_last_error ush_set_log ush_alloc_count; do
	nm --defined-only "$wlib" | grep -q " $s\$" &&
		bad "libushuffle_worker defines $s: a second copy of the core"
done

# The static library: public globals only.
a=$(nm -g --defined-only "$alib" | awk 'NF == 3 { print $3 }' | sort)
for s in $a; do
	echo "$lpub" | grep -qx "$s" || bad "libushuffle.a defines the global $s"
done
[ $fail -eq 0 ] && echo "exports: $(echo "$lpub" | wc -l) libushuffle" \
	"(+ $(echo "$lpriv" | wc -l) $priv for the worker)," \
	"$(echo "$wpub" | wc -l) libushuffle_worker, $(echo "$a" | wc -l)" \
	"libushuffle.a globals: all public, listed, declared and versioned"
exit $fail
