#!/usr/bin/perl
# Opens FILE read-write (+<, no truncation), prints "open ok", waits for a
# line on standard input, then reads the whole file through that handle
# and prints "read HEX" (the bytes in hex). A handle that has not written
# yet must read the latest committed version.
#
#   rw_reader.pl FILE
use strict;
use warnings;

my ($file) = @ARGV;
die "usage: $0 FILE\n" unless defined $file;
$| = 1;
open(my $fh, '+<', $file) or do { printf "open err %d %s\n", $! + 0, $!; exit 0 };
binmode($fh);
print "open ok\n";
my $go = <STDIN>;
die "no go-ahead\n" unless defined $go;
my $data = '';
while (1) {
    my $n = sysread($fh, $data, 65536, length($data));
    if (!defined $n) {
        printf "read err %d %s\n", $! + 0, $!;
        exit 0;
    }
    last if $n == 0;
}
print "read ", unpack('H*', $data), "\n";
close($fh);
exit 0;
