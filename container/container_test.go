// Package container tests the Dockerfile: it builds the image on local
// base images (CI machines cannot pull from a registry) and mounts safefs
// in a container, as an operator would run it.
package container

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// guardEnv keeps this slow test out of the ordinary `go test ./...`;
// .ci/container sets it.
const guardEnv = "SAFEFS_CONTAINER_TEST"

// The limits only turn a hang into a failure; no assertion depends on them.
const (
	buildLimit = 20 * time.Minute
	stepLimit  = 2 * time.Minute
)

func TestContainerMount(t *testing.T) {
	requireContainers(t)
	p := newPodman(t)
	base, goImage := baseImages(t, p)
	image := buildImage(t, p, base, goImage)
	host := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(host, "from-host"), []byte("host bytes\n"), 0o644))
	name := runContainer(t, p, image, host)
	p.waitLog(t, name, "\tmounted\t")
	checkMount(t, p, name, host)
	stopContainer(t, p, name)
}

// requireContainers skips unless the test is asked for and can run; in
// CI a missing tool or device fails instead.
func requireContainers(t *testing.T) {
	t.Helper()
	if os.Getenv(guardEnv) != "1" {
		t.Skipf("slow (builds a Debian base and the image): set %s=1 to run it, as .ci/container does", guardEnv)
	}
	if os.Geteuid() != 0 {
		cannotRun(t, "not root: debootstrap and a FUSE mount in a container need root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		cannotRun(t, "/dev/fuse is missing")
	}
	for _, tool := range []string{"podman", "runc", "debootstrap", "tar", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			cannotRun(t, tool+" is missing")
		}
	}
}

func cannotRun(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s, and CI is set: .ci/container must provide it", why)
	}
	t.Skip(why)
}

// buildImage builds the repository's Dockerfile on the local bases and
// removes the image at cleanup.
func buildImage(t *testing.T, p *podman, base, goImage string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	tag := "localhost/safefs-ci-test:" + suffix()
	t.Cleanup(func() { p.cleanup(t, "rmi", "--ignore", "--force", tag) })
	args := []string{"build", "--network", "host", "--layers=false", "--force-rm",
		"--build-arg", "GO_IMAGE=" + goImage, "--build-arg", "BASE_IMAGE=" + base, "-t", tag}
	args = append(args, buildVolumes(t)...)
	timed(t, "built "+tag, func() {
		p.run(t, buildLimit, append(args, "-f", filepath.Join(root, "Dockerfile"), root)...)
	})
	return tag
}

// buildVolumes lends the build stage the host's Go caches, so a warm run
// neither downloads nor compiles again, and the host's CA bundle, which a
// machine behind a TLS-inspecting proxy needs to reach the module proxy.
func buildVolumes(t *testing.T) []string {
	t.Helper()
	var vols []string
	for env, dest := range map[string]string{"GOMODCACHE": "/go/pkg/mod", "GOCACHE": "/root/.cache/go-build"} {
		dir := goEnv(t, env)
		if !filepath.IsAbs(dir) { // GOCACHE=off
			continue
		}
		require.NoError(t, os.MkdirAll(dir, 0o755))
		vols = append(vols, "-v", dir+":"+dest)
	}
	const ca = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(ca); err == nil {
		vols = append(vols, "-v", ca+":"+ca+":ro")
	}
	return vols
}

// runContainer starts the image's default command (safefs mount -o
// allow_other /data /mnt/safe) with host bind-mounted as /data.
func runContainer(t *testing.T, p *podman, image, host string) string {
	t.Helper()
	name := "safefs-ci-" + suffix()
	t.Cleanup(func() { p.cleanup(t, "rm", "--ignore", "--force", name) })
	p.run(t, stepLimit, "run", "-d", "--name", name, "--network", "host",
		"--device", "/dev/fuse", "--cap-add", "SYS_ADMIN", "-v", host+":/data", image)
	return name
}

// checkMount reads and writes through the mount from inside the container
// and checks the bytes in the host's directory.
func checkMount(t *testing.T, p *podman, name, host string) {
	t.Helper()
	mounts := p.run(t, stepLimit, "exec", name, "cat", "/proc/mounts")
	require.Contains(t, mounts, "/data /mnt/safe fuse.safefs ", "no safefs mount on /mnt/safe")
	require.Equal(t, "host bytes\n", p.run(t, stepLimit, "exec", name, "cat", "/mnt/safe/from-host"))

	first, second := "written in the container\n", "appended in the container\n"
	p.run(t, stepLimit, "exec", name, "sh", "-c",
		`printf %s "$1" > /mnt/safe/out && printf %s "$2" >> /mnt/safe/out`, "sh", first, second)
	got, err := os.ReadFile(filepath.Join(host, "out"))
	require.NoError(t, err)
	require.Equal(t, first+second, string(got))
	// Committed, not left staged, by safefs over /data.
	staged, err := os.ReadDir(filepath.Join(host, ".safefs", "staging"))
	require.NoError(t, err)
	require.Empty(t, staged)
}

// stopContainer stops with SIGTERM: safefs must unmount and exit 0. A
// daemon that hangs is killed at the deadline, which shows as exit 137.
func stopContainer(t *testing.T, p *podman, name string) {
	t.Helper()
	p.run(t, stepLimit, "stop", "--time", "60", name)
	state := p.run(t, stepLimit, "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name)
	logs := p.logs(t, name)
	require.Equal(t, "exited 0", strings.TrimSpace(state), "logs:\n%s", logs)
	require.Regexp(t, `(?m)\tunmounted$`, logs)
	// The replace and the append were commits of safefs, not writes to
	// the bind mount around it.
	require.Regexp(t, `"commits": 2, "rejected": 0,`, logs)
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	require.NoError(t, err, "go env %s", name)
	v := strings.TrimSpace(string(out))
	require.NotEmpty(t, v, "go env %s", name)
	return v
}

func suffix() string { return fmt.Sprintf("%d-%08x", os.Getpid(), rand.Uint32()) }

// podman runs podman the way that works on the CI machines.
type podman struct{ env []string }

func newPodman(t *testing.T) *podman {
	t.Helper()
	// The default ulimits fail setrlimit on the CI machines.
	conf := filepath.Join(t.TempDir(), "containers.conf")
	require.NoError(t, os.WriteFile(conf, []byte("[containers]\ndefault_ulimits = []\n"), 0o644))
	p := &podman{env: append(os.Environ(), "CONTAINERS_CONF="+conf)}
	if _, errOut, err := p.try(stepLimit, "info"); err != nil {
		cannotRun(t, fmt.Sprintf("podman cannot run here (podman info: %v): %s", err, strings.TrimSpace(errOut)))
	}
	return p
}

// try runs podman and returns its stdout and stderr. It does not use
// t.Context, which is done before cleanups run.
func (p *podman) try(limit time.Duration, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	// crun fails on cgroups on the CI machines; runc with cgroupfs works.
	cmd := exec.CommandContext(ctx, "podman", append([]string{"--runtime", "runc", "--cgroup-manager", "cgroupfs"}, args...)...)
	cmd.Env = p.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

func (p *podman) run(t *testing.T, limit time.Duration, args ...string) string {
	t.Helper()
	out, errOut, err := p.try(limit, args...)
	require.NoError(t, err, "podman %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), tail(out), tail(errOut))
	return out
}

func (p *podman) cleanup(t *testing.T, args ...string) {
	if _, errOut, err := p.try(stepLimit, args...); err != nil {
		t.Errorf("cleanup: podman %s: %v: %s", strings.Join(args, " "), err, errOut)
	}
}

func (p *podman) exists(image string) bool {
	_, _, err := p.try(stepLimit, "image", "exists", image)
	return err == nil
}

// logs is the container's output; safefs logs to stderr.
func (p *podman) logs(t *testing.T, name string) string {
	t.Helper()
	out, errOut, err := p.try(stepLimit, "logs", name)
	require.NoError(t, err, "podman logs: %s", errOut)
	return out + errOut
}

// waitLog waits for want in the container's log, failing at once if the
// container stops.
func (p *podman) waitLog(t *testing.T, name, want string) {
	t.Helper()
	deadline := time.Now().Add(stepLimit)
	for !strings.Contains(p.logs(t, name), want) {
		state := p.run(t, stepLimit, "inspect", "--format", "{{.State.Status}}", name)
		if strings.TrimSpace(state) != "running" {
			t.Fatalf("container %s, waiting for %q; logs:\n%s", strings.TrimSpace(state), want, p.logs(t, name))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log after %v; logs:\n%s", want, stepLimit, p.logs(t, name))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tail keeps the end of a long output for a failure message.
func tail(s string) string {
	const n = 4000
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}
