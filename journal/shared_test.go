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
