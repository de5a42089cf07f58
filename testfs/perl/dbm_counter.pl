#!/usr/bin/perl
# A CGI hit counter kept in a DBM file, the classic way: flock, tie the
# hash, increment, untie, unlock.
#
#   dbm_counter.pl MODULE FILE N [LOCK]
#
# MODULE is dbmopen, NDBM_File, GDBM_File, DB_File or SDBM_File (see
# dbm_lib.pl). LOCK is "lockfile" (the default: flock FILE.lock) or "db"
# (flock the database file itself, opened before the tie; gdbm is then
# told not to lock). Runs N increments of key "hits" and of a key of its
# own ("p<pid>"), and checks every read is not below what this process
# last wrote. Anomalies are printed one per line; the last line is
# "DONE n=N".
use strict;
use warnings;
use Fcntl qw(:flock O_RDWR O_CREAT);
use FindBin;
require "$FindBin::Bin/dbm_lib.pl";

my ($module, $file, $n, $how) = @ARGV;
die "usage: $0 MODULE FILE N [lockfile|db]\n" unless defined $n;
$how //= 'lockfile';
die "$0: LOCK is lockfile or db, not $how\n" unless $how =~ /^(lockfile|db)$/;
dbm_load($module);
$| = 1;
my $lockname = $how eq 'db' ? dbm_data_file($module, $file) : "$file.lock";
my $last = 0;
for (1 .. $n) {
    sysopen(my $lock, $lockname, O_RDWR | O_CREAT, 0644) or do { print "LOCKOPEN $!\n"; next };
    flock($lock, LOCK_EX) or do { print "FLOCK $!\n"; next };
    my %h;
    dbm_tie(\%h, $module, $file, 1, $how eq 'db') or do { print "TIE $! ", dbm_error(), "\n"; close($lock); next };
    my $v = $h{hits} // 0;
    print "STALE read $v after writing $last\n" if $v < $last;
    $h{hits} = $last = $v + 1;
    $h{"p$$"} = ($h{"p$$"} // 0) + 1;
    dbm_untie(\%h, $module);
    close($lock);
}
print "DONE n=$n\n";
