#!/usr/bin/perl
# A counter under a script lock that is released before the data file
# is closed, in each way old Perl CGI scripts do it.
#
#   unlock_counter.pl METHOD FILE N LOCK
#
# METHOD is one of
#   flock     open +<, flock LOCK_EX, read, seek, truncate, print,
#             flock LOCK_UN (Perl flushes the handle first), close
#   flock8    the same with the numeric constants of old scripts
#             (flock(F, 2), flock(F, 8)) and a bareword handle
#   fcntl     F_SETLKW F_WRLCK on the whole file, ..., F_SETLK F_UNLCK
#   range     F_SETLKW F_WRLCK on byte 0 only, ..., F_UNLCK of byte 0
#   lockfile  flock LOCK_EX on LOCK, open +< FILE, read, rewrite with
#             syswrite, flock LOCK UN, then close FILE and LOCK
#   close     as flock, without the unlock: close releases the lock
#   reader    open <, flock LOCK_EX, read through that handle, rewrite
#             with open >, print, close; then close the locked reader:
#             the read handle was opened before the lock was granted
#
# Anomalies (empty, torn or stale reads) are printed one per line; the
# last line is "DONE n=N last=L".
use strict;
use warnings;
use Fcntl qw(:flock F_SETLKW F_SETLK F_WRLCK F_UNLCK SEEK_SET);

my ($method, $file, $n, $lock) = @ARGV;
die "usage: $0 METHOD FILE N LOCK\n" unless defined $lock;
$| = 1;
my $last = 0;

sub check {
    my ($data) = @_;
    $data = '' unless defined $data;
    if ($data !~ /\A(\d+)\n\z/) {
        (my $s = $data) =~ s/\n/\\n/g;
        print $data eq '' ? "EMPTY\n" : "TORN '$s'\n";
        return $last;
    }
    print "STALE read $1 after writing $last\n" if $1 < $last;
    return $1;
}

# lk packs a struct flock (x86_64 linux) for bytes [start, start+len).
sub lk { my ($type, $start, $len) = @_; pack("s s x4 q q i x4", $type, SEEK_SET, $start, $len, 0) }

sub rewrite {
    my ($fh) = @_;
    my $v = check(do { local $/; <$fh> });
    seek($fh, 0, 0) or die "seek: $!\n";
    truncate($fh, 0) or die "truncate: $!\n";
    print $fh $v + 1, "\n";
    $last = $v + 1;
}

for (1 .. $n) {
    if ($method eq 'flock' || $method eq 'close') {
        open(my $fh, "+<", $file) or die "open +<$file: $!\n";
        flock($fh, LOCK_EX) or die "flock: $!\n";
        rewrite($fh);
        if ($method eq 'flock') { flock($fh, LOCK_UN) or die "unlock: $!\n" }
        close($fh) or die "close: $!\n";
    } elsif ($method eq 'flock8') {
        open(F, "+<$file") or die "open +<$file: $!\n";
        flock(F, 2) or die "flock: $!\n";
        rewrite(\*F);
        flock(F, 8) or die "unlock: $!\n";
        close(F) or die "close: $!\n";
    } elsif ($method eq 'fcntl' || $method eq 'range') {
        my $len = $method eq 'range' ? 1 : 0;
        open(my $fh, "+<", $file) or die "open +<$file: $!\n";
        fcntl($fh, F_SETLKW, lk(F_WRLCK, 0, $len)) or die "fcntl lock: $!\n";
        rewrite($fh);
        $fh->flush or die "flush: $!\n";
        fcntl($fh, F_SETLK, lk(F_UNLCK, 0, $len)) or die "fcntl unlock: $!\n";
        close($fh) or die "close: $!\n";
    } elsif ($method eq 'lockfile') {
        open(my $lfh, ">", $lock) or die "open >$lock: $!\n";
        flock($lfh, LOCK_EX) or die "flock: $!\n";
        open(my $fh, "+<", $file) or die "open +<$file: $!\n";
        my $v = check(do { local $/; <$fh> });
        sysseek($fh, 0, 0) or die "sysseek: $!\n";
        truncate($fh, 0) or die "truncate: $!\n";
        syswrite($fh, ($v + 1) . "\n") or die "syswrite: $!\n";
        $last = $v + 1;
        flock($lfh, LOCK_UN) or die "unlock: $!\n";
        close($fh) or die "close: $!\n";
        close($lfh) or die "close lock: $!\n";
    } elsif ($method eq 'reader') {
        open(my $in, "<", $file) or die "open <$file: $!\n";
        flock($in, LOCK_EX) or die "flock: $!\n";
        my $v = check(do { local $/; <$in> });
        open(my $out, ">", $file) or die "open >$file: $!\n";
        print $out $v + 1, "\n";
        close($out) or die "close: $!\n";
        $last = $v + 1;
        close($in) or die "close: $!\n";
    } else {
        die "unknown method $method\n";
    }
}
print "DONE n=$n last=$last\n";
