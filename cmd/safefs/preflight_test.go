package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
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
