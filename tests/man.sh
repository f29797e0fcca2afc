#!/bin/sh
# The manual pages render without a groff warning and carry every option
# their program's --help lists; the bash completion offers options and
# values from --help. Usage: man.sh MANDIR USHUFFLE USHUFFLED COMPLETION
set -eu
mandir=$1 cli=$2 daemon=$3 completion=$4
if ! command -v groff >/dev/null 2>&1; then
	echo "SKIPPED: groff is not installed: the manual pages were NOT" \
	     "checked (tests/bootstrap.sh installs it)" >&2
	exit 77
fi
for page in ushuffle.1 ushuffled.8 libushuffle.3; do
	warn=$(groff -man -Tutf8 -ww -z "$mandir/$page" 2>&1)
	[ -z "$warn" ] || { echo "$page: groff warns: $warn" >&2; exit 1; }
done
check_options() { # PROGRAM PAGE
	text=$(groff -man -Tascii -P-cbou "$mandir/$2" 2>/dev/null)
	n=0
	for opt in $("$1" --help | sed -n 's/^  \(--[a-z_-]*\).*/\1/p'); do
		printf '%s\n' "$text" | grep -qe "^ *$opt" || {
			echo "$2 lacks $opt" >&2; exit 1; }
		n=$((n + 1))
	done
	[ "$n" -gt 20 ] || { echo "$2: only $n options in --help?" >&2; exit 1; }
	echo "$2: all $n options of --help"
}
check_options "$cli" ushuffle.1
check_options "$daemon" ushuffled.8

# COMP_WORDS as bash splits them ('=' breaks words); prints COMPREPLY.
complete_words() {
	bash -c '. "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
		_ushuffle_complete; printf "%s\n" "${COMPREPLY[@]}"' \
		"$completion" "$@"
}
expect() { # WANT WORDS...
	want=$1; shift
	got=$(complete_words "$@")
	printf '%s\n' "$got" | grep -qx -- "$want" || {
		echo "completing '$*': no '$want' in:" >&2
		printf '%s\n' "$got" >&2; exit 1; }
}
expect --rw= "$cli" --r
expect --stonewall "$cli" --stone
expect shuffle "$cli" --rw = sh
expect --rw=shuffle "$cli" --rw=sh
expect json+ "$cli" --output-format = json
expect --secrets-dir= "$daemon" --secrets
expect --insecure-non-loopback "$daemon" --insecure-n
expect zstd "$cli" --codec = zs
expect --directory= "$cli" --direc
expect --blocksize= "$cli" --blocks
if complete_words "$cli" --codec = z | grep -qF '['; then
	echo "completing --codec=z offers a metavariable:" >&2
	complete_words "$cli" --codec = z >&2; exit 1
fi
# SEE ALSO names the documents where a package installs them
for want in "$cli:ushuffle.1:/doc/ushuffle/cli.md.gz" \
	    "$daemon:ushuffled.8:/doc/ushuffled/"; do
	page=${want#*:} path=${page#*:} page=${page%%:*}
	groff -man -Tascii -P-cbou "$mandir/$page" 2>/dev/null | tr -s ' \n' ' ' |
		grep -qF "$path" || {
		echo "$page: SEE ALSO does not name $path" >&2; exit 1; }
done
echo "completion: options and values from --help"
