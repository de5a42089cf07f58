package fs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/mountinfo"
	"github.com/safefs/safefs/internal/mountroot"
)

// aclProbe mounts with the FUSE request trace in an observed log, and
// lets a user who owns nothing read a page through the mount.
type aclProbe struct {
	t    *testing.T
	logs *observer.ObservedLogs
	mnt  string
}

func newACLProbe(t *testing.T) *aclProbe {
	_, backing, mnt, logs := mountTraced(t, func(o *Options) { o.AllowOther = true })
	// The temporary directories above the mount are 0700.
	for d := filepath.Dir(mnt); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	require.NoError(t, os.Chmod(backing, 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(backing, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(backing, "sub", "page"), []byte("page\n"), 0o644))
	return &aclProbe{t: t, logs: logs, mnt: mnt}
}

// read reads the page as uid 33 (www-data on Debian), by its path.
func (p *aclProbe) read() {
	cmd := exec.Command("cat", filepath.Join(p.mnt, "sub", "page"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 33, Gid: 33}}
	out, err := cmd.CombinedOutput()
	require.NoError(p.t, err, "%s", out)
	require.Equal(p.t, "page\n", string(out))
}

// topAsks counts the requests for the top's ACL the daemon has received.
func (p *aclProbe) topAsks() int {
	return p.logs.FilterMessageSnippet("GETXATTR " + p.topID() + " ").FilterMessageSnippet("posix_acl_access").Len()
}

// topID is the top's node as the request trace names it: the FUSE
// root's, or the one the lookup of topName in it got.
func (p *aclProbe) topID() string {
	msgs := fuseTrace(p.logs)
	if node, _ := replyNode(p.t, msgs, func(m string) bool { return strings.Contains(m, `LOOKUP n1  "`+topName+`"`) }); node != "" {
		return node
	}
	return "n1"
}

// rootField is the mount's root as /proc/self/mountinfo shows it.
func (p *aclProbe) rootField() string {
	ms, err := mountinfo.Read(mountinfo.Self)
	require.NoError(p.t, err)
	for _, m := range ms {
		if m.Point == p.mnt {
			return m.Root
		}
	}
	p.t.Fatalf("%s is not in the mount table", p.mnt)
	return ""
}

// The mount's root is a bind mount of an ordinary inode, whose ACL the
// kernel caches: a web server walking through it does not ask for it
// at each path walk, as it does for a FUSE root inode.
func TestMountRootACLCached(t *testing.T) {
	p := newACLProbe(t)
	require.Equal(t, "/"+topName, p.rootField(), "the root was not swapped")
	p.read()
	before := p.topAsks()
	for range walks {
		p.read()
	}
	// The kernel asks again once its attributes expire (1 s): that
	// the walks take longer than half a second each is not likely.
	require.Less(t, p.topAsks()-before, walks/2, "requests for the top's ACL in %d walks (top %s)", walks, p.topID())
}

// walks is how many times the tests read the page.
const walks = 10

// Where the root cannot be swapped (not root, an old kernel, or a swap
// that fails half way), the mount serves with the kernel's root inode.
func TestMountRootKept(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func()
	}{
		{"no_swap", func() { noSwapRoot = true }},
		{"swap_fails_detached", func() {
			swapRoot = func(mnt string) error {
				if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
					return err
				}
				return mountroot.ErrSwapDetached
			}
		}},
		{"swap_fails", func() {
			swapRoot = func(string) error { return mountroot.ErrSwap }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.set()
			t.Cleanup(func() { noSwapRoot, swapRoot = false, swapMount })
			p := newACLProbe(t)
			require.Equal(t, "/", p.rootField())
			require.Equal(t, "n1", p.topID())
			p.read()
			before := p.topAsks()
			for range walks {
				p.read()
			}
			// The kernel's behaviour, not safefs's: logged, not asserted.
			t.Logf("requests for the top's ACL in %d walks through the kernel's root: %d", walks, p.topAsks()-before)
		})
	}
}
