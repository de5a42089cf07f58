#!/usr/bin/perl
# A CGI hit counter kept as many old scripts keep one: open the file, flock
# it, read the number, write it back plus one, close. On a plain directory a
# reader can find the file empty while another request rewrites it (and
# starts again from 0); through safefs every request counts. Its data:
# /var/www/data/counter.txt (edit $file for another directory).
use strict;
use warnings;
use Fcntl qw(:flock O_RDWR O_CREAT);

my $file = '/var/www/data/counter.txt';
sysopen(my $fh, $file, O_RDWR | O_CREAT, 0644) or die "counter.pl: open $file: $!\n";
flock($fh, LOCK_EX) or die "counter.pl: flock $file: $!\n";
my $n = <$fh>;
$n = defined $n && $n =~ /^(\d+)$/ ? $1 : 0;
$n++;
seek($fh, 0, 0) or die "counter.pl: seek $file: $!\n";
truncate($fh, 0) or die "counter.pl: truncate $file: $!\n";
print $fh "$n\n";
close($fh) or die "counter.pl: close $file: $!\n";
print "Content-Type: text/plain\r\n\r\n$n\n";
