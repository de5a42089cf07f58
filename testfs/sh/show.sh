# A shell CGI script that only shows a file: cat reads it.
#
#   sh show.sh FILE
cat "$1" >/dev/null
