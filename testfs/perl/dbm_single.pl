#!/usr/bin/perl
# One process creates a DBM database, updates it and reads it back, each
# step a tie of its own:
#
#   dbm_single.pl MODULE FILE
#
# MODULE as in dbm_lib.pl. Stores N keys (values of 1 to 250 bytes, so
# the database spans many pages), then rewrites every even key and
# deletes every third, then checks every key read-only. Anomalies are
# printed one per line; the last line is "DONE keys=K" (the keys left).
use strict;
use warnings;
use FindBin;
require "$FindBin::Bin/dbm_lib.pl";

my ($module, $file) = @ARGV;
die "usage: $0 MODULE FILE\n" unless defined $file;
dbm_load($module);
$| = 1;
my $n = 500;
my %want;
my %h;

dbm_tie(\%h, $module, $file, 1, 0) or die "create: tie $file: $!\n";
for my $i (0 .. $n - 1) {
    $h{ sprintf('k%04d', $i) } = $want{ sprintf('k%04d', $i) } = "v$i," x ($i % 50 + 1);
}
dbm_untie(\%h, $module);

dbm_tie(\%h, $module, $file, 1, 0) or die "update: tie $file: $!\n";
for my $i (0 .. $n - 1) {
    my $k = sprintf('k%04d', $i);
    my $v = $h{$k} // 'none';
    print "before update: $k holds '", substr($v, 0, 20), "'\n" if $v ne $want{$k};
    if ($i % 3 == 0) {
        delete $h{$k};
        delete $want{$k};
    } elsif ($i % 2 == 0) {
        $h{$k} = $want{$k} = "u$i";
    }
}
dbm_untie(\%h, $module);

dbm_tie(\%h, $module, $file, 0, 0) or die "read: tie $file: $!\n";
for my $k (sort keys %want) {
    my $v = $h{$k} // 'none';
    print "read back: $k holds '", substr($v, 0, 20), "'\n" if $v ne $want{$k};
}
my @extra = grep { !exists $want{$_} } keys %h;
print "read back: deleted key $_ is there\n" for sort @extra;
my $keys = keys %h;
dbm_untie(\%h, $module);
print "DONE keys=$keys\n";
