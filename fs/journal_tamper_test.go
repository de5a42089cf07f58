package fs_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"hash/crc32"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
)

// advInternal makes BACKING/.safefs and its parts as safefs does (0700).
func advInternal(t *testing.T, backing string) string {
	t.Helper()
	in := filepath.Join(backing, fs.InternalDir)
	for _, d := range []string{in, filepath.Join(in, "staging"), filepath.Join(in, "undo"), filepath.Join(in, "rejected")} {
		must(t, os.MkdirAll(d, 0o700))
	}
	return in
}

func advCRC(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }

// advMountBounded mounts p, failing the test if fs.Mount does not return
// by the deadline (a FIFO or a hostile journal must not hang it).
func advMountBounded(t *testing.T, p *advPrepared) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.mount(t) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		t.Fatalf("fs.Mount did not return within the deadline: hung on the prepared BACKING")
		return nil
	}
}

// TestAdvTamperedJournal: with the mount stopped, the journal, staging
// and undo directories are filled with garbage and with well-framed
// (valid crc32c) records aimed outside BACKING, at symlinks, at the
// internal directory; staging and undo hold symlinks to outside and a
// FIFO. Expected: the mount succeeds, nothing outside BACKING is read or
// changed (the sentinel, atimes included, is identical), the journal is
// emptied, and symlinks and FIFOs in staging/undo are left alone with
// their targets untouched.
func TestAdvTamperedJournal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	type setup func(t *testing.T, p *advPrepared, in, sent string) []byte // returns the journal
	lines := func(t *testing.T, recs ...map[string]any) []byte {
		var b []byte
		for _, r := range recs {
			b = append(b, advJournalLine(t, r)...)
		}
		return b
	}
	st := func(t *testing.T, p string) unix.Stat_t { return advLstat(t, p) }
	cases := map[string]setup{
		"random_bytes": func(t *testing.T, p *advPrepared, in, sent string) []byte {
			rng := rand.New(rand.NewSource(1))
			b := make([]byte, 64<<10)
			rng.Read(b)
			long := bytes.Repeat([]byte("x"), 2<<20) // a line longer than the scanner's 1 MiB
			return append(append(b, '\n'), append(long, []byte("\n00000000 {}\n\xff\xfe\n")...)...)
		},
		"targets_outside": func(t *testing.T, p *advPrepared, in, sent string) []byte {
			x, pw := st(t, filepath.Join(sent, "x")), st(t, filepath.Join(sent, "passwd"))
			return lines(t,
				map[string]any{"id": 1, "kind": "replace", "target": "../outside/x", "staging": "0123456789abcdef0123456789abcdef"},
				map[string]any{"id": 2, "kind": "append", "target": "/etc/passwd", "dev": pw.Dev, "ino": pw.Ino, "old_size": 0, "len": 1},
				map[string]any{"id": 3, "kind": "append", "target": filepath.Join(sent, "x"), "dev": x.Dev, "ino": x.Ino, "old_size": 0, "len": 1},
				map[string]any{"id": 4, "kind": "append", "target_hex": hex.EncodeToString([]byte("../../sentinel/x")), "dev": x.Dev, "ino": x.Ino, "old_size": 0, "len": 1},
				map[string]any{"id": 5, "kind": "append", "target": "a/../../x", "dev": x.Dev, "ino": x.Ino, "old_size": 0, "len": 1},
				map[string]any{"id": 6, "kind": "replace", "target": "f", "staging": "../../../sentinel/x"},
				map[string]any{"id": 7, "kind": "inplace", "target": "f", "dev": x.Dev, "ino": x.Ino, "undo": "../../../sentinel/x", "undo_size": 1},
				map[string]any{"id": 8, "kind": "append", "target": ".safefs/journal", "dev": x.Dev, "ino": x.Ino, "old_size": 0, "len": 1},
				map[string]any{"id": 9, "kind": "append", "target": "f\x00/../../x", "dev": x.Dev, "ino": x.Ino, "old_size": 0, "len": 1},
			)
		},
		"targets_through_symlinks": func(t *testing.T, p *advPrepared, in, sent string) []byte {
			must(t, os.Symlink(sent, p.bpath("link")))
			must(t, os.Symlink(filepath.Join(sent, "passwd"), p.bpath("lnkfile")))
			must(t, os.Mkdir(p.bpath("d"), 0o755))
			must(t, os.Symlink("../../"+filepath.Base(filepath.Dir(sent))+"/sentinel", p.bpath("d", "up")))
			x, pw, f := st(t, filepath.Join(sent, "x")), st(t, filepath.Join(sent, "passwd")), st(t, filepath.Join(sent, "f"))
			undo := []byte("pwned by recovery\n")
			must(t, os.WriteFile(filepath.Join(in, "undo", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), undo, 0o600))
			return lines(t,
				// Recovery would cut x to size 0 if it followed link/.
				map[string]any{"id": 1, "kind": "append", "target": "link/x", "dev": x.Dev, "ino": x.Ino, "old_size": 0, "len": 1, "crc": 1},
				// Or write the undo bytes over passwd.
				map[string]any{"id": 2, "kind": "inplace", "target": "lnkfile", "dev": pw.Dev, "ino": pw.Ino,
					"undo": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "undo_size": len(undo), "undo_crc": advCRC(undo)},
				map[string]any{"id": 3, "kind": "inplace", "target": "link/passwd", "dev": pw.Dev, "ino": pw.Ino,
					"undo": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "undo_size": len(undo), "undo_crc": advCRC(undo)},
				map[string]any{"id": 4, "kind": "append", "target": "d/up/f", "dev": f.Dev, "ino": f.Ino, "old_size": 1, "len": 1, "crc": 1},
				map[string]any{"id": 5, "kind": "append", "target": "link", "dev": x.Dev, "ino": x.Ino, "old_size": 0, "len": 1, "crc": 1},
			)
		},
		"staging_and_undo_symlinks_and_fifos": func(t *testing.T, p *advPrepared, in, sent string) []byte {
			s1, s2, s3 := "11111111111111111111111111111111", "22222222222222222222222222222222", "33333333333333333333333333333333"
			must(t, os.Symlink(filepath.Join(sent, "f"), filepath.Join(in, "staging", s1)))
			must(t, unix.Mkfifo(filepath.Join(in, "staging", s2), 0o600))
			must(t, os.Symlink(filepath.Join(sent, "sub"), filepath.Join(in, "staging", s3)))
			must(t, os.Symlink(filepath.Join(sent, "x"), filepath.Join(in, "undo", s1)))
			must(t, unix.Mkfifo(filepath.Join(in, "undo", s2), 0o600))
			must(t, os.Symlink(filepath.Join(sent, "sub"), filepath.Join(in, "rejected", s1)))
			must(t, os.WriteFile(p.bpath("target"), []byte("target\n"), 0o644))
			tg := st(t, p.bpath("target"))
			return lines(t,
				// A rename of staging/s1 over target would publish the symlink.
				map[string]any{"id": 1, "kind": "replace", "target": "target", "staging": s1},
				map[string]any{"id": 2, "kind": "replace", "target": "target", "staging": s2},
				// An undo that is a symlink or a FIFO must not be read.
				map[string]any{"id": 3, "kind": "inplace", "target": "target", "dev": tg.Dev, "ino": tg.Ino, "undo": s1, "undo_size": 11, "undo_crc": 0},
				map[string]any{"id": 4, "kind": "inplace", "target": "target", "dev": tg.Dev, "ino": tg.Ino, "undo": s2, "undo_size": 11, "undo_crc": 0},
			)
		},
	}
	for name, prepare := range cases {
		t.Run(name, func(t *testing.T) {
			p := advNewDirs(t)
			sent := advSentinel(t)
			// The sentinel's parent must be reachable by name for the
			// "../.." symlinks; it stays 0700, root's.
			in := advInternal(t, p.Backing)
			must(t, os.WriteFile(p.bpath("f"), []byte("inside f\n"), 0o644))
			journal := prepare(t, p, in, sent)
			must(t, os.WriteFile(filepath.Join(in, "journal"), journal, 0o600))
			var links []string
			for _, sub := range []string{"staging", "undo", "rejected"} {
				ents, _ := os.ReadDir(filepath.Join(in, sub))
				for _, e := range ents {
					if e.Type()&os.ModeType != 0 {
						links = append(links, filepath.Join(in, sub, e.Name()))
					}
				}
			}
			sentBefore := advSnapshot(t, sent)
			outerBefore := advSnapshot(t, filepath.Dir(p.Backing))
			targetBefore, _ := os.ReadFile(p.bpath("target"))

			if err := advMountBounded(t, p); err != nil {
				t.Fatalf("mount over a tampered BACKING: %v", err)
			}
			jst := advLstat(t, filepath.Join(in, "journal"))
			if jst.Size != 0 {
				t.Errorf("journal holds %d bytes after mount, want it emptied", jst.Size)
			}
			for _, l := range links {
				if _, err := os.Lstat(l); err != nil {
					t.Errorf("%s was removed (%v): recovery must leave non-regular entries alone", l, err)
				}
			}
			if b, _ := os.ReadFile(p.bpath("target")); !bytes.Equal(b, targetBefore) {
				t.Errorf("BACKING/target changed: %q -> %q", targetBefore, b)
			}
			if fi, err := os.Lstat(p.bpath("target")); err == nil && !fi.Mode().IsRegular() {
				t.Errorf("BACKING/target is now %v", fi.Mode())
			}
			// The mount works.
			must(t, os.WriteFile(p.path("after"), []byte("after"), 0o644))
			p.unmount(t)
			advSameTree(t, "sentinel outside BACKING", sentBefore, advSnapshot(t, sent))
			outerAfter := advSnapshot(t, filepath.Dir(p.Backing))
			for _, s := range []map[string]advEntry{outerBefore, outerAfter} {
				for k := range s {
					if k != "." && k != "mnt" && k != "orig" && filepath.Dir(k) == "." {
						continue
					}
					delete(s, k) // BACKING and the mount point change; only new neighbours matter
				}
			}
			advSameTree(t, "next to BACKING", outerBefore, outerAfter)
		})
	}

	// The internal directory or its parts replaced by symlinks to the
	// outside, or by a FIFO: the internal directory is not safefs's own
	// any more, so it is quarantined and the mount goes ahead; nothing
	// outside is touched, nothing hangs.
	parts := map[string]func(t *testing.T, in, sent string){
		"internal_dir_symlink": func(t *testing.T, in, sent string) {
			must(t, os.RemoveAll(in))
			must(t, os.Symlink(filepath.Join(sent, "sub"), in))
		},
		"staging_symlink": func(t *testing.T, in, sent string) {
			must(t, os.Remove(filepath.Join(in, "staging")))
			must(t, os.Symlink(filepath.Join(sent, "sub"), filepath.Join(in, "staging")))
		},
		"undo_symlink": func(t *testing.T, in, sent string) {
			must(t, os.Remove(filepath.Join(in, "undo")))
			must(t, os.Symlink(filepath.Join(sent, "sub"), filepath.Join(in, "undo")))
		},
		"journal_symlink": func(t *testing.T, in, sent string) {
			must(t, os.Symlink(filepath.Join(sent, "f"), filepath.Join(in, "journal")))
		},
		"journal_dangling_symlink": func(t *testing.T, in, sent string) {
			must(t, os.Symlink(filepath.Join(sent, "new"), filepath.Join(in, "journal")))
		},
		"lock_symlink": func(t *testing.T, in, sent string) {
			must(t, os.Symlink(filepath.Join(sent, "x"), filepath.Join(in, "lock")))
		},
		"journal_fifo": func(t *testing.T, in, sent string) {
			must(t, unix.Mkfifo(filepath.Join(in, "journal"), 0o600))
		},
		"lock_fifo": func(t *testing.T, in, sent string) {
			must(t, unix.Mkfifo(filepath.Join(in, "lock"), 0o600))
		},
		"journal_dir": func(t *testing.T, in, sent string) {
			must(t, os.Mkdir(filepath.Join(in, "journal"), 0o700))
		},
	}
	for name, prepare := range parts {
		t.Run(name, func(t *testing.T) {
			p := advNewDirs(t)
			sent := advSentinel(t)
			in := advInternal(t, p.Backing)
			prepare(t, in, sent)
			before := advSnapshot(t, sent)
			if err := advMountBounded(t, p); err != nil {
				t.Fatalf("mount refused: %v; want the internal directory quarantined and the mount made", err)
			}
			must(t, os.WriteFile(p.path("after"), []byte("after"), 0o644))
			p.unmount(t)
			if q, _ := filepath.Glob(p.bpath(fs.InternalDir + ".untrusted-*")); len(q) != 1 {
				t.Errorf("quarantined internal directories: %v, want one", q)
			}
			advSameTree(t, "sentinel outside BACKING", before, advSnapshot(t, sent))
		})
	}
}
