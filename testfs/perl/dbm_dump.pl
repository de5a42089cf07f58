#!/usr/bin/perl
# Prints every KEY=VALUE of a DBM file, one per line, sorted.
#
#   dbm_dump.pl MODULE FILE
#
# MODULE as in dbm_lib.pl.
use strict;
use warnings;
use FindBin;
require "$FindBin::Bin/dbm_lib.pl";

my ($module, $file) = @ARGV;
die "usage: $0 MODULE FILE\n" unless defined $file;
dbm_load($module);
my %h;
dbm_tie(\%h, $module, $file, 0, 0) or die "tie $file: $!\n";
print "$_=$h{$_}\n" for sort keys %h;
dbm_untie(\%h, $module);
