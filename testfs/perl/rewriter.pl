#!/usr/bin/perl
# A data file rewritten whole by each request (BBS, ranking, settings):
# open >, print it in 4 KiB pieces, close.
#
#   rewriter.pl FILE ID N [CHUNKS]
#
# Writes N versions. A version is CHUNKS (64) chunks of 4096 bytes
# (256 KiB): CHUNKS-1 data chunks "id=II ver=VVVVVV chunk=CCC " filled with a character of
# the writer, and a last chunk "SUM id=II ver=VVVVVV md5=HEX" (md5 of the
# data chunks) filled with '.'. Each chunk is its own write(2).
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);

my ($file, $id, $n, $chunks) = @ARGV;
die "usage: $0 FILE ID N [CHUNKS]\n" unless defined $n;
$chunks ||= 64;

sub chunk {
    my ($head, $fill) = @_;
    return $head . ($fill x (4096 - length($head) - 1)) . "\n";
}

for my $ver (1 .. $n) {
    my $fill = chr(ord('a') + $id % 26);
    my $body = '';
    $body .= chunk(sprintf("id=%02d ver=%06d chunk=%03d ", $id, $ver, $_), $fill) for 0 .. $chunks - 2;
    my $sum = chunk(sprintf("SUM id=%02d ver=%06d md5=%s ", $id, $ver, md5_hex($body)), '.');
    open(OUT, ">$file") or die "open >$file: $!\n";
    binmode(OUT);
    my $old = select(OUT); $| = 1; select($old);
    for (my $off = 0; $off < length($body); $off += 4096) {
        print OUT substr($body, $off, 4096) or die "print: $!\n";
    }
    print OUT $sum or die "print: $!\n";
    close(OUT) or die "close: $!\n";
}
print "DONE\n";
