package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestManualListsEveryOption: docs/manual.md's option table names every
// -o option of the code's table (mountOptions), and nothing else, so the
// manual and `safefs mount --help` cannot drift apart.
func TestManualListsEveryOption(t *testing.T) {
	b, err := os.ReadFile("../../docs/manual.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Options\n")
	require.True(t, ok, "docs/manual.md has no Options section")
	section, _, _ = strings.Cut(section, "\n## ")
	name := regexp.MustCompile("`([a-z_]+)(=[^`]*)?`")
	var documented []string
	for line := range strings.Lines(section) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.Split(strings.ReplaceAll(line, `\|`, "/"), "|")[1]
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			documented = append(documented, m[1])
		}
	}
	var code []string
	for _, o := range mountOptions {
		code = append(code, o.name)
	}
	sort.Strings(documented)
	sort.Strings(code)
	assert.Equal(t, code, documented, "options in the code's table (left) and in docs/manual.md (right)")
}
