#!/usr/bin/perl
# The careful counter of a CGI script: open the data file read-write,
# lock, read, seek, print, truncate, close (the close releases the lock).
# The open comes before the lock: what it reads must be what the last
# holder wrote, wherever that holder ran.
#
#   careful_counter.pl LOCK HOW FILE N [LOCKFILE]
#
# LOCK is flock or fcntl (F_SETLKW F_WRLCK on the whole file); HOW is
# data (lock FILE's own descriptor) or lockfile (lock LOCKFILE, opened
# and locked before FILE is opened, closed after it). Every read must be
# a well-formed count not below the count this process last wrote.
# Anomalies are printed one per line; the last line is "DONE n=N last=L".
use strict;
use warnings;
use Fcntl qw(:flock F_SETLKW F_WRLCK SEEK_SET);

my ($how_lock, $how, $file, $n, $lockfile) = @ARGV;
die "usage: $0 flock|fcntl data|lockfile FILE N [LOCKFILE]\n" unless defined $n;
$| = 1;
my $last = 0;

sub lock_fh {
    my ($fh) = @_;
    if ($how_lock eq 'flock') {
        flock($fh, LOCK_EX) or die "flock: $!\n";
    } else {
        # struct flock on x86_64 linux: type, whence, start, len, pid.
        my $fl = pack("s s x4 q q i x4", F_WRLCK, SEEK_SET, 0, 0, 0);
        fcntl($fh, F_SETLKW, $fl) or die "fcntl: $!\n";
    }
}

sub rewrite {
    my ($fh) = @_;
    my $data = do { local $/; <$fh> };
    $data = '' unless defined $data;
    my $v = $last;
    if ($data =~ /\A(\d+)\n\z/) {
        $v = $1;
        print "STALE read $v after writing $last\n" if $v < $last;
    } else {
        (my $s = $data) =~ s/\n/\\n/g;
        print $data eq '' ? "EMPTY\n" : "TORN '$s'\n";
    }
    seek($fh, 0, 0) or die "seek: $!\n";
    print $fh $v + 1, "\n";
    truncate($fh, tell($fh)) or die "truncate: $!\n";
    $last = $v + 1;
}

for (1 .. $n) {
    my $lfh;
    if ($how eq 'lockfile') {
        open($lfh, '+<', $lockfile) or die "open $lockfile: $!\n";
        lock_fh($lfh);
    }
    open(my $fh, '+<', $file) or die "open +<$file: $!\n";
    lock_fh($fh) if $how eq 'data';
    rewrite($fh);
    close($fh) or die "close $file: $!\n";
    close($lfh) or die "close $lockfile: $!\n" if $lfh;
}
print "DONE n=$n last=$last\n";
