package fs_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/testfs"
)

// TestAdvMountOptions: the mount is nosuid and nodev.
func TestAdvMountOptions(t *testing.T) {
	m := testfs.New(t)
	opts, ok := advMounted(t, m.Dir)
	if !ok {
		t.Fatalf("%s not in /proc/self/mounts", m.Dir)
	}
	set := map[string]bool{}
	for _, o := range strings.Split(opts, ",") {
		set[o] = true
	}
	for _, want := range []string{"nosuid", "nodev"} {
		if !set[want] {
			t.Errorf("mount options %q lack %s", opts, want)
		}
	}
}

// TestAdvSpecialFiles: a FIFO, a socket and device nodes made directly in
// BACKING, opened for writing through the mount. FUSE hands FIFOs,
// sockets and devices to the kernel (init_special_inode): their opens
// never reach the daemon. So:
//   - FIFO: pass-through, a pipe local to the mount's inode (not the
//     backing FIFO). O_NONBLOCK without a reader: ENXIO. A blocking open
//     blocks in the caller, like a FIFO anywhere; the daemon keeps
//     serving meanwhile.
//   - socket: ENXIO.
//   - devices: EACCES (nodev), for root too.
//
// Every open runs in a subprocess with a time limit, so a hang is seen
// as such and never hangs the test.
func TestAdvSpecialFiles(t *testing.T) {
	m := testfs.New(t)
	www := testfs.LookupUser(t, "www-data")
	must(t, unix.Mkfifo(m.BackingPath("fifo"), 0o666))
	must(t, unix.Chmod(m.BackingPath("fifo"), 0o666))
	must(t, unix.Mknod(m.BackingPath("sock"), unix.S_IFSOCK|0o666, 0))
	must(t, unix.Chmod(m.BackingPath("sock"), 0o666))
	must(t, unix.Mknod(m.BackingPath("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, unix.Chmod(m.BackingPath("null"), 0o666))
	must(t, unix.Mknod(m.BackingPath("mem"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 1))))
	must(t, unix.Mknod(m.BackingPath("ram0"), unix.S_IFBLK|0o600, int(unix.Mkdev(1, 0))))

	type want struct {
		errno syscall.Errno
		hang  bool // a blocking open may block in the caller (FIFO semantics)
	}
	cases := []struct {
		name, op string
		as       *testfs.Cred
		want     []want // any of these
	}{
		{"fifo", "opennb", &www, []want{{errno: syscall.ENXIO}}},
		{"fifo", "openw", &www, []want{{hang: true}, {errno: 0}}},
		{"sock", "opennb", &www, []want{{errno: syscall.ENXIO}}},
		{"sock", "openw", &www, []want{{errno: syscall.ENXIO}}},
		{"null", "openw", &www, []want{{errno: syscall.EACCES}}},
		{"null", "openw", nil, []want{{errno: syscall.EACCES}}},
		{"mem", "openw", nil, []want{{errno: syscall.EACCES}}},
		{"mem", "read", nil, []want{{errno: syscall.EACCES}}},
		{"ram0", "openw", nil, []want{{errno: syscall.EACCES}}},
	}
	for _, c := range cases {
		who := "root"
		if c.as != nil {
			who = "www-data"
		}
		t.Run(c.name+"_"+c.op+"_"+who, func(t *testing.T) {
			// The subprocess is started (exec done) before this process
			// opens anything on the mount: see TestAdvExecWhileWriting.
			wait, err := advStart(t, c.as, "", specialLimit(slices.ContainsFunc(c.want, func(w want) bool { return w.hang })), c.op, m.Path(c.name))
			must(t, err)
			// The daemon keeps serving while the open is in progress.
			servedWhileOpen(t, m)
			r, err := wait()
			hung := err != nil && strings.Contains(err.Error(), "hung")
			if err != nil && !hung {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if w.hang && hung || !hung && !w.hang && r.Errno == w.errno {
					t.Logf("%s %s as %s: errno %v, blocked in the caller: %v", c.op, c.name, who, r.Errno, hung)
					return
				}
			}
			t.Errorf("%s %s as %s: errno %v (%d), blocked: %v; want one of %+v", c.op, c.name, who, r.Errno, r.Errno, hung, c.want)
		})
	}

	// A regular file the kernel has looked up, then replaced in BACKING
	// by a FIFO or a device: the kernel still believes it is a regular
	// file (entry timeout), so OPEN does reach the daemon. The daemon must
	// not open the special file (no block in the daemon, no side effect):
	// it fails, or sends the kernel to look the name up again.
	for _, sw := range []struct {
		name string
		mk   func(p string) error
	}{
		{"fifo", func(p string) error { return unix.Mkfifo(p, 0o666) }},
		{"null", func(p string) error { return unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) }},
		{"sock", func(p string) error { return unix.Mknod(p, unix.S_IFSOCK|0o666, 0) }},
	} {
		for _, op := range []string{"openw", "read", "wronly"} {
			t.Run("swapped_regular_to_"+sw.name+"_"+op, func(t *testing.T) {
				nm := "reg_" + sw.name + "_" + op
				must(t, os.WriteFile(m.BackingPath(nm), []byte("regular\n"), 0o666))
				must(t, os.Chmod(m.BackingPath(nm), 0o666))
				r := advOp(t, &www, "", "stat", m.Path(nm)) // LOOKUP: cached as a regular file
				if r.Errno != 0 {
					t.Fatal(r.Errno)
				}
				must(t, os.Remove(m.BackingPath(nm)))
				must(t, sw.mk(m.BackingPath(nm)))
				must(t, unix.Chmod(m.BackingPath(nm), 0o666))
				args := []string{op, m.Path(nm)}
				if op == "wronly" {
					args = append(args, "x")
				}
				wait, err := advStart(t, &www, "", specialLimit(sw.name == "fifo"), args...)
				must(t, err)
				servedWhileOpen(t, m)
				r, err = wait()
				// The daemon answers ESTALE, the kernel looks the name up
				// again and finds the FIFO: a blocking open then blocks in
				// the caller until the other end opens, as the FIFO case
				// above.
				if err != nil && sw.name == "fifo" && strings.Contains(err.Error(), "hung") {
					t.Logf("%s on a regular file swapped for a fifo: blocked in the caller, daemon serving", op)
					return
				}
				if err != nil {
					t.Fatalf("open of a regular file swapped for a %s: %v", sw.name, err)
				}
				t.Logf("%s on a regular file swapped for a %s: %v", op, sw.name, r.Errno)
				if r.Errno == 0 && sw.name != "fifo" {
					t.Errorf("%s on a regular file swapped for a %s succeeded", op, sw.name)
				}
				st := advLstat(t, m.BackingPath(nm))
				if st.Mode&unix.S_IFMT == unix.S_IFREG {
					t.Errorf("the %s in BACKING was replaced by a regular file", sw.name)
				}
			})
		}
	}
}

// servedWhileOpen writes and reads a file through the mount, bounded by
// a deadline: the daemon must keep serving other requests.
// specialLimit is how long an open may take: where blocking in the
// caller is a right outcome (a FIFO), 3 s stops the wait for it; where it
// is not, only a hang guard, long enough for a loaded machine.
func specialLimit(mayBlock bool) time.Duration {
	if mayBlock {
		return 3 * time.Second
	}
	return 60 * time.Second
}

func servedWhileOpen(t *testing.T, m *testfs.Mount) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		p := m.Path("alive")
		err := os.WriteFile(p, []byte("alive"), 0o644)
		if err == nil {
			var b []byte
			b, err = os.ReadFile(p)
			if err == nil && string(b) != "alive" {
				err = os.ErrInvalid
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the daemon did not serve a write meanwhile: %v", err)
		}
	case <-ctx.Done():
		advHung(t, m.Dir, "write and read through the mount while a special file is being opened")
		t.FailNow()
	}
}
