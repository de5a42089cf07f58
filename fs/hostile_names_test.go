package fs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/testfs"
)

// advRoundTrip creates dir/nm through the mount, commits a replace, an
// append and an in-place (hard-linked) commit, and checks every step in
// BACKING and in the listing. It returns the final contents.
func advRoundTrip(t *testing.T, m *testfs.Mount, dir, nm string) {
	t.Helper()
	p := filepath.Join(m.Path(dir), nm)
	b := filepath.Join(m.BackingPath(dir), nm)
	must(t, os.WriteFile(p, []byte("one\n"), 0o644))
	if got, err := os.ReadFile(b); err != nil || string(got) != "one\n" {
		t.Fatalf("%q in BACKING after the first commit: %q %v", nm, got, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString("two\n")
	must(t, err)
	must(t, f.Close())
	// A hard link makes the next commit an in-place one (undo copy, journal record).
	link := filepath.Join(m.Path(dir), "hl")
	must(t, os.Link(p, link))
	f, err = os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	must(t, err)
	_, err = f.WriteString("three\n")
	must(t, err)
	must(t, f.Close())
	must(t, os.Remove(link))
	for _, q := range []string{p, b} {
		if got, err := os.ReadFile(q); err != nil || string(got) != "three\n" {
			t.Errorf("%q: %q %v, want the last commit", q, got, err)
		}
	}
	ents, err := os.ReadDir(m.Path(dir))
	must(t, err)
	found := false
	for _, e := range ents {
		found = found || e.Name() == nm
	}
	if !found {
		t.Errorf("%q not listed", nm)
	}
}

// TestAdvNames: hostile but valid names work end to end (create, write,
// the three kinds of commit, read back, list, rename, remount); invalid
// ones are refused with the right errno and leave nothing behind.
func TestAdvNames(t *testing.T) {
	m := testfs.New(t)
	must(t, os.Mkdir(m.Path("sub"), 0o755))
	names := map[string]string{
		"255 bytes":      strings.Repeat("n", 255),
		"255 bytes utf8": strings.Repeat("é", 127) + "x", // 2*127+1
		"invalid utf8":   "bad-\xff\xfe-\xc3(",
		"newline":        "line1\nline2",
		"CR and tab":     "a\rb\tc",
		"leading dash":   "-rf",
		"double dash":    "--",
		"spaces":         " lead and trail ",
		"backslash":      `a\b`,
		"glob":           "*?[x]",
		"quote":          `"'$(id)` + "`",
		"dots":           "...",
		"like internal":  ".safefs-not",
		"json":           `{"id":1,"kind":"replace","target":".."}`,
	}
	for what, nm := range names {
		t.Run(strings.ReplaceAll(what, " ", "_"), func(t *testing.T) {
			for _, dir := range []string{".", "sub"} {
				advRoundTrip(t, m, dir, nm)
				renamed := nm[:min(len(nm), 250)] + ".mv"
				must(t, os.Rename(filepath.Join(m.Path(dir), nm), filepath.Join(m.Path(dir), renamed)))
				if _, err := os.Lstat(filepath.Join(m.BackingPath(dir), renamed)); err != nil {
					t.Errorf("rename: %v", err)
				}
				must(t, os.Rename(filepath.Join(m.Path(dir), renamed), filepath.Join(m.Path(dir), nm)))
			}
		})
	}
	t.Run("256_bytes", func(t *testing.T) {
		long := strings.Repeat("L", 256)
		ops := map[string]error{}
		_, ops["create"] = os.Create(m.Path(long))
		ops["mkdir"] = os.Mkdir(m.Path(long), 0o755)
		ops["symlink"] = os.Symlink("x", m.Path(long))
		must(t, os.WriteFile(m.Path("short"), []byte("s"), 0o644))
		ops["rename to"] = os.Rename(m.Path("short"), m.Path(long))
		ops["link to"] = os.Link(m.Path("short"), m.Path(long))
		_, ops["stat"] = os.Lstat(m.Path(long))
		ops["mkfifo"] = unix.Mkfifo(m.Path(long), 0o644)
		for op, err := range ops {
			if advErrno(err) != syscall.ENAMETOOLONG {
				t.Errorf("%s with a 256-byte name: %v, want ENAMETOOLONG", op, err)
			}
		}
		ents, err := os.ReadDir(m.Backing)
		must(t, err)
		for _, e := range ents {
			if len(e.Name()) > 255 {
				t.Errorf("BACKING holds a name of %d bytes", len(e.Name()))
			}
		}
	})
	// Everything survives a remount (recovery) unchanged.
	before := advSnapshot(t, m.Backing)
	m.Remount(t)
	after := advSnapshot(t, m.Backing)
	for _, s := range []map[string]advEntry{before, after} {
		for k, e := range s {
			if k == "." || k == "sub" || strings.HasPrefix(k, fs.InternalDir) {
				delete(s, k)
			} else {
				e.Atime = unix.Timespec{}
				s[k] = e
			}
		}
	}
	advSameTree(t, "BACKING across a remount", before, after)
	for what, nm := range names {
		if b, err := os.ReadFile(filepath.Join(m.Path("sub"), nm)); err != nil || string(b) != "three\n" {
			t.Errorf("%s after remount: %q %v", what, b, err)
		}
	}
}

// TestAdvInternalDirHidden: BACKING/.safefs cannot be seen or touched
// through the mount, by root either.
func TestAdvInternalDirHidden(t *testing.T) {
	m := testfs.New(t)
	must(t, os.WriteFile(m.Path("f"), []byte("f"), 0o644))
	must(t, os.Mkdir(m.Path("d"), 0o755))
	internal := m.BackingPath(fs.InternalDir)
	before := advLstat(t, internal)

	ents, err := os.ReadDir(m.Dir)
	must(t, err)
	for _, e := range ents {
		if e.Name() == fs.InternalDir {
			t.Errorf("%s is listed at the top of the mount", fs.InternalDir)
		}
	}
	p := m.Path(fs.InternalDir)
	want := func(what string, err error, errnos ...syscall.Errno) {
		t.Helper()
		got := advErrno(err)
		for _, e := range errnos {
			if got == e {
				return
			}
		}
		t.Errorf("%s: %v, want one of %v", what, err, errnos)
	}
	_, err = os.Lstat(p)
	want("lstat .safefs", err, syscall.ENOENT)
	_, err = os.Lstat(filepath.Join(p, "journal"))
	want("lstat .safefs/journal", err, syscall.ENOENT)
	_, err = os.Lstat(filepath.Join(p, "staging"))
	want("lstat .safefs/staging", err, syscall.ENOENT)
	_, err = os.ReadFile(filepath.Join(p, "lock"))
	want("read .safefs/lock", err, syscall.ENOENT)
	_, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
	want("create .safefs", err, syscall.EPERM, syscall.EACCES)
	_, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	want("create O_EXCL .safefs", err, syscall.EPERM, syscall.EACCES)
	want("mkdir .safefs", os.Mkdir(p, 0o755), syscall.EPERM, syscall.EACCES)
	want("mkdir .safefs/staging", os.Mkdir(filepath.Join(p, "staging"), 0o755), syscall.ENOENT)
	want("symlink .safefs", os.Symlink("/tmp", p), syscall.EPERM, syscall.EACCES)
	want("mkfifo .safefs", unix.Mkfifo(p, 0o644), syscall.EPERM, syscall.EACCES)
	want("rename file onto .safefs", os.Rename(m.Path("f"), p), syscall.EPERM, syscall.EACCES)
	want("rename dir onto .safefs", os.Rename(m.Path("d"), p), syscall.EPERM, syscall.EACCES)
	want("RENAME_EXCHANGE with .safefs", unix.Renameat2(unix.AT_FDCWD, m.Path("d"), unix.AT_FDCWD, p, unix.RENAME_EXCHANGE),
		syscall.EPERM, syscall.EACCES, syscall.ENOENT)
	want("rename .safefs away", os.Rename(p, m.Path("stolen")), syscall.ENOENT)
	want("link to .safefs", os.Link(m.Path("f"), p), syscall.EPERM, syscall.EACCES)
	want("unlink .safefs", unix.Unlink(p), syscall.ENOENT)
	want("rmdir .safefs", unix.Rmdir(p), syscall.ENOENT)
	want("chmod .safefs", os.Chmod(p, 0o777), syscall.ENOENT)
	want("chown .safefs", os.Chown(p, 33, 33), syscall.ENOENT)
	want("setxattr .safefs", unix.Setxattr(p, "user.x", []byte("x"), 0), syscall.ENOENT)
	want("truncate .safefs/journal", os.Truncate(filepath.Join(p, "journal"), 0), syscall.ENOENT)
	// Relative to an open directory fd of the top, too.
	top, err := unix.Open(m.Dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	_, err = unix.Openat(top, fs.InternalDir, unix.O_RDONLY, 0)
	want("openat(top, .safefs)", err, syscall.ENOENT)
	_, err = unix.Openat(top, fs.InternalDir+"/journal", unix.O_RDWR, 0)
	want("openat(top, .safefs/journal)", err, syscall.ENOENT)
	unix.Close(top)
	// Through "..": sub/../.safefs is the same name at the top.
	_, err = os.Lstat(m.Path("d") + "/../" + fs.InternalDir)
	want("lstat d/../.safefs", err, syscall.ENOENT)

	after := advLstat(t, internal)
	if after.Ino != before.Ino || after.Mode != before.Mode || after.Uid != 0 {
		t.Errorf("BACKING/.safefs changed: %+v -> %+v", before, after)
	}
	for _, n := range []string{"journal", "lock", "staging", "undo", "rejected"} {
		if _, err := os.Lstat(filepath.Join(internal, n)); err != nil {
			t.Errorf("BACKING/.safefs/%s: %v", n, err)
		}
	}
	// Names close to the internal one are ordinary files.
	for _, nm := range []string{".SAFEFS", ".safefs ", "..safefs", ".safefs.", ".safefs~"} {
		must(t, os.WriteFile(m.Path(nm), []byte(nm), 0o644))
		if b, err := os.ReadFile(m.BackingPath(nm)); err != nil || string(b) != nm {
			t.Errorf("%q: %q %v", nm, b, err)
		}
	}
}

// TestAdvStagingLikeNamesSurviveRemount: user files whose names look like
// staging or undo files (32 hex characters), or like the internal files,
// at the top and in subdirectories, made through the mount and directly
// in BACKING, are never removed by recovery.
func TestAdvStagingLikeNamesSurviveRemount(t *testing.T) {
	m := testfs.New(t)
	hex1 := "0123456789abcdef0123456789abcdef"
	hex2 := "fedcba9876543210fedcba9876543210"
	must(t, os.MkdirAll(m.Path("sub", "staging"), 0o755))
	must(t, os.MkdirAll(m.Path("sub", ".safefs", "staging"), 0o755))
	must(t, os.MkdirAll(m.Path("sub", ".safefs", "undo"), 0o755))
	must(t, os.MkdirAll(m.Path("staging"), 0o755))
	must(t, os.MkdirAll(m.Path("undo"), 0o755))
	var files []string
	for _, dir := range []string{".", "sub", "sub/staging", "sub/.safefs/staging", "sub/.safefs/undo", "sub/.safefs", "staging", "undo"} {
		for _, nm := range []string{hex1, "journal", "lock"} {
			rel := filepath.Join(dir, nm)
			must(t, os.WriteFile(m.Path(rel), []byte("through the mount: "+rel), 0o644))
			files = append(files, rel)
		}
		rel := filepath.Join(dir, hex2)
		must(t, os.WriteFile(m.BackingPath(rel), []byte("directly in BACKING: "+rel), 0o644))
		files = append(files, rel)
	}
	// A journal-looking file with a record that would name a real file.
	must(t, os.WriteFile(m.Path("sub", ".safefs", "journal"), advJournalLine(t, map[string]any{
		"id": 1, "kind": "replace", "target": "sub/staging/" + hex1, "staging": hex1}), 0o644))
	sort.Strings(files)
	read := func() map[string]string {
		out := map[string]string{}
		for _, rel := range files {
			b, err := os.ReadFile(m.BackingPath(rel))
			if err != nil {
				out[rel] = err.Error()
			} else {
				out[rel] = string(b)
			}
		}
		return out
	}
	before := read()
	m.Remount(t)
	m.Remount(t)
	after := read()
	for _, rel := range files {
		if before[rel] != after[rel] {
			t.Errorf("%s: %q before the remounts, %q after", rel, before[rel], after[rel])
		}
		if b, err := os.ReadFile(m.Path(rel)); err != nil || !bytes.Equal(b, []byte(after[rel])) {
			t.Errorf("%s through the mount: %q %v", rel, b, err)
		}
	}
}

// TestAdvSubdirNamedInternal: sub/.safefs is an ordinary directory.
func TestAdvSubdirNamedInternal(t *testing.T) {
	m := testfs.New(t)
	must(t, os.Mkdir(m.Path("sub"), 0o755))
	d := m.Path("sub", fs.InternalDir)
	must(t, os.Mkdir(d, 0o755))
	must(t, os.Mkdir(filepath.Join(d, "staging"), 0o755))
	advRoundTrip(t, m, "sub/"+fs.InternalDir, "journal")
	advRoundTrip(t, m, "sub/"+fs.InternalDir+"/staging", "0123456789abcdef0123456789abcdef")
	ents, err := os.ReadDir(m.Path("sub"))
	must(t, err)
	if len(ents) != 1 || ents[0].Name() != fs.InternalDir {
		t.Errorf("sub lists %v, want [.safefs]", ents)
	}
	must(t, os.Rename(d, m.Path("sub", "renamed")))
	must(t, os.Rename(m.Path("sub", "renamed"), d))
	must(t, os.WriteFile(filepath.Join(d, "x"), []byte("x"), 0o600))
	must(t, os.Chmod(filepath.Join(d, "x"), 0o644))
	must(t, os.Symlink("x", filepath.Join(d, "l")))
	must(t, os.Remove(filepath.Join(d, "l")))
	must(t, os.Remove(filepath.Join(d, "x")))
	must(t, os.RemoveAll(d))
	if _, err := os.Lstat(m.BackingPath("sub", fs.InternalDir)); !os.IsNotExist(err) {
		t.Errorf("sub/.safefs still in BACKING: %v", err)
	}
	if _, err := os.Lstat(m.BackingPath(fs.InternalDir, "journal")); err != nil {
		t.Errorf("the real internal directory suffered: %v", err)
	}
}
