"""Read-modify-write from the threads of one process.

    python3 rmw_threads.py counter FILE THREADS ROUNDS
        Each thread, ROUNDS times: n = int(open(FILE).read()), then
        open(FILE, 'w').write(n + 1). No lock.
    python3 rmw_threads.py family FILE THREADS ROUNDS
        The same, with a child process between the read and the write
        (cat FILE, as a shell script would), whose output must be what
        the thread read: "CHILD saw X, read Y" otherwise.
    python3 rmw_threads.py handoff FILE
        Thread A opens FILE and reads it, keeps it open and hands the
        count to thread B, which writes count + 1; A closes FILE after B
        is done.
    python3 rmw_threads.py exit FILE
        Thread A opens FILE, reads it and keeps it open (in a global);
        then thread B starts one increment and the program prints
        "STARTED B" and reads a line from standard input; then A's thread
        ends, FILE still open. B must finish.

A read that is not one number is printed ("TORN ..."); the last line is
"DONE rounds=N" (the increments written).
"""
import subprocess
import sys
import threading

mode, path = sys.argv[1], sys.argv[2]
done = []
lock = threading.Lock()


def read():
    data = open(path).read()
    if not data.rstrip("\n").isdigit():
        print("TORN %r" % data, flush=True)
        return None
    return int(data)


def write(n):
    open(path, "w").write("%d\n" % n)
    with lock:
        done.append(1)


def rounds(k, child):
    for _ in range(k):
        n = read()
        if n is None:
            continue
        if child:
            out = subprocess.run(["cat", path], capture_output=True, text=True).stdout
            if out != "%d\n" % n:
                print("CHILD saw %r, read %d" % (out, n), flush=True)
        write(n + 1)


def run(threads):
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if mode in ("counter", "family"):
    k, n = int(sys.argv[3]), int(sys.argv[4])
    run([threading.Thread(target=rounds, args=(n, mode == "family")) for _ in range(k)])
elif mode == "handoff":
    box = []
    got, wrote = threading.Event(), threading.Event()

    def a():
        f = open(path)
        box.append(int(f.read()))
        got.set()
        wrote.wait()
        f.close()

    def b():
        got.wait()
        write(box[0] + 1)
        wrote.set()

    run([threading.Thread(target=a), threading.Thread(target=b)])
elif mode == "exit":
    kept = []
    held, go = threading.Event(), threading.Event()

    def a():
        f = open(path)
        f.read()
        kept.append(f)
        held.set()
        go.wait()

    ta = threading.Thread(target=a)
    ta.start()
    held.wait()
    tb = threading.Thread(target=rounds, args=(1, False))
    tb.start()
    print("STARTED B", flush=True)
    sys.stdin.readline()
    go.set()
    ta.join()
    tb.join()
else:
    sys.exit("unknown mode " + mode)
print("DONE rounds=%d" % len(done), flush=True)
