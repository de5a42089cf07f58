#!/usr/bin/perl
# A request that reads a rewritten data file whole and checks it (see
# rewriter.pl for the format).
#
#   reader.pl FILE STOPFILE MIN [CHUNKS]
#
# Reads until STOPFILE exists, and at least MIN times. Every read must be
# one whole version: CHUNKS (64) x 4096 bytes, one writer and version in every chunk,
# the checksum right. Anomalies are printed one per line; the last line
# is "DONE reads=R".
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);
use Time::HiRes qw(usleep);

my ($file, $stop, $min, $chunks) = @ARGV;
die "usage: $0 FILE STOPFILE MIN [CHUNKS]\n" unless defined $min;
$chunks ||= 64;
my $data_chunks = $chunks - 1;
$| = 1;

my $reads = 0;
while ($reads < $min || !-e $stop) {
    open(IN, "<$file") or do { $reads++; print "OPENFAIL $!\n"; usleep(1000); next };
    binmode(IN);
    my $data = do { local $/; <IN> };
    close(IN);
    $reads++;
    $data = '' unless defined $data;
    my $len = length($data);
    if ($len == 0) { print "EMPTY\n"; next }
    if ($len != $chunks * 4096) { print "SHORT len=$len\n"; next }
    my $sum = substr($data, $data_chunks * 4096, 4096);
    unless ($sum =~ /\ASUM id=(\d\d) ver=(\d{6}) md5=([0-9a-f]{32}) \.+\n\z/) {
        print "TORN bad sum chunk\n";
        next;
    }
    my ($id, $ver, $md5) = ($1, $2, $3);
    my $bad = 0;
    for my $c (0 .. $data_chunks - 1) {
        my $head = sprintf("id=%s ver=%s chunk=%03d ", $id, $ver, $c);
        if (substr($data, $c * 4096, length($head)) ne $head) {
            my $got = substr($data, $c * 4096, 26);
            print "TORN chunk $c is '$got', sum says id=$id ver=$ver\n";
            $bad = 1;
            last;
        }
    }
    next if $bad;
    print "BADSUM id=$id ver=$ver\n" if md5_hex(substr($data, 0, $data_chunks * 4096)) ne $md5;
}
print "DONE reads=$reads\n";
