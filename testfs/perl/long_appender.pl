#!/usr/bin/perl
# A long-lived appender: a FastCGI script or a daemon that keeps its log
# open for append for its whole life and writes one line per request.
#
#   long_appender.pl FILE ID
#
# Reads requests on stdin, one a line:
#   N          append request N's line in three pieces (each its own
#              write(2), as an unbuffered print field by field), then
#              print "OK N"
#   half N     append the first two pieces of request N's line: "HALF N"
#   rest N     append the last piece of request N's line: "OK N"
#   run S MS   serve requests 1, 2, ... for S seconds, MS milliseconds
#              apart, then print "RAN N" (N requests)
#   close      close FILE: "CLOSED"
# At the end of stdin it exits 0 (Perl closes FILE at exit).
#
# Request N's line is "id=ID req=N pad=XXX... end\n" with as many x as
# padLen(N) in the tests: 20000 for every 17th request (more than the
# daemon keeps in memory), else 10 to 309. A reader tells a whole line
# from a torn one by its length.
use strict;
use warnings;
use Time::HiRes qw(usleep time);

my ($file, $id) = @ARGV;
die "usage: $0 FILE ID\n" unless defined $id;
$| = 1;
# A hangup ends it, as it ends a FastCGI process, even when the tests run
# under nohup (an ignored SIGHUP is inherited).
$SIG{HUP} = 'DEFAULT';
open(my $log, '>>', $file) or die "open >>$file: $!\n";

sub pieces {
    my ($n) = @_;
    my $pad = $n % 17 == 0 ? 20000 : ($n * 37) % 300 + 10;
    my $h = int($pad / 2);
    return ("id=$id req=$n ", "pad=" . ("x" x $h), ("x" x ($pad - $h)) . " end\n");
}

sub put {
    for my $p (@_) {
        my $w = syswrite($log, $p);
        die "write: $!\n" unless defined $w && $w == length($p);
    }
}

while (my $req = <STDIN>) {
    chomp $req;
    if ($req =~ /^(\d+)$/) {
        put(pieces($1));
        print "OK $1\n";
    } elsif ($req =~ /^half (\d+)$/) {
        my @p = pieces($1);
        put(@p[0, 1]);
        print "HALF $1\n";
    } elsif ($req =~ /^rest (\d+)$/) {
        my @p = pieces($1);
        put($p[2]);
        print "OK $1\n";
    } elsif ($req =~ /^run (\d+) (\d+)$/) {
        my ($end, $n) = (time() + $1, 0);
        while (time() < $end) {
            $n++;
            put(pieces($n));
            usleep($2 * 1000);
        }
        print "RAN $n\n";
    } elsif ($req eq 'close') {
        close($log) or die "close: $!\n";
        print "CLOSED\n";
    } else {
        die "bad request $req\n";
    }
}
exit 0;
