package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIsWithin(t *testing.T) {
	tests := []struct {
		path, parent string
		want         bool
	}{
		{"/a/b", "/a", true},
		{"/a", "/a", true},
		{"/ab", "/a", false},
		{"/a", "/a/b", false},
		{"/x", "/", true},
		{"/a/..b", "/a", true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, isWithin(tt.path, tt.parent), "isWithin(%q, %q)", tt.path, tt.parent)
	}
}

func TestMountPoints(t *testing.T) {
	table := `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 22 0:30 / /mnt/with\040space rw - tmpfs none rw
36 22 0:31 / /mnt/back\134slash rw - tmpfs none rw
`
	points, err := mountPoints(strings.NewReader(table))
	require.NoError(t, err)
	assert.Equal(t, []string{"/", "/mnt/with space", `/mnt/back\slash`}, points)
}

func TestUnescapeMountField(t *testing.T) {
	assert.Equal(t, "a b", unescapeMountField(`a\040b`))
	assert.Equal(t, `trailing\04`, unescapeMountField(`trailing\04`))
	assert.Equal(t, `not\999octal`, unescapeMountField(`not\999octal`))
}
