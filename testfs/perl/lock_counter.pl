#!/usr/bin/perl
# A CGI counter protected by one of the home-made locks of old scripts.
#
#   lock_counter.pl METHOD FILE N LOCK
#
# METHOD is one of
#   flock      open +<, flock LOCK_EX, read, seek, truncate, print, close
#   fcntl      same with an fcntl F_SETLKW write lock (struct flock by hand)
#   flockfile  open >LOCK, flock it, then the naive read and rewrite of FILE
#   mkdir      mkdir LOCK succeeds = locked; rmdir to unlock
#   symlink    symlink FILE, LOCK succeeds = locked; unlink to unlock
#   link       link a private temp file to LOCK; nlink 2 = locked
#   excl       sysopen LOCK O_CREAT|O_EXCL succeeds = locked; unlink
#   rename     rename the token file LOCK to LOCK.pid = locked; rename back
#   renamedata rename FILE itself to FILE.pid, rewrite it there, rename back
#
# Runs N increments. Every read must be a well-formed count not below the
# count this process last wrote. Anomalies are printed one per line; the
# last line is "DONE n=N last=L".
use strict;
use warnings;
use Fcntl qw(:flock F_SETLKW F_WRLCK F_UNLCK SEEK_SET O_CREAT O_EXCL O_WRONLY);
use Time::HiRes qw(usleep);

my ($method, $file, $n, $lock) = @ARGV;
die "usage: $0 METHOD FILE N LOCK\n" unless defined $lock;
$| = 1;
my $last = 0;    # the count this process last wrote

# check parses a count read from the file.
sub check {
    my ($data) = @_;
    $data = '' unless defined $data;
    if ($data !~ /\A(\d+)\n\z/) {
        (my $s = $data) =~ s/\n/\\n/g;
        print $data eq '' ? "EMPTY\n" : "TORN '$s'\n";
        return undef;
    }
    my $v = $1;
    print "STALE read $v after writing $last\n" if $v < $last;
    return $v;
}

# naive is the unlocked read and rewrite, run under a lock.
sub naive {
    my ($path) = @_;
    open(IN, "<$path") or die "open <$path: $!\n";
    my $data = do { local $/; <IN> };
    close(IN);
    my $v = check($data);
    $v = $last unless defined $v;
    open(OUT, ">$path") or die "open >$path: $!\n";
    print OUT $v + 1, "\n";
    close(OUT) or die "close $path: $!\n";
    $last = $v + 1;
}

# inplace is the read and rewrite through one +< handle holding a lock.
sub inplace {
    my ($fh) = @_;
    my $data = do { local $/; <$fh> };
    my $v = check($data);
    $v = $last unless defined $v;
    seek($fh, 0, 0) or die "seek: $!\n";
    truncate($fh, 0) or die "truncate: $!\n";
    print $fh $v + 1, "\n";
    $last = $v + 1;
}

sub pause { usleep(2000 + int(rand(8000))) }

my $tmp = "$lock.$$.tmp";
if ($method eq 'link') {
    open(T, ">$tmp") or die "open $tmp: $!\n";
    close(T);
}

for my $i (1 .. $n) {
    if ($method eq 'flock') {
        open(my $fh, "+<$file") or die "open +<$file: $!\n";
        flock($fh, LOCK_EX) or die "flock: $!\n";
        inplace($fh);
        close($fh) or die "close: $!\n";
    } elsif ($method eq 'fcntl') {
        open(my $fh, "+<$file") or die "open +<$file: $!\n";
        # struct flock on x86_64 linux: short type, short whence, (pad),
        # off_t start, off_t len, pid_t pid, (pad).
        my $fl = pack("s s x4 q q i x4", F_WRLCK, SEEK_SET, 0, 0, 0);
        fcntl($fh, F_SETLKW, $fl) or die "fcntl F_SETLKW: $!\n";
        inplace($fh);
        close($fh) or die "close: $!\n";    # releases the lock
    } elsif ($method eq 'flockfile') {
        open(LOCK, ">$lock") or die "open >$lock: $!\n";
        flock(LOCK, LOCK_EX) or die "flock: $!\n";
        naive($file);
        close(LOCK);
    } elsif ($method eq 'mkdir') {
        pause() until mkdir($lock, 0755);
        naive($file);
        rmdir($lock) or die "rmdir $lock: $!\n";
    } elsif ($method eq 'symlink') {
        pause() until symlink($file, $lock);
        naive($file);
        unlink($lock) or die "unlink $lock: $!\n";
    } elsif ($method eq 'link') {
        # The NFS-safe form: trust the link count, not link's result.
        until (link($tmp, $lock) || (stat($tmp))[3] == 2) { pause() }
        print "NLINK ", (stat($tmp))[3], "\n" if (stat($tmp))[3] != 2;
        naive($file);
        unlink($lock) or die "unlink $lock: $!\n";
    } elsif ($method eq 'excl') {
        pause() until sysopen(L, $lock, O_WRONLY | O_CREAT | O_EXCL, 0644);
        close(L);
        naive($file);
        unlink($lock) or die "unlink $lock: $!\n";
    } elsif ($method eq 'rename') {
        pause() until rename($lock, "$lock.$$");
        naive($file);
        rename("$lock.$$", $lock) or die "rename back: $!\n";
    } elsif ($method eq 'renamedata') {
        pause() until rename($file, "$file.$$");
        naive("$file.$$");
        rename("$file.$$", $file) or die "rename back: $!\n";
    } else {
        die "unknown method $method\n";
    }
}
unlink($tmp) if $method eq 'link';
print "DONE n=$n last=$last\n";
