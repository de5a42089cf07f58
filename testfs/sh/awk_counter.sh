# A shell CGI counter rewritten through a temporary file: awk (a child)
# reads the count into FILE.PID, mv (another child) renames it over
# FILE.
#
#   sh awk_counter.sh FILE
awk '/^[0-9]+$/ { print $1 + 1; next } { print "TORN" > "/dev/stderr"; print }' "$1" >"$1.$$" && mv "$1.$$" "$1"
