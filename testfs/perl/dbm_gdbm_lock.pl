#!/usr/bin/perl
# gdbm's own lock on its database (no flock by the script): one writer,
# or any number of readers.
#
#   dbm_gdbm_lock.pl hold FILE   open FILE as writer (creating it), store
#                                k=held, print "HELD", wait for standard
#                                input to close, untie, print "RELEASED"
#   dbm_gdbm_lock.pl try FILE    try to open FILE as writer, then as
#                                reader, and print one line for each:
#                                "writer: ok k=VALUE" or
#                                "writer: fails: GDBM_ERROR errno ERRNO"
use strict;
use warnings;
use GDBM_File;

my ($what, $file) = @ARGV;
die "usage: $0 hold|try FILE\n" unless defined $file;
$| = 1;

if ($what eq 'hold') {
    tie(my %h, 'GDBM_File', $file, GDBM_WRCREAT, 0644) or die "hold: tie $file: $GDBM_File::gdbm_errno ($!)\n";
    $h{k} = 'held';
    print "HELD\n";
    1 while <STDIN>;
    untie %h;
    print "RELEASED\n";
    exit 0;
}
die "usage: $0 hold|try FILE\n" unless $what eq 'try';
for my $mode ([writer => GDBM_WRITER], [reader => GDBM_READER]) {
    my ($name, $flags) = @$mode;
    $! = 0;
    if (tie(my %h, 'GDBM_File', $file, $flags, 0644)) {
        print "$name: ok k=", $h{k} // 'none', "\n";
        untie %h;
    } else {
        # The errno's name, not its text: the same on any locale.
        my ($errno) = grep { $!{$_} } sort keys %!;
        print "$name: fails: $GDBM_File::gdbm_errno errno ", $errno // 'none', "\n";
    }
}
