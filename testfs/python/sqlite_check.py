"""Prints a SQLite counter database's state: "v=V integrity=RESULT".

    python3 sqlite_check.py DB

Opening it recovers it as SQLite does (a hot journal rolled back, a
write-ahead log replayed).
"""
import sqlite3
import sys

c = sqlite3.connect(sys.argv[1], timeout=60)
v = c.execute("SELECT v FROM t").fetchone()[0]
ok = ";".join(r[0] for r in c.execute("PRAGMA integrity_check"))
print("v=%d integrity=%s" % (v, ok))
