#!/usr/bin/perl
# The naive CGI access counter, as written in countless old scripts:
# read the count, add one, rewrite the file. No lock at all.
#
#   naive_counter.pl FILE N
#
# Runs N requests in a row. Increments may be lost (two requests read the
# same count), but a read must never see an empty file, a torn value, or
# 0 again once the counter was above 0. Anomalies are printed one per line;
# the last line is "DONE reads=R max=M".
use strict;
use warnings;

my ($file, $n) = @ARGV;
die "usage: $0 FILE N\n" unless defined $n;

my ($reads, $max, $positive) = (0, 0, 0);
for my $i (1 .. $n) {
    open(IN, "<$file") or do { print "OPENFAIL read: $!\n"; next };
    my $data = do { local $/; <IN> };
    close(IN);
    $data = '' unless defined $data;
    $reads++;
    my $count;
    if ($data eq '') {
        print "EMPTY\n";
        $count = 0;
    } elsif ($data =~ /\A(\d+)\n\z/) {
        $count = $1;
    } else {
        (my $s = $data) =~ s/\n/\\n/g;
        print "TORN '$s'\n";
        next;
    }
    print "ZERO again after $max\n" if $count == 0 && $positive;
    $max = $count if $count > $max;
    $count++;
    open(OUT, ">$file") or do { print "OPENFAIL write: $!\n"; next };
    print OUT "$count\n";
    close(OUT) or print "CLOSEFAIL $!\n";
    # close returned: our count (>= 1) is committed, 0 can never come back.
    $positive = 1;
}
print "DONE reads=$reads max=$max\n";
