package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/packaging/manpage"
)

func requireDpkgDeb(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("dpkg-deb is missing and CI is set: CI runs on Debian")
		}
		t.Skip("dpkg-deb is missing")
	}
}

func dpkgDeb(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("dpkg-deb", args...).Output()
	require.NoError(t, err, "dpkg-deb %v", args)
	return string(out)
}

// TestDeb: the package holds the stamped static binary where mount.fuse3
// finds it, the man page made from docs/manual.md, the unit pointing at
// that binary, the docs and the CGI examples, and depends on fuse3.
func TestDeb(t *testing.T) {
	requireDpkgDeb(t)
	out := t.TempDir()
	t.Setenv("SOURCE_DATE_EPOCH", "1796618580") // 2026-12-07T04:43:00Z
	require.NoError(t, run(out, runtime.GOARCH, true, "Test <test@safefs.invalid>"))
	root, err := findRoot()
	require.NoError(t, err)
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	require.NoError(t, err)
	version := strings.TrimSpace(string(v))
	arch := map[string]string{"amd64": "amd64", "arm64": "arm64", "386": "i386"}[runtime.GOARCH]
	require.NotEmpty(t, arch, "add %s's Debian name here", runtime.GOARCH)
	debFile := filepath.Join(out, "safefs_"+version+"_"+arch+".deb")
	require.FileExists(t, debFile)

	for field, want := range map[string]string{"Package": "safefs", "Version": version, "Architecture": arch,
		"Depends": "fuse3", "Maintainer": "Test <test@safefs.invalid>"} {
		assert.Equal(t, want, strings.TrimSpace(dpkgDeb(t, "-f", debFile, field)), field)
	}
	list := dpkgDeb(t, "-c", debFile)
	for _, want := range []string{"-rwxr-xr-x root/root", "./usr/sbin/safefs\n", "./usr/share/man/man8/safefs.8.gz\n",
		"./lib/systemd/system/safefs.service\n", "./usr/share/doc/safefs/operations.md\n",
		"./usr/share/doc/safefs/manual.md\n", "./usr/share/doc/safefs/examples/counter.pl\n",
		"./usr/share/doc/safefs/examples/guestbook.pl\n", " 2026-12-07 04:43 "} {
		assert.Contains(t, list, want)
	}
	assert.Contains(t, dpkgDeb(t, "-I", debFile), "postinst")

	tree := t.TempDir()
	dpkgDeb(t, "-x", debFile, tree)
	got, err := exec.Command(filepath.Join(tree, "usr/sbin/safefs"), "version").Output()
	require.NoError(t, err)
	assert.Regexp(t, `^safefs `+strings.ReplaceAll(version, ".", `\.`)+` \(commit [0-9a-f]{12}(-dirty)?, date 2026-12-07T04:43:00Z, go`, string(got))
	require.NoError(t, checkStatic(filepath.Join(tree, "usr/sbin/safefs")))

	unit, err := os.ReadFile(filepath.Join(tree, "lib/systemd/system/safefs.service"))
	require.NoError(t, err)
	assert.Contains(t, string(unit), "\nExecStart=/usr/sbin/safefs mount ")
	assert.NotContains(t, string(unit), "/usr/local/bin")

	gz, err := os.Open(filepath.Join(tree, "usr/share/man/man8/safefs.8.gz"))
	require.NoError(t, err)
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	require.NoError(t, err)
	page, err := io.ReadAll(zr)
	require.NoError(t, err)
	manual, err := os.ReadFile(filepath.Join(root, "docs/manual.md"))
	require.NoError(t, err)
	s, err := readStamp(root)
	require.NoError(t, err)
	want, err := manpage.Render(manual, version, s.date)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, page), "the packaged man page is not docs/manual.md's")
}

// TestSafefsHasNoPackagingDeps: nfpm is this module's, never a dependency
// of the safefs binary.
func TestSafefsHasNoPackagingDeps(t *testing.T) {
	root, err := findRoot()
	require.NoError(t, err)
	cmd := exec.Command("go", "list", "-deps", "./cmd/safefs")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "github.com/hanwen/go-fuse/v2/fuse\n")
	for _, pkg := range strings.Fields(string(out)) {
		assert.False(t, strings.Contains(pkg, "goreleaser") || strings.Contains(pkg, "safefs/packaging"), "safefs depends on %s", pkg)
	}
}

func TestUnitRewrite(t *testing.T) {
	root, err := findRoot()
	require.NoError(t, err)
	u, err := unit(root)
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(u), "ExecStart=/usr/sbin/safefs "))
}

// TestDebReproducible: two builds of one tree are the same bytes (the
// date is the commit's, or SOURCE_DATE_EPOCH's).
func TestDebReproducible(t *testing.T) {
	requireDpkgDeb(t)
	var debs [][]byte
	for range 2 {
		out := t.TempDir()
		require.NoError(t, run(out, runtime.GOARCH, true, "Test <test@safefs.invalid>"))
		found, err := filepath.Glob(filepath.Join(out, "*.deb"))
		require.NoError(t, err)
		require.Len(t, found, 1)
		b, err := os.ReadFile(found[0])
		require.NoError(t, err)
		debs = append(debs, b)
	}
	assert.True(t, bytes.Equal(debs[0], debs[1]), "two builds differ")
}
