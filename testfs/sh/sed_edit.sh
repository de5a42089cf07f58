# A shell CGI script that adds a line to a file with sed -i, which reads
# the file, writes a temporary file beside it and renames it over the
# file.
#
#   sh sed_edit.sh FILE
sed -i '$a entry' "$1"
