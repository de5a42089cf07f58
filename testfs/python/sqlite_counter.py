"""A counter in a SQLite database, as CGI and FastCGI scripts keep one.

    python3 sqlite_counter.py DB MODE SYNC keep|per N

Each of the N transactions is BEGIN IMMEDIATE, read the counter, write
it plus one, COMMIT, with journal_mode=MODE and synchronous=SYNC, on a
connection opened for it ("per": a CGI request) or kept open ("keep": a
FastCGI process). The first transaction creates the table if need be,
so that processes started together create the database together.
SQLITE_BUSY is met by beginning again, the connection's set-up too:
two connections that switch a new database to WAL at once may get it
without waiting (one holds a read lock), on any file system.

Anomalies are printed one per line; the last line is
"DONE n=N retries=R" (R: transactions begun again after SQLITE_BUSY).
"""
import sqlite3
import sys
import time

path, mode, sync, keep, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "keep", int(sys.argv[5])
retries = 0
last = -1


def connect():
    c = sqlite3.connect(path, timeout=60, isolation_level=None)
    c.execute("PRAGMA journal_mode=%s" % mode).fetchall()
    c.execute("PRAGMA synchronous=%s" % sync)
    return c


def busy(e):
    return "locked" in str(e) or "busy" in str(e)


def connect_retrying():
    global retries
    for _ in range(100):
        try:
            return connect()
        except sqlite3.OperationalError as e:
            if not busy(e):
                raise
            retries += 1
            time.sleep(0.01)
    sys.exit("gave up after 100 tries")


def transaction(c, fn):
    global retries
    for _ in range(100):
        try:
            c.execute("BEGIN IMMEDIATE")
            fn(c)
            c.execute("COMMIT")
            return
        except sqlite3.OperationalError as e:
            if not busy(e):
                raise
            retries += 1
            try:
                c.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            time.sleep(0.01)
    sys.exit("gave up after 100 tries")


def create(c):
    c.execute("CREATE TABLE IF NOT EXISTS t(v INTEGER)")
    c.execute("INSERT INTO t SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM t)")


def increment(c):
    global last
    v = c.execute("SELECT v FROM t").fetchone()[0]
    if v < last:
        print("STALE read %d after writing %d" % (v, last))
    c.execute("UPDATE t SET v=?", (v + 1,))
    last = v + 1


conn = connect_retrying()
transaction(conn, create)
for _ in range(n):
    if not keep:
        conn.close()
        conn = connect_retrying()
    transaction(conn, increment)
conn.close()
print("DONE n=%d retries=%d" % (n, retries))
