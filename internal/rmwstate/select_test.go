package rmwstate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/rmw"
)

const uid = 33

// A glob selects every process of every user; a learned pair its
// program, and for a family pair the children of that program's
// process, in its name; a program or parent that cannot be told takes
// a session of its own.
func TestSelected(t *testing.T) {
	p := newFake()
	p.prog[100] = "/bin/sh /s.sh" // a script, family pair
	p.prog[101] = "/bin/cat"      // its child
	p.parent[101] = 100
	p.prog[200] = "/usr/bin/perl /c.pl" // a learned program
	p.tgid[201] = 200                   // one of its threads
	p.prog[300] = "/bin/grep"           // child of an unknown parent
	p.parent[300] = 42
	p.prog[400] = "/bin/ls" // child of init
	p.parent[400] = 1
	p.prog[500] = "/bin/other" // a child of no one known
	x, _ := newState(t, true, []string{"g/*"}, p)
	x.learned.AddFamily(rmw.Pair{UID: uid, Path: "f", Cmd: "/bin/sh /s.sh"})
	x.learned.Add(rmw.Pair{UID: uid, Path: "f", Cmd: "/usr/bin/perl /c.pl"})
	x.learned.Add(rmw.Pair{UID: uid, Path: "h", Cmd: "/usr/bin/perl /c.pl"})
	for _, c := range []struct {
		name       string
		tid, uid   uint32
		path       string
		as         uint32
		sel, class bool
	}{
		{"glob, any user", 7, 1000, "g/x", 0, true, false},
		{"unselected path", 201, uid, "other", 0, false, false},
		{"learned program's thread", 201, uid, "f", 0, true, true},
		{"another user", 201, 34, "f", 0, false, false},
		{"family pair's child: its parent's session", 101, uid, "f", 100, true, true},
		{"family pair itself", 100, uid, "f", 0, true, true},
		{"unknown program", 999, uid, "f", 0, true, false},
		{"unknown parent's program", 300, uid, "f", 0, true, false},
		{"child of init", 400, uid, "f", 0, false, false},
		{"no parent known", 500, uid, "f", 0, true, false},
		{"path without a family pair", 101, uid, "h", 0, false, false},
	} {
		as, sel, cls := x.Selected(c.tid, c.uid, []string{c.path})
		assert.Equal(t, c.as, as, c.name)
		assert.Equal(t, c.sel, sel, c.name)
		assert.Equal(t, c.class, cls != nil, c.name)
	}
	x.cfg.Auto = false
	_, sel, _ := x.Selected(201, uid, []string{"f"})
	assert.False(t, sel, "learned pairs select only in auto mode")
	_, sel, _ = x.Selected(201, uid, []string{"f", "g/y"})
	assert.True(t, sel, "any path of the file may match a glob")
}

// A class's read waits until the class is judged read-only, then takes
// no session; its write makes it a writing class again.
func TestGate(t *testing.T) {
	x, _ := newState(t, true, nil, newFake())
	skip, unneeded := x.Gate(nil, false, 1)
	assert.False(t, skip)
	assert.Nil(t, unneeded)
	cls := rmw.NewClasses().Get(rmw.Pair{UID: uid, Path: "f", Cmd: "c"}, "GET a")
	skip, unneeded = x.Gate(cls, false, 1)
	require.False(t, skip)
	require.NotNil(t, unneeded)
	tbl := x.Table(uid)
	for range rmw.ReadOnlyAfter {
		s, out, _ := tbl.Enter(context.Background(), 1, 5, nil, 0)
		require.Equal(t, rmw.Took, out)
		s.SetClass(cls)
		s.End()
	}
	<-unneeded
	skip, _ = x.Gate(cls, false, 1)
	assert.True(t, skip, "judged read-only: its reads take no session")
	skip, unneeded = x.Gate(cls, true, 1)
	assert.False(t, skip)
	assert.Nil(t, unneeded)
	skip, unneeded = x.Gate(cls, false, 1)
	assert.False(t, skip, "a class that wrote takes sessions again")
	assert.Nil(t, unneeded, "and is never judged again")
}

// A session just taken on a file a rename replaced is ended and the
// file now at the path entered instead.
func TestEnterCurrent(t *testing.T) {
	x, _ := newState(t, false, []string{"*"}, newFake())
	cur := uint64(2)
	s, out, _ := x.EnterCurrent(context.Background(), uid, 1, 5, nil, func() uint64 { return cur })
	require.Equal(t, rmw.Took, out)
	assert.Equal(t, uint64(2), s.Key())
	assert.Nil(t, x.Table(uid).Held(1), "the replaced file's session ended")
	assert.Same(t, s, x.Table(uid).Held(2))
	assert.Nil(t, x.Table(34).Held(2), "another user's table")
}

// A holder owns its session, and so does a thread of a child of its
// process; another process does not.
func TestOwns(t *testing.T) {
	p := newFake()
	p.parent[11] = 10
	p.tgid[12] = 11
	x, _ := newState(t, false, []string{"*"}, p)
	s, _, _ := x.Table(uid).Enter(context.Background(), 1, 10, nil, 0)
	assert.True(t, x.Owns(s, 10))
	assert.True(t, x.Owns(s, 12))
	assert.False(t, x.Owns(s, 20))
}
