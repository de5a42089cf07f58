"""A SQLite writer killed in the middle of a transaction, as a CGI
request is at its time limit.

    python3 sqlite_killed.py DB MODE setup|kill|check

setup   makes the database in journal mode MODE: a counter t(v) at 0 and
        a table big of 200 rows of 1000 bytes
kill    begins a transaction, increments the counter, rewrites every row
        of big with a cache of 10 pages, so that SQLite writes pages
        before the commit (to the database after journaling them, or to
        the write-ahead log), prints "spilled", and kills itself with
        SIGKILL before COMMIT
check   opens the database, which recovers it as SQLite does, and prints
        "v=V big=MD5 integrity=RESULT"
"""
import hashlib
import os
import signal
import sqlite3
import sys

path, mode, op = sys.argv[1], sys.argv[2], sys.argv[3]
c = sqlite3.connect(path, timeout=60, isolation_level=None)
c.execute("PRAGMA journal_mode=%s" % mode).fetchall()


def big_md5():
    h = hashlib.md5()
    for (x,) in c.execute("SELECT x FROM big ORDER BY rowid"):
        h.update(x)
    return h.hexdigest()


if op == "setup":
    c.execute("BEGIN IMMEDIATE")
    c.execute("CREATE TABLE t(v INTEGER)")
    c.execute("INSERT INTO t VALUES(0)")
    c.execute("CREATE TABLE big(x BLOB)")
    c.executemany("INSERT INTO big VALUES(randomblob(1000))", [()] * 200)
    c.execute("COMMIT")
elif op == "kill":
    c.execute("PRAGMA cache_size=10")
    c.execute("BEGIN IMMEDIATE")
    c.execute("UPDATE t SET v=v+1")
    c.execute("UPDATE big SET x=randomblob(1000)")
    print("spilled", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
elif op == "check":
    v = c.execute("SELECT v FROM t").fetchone()[0]
    ok = ";".join(r[0] for r in c.execute("PRAGMA integrity_check"))
    print("v=%d big=%s integrity=%s" % (v, big_md5(), ok))
else:
    sys.exit("unknown op " + op)
