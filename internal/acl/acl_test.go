package acl

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func encodeACL(es ...Entry) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint16(b, e.Tag)
		b = binary.LittleEndian.AppendUint16(b, e.Perm)
		b = binary.LittleEndian.AppendUint32(b, e.ID)
	}
	return b
}

const anyID = ^uint32(0)

// The cases of the kernel's posix_acl_permission, for caller uid 33 gid 33.
func TestACLAllows(t *testing.T) {
	st := &unix.Stat_t{Uid: 0, Gid: 50}
	const uid = 33
	inGroup := func(gid uint32) bool { return gid == 33 }
	obj := func(tag, perm uint16) Entry { return Entry{tag, perm, anyID} }
	for _, tc := range []struct {
		name string
		acl  []Entry
		want uint16
		ok   bool
	}{
		{"other grants", []Entry{obj(UserObj, 6), obj(GroupObj, 4), obj(Other, 4)}, 4, true},
		{"named user denies though other grants", []Entry{obj(UserObj, 6), {User, 0, 33}, obj(GroupObj, 4), obj(Mask, 4), obj(Other, 4)}, 4, false},
		{"named user masked", []Entry{obj(UserObj, 6), {User, 6, 33}, obj(GroupObj, 4), obj(Mask, 4), obj(Other, 0)}, 2, false},
		{"named user grants", []Entry{obj(UserObj, 6), {User, 6, 33}, obj(GroupObj, 0), obj(Mask, 6), obj(Other, 0)}, 6, true},
		{"named group masked", []Entry{obj(UserObj, 6), obj(GroupObj, 0), {Group, 6, 33}, obj(Mask, 4), obj(Other, 6)}, 2, false},
		{"group class found denies other", []Entry{obj(UserObj, 6), obj(GroupObj, 0), {Group, 0, 33}, obj(Mask, 7), obj(Other, 7)}, 4, false},
		{"no single group entry grants both", []Entry{obj(UserObj, 6), obj(GroupObj, 0), {Group, 4, 33}, {Group, 2, 33}, obj(Mask, 7), obj(Other, 0)}, 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.ok, Allows(tc.acl, st, uid, inGroup, tc.want))
		})
	}
	owner := &unix.Stat_t{Uid: 33, Gid: 50}
	assert.False(t, Allows([]Entry{obj(UserObj, 4), obj(GroupObj, 7), obj(Other, 7)}, owner, uid, inGroup, 2),
		"the owner's entry decides alone")
}

// Parse reads what the kernel stores, and refuses anything else.
func TestParse(t *testing.T) {
	want := []Entry{{UserObj, 6, anyID}, {User, 4, 33}, {GroupObj, 4, anyID}, {Mask, 4, anyID}, {Other, 0, anyID}}
	got, err := Parse(encodeACL(want...))
	require.NoError(t, err)
	assert.Equal(t, want, got)
	for _, bad := range [][]byte{nil, {2, 0, 0}, {1, 0, 0, 0}, append(encodeACL(want...), 0)} {
		_, err := Parse(bad)
		assert.Error(t, err, "%x", bad)
	}
}

// A file's access ACL and a directory's default ACL are read through
// the descriptor.
func TestAccessAndDefault(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	acl := []Entry{{UserObj, 6, anyID}, {User, 0, 33}, {GroupObj, 4, anyID}, {Mask, 4, anyID}, {Other, 4, anyID}}
	if err := unix.Setxattr(p, AccessXattr, encodeACL(acl...), 0); err != nil {
		t.Skipf("no ACLs here: %v", err)
	}
	open := func(p string) int {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		require.NoError(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	assert.Equal(t, acl, Access(open(p)))
	assert.Nil(t, Access(open(dir)), "no access ACL")
	assert.False(t, HasDefault(open(dir)))
	def := []Entry{{UserObj, 7, anyID}, {GroupObj, 5, anyID}, {Other, 5, anyID}}
	require.NoError(t, unix.Setxattr(dir, DefaultXattr, encodeACL(def...), 0))
	assert.True(t, HasDefault(open(dir)))
}
