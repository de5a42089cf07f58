# Runs a script N times, each run its own sh process, one after the
# other, as a web server runs a CGI script once per request.
#
#   sh loop.sh N SCRIPT ARGS...
#
# Each run's output is passed on (anomalies, one per line); a run that
# fails prints "FAILED"; the last line is "DONE n=N".
n=$1 script=$2
shift 2
i=0
while [ "$i" -lt "$n" ]; do
	sh "$script" "$@" || echo "FAILED run $i"
	i=$((i + 1))
done
echo "DONE n=$n"
