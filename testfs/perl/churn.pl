#!/usr/bin/perl
# churn.pl DIR ROUNDS SEED FILES: a busy site's churn over DIR/f1..fFILES. Each
# round, for each file at random: rewrite it whole or read it, rewrite
# it in place under flock (a counter), rename it to g<i>, remove g<i> or
# it; append a line to DIR/log. Pauses 1.1 s between rounds, past the
# mount's 1 s entry timeout, so names are looked up again. Prints DONE.
use strict;
use warnings;
use Fcntl qw(:flock);

my ($dir, $rounds, $seed, $files) = @ARGV;
srand($seed);
for my $r (1 .. $rounds) {
    for my $i (1 .. $files) {
        my $f = "$dir/f$i";
        if (rand() < 0.5) {
            open(my $h, '>', $f) or die "$f: $!";
            print $h 'x' x (1000 + int(rand(200000)));
            close($h) or die "close $f: $!";
        } elsif (open(my $h, '<', $f)) {
            local $/;
            my $data = <$h>;
            close($h);
        }
        if (rand() < 0.2 && open(my $h, '+<', $f)) {
            flock($h, LOCK_EX) or die "flock $f: $!";
            my $n = <$h>;
            seek($h, 0, 0);
            truncate($h, 0);
            print $h "n\n";
            close($h) or die "close $f: $!";
        }
        rename($f, "$dir/g$i") if rand() < 0.1;
        unlink("$dir/g$i") if rand() < 0.1;
        unlink($f) if rand() < 0.05;
        open(my $l, '>>', "$dir/log") or die "log: $!";
        print $l "line $r $i\n";
        close($l) or die "close log: $!";
    }
    select(undef, undef, undef, 1.1);
}
print "DONE\n";
