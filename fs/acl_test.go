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
)

func encodeACL(es ...aclEntry) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

const anyID = ^uint32(0)

// The cases of the kernel's posix_acl_permission, for caller uid 33 gid 33.
func TestACLAllows(t *testing.T) {
	st := &unix.Stat_t{Uid: 0, Gid: 50}
	c := &fuse.Caller{Owner: fuse.Owner{Uid: 33, Gid: 33}}
	obj := func(tag, perm uint16) aclEntry { return aclEntry{tag, perm, anyID} }
	for _, tc := range []struct {
		name string
		acl  []aclEntry
		want uint16
		ok   bool
	}{
		{"other grants", []aclEntry{obj(aclUserObj, 6), obj(aclGroupObj, 4), obj(aclOther, 4)}, 4, true},
		{"named user denies though other grants", []aclEntry{obj(aclUserObj, 6), {aclUser, 0, 33}, obj(aclGroupObj, 4), obj(aclMask, 4), obj(aclOther, 4)}, 4, false},
		{"named user masked", []aclEntry{obj(aclUserObj, 6), {aclUser, 6, 33}, obj(aclGroupObj, 4), obj(aclMask, 4), obj(aclOther, 0)}, 2, false},
		{"named user grants", []aclEntry{obj(aclUserObj, 6), {aclUser, 6, 33}, obj(aclGroupObj, 0), obj(aclMask, 6), obj(aclOther, 0)}, 6, true},
		{"named group masked", []aclEntry{obj(aclUserObj, 6), obj(aclGroupObj, 0), {aclGroup, 6, 33}, obj(aclMask, 4), obj(aclOther, 6)}, 2, false},
		{"group class found denies other", []aclEntry{obj(aclUserObj, 6), obj(aclGroupObj, 0), {aclGroup, 0, 33}, obj(aclMask, 7), obj(aclOther, 7)}, 4, false},
		{"no single group entry grants both", []aclEntry{obj(aclUserObj, 6), obj(aclGroupObj, 0), {aclGroup, 4, 33}, {aclGroup, 2, 33}, obj(aclMask, 7), obj(aclOther, 0)}, 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.ok, aclAllows(tc.acl, st, c, tc.want))
		})
	}
	owner := &unix.Stat_t{Uid: 33, Gid: 50}
	assert.False(t, aclAllows([]aclEntry{obj(aclUserObj, 4), obj(aclGroupObj, 7), obj(aclOther, 7)}, owner, c, 2),
		"the owner's entry decides alone")
}

// mayOpen (the create race check) follows the file's ACL, not only its
// mode bits.
func TestMayOpenACL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	acl := encodeACL(aclEntry{aclUserObj, 6, anyID}, aclEntry{aclUser, 0, 33}, aclEntry{aclGroupObj, 4, anyID},
		aclEntry{aclMask, 4, anyID}, aclEntry{aclOther, 4, anyID})
	if err := unix.Setxattr(p, aclAccess, acl, 0); err != nil {
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
