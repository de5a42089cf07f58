#!/usr/bin/perl
# Prints every KEY=VALUE of a DBM file, one per line, sorted.
#
#   dbm_dump.pl MODULE FILE
use strict;
use warnings;
use Fcntl qw(O_RDONLY);

my ($module, $file) = @ARGV;
die "usage: $0 MODULE FILE\n" unless defined $file;
eval "require $module; 1" or die "$module: $@";
tie(my %h, $module, $file, O_RDONLY, 0) or die "tie $file: $!\n";
print "$_=$h{$_}\n" for sort keys %h;
untie %h;
