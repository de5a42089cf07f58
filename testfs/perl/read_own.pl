#!/usr/bin/perl
# A request that updates a file through a read-write handle and reads it
# back before closing: it must read its own writes.
#
#   read_own.pl FILE OPEN TEXT
#
# OPEN is '+<' (TEXT is written at offset 0) or '+>>' (TEXT is appended).
# Writes TEXT with write(2), seeks to 0, reads the whole file through the
# same handle, prints "READ <hex of what it read>", closes.
use strict;
use warnings;

my ($file, $mode, $text) = @ARGV;
die "usage: $0 FILE OPEN TEXT\n" unless defined $text;
$mode eq '+<' || $mode eq '+>>' or die "bad OPEN $mode\n";
open(F, "$mode$file") or die "open $mode$file: $!\n";
binmode(F);
defined syswrite(F, $text) or die "write: $!\n";
defined sysseek(F, 0, 0) or die "seek: $!\n";
my $data = '';
while (1) {
    my $r = sysread(F, $data, 65536, length($data));
    die "read: $!\n" unless defined $r;
    last if $r == 0;
}
close(F) or die "close: $!\n";
print "READ ", unpack("H*", $data), "\n";
