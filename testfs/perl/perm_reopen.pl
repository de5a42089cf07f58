#!/usr/bin/perl
# Holds FILE open for reading and, at each line on stdin, does one step
# through that descriptor, answering one line:
#
#   perm_reopen.pl FILE
#
#   stat     fstat it: "MODE <octal permission bits>"
#   reopen   open /proc/self/fd/N for reading, then for writing (each
#            closed at once): "READ OK|ERR <errno> WRITE OK|ERR <errno>"
#
# Prints "OPEN" once FILE is open; ends at the end of stdin.
use strict;
use warnings;
use Fcntl;

$| = 1;
my ($file) = @ARGV;
open(my $fh, "<", $file) or die "open <$file: $!\n";
my $fd = fileno($fh);
print "OPEN\n";
while (my $l = <STDIN>) {
    chomp $l;
    if ($l eq 'stat') {
        my @s = stat($fh) or die "fstat: $!\n";
        printf "MODE %o\n", $s[2] & 07777;
    } elsif ($l eq 'reopen') {
        my @r;
        for my $mode (O_RDONLY, O_WRONLY) {
            my $g;
            if (sysopen($g, "/proc/self/fd/$fd", $mode)) {
                close($g);
                push @r, "OK";
            } else {
                push @r, "ERR " . ($! + 0);
            }
        }
        print "READ $r[0] WRITE $r[1]\n";
    } else {
        die "unknown step $l\n";
    }
}
