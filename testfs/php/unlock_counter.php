<?php
// A counter under a script lock released before the data file is closed,
// as PHP scripts do it.
//
//   php unlock_counter.php METHOD FILE N LOCK
//
// METHOD is one of
//   manual    the flock example of the PHP manual: fopen('c+'),
//             flock(LOCK_EX), read, ftruncate, rewind, fwrite, fflush,
//             flock(LOCK_UN), fclose
//   lockfile  flock(LOCK_EX) on LOCK, fopen FILE 'c+', read, rewrite,
//             fflush, flock(LOCK_UN) on LOCK, fclose FILE, fclose LOCK
//
// Anomalies are printed one per line; the last line is "DONE n=N last=L".
[$_, $method, $file, $n, $lock] = $argv;
$last = 0;

function check($data) {
    global $last;
    if (!preg_match('/\A(\d+)\n\z/', $data, $m)) {
        echo $data === '' ? "EMPTY\n" : "TORN '" . str_replace("\n", '\n', $data) . "'\n";
        return $last;
    }
    if ((int)$m[1] < $last) echo "STALE read {$m[1]} after writing $last\n";
    return (int)$m[1];
}

function rewrite($fp) {
    global $last;
    $v = check(stream_get_contents($fp));
    ftruncate($fp, 0) or die("ftruncate failed\n");
    rewind($fp);
    fwrite($fp, ($v + 1) . "\n") or die("fwrite failed\n");
    fflush($fp) or die("fflush failed\n");
    $last = $v + 1;
}

for ($i = 0; $i < $n; $i++) {
    if ($method === 'manual') {
        $fp = fopen($file, 'c+') or die("fopen failed\n");
        flock($fp, LOCK_EX) or die("flock failed\n");
        rewrite($fp);
        flock($fp, LOCK_UN) or die("unlock failed\n");
        fclose($fp) or die("fclose failed\n");
    } elseif ($method === 'lockfile') {
        $lp = fopen($lock, 'c') or die("fopen lock failed\n");
        flock($lp, LOCK_EX) or die("flock failed\n");
        $fp = fopen($file, 'c+') or die("fopen failed\n");
        rewrite($fp);
        flock($lp, LOCK_UN) or die("unlock failed\n");
        fclose($fp) or die("fclose failed\n");
        fclose($lp);
    } else {
        die("unknown method $method\n");
    }
}
echo "DONE n=$n last=$last\n";
