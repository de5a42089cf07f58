package journal

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// sharedTestTargets are testTargets that other daemons commit to too.
type sharedTestTargets struct{ *testTargets }

func (sharedTestTargets) Shared() bool { return true }

// A cut-off append whose file other daemons (a cluster) appended to
// since is not cut back: that would remove their bytes. Without
// SharedTargets it is cut back as always.
func TestRecoverAppendSharedGrewPast(t *testing.T) {
	for _, shared := range []bool{true, false} {
		e := newEnv(t)
		e.write("log", "hello ")
		e.begin(e.appendRec("log", "WORLD"))
		e.write("log", "hello WO"+"other daemon's line\n")
		var tg Targets = e.targets
		if shared {
			tg = sharedTestTargets{e.targets}
		}
		s, err := Recover(e.dir(), tg, zaptest.NewLogger(t))
		require.NoError(t, err)
		if shared {
			assert.Equal(t, Summary{Records: 1, Refused: 1}, s)
			assert.Equal(t, "hello WOother daemon's line\n", e.read("log"))
		} else {
			assert.Equal(t, Summary{Records: 1, RolledBack: 1}, s)
			assert.Equal(t, "hello ", e.read("log"))
		}
	}
}

// In a cluster, a cut-off append is cut back only when everything past
// its old size is a prefix of its own pending bytes (its staging file):
// then no other daemon appended since. Fewer bytes of another daemon
// than the append's length, or no staging name, are not cut.
func TestRecoverAppendSharedOwnBytes(t *testing.T) {
	for _, c := range []struct {
		name, after string
		staging     bool
		want        Summary
		left        string
	}{
		{"own partial bytes", "hello WO", true, Summary{Records: 1, RolledBack: 1}, "hello "},
		{"another daemon's byte after them", "hello WOx", true, Summary{Records: 1, Refused: 1}, "hello WOx"},
		{"another daemon's bytes only", "hello xy", true, Summary{Records: 1, Refused: 1}, "hello xy"},
		{"no staging name", "hello WO", false, Summary{Records: 1, Refused: 1}, "hello WO"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.write("log", "hello ")
			rec := e.appendRec("log", "WORLD")
			if c.staging {
				rec.Staging = "s1"
				e.write(internalName+"/"+StagingDir+"/s1", "WORLD")
			}
			e.begin(rec)
			e.write("log", c.after)
			s, err := Recover(e.dir(), sharedTestTargets{e.targets}, zaptest.NewLogger(t))
			require.NoError(t, err)
			s.Orphans = 0 // the staging file, swept after
			assert.Equal(t, c.want, s)
			assert.Equal(t, c.left, e.read("log"))
		})
	}
}
