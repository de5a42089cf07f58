package main

import (
	"fmt"
	"strconv"
)

// flockCounter is the typical CGI counter: open '+<', flock
// LOCK_EX, read, seek 0, truncate, print, close, which rewrites the file
// in place. With "durable" (the by-hand target) it is the careful form
// without safefs: flock a lock file, read, write a temporary file, fsync
// it, rename it over the counter, fsync the directory, unlock.
const flockCounter = `
use strict;
use Fcntl qw(:flock O_RDONLY O_DIRECTORY);
use IO::Handle;
my ($file, $n, $mode) = @ARGV;
(my $dir = $file) =~ s{/[^/]*$}{};
for (1 .. $n) {
    if ($mode eq "durable") {
        open(my $l, ">>", "$file.lock") or die "open >>$file.lock: $!\n";
        flock($l, LOCK_EX) or die "flock $file.lock: $!\n";
        open(my $f, "<", $file) or die "open <$file: $!\n";
        my $c = <$f>;
        close($f);
        open(my $t, ">", "$file.tmp") or die "open >$file.tmp: $!\n";
        print $t $c + 1, "\n";
        ($t->flush and $t->sync) or die "fsync $file.tmp: $!\n";
        close($t) or die "close $file.tmp: $!\n";
        rename("$file.tmp", $file) or die "rename $file.tmp: $!\n";
        sysopen(my $d, $dir, O_RDONLY | O_DIRECTORY) or die "open $dir: $!\n";
        $d->sync or die "fsync $dir: $!\n";
        close($d);
        close($l);
        next;
    }
    open(my $f, "+<", $file) or die "open +<$file: $!\n";
    flock($f, LOCK_EX) or die "flock $file: $!\n";
    my $c = <$f>;
    seek($f, 0, 0) or die "seek $file: $!\n";
    truncate($f, 0) or die "truncate $file: $!\n";
    print $f $c + 1, "\n";
    close($f) or die "close $file: $!\n";
}
`

// lostError is a counter that kept fewer increments than were made.
type lostError struct{ lost int }

func (e lostError) Error() string { return fmt.Sprintf("lost %d", e.lost) }

// flockRun runs the processes at once on one file, checks that the count
// is exact and returns the commits made.
func flockRun(e *env) (float64, error) {
	p := e.path("count")
	mode := "inplace"
	if e.byHand {
		mode = "durable"
	}
	if err := runPerls(e, "flock counter", e.cfg.flockProcs, flockCounter, p, strconv.Itoa(e.cfg.flockRuns), mode); err != nil {
		return 0, err
	}
	want := e.cfg.flockProcs * e.cfg.flockRuns
	return float64(want), checkCount(p, want)
}

// checkCount reads the counter at path and fails with lostError if it
// holds less than want.
func checkCount(path string, want int) error {
	n, err := readCount(path)
	if err != nil {
		return err
	}
	if n < want {
		return lostError{want - n}
	}
	if n > want {
		return fmt.Errorf("%s holds %d, more than the %d increments made", path, n, want)
	}
	return nil
}
