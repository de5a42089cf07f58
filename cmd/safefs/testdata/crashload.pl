#!/usr/bin/perl
# A concurrent workload for the crash tests: CGI-style counters, log
# appenders and whole-file rewriters, all working through a safefs mount.
#
#   crashload.pl setup DIR C A L R
#   crashload.pl run DIR TAG SECONDS C A L R
#
# C counters (files counterN, two workers each): open +<, flock LOCK_EX,
#   read the count, truncate, write count+1, close.
# A appenders (ids TAG-aN) over L logs (files logN, appender N writes to
#   log N%L): open >>, write one entry of 3 lines "ID s=SEQ l=K/3 ---...",
#   one write(2) per line, close. SEQ counts from 1.
# R rewriters (files rwN): open >, write a version of 16 chunks of 4096
#   bytes "TAG ver=VVVVVV chunk=JJJ " filled with one letter, then the line
#   "SUM TAG VVVVVV MD5" (md5 of the chunks), one write(2) per chunk, close.
#   VER counts from 1.
#
# setup creates the counters ("0\n"), the logs (empty) and the rewriters'
# files (TAG "setup", version 0).
#
# Each worker prints, once close() has returned success:
#   ACK counter FILE VALUE INO   (INO: st_ino of the handle, through the mount)
#   ACK append LOG ID SEQ
#   ACK rewrite FILE TAG VER
# A counter read that is not a whole number is printed as "BAD ..."; a
# failed system call ends the worker with "ERR WORKER ERRNO MESSAGE".
# Workers stop after SECONDS, at their first error, or when the master
# goes away. The master waits for them all and prints "DONE"; on SIGTERM
# it kills its workers first.
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);
use Fcntl qw(:flock SEEK_SET);
use POSIX ();
use Time::HiRes qw(time);

$| = 1;
my $mode = shift @ARGV // '';
my ($dir, $tag, $seconds);
if ($mode eq 'setup') {
    $dir = shift @ARGV;
} elsif ($mode eq 'run') {
    ($dir, $tag, $seconds) = splice(@ARGV, 0, 3);
} else {
    die "usage: $0 setup DIR C A L R | run DIR TAG SECONDS C A L R\n";
}
my ($nc, $na, $nl, $nr) = @ARGV;
die "missing counts\n" unless defined $nr;
chdir($dir) or die "chdir $dir: $!\n";

sub version_bytes {
    my ($tag, $ver) = @_;
    my $body = '';
    for my $j (0 .. 15) {
        my $head = sprintf("%s ver=%06d chunk=%03d ", $tag, $ver, $j);
        my $fill = chr(ord('a') + ($ver + $j) % 26);
        $body .= $head . ($fill x (4096 - length($head) - 1)) . "\n";
    }
    return ($body, sprintf("SUM %s %06d %s\n", $tag, $ver, md5_hex($body)));
}

if ($mode eq 'setup') {
    for my $i (0 .. $nc - 1) {
        open(my $fh, '>', "counter$i") or die "counter$i: $!\n";
        print $fh "0\n";
        close($fh) or die "close counter$i: $!\n";
    }
    for my $i (0 .. $nl - 1) {
        open(my $fh, '>', "log$i") or die "log$i: $!\n";
        close($fh) or die "close log$i: $!\n";
    }
    for my $i (0 .. $nr - 1) {
        my ($body, $sum) = version_bytes('setup', 0);
        open(my $fh, '>', "rw$i") or die "rw$i: $!\n";
        print $fh $body, $sum;
        close($fh) or die "close rw$i: $!\n";
    }
    print "DONE\n";
    exit 0;
}

my $master = $$;
my $end = time() + $seconds;
my $who = 'master';

sub fail {
    my ($what) = @_;
    printf "ERR %s %d %s: %s\n", $who, $! + 0, $what, $!;
    POSIX::_exit(1);
}

sub going { return time() < $end && getppid() == $master }

sub counter {
    my ($file) = @_;
    while (going()) {
        open(my $fh, '+<', $file) or fail("open $file");
        flock($fh, LOCK_EX) or fail("flock $file");
        my $data = '';
        while (1) {
            my $n = sysread($fh, $data, 4096, length($data));
            fail("read $file") unless defined $n;
            last if $n == 0;
        }
        if ($data !~ /\A(\d+)\n\z/) {
            (my $s = $data) =~ s/\n/\\n/g;
            print "BAD counter $file read '$s'\n";
            POSIX::_exit(1);
        }
        my $v = $1 + 1;
        truncate($fh, 0) or fail("truncate $file");
        sysseek($fh, 0, SEEK_SET) or fail("seek $file");
        defined(syswrite($fh, "$v\n")) or fail("write $file");
        my $ino = (stat($fh))[1] // 0;
        close($fh) or fail("close $file");
        print "ACK counter $file $v $ino\n";
    }
}

sub appender {
    my ($log, $id) = @_;
    for (my $seq = 1; going(); $seq++) {
        open(my $fh, '>>', $log) or fail("open $log");
        for my $k (1 .. 3) {
            defined(syswrite($fh, "$id s=$seq l=$k/3 " . ('-' x 40) . "\n")) or fail("write $log");
        }
        close($fh) or fail("close $log");
        print "ACK append $log $id $seq\n";
    }
}

sub rewriter {
    my ($file) = @_;
    for (my $ver = 1; going(); $ver++) {
        my ($body, $sum) = version_bytes($tag, $ver);
        open(my $fh, '>', $file) or fail("open $file");
        for (my $off = 0; $off < length($body); $off += 4096) {
            defined(syswrite($fh, substr($body, $off, 4096))) or fail("write $file");
        }
        defined(syswrite($fh, $sum)) or fail("write $file");
        close($fh) or fail("close $file");
        print "ACK rewrite $file $tag $ver\n";
    }
}

my @jobs;
for my $i (0 .. $nc - 1) {
    push @jobs, ["counter$i/w$_", sub { counter("counter$i") }] for 0 .. 1;
}
for my $i (0 .. $na - 1) {
    my $log = 'log' . ($i % $nl);
    push @jobs, ["$tag-a$i", sub { appender($log, "$tag-a$i") }];
}
for my $i (0 .. $nr - 1) {
    push @jobs, ["rw$i", sub { rewriter("rw$i") }];
}

my %kids;
$SIG{TERM} = $SIG{INT} = sub {
    kill 'KILL', keys %kids;
    POSIX::_exit(2);
};
for my $job (@jobs) {
    my $pid = fork();
    die "fork: $!\n" unless defined $pid;
    if ($pid == 0) {
        $SIG{TERM} = $SIG{INT} = 'DEFAULT';
        $who = $job->[0];
        $job->[1]->();
        POSIX::_exit(0);
    }
    $kids{$pid} = 1;
}
while (%kids) {
    my $pid = waitpid(-1, 0);
    last if $pid <= 0;
    delete $kids{$pid};
}
print "DONE\n";
exit 0;
