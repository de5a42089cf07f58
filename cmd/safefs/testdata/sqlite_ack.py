"""SQLite counter transactions that acknowledge each commit, for the
daemon crash test.

    python3 sqlite_ack.py DB MODE SYNC keep|per N

Each of the N transactions is BEGIN IMMEDIATE, read the counter, write it
plus one, COMMIT, on a connection kept open or opened for it; after each COMMIT returns, "c V" (V: the value it
committed) is printed and flushed. SQLITE_BUSY begins again, unless the
mount is gone (SQLite takes a failed lock on the -shm file for a busy
one); any other error ends the script with a traceback.
"""
import os
import sqlite3
import sys
import time

path, mode, sync, keep, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "keep", int(sys.argv[5])


def busy(e):
    return "locked" in str(e) or "busy" in str(e)


def retrying(fn):
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as e:
            if not busy(e):
                raise
            os.stat(path)  # the mount gone: OSError ENOTCONN
            time.sleep(0.01)


def connect():
    c = sqlite3.connect(path, timeout=5, isolation_level=None)
    c.execute("PRAGMA journal_mode=%s" % mode).fetchall()
    c.execute("PRAGMA synchronous=%s" % sync)
    return c


def transaction(c, fn):
    def run():
        try:
            c.execute("BEGIN IMMEDIATE")
            r = fn()
            c.execute("COMMIT")
            return r
        except sqlite3.OperationalError:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
    return retrying(run)


def create():
    c.execute("CREATE TABLE IF NOT EXISTS t(v INTEGER)")
    c.execute("INSERT INTO t SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM t)")


def increment():
    v = c.execute("SELECT v FROM t").fetchone()[0] + 1
    c.execute("UPDATE t SET v=?", (v,))
    return v


c = retrying(connect)
transaction(c, create)
for _ in range(n):
    if not keep:
        c.close()
        c = retrying(connect)
    print("c", transaction(c, increment), flush=True)
print("DONE", flush=True)
