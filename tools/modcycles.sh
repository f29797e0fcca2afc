#!/bin/sh
# Which object files of one module folder call each other both ways.
# For each pair of .o files A, B: does A reference a global defined in B,
# and B one defined in A? Prints the edges, then every two-way pair and
# any longer cycle (tsort); exits 1 when there is one.
#   tools/modcycles.sh build-test/CMakeFiles/ushuffle_worker.dir/src/worker
set -eu
[ $# -ge 1 ] || { echo "usage: $0 OBJDIR..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for d in "$@"; do
	for o in "$d"/*.o; do
		n=$(basename "$o" .o)
		n=${n%.c}
		nm -g --defined-only "$o" | awk '{print $3}' | sort -u >"$tmp/$n.def"
		nm -u "$o" | awk '{print $2}' | sort -u >"$tmp/$n.und"
	done
done
: >"$tmp/edges"
for a in "$tmp"/*.und; do
	an=$(basename "$a" .und)
	for b in "$tmp"/*.def; do
		bn=$(basename "$b" .def)
		[ "$an" = "$bn" ] && continue
		syms=$(comm -12 "$a" "$b" | tr '\n' ' ')
		[ -n "$syms" ] && echo "$an -> $bn: $syms" >>"$tmp/edges"
	done
done
sort "$tmp/edges"
bad=0
while IFS=: read -r e _; do
	a=${e% -> *}
	b=${e#* -> }
	if [ "$a" \< "$b" ] && grep -q "^$b -> $a:" "$tmp/edges"; then
		echo "TWO-WAY: $a <-> $b"
		bad=1
	fi
done <"$tmp/edges"
sed 's/ -> / /; s/:.*//' "$tmp/edges" | tsort >/dev/null 2>"$tmp/tsort" ||
	true
if [ -s "$tmp/tsort" ]; then
	grep -v 'input contains a loop' "$tmp/tsort" | sed 's/^tsort: /CYCLE: /'
	bad=1
fi
[ $bad = 0 ] && echo "no two-way pairs, no cycles"
exit $bad
