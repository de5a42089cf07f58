package container

// Local stand-ins for the Dockerfile's base images, built from a
// debootstrap rootfs and kept between runs (the tarball under cacheRoot and
// the two named images are the cache).

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// suite is the Debian release of the Dockerfile's default images.
const suite = "bookworm"

const defaultMirror = "http://deb.debian.org/debian"

// cacheRoot holds one rootfs tarball per mirror.
func cacheRoot() string {
	if d := os.Getenv("SAFEFS_CI_CACHE"); d != "" {
		return d
	}
	return "/var/cache/safefs-ci"
}

// baseImages returns images standing in for BASE_IMAGE (debian slim) and
// GO_IMAGE (golang): a minbase rootfs, and the same with the host's Go.
func baseImages(t *testing.T, p *podman) (base, goImage string) {
	t.Helper()
	mirror := debianMirror(t)
	key := fmt.Sprintf("%x", sha256.Sum256([]byte(suite+" minbase "+mirror)))[:12]
	require.NoError(t, os.MkdirAll(cacheRoot(), 0o755))
	unlock := lockCache(t)
	defer unlock()

	base = "localhost/safefs-ci-base:" + key
	if !p.exists(base) {
		tarball := rootfsTar(t, mirror, key)
		timed(t, "imported "+base, func() { p.run(t, buildLimit, "import", tarball, base) })
	}
	goroot, version := goEnv(t, "GOROOT"), goEnv(t, "GOVERSION")
	goImage = "localhost/safefs-ci-go:" + key + "-" + version
	if !p.exists(goImage) {
		timed(t, "built "+goImage, func() { buildGoImage(t, p, base, goroot, goImage) })
	}
	return base, goImage
}

// lockCache serializes runs that share the cache.
func lockCache(t *testing.T) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(cacheRoot(), "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	require.NoError(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
	return func() { f.Close() }
}

// rootfsTar returns the cached tarball of a minbase rootfs from mirror,
// running debootstrap on a miss.
func rootfsTar(t *testing.T, mirror, key string) string {
	t.Helper()
	dir := filepath.Join(cacheRoot(), key)
	tarball := filepath.Join(dir, "rootfs.tar")
	if _, err := os.Stat(tarball); err == nil {
		return tarball
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	rootfs, err := os.MkdirTemp(dir, "rootfs-")
	require.NoError(t, err)
	defer removeRootfs(t, rootfs)

	timed(t, "debootstrap from "+mirror, func() {
		runTool(t, "debootstrap", "--variant=minbase", suite, rootfs, mirror)
	})
	runTool(t, "tar", "--numeric-owner", "-C", rootfs, "-cf", tarball+".tmp", ".")
	require.NoError(t, os.Rename(tarball+".tmp", tarball))
	return tarball
}

// removeRootfs removes a rootfs, first detaching what a failed
// debootstrap may have left mounted in it (its /proc, /sys).
func removeRootfs(t *testing.T, rootfs string) {
	for _, m := range mountsUnder(t, rootfs) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Errorf("cleanup: unmount %s: %v", m, err)
			return
		}
	}
	if err := os.RemoveAll(rootfs); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// mountsUnder lists the mount points under dir, deepest first.
func mountsUnder(t *testing.T, dir string) []string {
	data, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	var found []string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			found = append(found, f[1])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(found)))
	return found
}

// buildGoImage adds the host's Go toolchain to base, laid out like the
// golang image (GOROOT /usr/local/go, GOPATH /go). Debian's own golang
// package is too old for go.mod.
func buildGoImage(t *testing.T, p *podman, base, goroot, image string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "Containerfile")
	text := "FROM " + base + "\nCOPY . /usr/local/go\n" +
		"ENV GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
	require.NoError(t, os.WriteFile(file, []byte(text), 0o644))
	p.run(t, buildLimit, "build", "--layers=false", "--force-rm", "-f", file, "-t", image, goroot)
}

func runTool(t *testing.T, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildLimit)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), tail(string(out)))
}

// debianMirror is the machine's APT mirror for suite (the one that can be
// reached from CI), SAFEFS_DEBIAN_MIRROR if set, else deb.debian.org.
func debianMirror(t *testing.T) string {
	t.Helper()
	if m := os.Getenv("SAFEFS_DEBIAN_MIRROR"); m != "" {
		return m
	}
	files := []string{"/etc/apt/sources.list"}
	for _, pattern := range []string{"*.list", "*.sources"} {
		more, err := filepath.Glob("/etc/apt/sources.list.d/" + pattern)
		require.NoError(t, err)
		files = append(files, more...)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if m := mirrorIn(string(data), strings.HasSuffix(f, ".sources")); m != "" {
			return m
		}
	}
	return defaultMirror
}

// mirrorIn returns the first URI serving suite in an APT sources file,
// one-line format or deb822, or "".
func mirrorIn(text string, deb822 bool) string {
	if deb822 {
		return mirrorIn822(text)
	}
	for _, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // options: [arch=amd64 signed-by=...]
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) > 0 {
				f = f[1:]
			}
		}
		if len(f) >= 2 && f[1] == suite {
			return f[0]
		}
	}
	return ""
}

func mirrorIn822(text string) string {
	for _, para := range strings.Split(text, "\n\n") {
		fields := map[string][]string{}
		for _, line := range strings.Split(para, "\n") {
			if strings.HasPrefix(line, "#") {
				continue
			}
			if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, " ") {
				fields[strings.ToLower(k)] = strings.Fields(v)
			}
		}
		if slices.Contains(fields["types"], "deb") && slices.Contains(fields["suites"], suite) &&
			!slices.Contains(fields["enabled"], "no") && len(fields["uris"]) > 0 {
			return fields["uris"][0]
		}
	}
	return ""
}

// timed logs how long f took, to measure cold and warm runs.
func timed(t *testing.T, what string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	t.Logf("%s in %v", what, time.Since(start).Round(time.Second))
}
