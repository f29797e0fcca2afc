# Turns a program's --help text into the roff of its manual's OPTIONS:
# "  --opt=ARG   text" starts an option (continued by lines indented
# further), other lines are paragraphs. The manual is made from --help
# at build time (gen.sh), so the two cannot drift.
# Variables, regular expressions: start, of the line after which the
# options begin (the text before it is the manual's own); stop, of the
# line where they end (what follows is --help's footer, with facts of the
# machine that ran it).
function esc(s) {
	gsub(/\\/, "\\e", s)
	gsub(/-/, "\\-", s)
	return s
}
function line(s) { # text, not at the start of a roff line
	s = esc(s)
	if (s ~ /^[.']/)
		s = "\\&" s
	return s
}
function flush() {
	if (text != "")
		print line(text)
	text = ""
}
NR == 1 || stopped { next }
stop != "" && $0 ~ stop { stopped = 1; next }
start != "" && !started { if ($0 ~ start) started = 1; next }
/^[ \t]*$/ { flush(); para = 0; next }
/^  -/ {
	flush()
	opt = $1
	rest = $0
	sub(/^ +[^ ]+ */, "", rest)
	eq = index(opt, "=")
	print ".TP"
	if (eq)
		print "\\fB" esc(substr(opt, 1, eq - 1)) "\\fR=\\fI" \
		      esc(substr(opt, eq + 1)) "\\fR"
	else
		print "\\fB" esc(opt) "\\fR"
	text = rest
	para = 1
	next
}
/^   +/ && para { sub(/^ +/, ""); text = text " " $0; next }
{
	flush()
	if (para != 2) # after an option or a blank line
		print ".PP"
	para = 2
	text = $0
}
END { flush() }
