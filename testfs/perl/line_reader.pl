#!/usr/bin/perl
# A reader of a log that long-lived appenders (long_appender.pl) write:
# it polls the file until STOPFILE exists, each time opening it again
# and reading what was added since its last read, which must be whole
# lines, each one line of an appender, whole.
#
#   line_reader.pl FILE STOPFILE
#
# Anomalies are printed one per line (TORN, BADLINE, SHRUNK); the last
# line is "DONE reads=R lines=L".
use strict;
use warnings;
use Time::HiRes qw(usleep);

my ($file, $stop) = @ARGV;
die "usage: $0 FILE STOPFILE\n" unless defined $stop;
$| = 1;

my ($off, $reads, $lines, $bad) = (0, 0, 0, 0);
sub bad { print "$_[0]\n" if $bad++ < 20 }
while (1) {
    my $last = -e $stop;
    if (open(my $in, '<', $file)) {
        binmode($in);
        my $size = -s $in;
        if ($size < $off) { bad("SHRUNK from $off to $size") }
        seek($in, $off, 0);
        my $data = do { local $/; <$in> };
        close($in);
        $reads++;
        $data = '' unless defined $data;
        if (length($data) > 0) {
            if (substr($data, -1) ne "\n") {
                my $cut = rindex($data, "\n") + 1;
                bad("TORN at " . ($off + $cut) . ": " . substr($data, $cut, 60));
                $data = substr($data, 0, $cut);
            }
            for my $l (split /\n/, $data) {
                $lines++;
                next if $l !~ /^id=/;    # the file's first, older lines
                if ($l !~ /^id=\d+ req=(\d+) pad=(x*) end$/) {
                    bad("BADLINE " . substr($l, 0, 60));
                    next;
                }
                my $want = $1 % 17 == 0 ? 20000 : ($1 * 37) % 300 + 10;
                bad("BADLINE pad " . length($2) . " want $want: " . substr($l, 0, 40)) if length($2) != $want;
            }
            $off += length($data);
        }
    }
    last if $last;
    usleep(20_000);
}
print "DONE reads=$reads lines=$lines\n";
