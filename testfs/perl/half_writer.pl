#!/usr/bin/perl
# A request cut off half way through a rewrite (CGI timeout, killed
# server), or one that simply ends without closing its file.
#
#   half_writer.pl FILE OPEN END
#
# OPEN is '>' (rewrite) or '>>' (append). Writes 128 KiB of 'N' bytes with
# write(2), prints HALF and then, by END:
#   wait   sleeps (the test kills it)
#   exit   exit 0 without closing (perl closes at exit)
#   _exit  POSIX::_exit 0 without closing (the kernel closes the fd)
use strict;
use warnings;
use POSIX ();

my ($file, $mode, $end) = @ARGV;
die "usage: $0 FILE OPEN END\n" unless defined $end;
$mode eq '>' || $mode eq '>>' or die "bad OPEN $mode\n";

open(OUT, "$mode$file") or die "open $mode$file: $!\n";
my $half = "N" x (128 * 1024);
my $w = syswrite(OUT, $half);
die "write: $!\n" unless defined $w && $w == length($half);
$| = 1;
print "HALF\n";
if ($end eq 'wait') {
    sleep 60;
    exit 3;
} elsif ($end eq 'exit') {
    exit 0;
} elsif ($end eq '_exit') {
    POSIX::_exit(0);
}
die "bad END $end\n";
