#!/bin/sh
# What the shared libraries export: libushuffle only ush_* symbols (none
# of the worker's), each versioned USHUFFLE_*; libushuffle_worker only
# ush_worker_*, versioned USHUFFLE_WORKER_*. Usage: exports.sh LIB WORKERLIB
set -eu
# Defined dynamic symbols as "name version".
defined() {
	objdump -T "$1" | awk '$4 != "*UND*" && $2 == "g" && NF >= 7 && $NF !~ /^USHUFFLE/ {
		print $NF, $(NF-1) }'
}
fail=0
lib=$(defined "$1")
wlib=$(defined "$2")
[ -n "$lib" ] && [ -n "$wlib" ] || { echo "no symbols read"; exit 1; }
echo "$lib" | awk '$1 !~ /^ush_/ || $1 ~ /^ush_worker_/ ||
	$2 !~ /^\(?USHUFFLE_(0\.|UNSTABLE)/ { print "libushuffle exports", $0; bad=1 }
	END { exit bad }' || fail=1
echo "$wlib" | awk '$1 !~ /^ush_worker_/ || $2 !~ /^\(?USHUFFLE_WORKER_/ {
	print "libushuffle_worker exports", $0; bad=1 } END { exit bad }' || fail=1
for s in ush_writer_open ush_writer_status ush_status_info_size \
	ush_reader_open ush_version ush_strerror; do
	echo "$lib" | grep -q "^$s " || { echo "libushuffle lacks $s"; fail=1; }
done
echo "$wlib" | grep -q "^ush_worker_create " ||
	{ echo "libushuffle_worker lacks ush_worker_create"; fail=1; }
n=$(echo "$lib" | wc -l)
m=$(echo "$wlib" | wc -l)
[ $fail -eq 0 ] && echo "exports: $n libushuffle, $m libushuffle_worker symbols, all public and versioned"
exit $fail
