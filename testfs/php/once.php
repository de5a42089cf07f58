<?php
// A job that must never run twice at once (a report, a clean-up a CGI
// request starts): fopen(LOCK, 'c') and flock(LOCK_EX|LOCK_NB); the
// process that gets the lock runs the guarded section, the others find
// it held (EWOULDBLOCK) and skip it.
//
//   php once.php try LOCK DIR N
//       N tries in a row. The guarded section makes DIR/inside with
//       fopen('x') (OVERLAP if another is inside), adds one to
//       DIR/count without a lock of its own, and removes DIR/inside.
//       A refusal that is not EWOULDBLOCK is an anomaly. The last line
//       is "DONE ran=R skipped=S".
//   php once.php hold LOCK DIR
//       takes the lock, makes DIR/held, and keeps the lock until
//       DIR/release appears.
[$_, $mode, $lock, $dir] = $argv;

if ($mode === 'hold') {
    $lp = fopen($lock, 'c') or die("fopen lock failed\n");
    flock($lp, LOCK_EX) or die("flock failed\n");
    touch("$dir/held") or die("touch failed\n");
    while (!file_exists("$dir/release")) usleep(10000);
    flock($lp, LOCK_UN);
    fclose($lp);
    echo "DONE\n";
    exit(0);
}

$n = (int)$argv[4];
$ran = $skipped = 0;
for ($i = 0; $i < $n; $i++) {
    $lp = fopen($lock, 'c') or die("fopen lock failed\n");
    if (flock($lp, LOCK_EX | LOCK_NB, $wouldblock)) {
        $in = @fopen("$dir/inside", 'x');
        if ($in === false) echo "OVERLAP\n"; else fclose($in);
        $c = file_get_contents("$dir/count");
        file_put_contents("$dir/count", ((int)$c + 1) . "\n") !== false or die("write failed\n");
        usleep(1000); // the section's own work
        if ($in !== false) unlink("$dir/inside") or die("unlink failed\n");
        flock($lp, LOCK_UN);
        $ran++;
    } else {
        if (!$wouldblock) echo "REFUSED without EWOULDBLOCK\n";
        $skipped++;
    }
    fclose($lp);
}
echo "DONE ran=$ran skipped=$skipped\n";
