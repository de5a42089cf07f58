#!/usr/bin/perl
# The plainest CGI write: open FILE with OPEN ('>' or '>>'), print TEXT,
# close. TEXT '-' means the text is read from stdin.
#
#   write.pl FILE OPEN TEXT
use strict;
use warnings;

my ($file, $mode, $text) = @ARGV;
die "usage: $0 FILE OPEN TEXT\n" unless defined $text;
if ($text eq '-') {
    binmode(STDIN);
    $text = do { local $/; <STDIN> };
    $text = '' unless defined $text;
}
open(OUT, "$mode$file") or die "open $mode$file: $!\n";
binmode(OUT);
print OUT $text or die "print: $!\n";
close(OUT) or die "close: $!\n";
