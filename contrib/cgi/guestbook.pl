#!/usr/bin/perl
# A CGI guestbook as many were written: append the visitor's entry to one
# file, line by line (autoflush, as log-keeping scripts do), without a lock.
# On a plain directory the lines of entries made at the same time interleave;
# through safefs each entry lands whole, once. Its data:
# /var/www/data/guestbook.txt (edit $file for another directory).
# Sign it: guestbook.pl?name=NAME&text=TEXT
use strict;
use warnings;
use IO::Handle;

my $file = '/var/www/data/guestbook.txt';
my %form;
for my $pair (split /[&;]/, $ENV{QUERY_STRING} // '') {
	my ($key, $value) = split /=/, $pair, 2;
	next unless defined $value;
	$value =~ tr/+/ /;
	$value =~ s/%([0-9A-Fa-f]{2})/chr hex $1/ge;
	$value =~ s/[\x00-\x1f<>&]/ /g;
	$form{$key} = $value;
}
my $name = $form{name} // 'anonymous';
my $text = $form{text} // '';
my $id = sprintf '%d-%d-%06d', time, $$, int rand 1_000_000;

open(my $fh, '>>', $file) or die "guestbook.pl: open $file: $!\n";
$fh->autoflush(1);
print $fh "--- entry $id\n";
print $fh "name: $name\n";
print $fh "date: " . gmtime() . "\n";
print $fh "text: $text\n";
print $fh "--- end $id\n";
close($fh) or die "guestbook.pl: close $file: $!\n";
print "Content-Type: text/plain\r\n\r\nThank you, $name: entry $id.\n";
