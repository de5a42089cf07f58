package proc

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readProc reads whole files of any size with plain system calls.
func TestReadProc(t *testing.T) {
	b, err := readProc("/proc/self/status")
	require.NoError(t, err)
	assert.Contains(t, string(b), "\nTgid:\t"+strconv.Itoa(os.Getpid())+"\n")

	p := filepath.Join(t.TempDir(), "big")
	want := bytes.Repeat([]byte("0123456789"), 1000) // more than one buffer
	require.NoError(t, os.WriteFile(p, want, 0o600))
	got, err := readProc(p)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	_, err = readProc(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	// A one-line file in one read; a file whose first read does not end
	// a line is read on to its end.
	line, err := readProcLine("/proc/self/stat")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(line), strconv.Itoa(os.Getpid())+" ("), "%q", line)
	assert.True(t, strings.HasSuffix(string(line), "\n"))
	got, err = readProcLine(p)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}
