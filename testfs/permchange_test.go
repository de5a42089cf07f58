package testfs

// A permission change through the mount reaches every kernel inode of
// the file at once (security round 3): with cache=version a file has
// several (a reader's node, a writer's), each with attributes the
// kernel checks opens against, and a chmod or ACL change came through
// one of them. For up to 1 s after root's fchmod to 0600, www-data
// reopened /proc/self/fd/N of the file it held, for reading and for
// writing; a plain file system refuses both at once (EACCES).

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// permHolder is a running perm_reopen.pl.
type permHolder struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

// startPermHolder runs perm_reopen.pl on file as c, once the file is open.
func startPermHolder(t *testing.T, c Cred, file string) *permHolder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rmwDeadline) // a hang guard only
	cmd := Perl{Script: "perm_reopen.pl", Args: []string{file}, As: &c}.Command(ctx)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
		cancel()
	})
	h := &permHolder{in: in, out: bufio.NewScanner(out)}
	require.Equal(t, "OPEN", h.line(t))
	return h
}

func (h *permHolder) line(t *testing.T) string {
	t.Helper()
	require.True(t, h.out.Scan(), "perm_reopen.pl ended: %v", h.out.Err())
	return h.out.Text()
}

// step runs one step and returns its answer.
func (h *permHolder) step(t *testing.T, s string) string {
	t.Helper()
	_, err := io.WriteString(h.in, s+"\n")
	require.NoError(t, err)
	return h.line(t)
}

// TestVersionCachePermChange: www-data holds a reader of a 0666 file;
// root, through a writer (another kernel inode), revokes its access
// with fchmod(0600). www-data's next reopen of /proc/self/fd/N, for
// reading or writing, is refused (EACCES) with no wait. Each round
// first gives access back and has www-data's fstat cache the file's
// attributes in its node (1 s), which the revocation must drop.
func TestVersionCachePermChange(t *testing.T) {
	m, www, dir := setup(t, versionCache)
	file := filepath.Join(dir, "perm.txt")
	require.NoError(t, os.WriteFile(file, []byte("v1\n"), 0o666))
	require.NoError(t, os.Chmod(file, 0o666))
	h := startPermHolder(t, www, file)
	w, err := os.OpenFile(file, os.O_WRONLY, 0)
	require.NoError(t, err, "root's writer while www-data reads")
	defer w.Close()

	const rounds = 20
	let := 0
	for i := range rounds {
		require.NoError(t, w.Chmod(0o666))
		require.Equal(t, "MODE 666", h.step(t, "stat"), "round %d: access given back", i)
		require.True(t, strings.HasPrefix(h.step(t, "reopen"), "READ OK "), "round %d: premise: www-data reopens a 0666 file", i)
		require.Equal(t, "MODE 666", h.step(t, "stat"), "round %d", i)
		require.NoError(t, w.Chmod(0o600))
		if got := h.step(t, "reopen"); got != "READ ERR 13 WRITE ERR 13" {
			let++
			t.Logf("round %d: www-data's reopens after root's fchmod 0600: %s", i, got)
		}
	}
	assert.Zero(t, let, "rounds of %d in which a reopen after the revocation was not refused with EACCES", rounds)
	got, err := os.ReadFile(m.BackingPath("data", "perm.txt"))
	require.NoError(t, err)
	assert.Equal(t, "v1\n", string(got))
}

// aclGrant is a system.posix_acl_access value: owner rw, user uid rw,
// group and others nothing, mask rw.
func aclGrant(uid uint32) []byte {
	const none = 0xffffffff
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 6, none}, {0x02, 6, uid}, {0x04, 0, none}, {0x10, 6, none}, {0x20, 0, none}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// TestVersionCacheACLRevoke: as TestVersionCachePermChange, with the
// access given by an ACL entry for www-data on root's 0600 file and
// revoked by root's removal of the ACL through its writer.
func TestVersionCacheACLRevoke(t *testing.T) {
	_, www, dir := setup(t, versionCache)
	file := filepath.Join(dir, "acl.txt")
	require.NoError(t, os.WriteFile(file, []byte("v1\n"), 0o600))
	require.NoError(t, os.Chmod(file, 0o600))
	require.NoError(t, unix.Setxattr(file, "system.posix_acl_access", aclGrant(www.Uid), 0))
	h := startPermHolder(t, www, file)
	w, err := os.OpenFile(file, os.O_WRONLY, 0)
	require.NoError(t, err, "root's writer while www-data reads")
	defer w.Close()

	const rounds = 20
	let := 0
	for i := range rounds {
		require.NoError(t, unix.Fsetxattr(int(w.Fd()), "system.posix_acl_access", aclGrant(www.Uid), 0))
		require.True(t, strings.HasPrefix(h.step(t, "reopen"), "READ OK "), "round %d: premise: the ACL lets www-data reopen", i)
		h.step(t, "stat")
		require.NoError(t, unix.Fremovexattr(int(w.Fd()), "system.posix_acl_access"))
		if got := h.step(t, "reopen"); got != "READ ERR 13 WRITE ERR 13" {
			let++
			t.Logf("round %d: www-data's reopens after root removed its ACL: %s", i, got)
		}
	}
	assert.Zero(t, let, "rounds of %d in which a reopen after the revocation was not refused with EACCES", rounds)
}
