package fs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNameSet(t *testing.T) {
	d1, d2 := &Node{}, &Node{}
	var s nameSet
	require.True(t, s.add(name{d1, "a"}))
	require.False(t, s.add(name{d1, "a"}), "a name is kept once")
	require.True(t, s.add(name{d2, "a"}), "the same name in another directory is another name")
	require.True(t, s.add(name{d1, "b"}))
	require.True(t, s.has(name{d2, "a"}))
	s.drop(name{d2, "a"})
	require.False(t, s.has(name{d2, "a"}))
	require.Equal(t, nameSet{{d1, "a"}, {d1, "b"}}, s)
	s.drop(name{d1, "x"}) // not there: nothing changes
	require.Len(t, s, 2)
	s.drop(name{d1, "a"})
	s.drop(name{d1, "b"})
	require.Nil(t, s)
}
