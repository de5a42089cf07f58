package container

// The package as an operator installs it: `make deb` on this machine, the
// .deb installed into a clean Debian bookworm container, and there every
// command of docs/operations.md's "Protecting a CGI data directory"
// (with Apache, then with nginx and fcgiwrap) run as written, under ab -c 16.

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// webPackages are installed in the image the test starts from, with
// fuse3's packages downloaded but not installed: the .deb's dependency is
// installed by apt from them, with no network in the container.
var webPackages = []string{"apache2", "apache2-utils", "nginx", "fcgiwrap", "spawn-fcgi", "man-db"}

// requests is what each ab of the walkthrough's check sends.
const requests = 200

func TestDebInstall(t *testing.T) {
	requireContainers(t)
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			cannotRun(t, tool+" is missing")
		}
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	blocks := docBlocks(t, filepath.Join(root, "docs/operations.md"))
	p := newPodman(t)
	base, _ := baseImages(t, p)
	web := webImage(t, p, base)

	var deb string
	timed(t, "ran the build block (make deb)", func() { deb = hostBlock(t, root, blocks["build"]) })
	name := startInstallContainer(t, p, web)
	p.run(t, stepLimit, "cp", deb, name+":/root/")

	version := readVersion(t, root)
	out := docBlock(t, p, name, blocks, "install")
	assert.Regexp(t, `(?m)^safefs `+regexp.QuoteMeta(version)+` \(commit [0-9a-f]{12}(-dirty)?, date \S+, go`, out)
	for _, want := range []string{"SAFEFS(8)", "EXIT CODES", "allow_other", "fusermount3"} {
		assert.Contains(t, out, want, "man safefs")
	}
	assert.Contains(t, inContainer(t, p, name, "whatis safefs"), "safefs (8)")
	assert.Contains(t, inContainer(t, p, name, "dpkg -s fuse3"), "Status: install ok installed", "the dependency")
	inContainer(t, p, name, "test -f /lib/systemd/system/safefs.service && ! test -e /etc/systemd/system/multi-user.target.wants/safefs.service") // installed, disabled

	// The host before: the scripts' data in /var/www/data, www-data's.
	inContainer(t, p, name, `mkdir -p /var/www/data && echo old > /var/www/data/old.txt && chown -R www-data: /var/www/data`)
	out = docBlock(t, p, name, blocks, "mount")
	assert.NotContains(t, out, "warning", "mount's output") // no allow_other, or no log
	assert.Contains(t, inContainer(t, p, name, "cat /proc/mounts"), "/srv/data /var/www/data fuse.safefs ")
	assert.Equal(t, "old\n", inContainer(t, p, name, "su -s /bin/sh -c 'cat /var/www/data/old.txt' www-data"))

	docBlock(t, p, name, blocks, "apache")
	checkBlock(t, p, name, blocks, 1)
	inContainer(t, p, name, "service apache2 stop") // the same host with nginx instead
	docBlock(t, p, name, blocks, "nginx")
	checkBlock(t, p, name, blocks, 2)
	docBlock(t, p, name, blocks, "stop")

	assert.NotContains(t, inContainer(t, p, name, "cat /proc/mounts"), "fuse.safefs", "still mounted")
	assert.Equal(t, fmt.Sprintf("%d\n", 2*requests), inContainer(t, p, name, "cat /srv/data/counter.txt"))
	checkGuestbook(t, inContainer(t, p, name, "cat /srv/data/guestbook.txt"), 2*requests)
	log := inContainer(t, p, name, "cat /var/log/safefs.log")
	assert.Regexp(t, `(?m)\tunmounted from outside$`, log)
	assert.Contains(t, log, `"rejected": 0,`)
	assert.NotContains(t, log, "\tERROR\t")
	assert.NotContains(t, log, "\tWARN\t")
	assert.Empty(t, inContainer(t, p, name, "grep -lx safefs /proc/[0-9]*/comm || true"), "a daemon is left")
}

// docBlocks returns the sh blocks of operations.md marked
// <!-- install-test: NAME -->, and fails unless every sh block of the
// walkthrough is marked: every command in it is run here.
func docBlocks(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	marker := regexp.MustCompile(`^<!-- install-test: (\w+) -->$`)
	blocks := map[string]string{}
	section, name := "", ""
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "## "):
			section = line[3:]
		case marker.MatchString(line):
			name = marker.FindStringSubmatch(line)[1]
		case line == "```sh":
			var body []string
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				body = append(body, lines[i])
			}
			if name == "" {
				require.NotEqual(t, "Protecting a CGI data directory", section,
					"a command block of the walkthrough without an install-test marker: the test would not run it")
				continue
			}
			require.NotContains(t, blocks, name, "two blocks named %s", name)
			blocks[name] = strings.Join(body, "\n") + "\n"
			name = ""
		}
	}
	for _, want := range []string{"build", "install", "mount", "apache", "nginx", "check", "stop"} {
		require.Contains(t, blocks, want, "docs/operations.md has no install-test block %q", want)
	}
	return blocks
}

// hostBlock runs the build block in the repository and returns the .deb
// it made.
func hostBlock(t *testing.T, root, block string) string {
	t.Helper()
	cmd := exec.Command("bash", "-e", "-c", block)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", block, tail(string(out)))
	arch := map[string]string{"amd64": "amd64", "arm64": "arm64", "386": "i386"}[runtime.GOARCH]
	require.NotEmpty(t, arch, "the Debian name of %s", runtime.GOARCH)
	deb := filepath.Join(root, "dist", "safefs_"+readVersion(t, root)+"_"+arch+".deb")
	require.FileExists(t, deb)
	return deb
}

func readVersion(t *testing.T, root string) string {
	t.Helper()
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	require.NoError(t, err)
	return strings.TrimSpace(string(v))
}

// webImage is base with the web servers, ab and man-db, and fuse3's
// packages downloaded; built once and kept, like the base.
func webImage(t *testing.T, p *podman, base string) string {
	t.Helper()
	install := strings.Join(webPackages, " ")
	key := fmt.Sprintf("%x", sha256.Sum256([]byte(base+" "+install)))[:12]
	image := "localhost/safefs-ci-web:" + key
	unlock := lockCache(t)
	defer unlock()
	if p.exists(image) {
		return image
	}
	file := filepath.Join(t.TempDir(), "Containerfile")
	text := "FROM " + base + "\n" +
		"RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends " + install +
		" && apt-get install -y --download-only fuse3\n"
	require.NoError(t, os.WriteFile(file, []byte(text), 0o644))
	timed(t, "built "+image, func() {
		p.run(t, buildLimit, "build", "--network", "host", "--layers=false", "--force-rm", "-f", file, "-t", image, filepath.Dir(file))
	})
	return image
}

// startInstallContainer starts a container of image with no network but
// its own loopback, /dev/fuse and CAP_SYS_ADMIN (mount), and an init
// that reaps (the init scripts wait for their daemons to be gone).
func startInstallContainer(t *testing.T, p *podman, image string) string {
	t.Helper()
	name := "safefs-ci-install-" + suffix()
	t.Cleanup(func() { p.cleanup(t, "rm", "--ignore", "--force", "--time", "0", name) })
	p.run(t, stepLimit, "run", "-d", "--init", "--name", name, "--network", "none",
		"--device", "/dev/fuse", "--cap-add", "SYS_ADMIN", image, "sleep", "infinity")
	return name
}

// inContainer runs a shell command in the container as root, which must
// succeed, and returns its output.
func inContainer(t *testing.T, p *podman, name, script string) string {
	t.Helper()
	return p.run(t, stepLimit, "exec", "-w", "/root", "-e", "DEBIAN_FRONTEND=noninteractive", name, "bash", "-e", "-c", script)
}

// docBlock runs the block of the walkthrough named so, as written, and
// returns its standard output; its standard error is in a failure's
// message, and in the result of the mount block, which ought to have
// none.
func docBlock(t *testing.T, p *podman, name string, blocks map[string]string, block string) string {
	t.Helper()
	var out, errOut string
	var err error
	timed(t, "ran the "+block+" block", func() {
		out, errOut, err = p.try(stepLimit, "exec", "-w", "/root", "-e", "DEBIAN_FRONTEND=noninteractive", name,
			"bash", "-e", "-c", blocks[block])
	})
	require.NoError(t, err, "the %s block:\n%s\nstdout:\n%s\nstderr:\n%s", block, blocks[block], tail(out), tail(errOut))
	if block == "mount" {
		return out + errOut
	}
	return out
}

// checkBlock runs the walkthrough's check, its run-th: every request
// answered, the counter exact, one guestbook entry per request.
func checkBlock(t *testing.T, p *podman, name string, blocks map[string]string, run int) {
	t.Helper()
	out := docBlock(t, p, name, blocks, "check")
	want := fmt.Sprintf("Complete requests:      %d\nFailed requests:        0\n", requests)
	want += want + fmt.Sprintf("%d\n%d\n", run*requests, run*requests)
	assert.Equal(t, want, out, "the check's output, run %d", run)
}

// checkGuestbook: n entries, each whole (its five lines together, its
// id at both ends) and none twice.
func checkGuestbook(t *testing.T, text string, n int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	require.Len(t, lines, 5*n, "guestbook lines")
	seen := map[string]bool{}
	for i := 0; i < len(lines); i += 5 {
		id, ok := strings.CutPrefix(lines[i], "--- entry ")
		require.True(t, ok, "line %d: %q: not an entry's first line", i+1, lines[i])
		require.False(t, seen[id], "entry %s twice", id)
		seen[id] = true
		require.Equal(t, "name: ab", lines[i+1], "entry %s", id)
		require.True(t, strings.HasPrefix(lines[i+2], "date: "), "entry %s: %q", id, lines[i+2])
		require.Equal(t, "text: hello", lines[i+3], "entry %s", id)
		require.Equal(t, "--- end "+id, lines[i+4], "entry %s", id)
	}
}
