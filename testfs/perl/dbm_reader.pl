#!/usr/bin/perl
# A CGI page that shows a DBM hit counter: flock shared, tie read-only,
# read, untie, unlock.
#
#   dbm_reader.pl MODULE FILE N
#
# Reads key "hits" N times under a shared flock of FILE.lock (as
# dbm_counter.pl's writers lock it), and checks each read is not below
# the one before. Anomalies are printed one per line; the last line is
# "DONE n=N".
use strict;
use warnings;
use Fcntl qw(:flock O_RDWR O_CREAT);
use FindBin;
require "$FindBin::Bin/dbm_lib.pl";

my ($module, $file, $n) = @ARGV;
die "usage: $0 MODULE FILE N\n" unless defined $n;
dbm_load($module);
$| = 1;
my $last = 0;
for (1 .. $n) {
    sysopen(my $lock, "$file.lock", O_RDWR | O_CREAT, 0644) or do { print "LOCKOPEN $!\n"; next };
    flock($lock, LOCK_SH) or do { print "FLOCK $!\n"; next };
    my %h;
    dbm_tie(\%h, $module, $file, 0, 0) or do { print "TIE $!\n"; close($lock); next };
    my $v = $h{hits} // 0;
    print "STALE read $v after reading $last\n" if $v < $last;
    $last = $v;
    dbm_untie(\%h, $module);
    close($lock);
}
print "DONE n=$n\n";
