#!/usr/bin/perl
# Unlocked read-modify-write counters of old CGI scripts, other than the
# naive one (naive_counter.pl):
#
#   rmw_counter.pl METHOD FILE N
#
#   plus    open +<, read, seek, truncate, print, close (no lock)
#   shared  open <, flock LOCK_SH, read, close; open >, flock LOCK_EX,
#           print, close (the lock does not span the read and the write)
#
# Runs N increments. A read must be a well-formed count. Anomalies are
# printed one per line; the last line is "DONE n=N".
use strict;
use warnings;
use Fcntl qw(:flock);

my ($method, $file, $n) = @ARGV;
die "usage: $0 METHOD FILE N\n" unless defined $n;

sub parse {
    my ($data) = @_;
    $data = '' unless defined $data;
    return $1 if $data =~ /\A(\d+)\n\z/;
    (my $s = $data) =~ s/\n/\\n/g;
    print "BAD '$s'\n";
    return 0;
}

for my $i (1 .. $n) {
    if ($method eq 'plus') {
        open(my $fh, "+<$file") or die "open +<$file: $!\n";
        my $v = parse(do { local $/; <$fh> });
        seek($fh, 0, 0) or die "seek: $!\n";
        truncate($fh, 0) or die "truncate: $!\n";
        print $fh $v + 1, "\n";
        close($fh) or die "close: $!\n";
    } elsif ($method eq 'shared') {
        open(my $in, "<$file") or die "open <$file: $!\n";
        flock($in, LOCK_SH) or die "flock SH: $!\n";
        my $v = parse(do { local $/; <$in> });
        close($in);
        open(my $out, ">$file") or die "open >$file: $!\n";
        flock($out, LOCK_EX) or die "flock EX: $!\n";
        print $out $v + 1, "\n";
        close($out) or die "close: $!\n";
    } else {
        die "unknown method $method\n";
    }
}
print "DONE n=$n\n";
