package fs

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/acl"
)

func encodeACL(es ...acl.Entry) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint16(b, e.Tag)
		b = binary.LittleEndian.AppendUint16(b, e.Perm)
		b = binary.LittleEndian.AppendUint32(b, e.ID)
	}
	return b
}

const anyID = ^uint32(0)

// mayOpen (the create race check) follows the file's ACL, not only its
// mode bits.
func TestMayOpenACL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	e := func(tag, perm uint16, id uint32) acl.Entry { return acl.Entry{Tag: tag, Perm: perm, ID: id} }
	a := encodeACL(e(acl.UserObj, 6, anyID), e(acl.User, 0, 33), e(acl.GroupObj, 4, anyID),
		e(acl.Mask, 4, anyID), e(acl.Other, 4, anyID))
	if err := unix.Setxattr(p, acl.AccessXattr, a, 0); err != nil {
		t.Skipf("no ACLs here: %v", err)
	}
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(f.Fd()), &st))
	ctx := &fuse.Context{Caller: fuse.Caller{Owner: fuse.Owner{Uid: 33, Gid: 33}}}
	assert.Equal(t, syscall.EACCES, mayOpen(ctx, int(f.Fd()), &st, syscall.O_RDONLY), "user:33:--- denies")
	other := &fuse.Context{Caller: fuse.Caller{Owner: fuse.Owner{Uid: 34, Gid: 34}}}
	assert.NoError(t, mayOpen(other, int(f.Fd()), &st, syscall.O_RDONLY))
	assert.Equal(t, syscall.EACCES, mayOpen(other, int(f.Fd()), &st, syscall.O_WRONLY))
}

func TestUmaskRides(t *testing.T) {
	m, u := splitUmask(withUmask(unix.S_IFREG|0o666, 0o027))
	assert.Equal(t, uint32(unix.S_IFREG|0o666), m)
	assert.Equal(t, uint32(0o027), u)
	m, u = splitUmask(0o640)
	assert.Equal(t, uint32(0o640), m)
	assert.Zero(t, u)
}
