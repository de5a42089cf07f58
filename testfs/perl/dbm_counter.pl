#!/usr/bin/perl
# A CGI hit counter kept in a DBM file, the classic way: flock a lock
# file, tie the hash, increment, untie, unlock.
#
#   dbm_counter.pl MODULE FILE N
#
# MODULE is SDBM_File (two files, FILE.dir and FILE.pag) or DB_File. Runs
# N increments of key "hits" and of a key of its own ("p<pid>"), and
# checks every read is not below what this process last wrote. Anomalies
# are printed one per line; the last line is "DONE n=N".
use strict;
use warnings;
use Fcntl qw(:flock O_RDWR O_CREAT);

my ($module, $file, $n) = @ARGV;
die "usage: $0 MODULE FILE N\n" unless defined $n;
eval "require $module; 1" or die "$module: $@";
$| = 1;
my $last = 0;
for (1 .. $n) {
    open(my $lock, '>>', "$file.lock") or do { print "LOCKOPEN $!\n"; next };
    flock($lock, LOCK_EX) or do { print "FLOCK $!\n"; next };
    my %h;
    tie(%h, $module, $file, O_RDWR | O_CREAT, 0644) or do { print "TIE $!\n"; close($lock); next };
    my $v = $h{hits} // 0;
    print "STALE read $v after writing $last\n" if $v < $last;
    $h{hits} = $last = $v + 1;
    $h{"p$$"} = ($h{"p$$"} // 0) + 1;
    untie %h;
    close($lock);
}
print "DONE n=$n\n";
