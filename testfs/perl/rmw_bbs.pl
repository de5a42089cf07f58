#!/usr/bin/perl
# A CGI script that shows a data file and, on a POST, rewrites it: the
# naive read-modify-write (read the count, add one, rewrite), no lock.
#
#   REQUEST_METHOD=GET|POST rmw_bbs.pl FILE N [BARRIER WANT]
#
# Runs N requests one after the other, each in a process of its own (a
# forked child, as a web server starts one per request). A POST (from
# REQUEST_METHOD, as CGI gives it) rewrites the file, and so does any
# request with BBS_WRITE set; others only read it. With BARRIER (a directory) and WANT, each view, after
# its read, puts its pid in BARRIER and waits until WANT views are there
# (views that overlap), then prints "DONE overlap=K" with the K it saw; after
# 30 s (a hang guard) it gives up, and so does every later view.
# Anomalies are printed one per line; the last line is "DONE requests=N".
use strict;
use warnings;
use Time::HiRes qw(usleep time);

my ($file, $n, $barrier, $want) = @ARGV;
die "usage: $0 FILE N [BARRIER WANT]\n" unless defined $n;
my $post = ($ENV{REQUEST_METHOD} // '') eq 'POST' || $ENV{BBS_WRITE};
$| = 1;

sub request {
    open(IN, "<$file") or do { print "OPENFAIL read: $!\n"; return };
    my $data = do { local $/; <IN> };
    close(IN);
    $data = '' unless defined $data;
    if ($data !~ /\A(\d+)\n\z/) {
        (my $s = $data) =~ s/\n/\\n/g;
        print "TORN '$s'\n";
        return;
    }
    my $count = $1;
    if ($post) {
        open(OUT, ">$file") or do { print "OPENFAIL write: $!\n"; return };
        print OUT $count + 1, "\n";
        close(OUT) or print "CLOSEFAIL $!\n";
    } elsif (defined $barrier) {
        overlap();
    }
}

sub overlap {
    open(my $m, ">$barrier/$$") or die "$barrier/$$: $!\n";
    close($m);
    my $deadline = time() + 30;
    my $k;
    while (1) {
        opendir(my $d, $barrier) or die "$barrier: $!\n";
        my @views = grep { /\A\d+\z/ } readdir($d);
        closedir($d);
        $k = @views;
        last if $k >= $want || -e "$barrier/broken";
        if (time() > $deadline) {
            open(my $b, ">$barrier/broken");
            last;
        }
        usleep(5000);
    }
    print "DONE overlap=$k\n";
}

for (1 .. $n) {
    my $pid = fork() // die "fork: $!\n";
    if ($pid == 0) {
        request();
        exit 0;
    }
    waitpid($pid, 0);
    print "CHILD FAILED $?\n" if $?;
}
print "DONE requests=$n\n";
