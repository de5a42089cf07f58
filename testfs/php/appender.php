<?php
// A guestbook / access log writer as PHP scripts keep one: each request
// opens the file with fopen('a'), writes one entry of several lines,
// each line its own fwrite, and closes it (the format of appender.pl).
//
//   php appender.php FILE ID N LINES
[$_, $file, $id, $n, $lines] = $argv;
for ($seq = 1; $seq <= $n; $seq++) {
    $fp = fopen($file, 'a') or die("fopen failed\n");
    for ($k = 1; $k <= $lines; $k++) {
        fwrite($fp, "w=$id s=$seq l=$k/$lines " . str_repeat('-', 24) . "\n") or die("fwrite failed\n");
    }
    fclose($fp) or die("fclose failed\n");
}
echo "DONE\n";
