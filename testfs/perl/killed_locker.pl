#!/usr/bin/perl
# A script killed by SIGKILL while it holds a lock and has rewritten the
# data file without closing it:
#
#   killed_locker.pl METHOD FILE LOCK
#
# METHOD: flock (flock LOCK_EX on LOCK) or fcntl (F_SETLKW F_WRLCK on
# LOCK). It opens FILE +<, rewrites it with "killed\n" through syswrite,
# and kills itself. Its lock ends with it; its rewrite must not commit.
use strict;
use warnings;
use Fcntl qw(:flock F_SETLKW F_WRLCK SEEK_SET);

my ($method, $file, $lock) = @ARGV;
die "usage: $0 METHOD FILE LOCK\n" unless defined $lock;
open(my $lfh, "+<", $lock) or die "open $lock: $!\n";
if ($method eq 'flock') {
    flock($lfh, LOCK_EX) or die "flock: $!\n";
} else {
    my $fl = pack("s s x4 q q i x4", F_WRLCK, SEEK_SET, 0, 0, 0);
    fcntl($lfh, F_SETLKW, $fl) or die "fcntl: $!\n";
}
open(my $fh, "+<", $file) or die "open $file: $!\n";
truncate($fh, 0) or die "truncate: $!\n";
syswrite($fh, "killed\n") or die "syswrite: $!\n";
kill 'KILL', $$;
sleep 10;
