#!/usr/bin/perl
# A rewrite whose descriptor is shared: a CGI script that forks a child
# (sendmail, a background job) or dups the handle, while writing.
#
#   fork_writer.pl FILE HOW
#
# Opens FILE with >, writes the first half (128 KiB of 'A'), then by HOW:
#   fork      a child inherits the descriptor and exits normally
#   forkkill  a child inherits the descriptor and is killed by SIGKILL
#   dup       a dup of the descriptor is closed
#   system    system("true"): the child closes the descriptor at exec
# then prints SHARED, waits for a line on stdin, writes the second half
# (128 KiB of 'B'), closes, and prints CLOSED.
use strict;
use warnings;
use POSIX ();

my ($file, $how) = @ARGV;
die "usage: $0 FILE HOW\n" unless defined $how;
$| = 1;

open(OUT, ">$file") or die "open >$file: $!\n";
my $w = syswrite(OUT, "A" x (128 * 1024));
die "write: $!\n" unless $w && $w == 128 * 1024;
if ($how eq 'fork' || $how eq 'forkkill') {
    my $pid = fork();
    die "fork: $!\n" unless defined $pid;
    if ($pid == 0) {
        kill('KILL', $$) if $how eq 'forkkill';
        POSIX::_exit(0);
    }
    waitpid($pid, 0);
} elsif ($how eq 'system') {
    system('true') == 0 or die "system: $?\n";
} elsif ($how eq 'dup') {
    open(DUP, ">&OUT") or die "dup: $!\n";
    close(DUP) or die "close dup: $!\n";
} else {
    die "bad HOW $how\n";
}
print "SHARED\n";
my $go = <STDIN>;
$w = syswrite(OUT, "B" x (128 * 1024));
die "write: $!\n" unless $w && $w == 128 * 1024;
close(OUT) or die "close: $!\n";
print "CLOSED\n";
