#!/usr/bin/perl
# A guestbook / BBS / access log writer: each request opens the file for
# append, writes one entry of several lines, and closes it.
#
#   appender.pl FILE ID N LINES
#
# Writes N entries of LINES lines each. The handle is unbuffered, so each
# line is its own write(2): the entry reaches the file system in pieces,
# as from a script that prints field by field.
use strict;
use warnings;

my ($file, $id, $n, $lines) = @ARGV;
die "usage: $0 FILE ID N LINES\n" unless defined $lines;

for my $seq (1 .. $n) {
    open(OUT, ">>$file") or die "open >>$file: $!\n";
    my $old = select(OUT); $| = 1; select($old);
    for my $k (1 .. $lines) {
        print OUT "w=$id s=$seq l=$k/$lines ", "-" x 24, "\n" or die "print: $!\n";
    }
    close(OUT) or die "close: $!\n";
}
print "DONE\n";
