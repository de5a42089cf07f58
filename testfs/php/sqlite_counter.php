<?php
// A counter in a SQLite database through PDO, as PHP scripts keep one.
//
//   php sqlite_counter.php DB MODE SYNC keep|per N
//
// Each of the N transactions is BEGIN IMMEDIATE, read the counter, write
// it plus one, COMMIT, with journal_mode=MODE and synchronous=SYNC, on a
// connection opened for it ("per": a request of mod_php or php-cgi) or
// kept open ("keep": php-fpm's persistent connection). The first
// transaction creates the table if need be. SQLITE_BUSY is met by
// beginning again, the connection's set-up too: two connections that
// switch a new database to WAL at once may get it without waiting (one
// holds a read lock), on any file system.
//
// Anomalies are printed one per line; the last line is
// "DONE n=N retries=R" (R: transactions begun again after SQLITE_BUSY).
[$_, $path, $mode, $sync, $keep, $n] = $argv;
$retries = 0;
$last = -1;

function connect_db() {
    global $path, $mode, $sync;
    $db = new PDO("sqlite:$path", null, null, [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION, PDO::ATTR_TIMEOUT => 60]);
    $db->query("PRAGMA journal_mode=$mode")->fetchAll();
    $db->exec("PRAGMA synchronous=$sync");
    return $db;
}

function connect_retrying() {
    global $retries;
    for ($i = 0; $i < 100; $i++) {
        try {
            return connect_db();
        } catch (PDOException $e) {
            if (!preg_match('/locked|busy/', $e->getMessage())) throw $e;
            $retries++;
            usleep(10000);
        }
    }
    fwrite(STDERR, "gave up after 100 tries\n");
    exit(1);
}

function transaction($db, $fn) {
    global $retries;
    for ($i = 0; $i < 100; $i++) {
        try {
            $db->exec("BEGIN IMMEDIATE");
            $fn($db);
            $db->exec("COMMIT");
            return;
        } catch (PDOException $e) {
            if (!preg_match('/locked|busy/', $e->getMessage())) throw $e;
            $retries++;
            try { $db->exec("ROLLBACK"); } catch (PDOException $e) {}
            usleep(10000);
        }
    }
    fwrite(STDERR, "gave up after 100 tries\n");
    exit(1);
}

function create($db) {
    $db->exec("CREATE TABLE IF NOT EXISTS t(v INTEGER)");
    $db->exec("INSERT INTO t SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM t)");
}

function increment($db) {
    global $last;
    $v = (int)$db->query("SELECT v FROM t")->fetchColumn();
    if ($v < $last) echo "STALE read $v after writing $last\n";
    $db->prepare("UPDATE t SET v=?")->execute([$v + 1]);
    $last = $v + 1;
}

$db = connect_retrying();
transaction($db, 'create');
for ($i = 0; $i < $n; $i++) {
    if ($keep !== "keep") {
        $db = null;
        $db = connect_retrying();
    }
    transaction($db, 'increment');
}
$db = null;
echo "DONE n=$n retries=$retries\n";
