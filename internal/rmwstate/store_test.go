package rmwstate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/rmw"
)

// No file: nothing learned; a file that does not parse: learning starts
// again; a saved file: its pairs, learned again by a new state.
func TestStore(t *testing.T) {
	p := newFake()
	x, dir := newState(t, true, nil, p)
	assert.Zero(t, Load(dir, zap.NewNop()).Len())
	require.NoError(t, backing.WriteWhole(dir, LearnedName, []byte("not a pair\n")))
	assert.Zero(t, Load(dir, zap.NewNop()).Len())
	x.learned.Add(rmw.Pair{UID: uid, Path: "f", Cmd: "perl"})
	x.save()
	y := New(Config{Auto: true, Dir: dir, Procs: p, Log: zap.NewNop()})
	assert.True(t, y.learned.Has(rmw.Pair{UID: uid, Path: "f", Cmd: "perl"}))
	z := New(Config{Globs: []string{"*"}, Dir: dir, Procs: p, Log: zap.NewNop()})
	assert.Zero(t, z.learned.Len(), "without rmw=auto nothing is loaded")
}
