#!/bin/bash
# A web farm on one machine, end to end: nginx balances two web servers
# (Apache with mod_cgid), each running the same Perl CGI scripts on its own
# safefs mount of one shared BACKING, both daemons in cluster mode over one
# etcd. ab sends N requests, C at a time, through the balancer to each of:
#
#   guestbook  appends a five-line entry per request, without a lock
#   flock      the careful counter: open +<, flock, read, rewrite, close
#   naive      the naive counter: open <, read, close, open >, write, close
#              (-o rmw=naive.txt: its opens are serialized across hosts)
#
# then checks every row exactly and prints a table. Exit 0 when every row
# holds, 1 when one does not, 2 when it could not run.
#
#   farm-demo.sh [-n N] [-c C] [--rows guestbook,flock,naive] [--plain]
#
# --plain gives both web servers BACKING itself, without safefs: the shared
# directory as a farm without safefs has it (the rows that fail are the
# point). ONE_MOUNT=h1 gives both web servers h1's mount (one daemon, a
# diagnostic). SAFEFS_OPTS adds -o options to both daemons (rmw_hold=20s,
# log_level=debug, ...). KEEP=1 keeps the temporary directory (logs, BACKING).
# SAFEFS names the binary (default: safefs in PATH). Needs root,
# /dev/fuse, etcd (etcd-server), nginx, apache2, ab (apache2-utils), perl,
# curl. Everything it starts runs below one temporary directory and is
# stopped, each mount lazily unmounted by its mount point, when it exits.
set -euo pipefail

N=200
C=32
PLAIN=0
ROWS=guestbook,flock,naive
while [ $# -gt 0 ]; do
	case $1 in
	-n) N=$2; shift 2 ;;
	-c) C=$2; shift 2 ;;
	--rows) ROWS=$2; shift 2 ;;
	--plain) PLAIN=1; shift ;;
	*) echo "usage: $0 [-n N] [-c C] [--rows guestbook,flock,naive] [--plain]" >&2; exit 2 ;;
	esac
done
SAFEFS=${SAFEFS:-safefs}
export PATH=$PATH:/usr/sbin:/sbin

die() { echo "farm-demo: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (to mount, and to run Apache as www-data)"
for t in etcd nginx apache2 ab perl curl; do
	command -v "$t" >/dev/null || die "$t is missing"
done
[ "$PLAIN" = 1 ] || command -v "$SAFEFS" >/dev/null || die "safefs ($SAFEFS) is missing"
[ "$PLAIN" = 1 ] || [ -e /dev/fuse ] || die "/dev/fuse is missing"
MODS=/usr/lib/apache2/modules

WORK=$(mktemp -d /tmp/farm-demo.XXXXXX)
chmod 755 "$WORK"
PIDS=()   # every process started, stopped in reverse order
MNTS=()

cleanup() {
	local i
	# Last started first: the web servers, then the daemons (while etcd
	# still answers their lease's revocation), then etcd.
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		kill "${PIDS[i]}" 2>/dev/null || continue
		for _ in $(seq 100); do kill -0 "${PIDS[i]}" 2>/dev/null || break; sleep 0.1; done
		kill -9 "${PIDS[i]}" 2>/dev/null || true
	done
	for i in "${MNTS[@]}"; do
		if grep -q " $i fuse" /proc/mounts; then umount -l "$i" || true; fi
	done
	if [ -n "${KEEP:-}" ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 2' INT TERM

port() { perl -MIO::Socket::INET -e 'print IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1:0")->sockport'; }

# waitfor CMD...: retries CMD for up to 30 s (a hang guard only).
waitfor() {
	for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	return 1
}

# etcd, one member.
EP=$(port); PP=$(port)
etcd --name farm --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$EP" \
	--advertise-client-urls "http://127.0.0.1:$EP" --listen-peer-urls "http://127.0.0.1:$PP" \
	--initial-advertise-peer-urls "http://127.0.0.1:$PP" --initial-cluster "farm=http://127.0.0.1:$PP" \
	--logger zap --log-outputs "$WORK/etcd.log" >/dev/null 2>&1 &
PIDS+=($!)
waitfor curl -sf "http://127.0.0.1:$EP/health" || die "etcd did not start: $(tail -5 "$WORK/etcd.log")"

# The shared BACKING, owned by www-data as a CGI data directory is.
BACKING=$WORK/backing
mkdir "$BACKING"
echo 0 >"$BACKING/flock.txt"
echo 0 >"$BACKING/naive.txt"
: >"$BACKING/guestbook.txt"
chown -R www-data:www-data "$BACKING"

# Each host's data directory: its own safefs mount of BACKING (or BACKING).
for h in h1 h2; do
	mkdir -p "$WORK/$h/data"
	if [ "$PLAIN" = 1 ]; then
		rmdir "$WORK/$h/data"
		ln -s "$BACKING" "$WORK/$h/data"
		continue
	fi
	MNTS+=("$WORK/$h/data")
	"$SAFEFS" mount -o "cluster=etcd,etcd=http://127.0.0.1:$EP,cluster_name=farm,node=$h,allow_other,rmw=naive.txt,rmw_wait=30s${SAFEFS_OPTS:+,$SAFEFS_OPTS},lock_timeout=30s" \
		"$BACKING" "$WORK/$h/data" >"$WORK/$h/safefs.log" 2>&1 &
	PIDS+=($!)
	waitfor grep -q " $WORK/$h/data fuse" /proc/mounts || die "safefs on $h did not mount: $(tail -5 "$WORK/$h/safefs.log")"
done

# The CGI scripts, shared by both hosts; FARM_DATA is the host's directory.
CGI=$WORK/cgi-bin
mkdir "$CGI"
cat >"$CGI/guestbook.pl" <<'EOF'
#!/usr/bin/perl
use strict; use warnings; use IO::Handle;
my $file = "$ENV{FARM_DATA}/guestbook.txt";
my ($name) = ($ENV{QUERY_STRING} // '') =~ /name=(\w+)/;
$name //= 'anonymous';
my $id = sprintf '%s-%d-%06d', $ENV{FARM_HOST}, $$, int rand 1_000_000;
open(my $fh, '>>', $file) or die "open $file: $!\n";
$fh->autoflush(1);
print $fh "--- entry $id\n";
print $fh "name: $name\n";
print $fh "host: $ENV{FARM_HOST}\n";
print $fh "text: hello from the farm\n";
print $fh "--- end $id\n";
close($fh) or die "close $file: $!\n";
print "Content-Type: text/plain\r\n\r\nentry $id\n";
EOF
cat >"$CGI/flock.pl" <<'EOF'
#!/usr/bin/perl
use strict; use warnings; use Fcntl qw(:flock SEEK_SET);
my $file = "$ENV{FARM_DATA}/flock.txt";
open(my $fh, '+<', $file) or die "open $file: $!\n";
flock($fh, LOCK_EX) or die "flock $file: $!\n";
my $n = <$fh> // 0;
$n = $n + 1;
seek($fh, 0, SEEK_SET) or die "seek $file: $!\n";
print $fh "$n\n";
truncate($fh, tell($fh)) or die "truncate $file: $!\n";
close($fh) or die "close $file: $!\n";
print "Content-Type: text/plain\r\n\r\n$n\n";
EOF
cat >"$CGI/naive.pl" <<'EOF'
#!/usr/bin/perl
use strict; use warnings;
my $file = "$ENV{FARM_DATA}/naive.txt";
open(my $r, '<', $file) or die "open < $file: $!\n";
my $n = <$r> // 0;
close($r);
$n = $n + 1;
open(my $w, '>', $file) or die "open > $file: $!\n";
print $w "$n\n";
close($w) or die "close $file: $!\n";
print "Content-Type: text/plain\r\n\r\n$n\n";
EOF
chmod 755 "$CGI"/*.pl

# Two web servers: Apache, mod_cgid, each its own port and data directory.
WEB=()
for h in h1 h2; do
	P=$(port)
	WEB+=("127.0.0.1:$P")
	cat >"$WORK/$h/apache2.conf" <<EOF
ServerRoot "$WORK/$h"
ServerName $h
Listen 127.0.0.1:$P
PidFile "$WORK/$h/apache2.pid"
ErrorLog "$WORK/$h/error.log"
DefaultRuntimeDir "$WORK/$h"
Mutex file:$WORK/$h default
LoadModule mpm_event_module $MODS/mod_mpm_event.so
LoadModule authz_core_module $MODS/mod_authz_core.so
LoadModule mime_module $MODS/mod_mime.so
LoadModule alias_module $MODS/mod_alias.so
LoadModule env_module $MODS/mod_env.so
LoadModule cgid_module $MODS/mod_cgid.so
ScriptSock "$WORK/$h/cgisock"
TypesConfig /etc/mime.types
User www-data
Group www-data
LogFormat "%r %>s" short
CustomLog "$WORK/$h/access.log" short
ScriptAlias /cgi-bin/ "$CGI/"
SetEnv FARM_DATA "$WORK/${ONE_MOUNT:-$h}/data"
SetEnv FARM_HOST $h
<Directory "$CGI">
    Require all granted
</Directory>
EOF
	apache2 -f "$WORK/$h/apache2.conf" -DFOREGROUND >"$WORK/$h/apache2.out" 2>&1 &
	PIDS+=($!)
done

# The balancer: nginx, an upstream of the two, round robin.
LB=$(port)
mkdir "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 2;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log;
events { worker_connections 512; }
http {
	access_log off;
	client_body_temp_path $WORK/nginx/body;
	proxy_temp_path $WORK/nginx/proxy;
	fastcgi_temp_path $WORK/nginx/fastcgi;
	uwsgi_temp_path $WORK/nginx/uwsgi;
	scgi_temp_path $WORK/nginx/scgi;
	upstream farm {
		server ${WEB[0]};
		server ${WEB[1]};
	}
	server {
		listen 127.0.0.1:$LB;
		location / { proxy_pass http://farm; }
	}
}
EOF
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" >"$WORK/nginx/out" 2>&1 &
PIDS+=($!)
for w in "${WEB[@]}" "127.0.0.1:$LB"; do
	waitfor curl -s -o /dev/null "http://$w/" || die "nothing answers on $w (see $WORK)"
done

# The load: ab through the balancer, one script after the other.
declare -A FAILED
for s in ${ROWS//,/ }; do
	case $s in guestbook | flock | naive) ;; *) die "no row $s" ;; esac
	url="http://127.0.0.1:$LB/cgi-bin/$s.pl"
	[ "$s" = guestbook ] && url="$url?name=ab"
	ab -q -l -c "$C" -n "$N" "$url" >"$WORK/ab-$s.out" 2>&1 || die "ab $s failed: $(tail -3 "$WORK/ab-$s.out")"
	f=$(awk '/^Failed requests/ {print $3}' "$WORK/ab-$s.out")
	x=$(awk '/^Non-2xx responses/ {print $3}' "$WORK/ab-$s.out")
	FAILED[$s]=$((${f:-0} + ${x:-0}))
done

# The checks. The guestbook: N entries, each its five lines together, in
# order, its id once; the counters: N.
read -r GB_WHOLE GB_BAD < <(perl -e '
	my (%seen, $whole, $bad);
	open(my $f, "<", $ARGV[0]) or die;
	my @l = <$f>;
	while (@l) {
		my @e = splice(@l, 0, 5);
		my ($id) = ($e[0] // "") =~ /^--- entry (\S+)$/;
		if (defined $id && @e == 5 && $e[1] =~ /^name: ab$/ && $e[2] =~ /^host: h[12]$/
		    && $e[3] eq "text: hello from the farm\n" && $e[4] eq "--- end $id\n" && !$seen{$id}++) {
			$whole++;
		} else {
			$bad++;
		}
	}
	printf "%d %d\n", $whole // 0, $bad // 0;' "$BACKING/guestbook.txt")
FLOCK=$(cat "$BACKING/flock.txt")
NAIVE=$(cat "$BACKING/naive.txt")
H1=$(wc -l <"$WORK/h1/access.log")
H2=$(wc -l <"$WORK/h2/access.log")

fail=0
row() { # name expected got failed-requests detail
	[ -n "${FAILED[$1]:-}" ] || return 0
	local ok=ok
	if [ "$2" != "$3" ] || [ "$4" != 0 ]; then ok=FAIL; fail=1; fi
	printf '%-10s %9s %9s %9s  %-4s %s\n' "$1" "$2" "$3" "$4" "$ok" "$5"
}
echo
if [ "$PLAIN" = 1 ]; then echo "plain shared directory (no safefs), $N requests each, $C at a time"; else
	echo "safefs cluster (etcd, 2 hosts), $N requests each, $C at a time"; fi
printf '%-10s %9s %9s %9s  %-4s %s\n' row expected got failed ok detail
row guestbook "$N" "$GB_WHOLE" "${FAILED[guestbook]:-}" "whole entries ($GB_BAD torn, mixed or repeated)"
row flock "$N" "$FLOCK" "${FAILED[flock]:-}" "careful counter"
row naive "$N" "$NAIVE" "${FAILED[naive]:-}" "naive counter$([ "$PLAIN" = 1 ] || echo ', rmw=naive.txt')"
echo "requests served: h1 $H1, h2 $H2"
[ "$H1" -gt 0 ] && [ "$H2" -gt 0 ] || { echo "the balancer did not use both hosts"; fail=1; }
exit $fail
