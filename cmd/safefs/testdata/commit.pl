#!/usr/bin/perl
# One writer that commits a new version of FILE through a safefs mount,
# reporting the result of every step, for the crash and fault tests.
#
#   commit.pl MODE FILE SRC [PAUSES]
#
# MODE is
#   replace  open >FILE (O_TRUNC), write SRC's bytes, close
#   append   open >>FILE (O_APPEND), write SRC's bytes, close
#   update   open +<FILE (no truncation), write SRC's bytes at offset 0, close
# SRC is a plain file (outside the mount) holding the bytes to write.
# PAUSES is a comma-separated list of steps, "write" and/or "close":
# before such a step the script prints "pause STEP" and waits for a line
# on standard input, so that the test can act (attach strace) first.
#
# Each step prints one line: "STEP ok" or "STEP err ERRNO MESSAGE".
# A failed open ends the script; after a failed write it still closes,
# as a careful program would. The exit status is 0 unless the usage is
# wrong: the test judges the printed lines.
use strict;
use warnings;
use Fcntl qw(SEEK_SET);

my ($mode, $file, $src, $pauses) = @ARGV;
die "usage: $0 replace|append|update FILE SRC [PAUSES]\n" unless defined $src;
my %pause = map { $_ => 1 } split /,/, ($pauses // '');
$| = 1;

open(my $in, '<', $src) or die "open $src: $!\n";
binmode($in);
my $data = do { local $/; <$in> };
close($in);

sub report {
    my ($step, $ok) = @_;
    if ($ok) {
        print "$step ok\n";
    } else {
        printf "%s err %d %s\n", $step, $! + 0, $!;
    }
    return $ok;
}

sub pause {
    my ($step) = @_;
    return unless $pause{$step};
    print "pause $step\n";
    my $line = <STDIN>;
    die "no go-ahead for $step\n" unless defined $line;
}

my %how = (replace => '>', append => '>>', update => '+<');
my $how = $how{$mode} or die "unknown mode $mode\n";
my $fh;
report('open', open($fh, $how, $file)) or exit 0;
binmode($fh);

pause('write');
my $ok = 1;
for (my $off = 0; $ok && $off < length($data); ) {
    # syswrite: one write(2) per piece, so an error is seen here and not
    # hidden in a buffer flushed by close.
    my $n = syswrite($fh, $data, 65536, $off);
    if (!defined $n) {
        $ok = 0;
    } else {
        $off += $n;
    }
}
report('write', $ok);

pause('close');
report('close', close($fh));
exit 0;
