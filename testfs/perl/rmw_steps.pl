#!/usr/bin/perl
# Runs steps in order, to set up the interleavings of the read-modify-
# write session tests. Each argument is one step:
#
#   hold:FILE     open FILE for reading, read it, keep it open
#   read:FILE     open FILE for reading, read it, close it
#   close:FILE    close the FILE a hold: step keeps open
#   incr:FILE     read FILE (a count), close, rewrite it with count+1
#   forkincr:FILE fork; the child does incr:FILE; wait for it
#   flock:PATH    open PATH (created) and flock LOCK_EX, keep it
#   touch:PATH    create PATH (a signal to the test)
#   await:PATH    wait until PATH exists
#   sleep:SECS    sleep
#
# Prints "step N done" after each step (unbuffered), then "DONE".
use strict;
use warnings;
use Fcntl qw(:flock);
use Time::HiRes qw(usleep sleep);

$| = 1;
my %keep;

sub incr {
    my ($file) = @_;
    open(my $in, "<$file") or die "open <$file: $!\n";
    my $data = do { local $/; <$in> };
    close($in);
    my $v = ($data // '') =~ /\A(\d+)\n\z/ ? $1 : die "bad count in $file\n";
    open(my $out, ">$file") or die "open >$file: $!\n";
    print $out $v + 1, "\n";
    close($out) or die "close $file: $!\n";
}

my $i = 0;
for my $step (@ARGV) {
    my ($op, $arg) = split /:/, $step, 2;
    if ($op eq 'hold') {
        open(my $fh, "<$arg") or die "open <$arg: $!\n";
        my $data = do { local $/; <$fh> };
        $keep{"hold $arg"} = $fh;
    } elsif ($op eq 'close') {
        my $fh = delete $keep{"hold $arg"} // die "close $arg: not held\n";
        close($fh);
    } elsif ($op eq 'read') {
        open(my $fh, "<$arg") or die "open <$arg: $!\n";
        my $data = do { local $/; <$fh> };
        close($fh);
    } elsif ($op eq 'incr') {
        incr($arg);
    } elsif ($op eq 'forkincr') {
        my $pid = fork() // die "fork: $!\n";
        if ($pid == 0) { incr($arg); exit 0 }
        waitpid($pid, 0);
        die "child failed\n" if $?;
    } elsif ($op eq 'flock') {
        open(my $fh, ">>$arg") or die "open >>$arg: $!\n";
        flock($fh, LOCK_EX) or die "flock $arg: $!\n";
        $keep{"flock $arg"} = $fh;
    } elsif ($op eq 'touch') {
        open(my $fh, ">$arg") or die "touch $arg: $!\n";
        close($fh);
    } elsif ($op eq 'await') {
        usleep(10000) until -e $arg;
    } elsif ($op eq 'sleep') {
        sleep($arg);
    } else {
        die "unknown step $step\n";
    }
    $i++;
    print "step $i done\n";
}
print "DONE\n";
