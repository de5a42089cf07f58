#!/usr/bin/perl
# A slow reader: opens FILE, reads its first 4 KiB, prints OPENED, waits
# for a line on stdin, reads the rest, and prints "LEN n MD5 hex" of all
# it read through that one descriptor.
#
#   snapshot_reader.pl FILE
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);

my ($file) = @ARGV;
die "usage: $0 FILE\n" unless defined $file;
$| = 1;
open(IN, "<$file") or die "open <$file: $!\n";
binmode(IN);
my $data = '';
defined sysread(IN, $data, 4096) or die "read: $!\n";
print "OPENED\n";
my $go = <STDIN>;
while (1) {
    my $r = sysread(IN, $data, 65536, length($data));
    die "read: $!\n" unless defined $r;
    last if $r == 0;
}
close(IN);
printf "LEN %d MD5 %s\n", length($data), md5_hex($data);
