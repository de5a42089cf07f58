package fs_test

// Lock waits through a real mount: a commit that cannot have its file's
// lock within lock_timeout fails with ETIMEDOUT, one that finds
// max_waiters commits already waiting fails with EAGAIN at once, and in
// both cases its bytes are kept in rejected/; waiters are served in
// arrival order; a held lock of one file does not delay another file.
//
// How a commit lock is held for as long as the test wants, without any
// hook in the product: a file lease. The test takes a read lease
// (F_SETLEASE F_RDLCK) on the backing file of the current version of A;
// an append commit opens that version for writing under A's lock
// (commitAppend: locate, then reopen O_WRONLY), which the lease holds
// back. The daemon never waits for a lease under a lock (fs/lease.go),
// except with SAFEFS_TEST_LEASE_WAIT set, as here: it then tries again
// until the lease holder gives the lease up (or
// /proc/sys/fs/lease-break-time passes, 45 s by default). So the holder's
// commit owns A's lock exactly until the test releases the lease. The
// test sees the commit arrive there when F_GETLEASE reports the break
// (F_UNLCK). The lease breaks' SIGIO comes to this process, where the Go
// runtime ignores it (no signal.Notify).
//
// A handle opened for writing holds its version open O_RDWR from its
// open (its base), and no read lease can be taken on a file open for
// writing. So every writer of A opens and writes first; then a "pivot"
// commit replaces A with a new version that none of them holds; the
// lease is taken on that one. Until the lease is released this process
// must not stat A through the mount: a stat answers with a pending
// writer's view, which would open the new version for writing.
//
// The commits that wait for A's lock are seen queued in the lock manager
// by their goroutines' stacks (this process is the daemon): so the order
// in which they queue is known, and no assertion depends on timing. The
// waits for events have generous deadlines that only guard against a
// hang.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/journal"
	"github.com/safefs/safefs/testfs"
)

// lkwGuard bounds every wait for an event. It must stay below the
// kernel's lease-break-time, after which the holder's commit goes on by
// itself (lkwFinish checks that it did not).
const lkwGuard = 30 * time.Second

// lkwWriter is a descriptor of the mount, opened O_APPEND and written,
// whose close (the commit) the test starts when it wants.
type lkwWriter struct {
	name string
	f    *os.File
	data []byte
	done chan error // the close's result, once started
	went bool       // close started
}

// lkwAppender opens path O_WRONLY|O_APPEND and writes data: its commit is
// pending until close. Cleanup closes it if the test did not, after
// lkwHold's cleanup (registered later) released the lease.
func lkwAppender(t *testing.T, m *testfs.Mount, path, name string, data []byte) *lkwWriter {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	if _, err := f.Write(data); err != nil {
		f.Close()
		t.Fatalf("%s: write: %v", name, err)
	}
	w := &lkwWriter{name: name, f: f, data: data, done: make(chan error, 1)}
	t.Cleanup(func() {
		if !w.went {
			w.close()
		}
		select {
		case <-w.done:
		case <-time.After(lkwGuard):
			advHung(t, m.Dir, w.name+"'s close")
		}
	})
	return w
}

// close starts the writer's close() in a goroutine.
func (w *lkwWriter) close() {
	w.went = true
	go func() { w.done <- w.f.Close() }()
}

// returned reports whether the close has returned, and its errno.
func (w *lkwWriter) returned() (bool, syscall.Errno) {
	select {
	case err := <-w.done:
		w.done <- err // keep it for the next look
		return true, advErrno(err)
	default:
		return false, 0
	}
}

// wait waits for the close to return and gives its errno.
func (w *lkwWriter) wait(t *testing.T) syscall.Errno {
	t.Helper()
	select {
	case err := <-w.done:
		w.done <- err
		return advErrno(err)
	case <-time.After(lkwGuard):
		t.Fatalf("%s: close() did not return within %v", w.name, lkwGuard)
		return 0
	}
}

// lkwEventually polls cond until it holds; the deadline only guards
// against a hang.
func lkwEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(lkwGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, lkwGuard)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lkwHold is a read lease on the backing file of a logical file's
// current version: an append commit of that file blocks in its open of
// the target, holding the file's commit lock, until release.
type lkwHold struct {
	t        *testing.T
	f        *os.File
	released bool
}

// lkwLease takes the lease on backing path p. Writable descriptors of
// the version (a handle that committed it, until its RELEASE, which the
// kernel sends after close() returns) make F_SETLEASE fail with EAGAIN:
// it is tried again until they are gone.
func lkwLease(t *testing.T, p string) *lkwHold {
	t.Helper()
	lkwLeaseTime(t)
	f, err := os.OpenFile(p, os.O_RDONLY, 0)
	must(t, err)
	h := &lkwHold{t: t, f: f}
	t.Cleanup(func() { _ = h.release() })
	var serr error
	lkwEventually(t, "read lease on "+p, func() bool {
		_, serr = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
		if serr != nil && serr != unix.EAGAIN {
			t.Fatalf("F_SETLEASE F_RDLCK on %s: %v", p, serr)
		}
		return serr == nil
	})
	return h
}

// lkwLeaseTime checks that the kernel lets a lease block an opener long
// enough for these tests (lkwGuard).
func lkwLeaseTime(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/fs/leases-enable")
	if err == nil && strings.TrimSpace(string(b)) != "1" {
		t.Fatalf("leases are disabled (fs.leases-enable=%s): these tests hold a commit lock with one", strings.TrimSpace(string(b)))
	}
	b, err = os.ReadFile("/proc/sys/fs/lease-break-time")
	must(t, err)
	s, err := strconv.Atoi(strings.TrimSpace(string(b)))
	must(t, err)
	if time.Duration(s)*time.Second < lkwGuard+10*time.Second {
		t.Fatalf("fs.lease-break-time is %d s: a lease must hold an opener for longer than %v", s, lkwGuard+10*time.Second)
	}
}

// broken reports whether an opener is waiting for the lease to go.
func (h *lkwHold) broken() bool {
	typ, err := unix.FcntlInt(h.f.Fd(), unix.F_GETLEASE, 0)
	if err != nil {
		h.t.Fatalf("F_GETLEASE: %v", err)
	}
	return typ == unix.F_UNLCK
}

// release gives the lease up: the held commit goes on. It fails if the
// lease was gone already (the kernel ends it after lease-break-time).
func (h *lkwHold) release() error {
	if h.released {
		return nil
	}
	h.released = true
	defer h.f.Close()
	if _, err := unix.FcntlInt(h.f.Fd(), unix.F_SETLEASE, unix.F_UNLCK); err != nil {
		return fmt.Errorf("F_SETLEASE F_UNLCK: %w (no lease left: lease-break-time passed?)", err)
	}
	return nil
}

// lkwQueued counts the commits of this process's daemon waiting in the
// lock manager's queue: goroutines parked in lockmgr's await under a
// handle's commit. (If those functions are renamed, the waits for a count
// end at lkwGuard and fail, saying what was looked for.)
func lkwQueued() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	q := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "lockmgr.(*Manager).await(") && strings.Contains(g, "fs.(*handle).commit(") {
			q++
		}
	}
	return q
}

// lkwSetup mounts safefs with edit, runs prep (if not nil) on the
// mount, makes file "a" with a first version, and opens and writes the
// holder and the given waiters (O_APPEND; their bytes are their names
// and a newline). Then it replaces "a" with a second version ("v1\n",
// the pivot), takes the lease on it, and starts the holder's close: its
// commit takes a's lock and is held at its open of the target until the
// lease is released.
func lkwSetup(t *testing.T, edit func(*fs.Options), prep func(*testfs.Mount), waiters ...string) (m *testfs.Mount, holder *lkwWriter, ws []*lkwWriter, lease *lkwHold) {
	t.Helper()
	t.Setenv("SAFEFS_TEST_LEASE_WAIT", "10m") // see the top of this file
	m = testfs.New(t, edit)
	if prep != nil {
		prep(m)
	}
	a := m.Path("a")
	must(t, os.WriteFile(a, []byte("v0\n"), 0o644))
	holder = lkwAppender(t, m, a, "holder", []byte("holder\n"))
	for _, n := range waiters {
		ws = append(ws, lkwAppender(t, m, a, n, []byte(n+"\n")))
	}
	must(t, os.WriteFile(a, []byte("v1\n"), 0o644))
	lease = lkwLease(t, m.BackingPath("a"))
	holder.close()
	lkwEventually(t, "the holder's commit opening a's version (lease break)", lease.broken)
	if done, e := holder.returned(); done {
		t.Fatalf("the holder's close returned (errno %d) while its commit should be held at the lease", e)
	}
	return m, holder, ws, lease
}

// lkwFinish releases the lease and checks that the holder was still held
// until then (the kernel did not end the lease by itself) and commits.
func lkwFinish(t *testing.T, holder *lkwWriter, lease *lkwHold) {
	t.Helper()
	if done, e := holder.returned(); done {
		t.Fatalf("the holder's close returned (errno %d) before the lease was released: the lock was not held as long as the test assumed", e)
	}
	if err := lease.release(); err != nil {
		t.Fatal(err)
	}
	if e := holder.wait(t); e != 0 {
		t.Errorf("the holder's close: %v, want success once the lease is released", e)
	}
}

// lkwRejected returns rejected/'s files by name, with their contents.
func lkwRejected(t *testing.T, m *testfs.Mount) map[string][]byte {
	t.Helper()
	dir := filepath.Join(m.Backing, fs.InternalDir, journal.RejectedDir)
	ents, err := os.ReadDir(dir)
	must(t, err)
	out := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		must(t, err)
		out[e.Name()] = b
	}
	return out
}

// lkwOnlyRejected checks that rejected/ holds one file, named after this
// process's uid, with exactly want.
func lkwOnlyRejected(t *testing.T, m *testfs.Mount, want []byte) {
	t.Helper()
	got := lkwRejected(t, m)
	if len(got) != 1 {
		t.Errorf("rejected/ holds %d files, want 1 (the failed commit's bytes): %q", len(got), got)
		return
	}
	prefix := fmt.Sprintf("u%d-", os.Geteuid())
	for nm, b := range got {
		if !strings.HasPrefix(nm, prefix) {
			t.Errorf("rejected/%s: want a name starting with %q (the writer's uid)", nm, prefix)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("rejected/%s holds %q, want the failed commit's bytes %q", nm, b, want)
		}
	}
}

// lkwContent checks a's content through the mount and in BACKING.
func lkwContent(t *testing.T, m *testfs.Mount, name, want string) {
	t.Helper()
	for _, p := range []string{m.Path(name), m.BackingPath(name)} {
		b, err := os.ReadFile(p)
		if err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", p, b, err, want)
		}
	}
}

// TestLockWaitTimeout: while a's lock is held, a second writer's close()
// waits lock_timeout and fails with ETIMEDOUT; its bytes are in
// rejected/ (named u<uid>-...), counted in Stats().Rejected, not in a;
// a is untouched until the holder's commit, which then lands whole.
func TestLockWaitTimeout(t *testing.T) {
	m, holder, ws, lease := lkwSetup(t, func(o *fs.Options) { o.LockTimeout = time.Second }, nil, "late")
	before := m.Stats()
	late := ws[0]
	late.close()
	if e := late.wait(t); e != syscall.ETIMEDOUT {
		t.Errorf("close() of a writer waiting for a held lock: errno %d (%v), want ETIMEDOUT", e, e)
	}
	if b, err := os.ReadFile(m.BackingPath("a")); err != nil || string(b) != "v1\n" {
		t.Errorf("while the lock is held, BACKING/a holds %q (%v), want the pivot version", b, err)
	}
	lkwOnlyRejected(t, m, late.data)
	st := m.Stats()
	if st.Rejected-before.Rejected != 1 || st.Dropped != before.Dropped || st.Commits != before.Commits {
		t.Errorf("Stats() went from %+v to %+v: want one more rejected, none dropped, no commit", before, st)
	}
	lkwFinish(t, holder, lease)
	lkwContent(t, m, "a", "v1\nholder\n")
	if st := m.Stats(); st.Commits-before.Commits != 1 {
		t.Errorf("Stats().Commits grew by %d, want 1 (the holder's)", st.Commits-before.Commits)
	}
}

// TestLockWaitQueueFull: with max_waiters=1, while a's lock is held and
// one commit waits, another writer's close() fails at once with EAGAIN
// (the holder is still held, the waiter still waiting) and its bytes are
// in rejected/; the waiter then commits after the holder.
func TestLockWaitQueueFull(t *testing.T) {
	m, holder, ws, lease := lkwSetup(t, func(o *fs.Options) {
		o.MaxWaiters = 1
		o.LockTimeout = 10 * time.Minute // only the queue bound may refuse
	}, nil, "waiter", "extra")
	before := m.Stats()
	waiter, extra := ws[0], ws[1]
	waiter.close()
	lkwEventually(t, "the waiter's commit queued for a's lock (lockmgr await in a goroutine's stack)", func() bool { return lkwQueued() == 1 })
	extra.close()
	if e := extra.wait(t); e != syscall.EAGAIN {
		t.Errorf("close() with max_waiters commits already waiting: errno %d (%v), want EAGAIN", e, e)
	}
	if done, e := waiter.returned(); done {
		t.Errorf("the queued waiter's close returned (errno %d) while the lock is held", e)
	}
	lkwOnlyRejected(t, m, extra.data)
	if st := m.Stats(); st.Rejected-before.Rejected != 1 || st.Dropped != before.Dropped {
		t.Errorf("Stats() went from %+v to %+v: want one more rejected, none dropped", before, st)
	}
	lkwFinish(t, holder, lease)
	if e := waiter.wait(t); e != 0 {
		t.Errorf("the queued waiter's close: %v, want success after the holder", e)
	}
	lkwContent(t, m, "a", "v1\nholder\nwaiter\n")
}

// TestLockWaitFIFO: commits queued for a's lock one after another (each
// started only once the previous one is seen waiting) are made in that
// order: their appends end up in a in queue order.
func TestLockWaitFIFO(t *testing.T) {
	var names []string
	for i := 1; i <= 8; i++ {
		names = append(names, fmt.Sprintf("w%d", i))
	}
	m, holder, ws, lease := lkwSetup(t, func(o *fs.Options) { o.LockTimeout = 10 * time.Minute }, nil, names...)
	for i, w := range ws {
		w.close()
		lkwEventually(t, fmt.Sprintf("%s queued for a's lock as number %d (lockmgr await in goroutines' stacks)", w.name, i+1),
			func() bool { return lkwQueued() == i+1 })
	}
	lkwFinish(t, holder, lease)
	want := "v1\nholder\n"
	for _, w := range ws {
		if e := w.wait(t); e != 0 {
			t.Errorf("%s's close: %v", w.name, e)
		}
		want += w.name + "\n"
	}
	lkwContent(t, m, "a", want)
}

// TestLockWaitOtherFileParallel: while a's commit is held under its lock,
// commits of another file b (a rewrite and an append) complete: each
// close() returns before a's commit has finished.
func TestLockWaitOtherFileParallel(t *testing.T) {
	// b is made before a's lock is held: its creation is a commit too.
	m, holder, _, lease := lkwSetup(t, func(o *fs.Options) { o.LockTimeout = 10 * time.Minute },
		func(m *testfs.Mount) { must(t, os.WriteFile(m.Path("b"), []byte("b0\n"), 0o644)) })
	b := m.Path("b")
	before := m.Stats()
	for _, c := range []struct {
		what string
		flag int
		data string
	}{{"rewrite", os.O_TRUNC, "b1\n"}, {"append", os.O_APPEND, "b2\n"}} {
		f, err := os.OpenFile(b, os.O_WRONLY|c.flag, 0)
		must(t, err)
		_, err = f.WriteString(c.data)
		must(t, err)
		w := &lkwWriter{name: "b's " + c.what, f: f, done: make(chan error, 1)}
		w.close()
		select {
		case err := <-w.done:
			if err != nil {
				t.Errorf("%s's close: %v", w.name, err)
			}
		case <-time.After(lkwGuard):
			_ = lease.release()
			err := <-w.done
			t.Fatalf("%s's close did not return while a's commit was held (it returned %v once a's lease was released): a's lock delays b's commits", w.name, err)
		}
		if done, e := holder.returned(); done {
			t.Fatalf("a's commit finished (errno %d) before b's %s returned: the order was not shown", e, c.what)
		}
	}
	if st := m.Stats(); st.Commits-before.Commits != 2 {
		t.Errorf("Stats().Commits grew by %d while a's commit was held, want 2 (b's)", st.Commits-before.Commits)
	}
	lkwContent(t, m, "b", "b1\nb2\n")
	lkwFinish(t, holder, lease)
	lkwContent(t, m, "a", "v1\nholder\n")
}
