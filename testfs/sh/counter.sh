# A shell CGI counter without a lock: cat reads the count, the shell
# writes it back (two processes of one request).
#
#   sh counter.sh FILE
n=$(cat "$1")
case $n in
'' | *[!0-9]*) echo "TORN '$n'" ;;
esac
echo $((n + 1)) >"$1"
