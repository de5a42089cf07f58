"""A counter under a script lock released before the file is closed, as
Python scripts do it.

    python3 unlock_counter.py METHOD FILE N LOCK

METHOD is one of
    lockf   fcntl.lockf(LOCK_EX), read, rewrite, flush, lockf(LOCK_UN)
            (lockf(3)'s F_ULOCK: an fcntl F_UNLCK), close
    flock   the same with fcntl.flock
    ofd     the same with an open file description lock (F_OFD_SETLKW,
            then F_OFD_SETLK F_UNLCK)

Anomalies are printed one per line; the last line is "DONE n=N last=L".
"""
import fcntl
import re
import struct
import sys

method, path, n, lock = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
last = 0


def check(data):
    m = re.fullmatch(r"(\d+)\n", data)
    if not m:
        print("EMPTY" if data == "" else "TORN %r" % data)
        return last
    if int(m.group(1)) < last:
        print("STALE read %s after writing %d" % (m.group(1), last))
    return int(m.group(1))


def ofd(f, typ, cmd):
    # struct flock on x86_64 linux; the pid must be 0 for OFD locks.
    fcntl.fcntl(f, cmd, struct.pack("hhxxxxqqixxxx", typ, 0, 0, 0, 0))


for _ in range(n):
    with open(path, "r+") as f:
        if method == "lockf":
            fcntl.lockf(f, fcntl.LOCK_EX)
        elif method == "flock":
            fcntl.flock(f, fcntl.LOCK_EX)
        elif method == "ofd":
            ofd(f, fcntl.F_WRLCK, fcntl.F_OFD_SETLKW)
        else:
            sys.exit("unknown method " + method)
        v = check(f.read())
        f.seek(0)
        f.truncate()
        f.write("%d\n" % (v + 1))
        f.flush()
        last = v + 1
        if method == "lockf":
            fcntl.lockf(f, fcntl.LOCK_UN)
        elif method == "flock":
            fcntl.flock(f, fcntl.LOCK_UN)
        else:
            ofd(f, fcntl.F_UNLCK, fcntl.F_OFD_SETLK)
print("DONE n=%d last=%d" % (n, last))
