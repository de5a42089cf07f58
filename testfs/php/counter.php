<?php
// Counters as PHP CGI scripts keep them in a file.
//
//   php counter.php METHOD FILE N
//
// METHOD is one of
//   naive   file_get_contents, add one, file_put_contents: no lock
//   lockex  the same with file_put_contents(..., LOCK_EX), which locks
//           only the write: the read is not under the lock
//   flock   fopen('c+'), flock(LOCK_EX), read, ftruncate, rewind,
//           fwrite, fclose (the close unlocks)
//
// Runs N requests in a row. A read must never see an empty file, a torn
// value, or 0 again once the counter was above 0. Anomalies are printed
// one per line; the last line is "DONE n=N".
[$_, $method, $file, $n] = $argv;
$positive = false;

// count_of parses what a request read; null (and an anomaly) if torn.
function count_of($data) {
    global $positive;
    if ($data === '') {
        echo "EMPTY\n";
        return 0;
    }
    if (!preg_match('/\A(\d+)\n\z/', $data, $m)) {
        echo "TORN '" . str_replace("\n", '\n', $data) . "'\n";
        return null;
    }
    if ((int)$m[1] === 0 && $positive) echo "ZERO again\n";
    return (int)$m[1];
}

function request($method, $file) {
    if ($method === 'flock') {
        $fp = fopen($file, 'c+') or die("fopen failed\n");
        flock($fp, LOCK_EX) or die("flock failed\n");
        $v = count_of(stream_get_contents($fp));
        if ($v === null) return false;
        ftruncate($fp, 0) or die("ftruncate failed\n");
        rewind($fp);
        fwrite($fp, ($v + 1) . "\n") or die("fwrite failed\n");
        fclose($fp) or die("fclose failed\n");
        return true;
    }
    $data = file_get_contents($file);
    if ($data === false) die("read failed\n");
    $v = count_of($data);
    if ($v === null) return false;
    $flags = $method === 'lockex' ? LOCK_EX : 0;
    file_put_contents($file, ($v + 1) . "\n", $flags) !== false or die("write failed\n");
    return true;
}

if (!in_array($method, ['naive', 'lockex', 'flock'], true)) die("unknown method $method\n");
for ($i = 0; $i < $n; $i++) {
    if (request($method, $file)) $positive = true;
}
echo "DONE n=$n\n";
