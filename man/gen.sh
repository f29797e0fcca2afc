#!/bin/sh
# Makes a manual page from its template (already through CMake's
# configure_file) and the program's --help.
# Usage: gen.sh TEMPLATE OUT PROGRAM START STOP
# The template's line %OPTIONS% becomes the options of PROGRAM --help
# (help2roff.awk: the lines after the one matching START, up to the one
# matching STOP).
set -eu
template=$1 out=$2 program=$3 start=$4 stop=$5
"$program" --help | awk -v start="$start" -v stop="$stop" \
	-f "$(dirname "$0")/help2roff.awk" > "$out.opts"
sed -e "/^%OPTIONS%\$/r $out.opts" -e '/^%OPTIONS%$/d' "$template" > "$out.tmp"
rm -f "$out.opts"
mv "$out.tmp" "$out"
