#!/usr/bin/perl
# A rewrite held open while something else happens to the file's name.
#
#   hold_writer.pl FILE TEXT1 TEXT2
#
# Opens FILE with >, writes TEXT1, prints READY, waits for a line on
# stdin, writes TEXT2, closes and prints CLOSED.
use strict;
use warnings;

my ($file, $t1, $t2) = @ARGV;
die "usage: $0 FILE TEXT1 TEXT2\n" unless defined $t2;
$| = 1;
open(OUT, ">$file") or die "open >$file: $!\n";
defined syswrite(OUT, $t1) or die "write: $!\n";
print "READY\n";
my $go = <STDIN>;
defined syswrite(OUT, $t2) or die "write: $!\n";
close(OUT) or die "close: $!\n";
print "CLOSED\n";
