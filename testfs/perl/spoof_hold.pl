#!/usr/bin/perl
# Holds FILE open for reading under a command line of its choosing, as
# a process would to pass for another program:
#
#   spoof_hold.pl ARGV0 FILE
#
# sets $0 to ARGV0 (/proc/PID/cmdline becomes that one string), opens
# FILE for reading, reads it, prints "HOLD" and keeps it open until
# stdin ends; then "CLOSED".
use strict;
use warnings;

$| = 1;
my ($argv0, $file) = @ARGV;
$0 = $argv0;
open(my $fh, "<", $file) or die "open <$file: $!\n";
my $data = do { local $/; <$fh> };
print "HOLD\n";
1 while <STDIN>;
close($fh);
print "CLOSED\n";
