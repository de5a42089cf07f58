#!/usr/bin/perl
# Teaches rmw=auto as many (file, program) pairs as it can: makes DIR,
# then N files in it, each written, then read and rewritten without a
# lock (a read-modify-write of N different files).
#
#   rmw_flood.pl DIR N
#
# Prints "DONE N".
use strict;
use warnings;

my ($dir, $n) = @ARGV;
die "usage: $0 DIR N\n" unless defined $n;
mkdir($dir) or die "mkdir $dir: $!\n";
for my $i (0 .. $n - 1) {
    my $p = "$dir/f$i";
    open(my $out, ">", $p) or die "create $p: $!\n";
    print $out "0\n";
    close($out) or die "close $p: $!\n";
    open(my $in, "<", $p) or die "open <$p: $!\n";
    my $data = do { local $/; <$in> };
    close($in);
    open($out, ">", $p) or die "open >$p: $!\n";
    print $out "1\n";
    close($out) or die "close $p: $!\n";
}
print "DONE $n\n";
