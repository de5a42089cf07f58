package manpage

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const manualPath = "../../docs/manual.md"

func render(t *testing.T) []byte {
	t.Helper()
	manual, err := os.ReadFile(manualPath)
	require.NoError(t, err)
	page, err := Render(manual, "1.2.3", time.Date(2026, 12, 7, 4, 43, 0, 0, time.UTC))
	require.NoError(t, err)
	return page
}

func requireGroff(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("groff")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("groff is missing and CI is set: .ci/run installs groff-base")
		}
		t.Skip("groff is missing")
	}
	return p
}

// groff formats the page as man(1) would, as plain text, or returns its
// warnings.
func groff(t *testing.T, page []byte, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(requireGroff(t), append([]string{"-man", "-Tascii", "-ww", "-P", "-cbou", "-rLL=100n"}, args...)...)
	cmd.Stdin = bytes.NewReader(page)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "groff: %s", errOut.String())
	return out.String(), errOut.String()
}

// TestPageSaysWhatTheManualSays: every word of docs/manual.md is in the
// formatted page, in the manual's order, so the page drops nothing of
// the manual (the manual's option table is checked against the code by
// cmd/safefs's TestManualListsEveryOption). groff formats it without a
// warning.
func TestPageSaysWhatTheManualSays(t *testing.T) {
	page := render(t)
	text, warnings := groff(t, page)
	assert.Empty(t, warnings, "groff warnings")
	manual, err := os.ReadFile(manualPath)
	require.NoError(t, err)
	want := words(markdownText(string(manual)))
	got := words(text)
	require.Greater(t, len(want), 3000, "the manual's words")
	i := 0
	for j := 0; i < len(want) && j < len(got); j++ {
		if got[j] == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Fatalf("the page lacks the manual's words from %q on (word %d of %d); page:\n%s",
			strings.Join(want[i:min(i+12, len(want))], " "), i, len(want), text)
	}
	for _, s := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "PROMISES", "COMMANDS", "OPTIONS", "EXIT CODES", "SEE ALSO"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^`+s+`$`), text, "section heading")
	}
}

// TestPageHeader: whatis(1) and man(1) find the page as safefs(8), with
// the version and date given.
func TestPageHeader(t *testing.T) {
	page := string(render(t))
	assert.True(t, strings.HasPrefix(page, ".\\\" Made from docs/manual.md"))
	assert.Contains(t, page, "\n.TH SAFEFS 8 2026-12-07 \"safefs 1.2.3\" \"System Administration\"\n")
	assert.Contains(t, page, "\n.SH NAME\nsafefs \\- ")
	assert.Contains(t, page, "\n\\fBsafefs mount [\\-o OPT[,OPT...]] BACKING MOUNTPOINT\\fR\n", "synopsis")
}

// TestRenderRefuses: Markdown the converter does not know fails the
// build rather than vanish from the page.
func TestRenderRefuses(t *testing.T) {
	for name, md := range map[string]string{
		"no sections":    "# safefs\n\ntext\n",
		"deep heading":   "## A\n\n#### deep\n",
		"open code":      "## A\n\n```\ncode\n",
		"ragged table":   "## A\n\n| a | b |\n|---|---|\n| 1 |\n",
		"table no heads": "## A\n\n| a | b |\n| 1 | 2 |\n",
	} {
		_, err := Render([]byte(md), "1", time.Now())
		assert.Error(t, err, name)
	}
}

func TestInline(t *testing.T) {
	for in, want := range map[string]string{
		"`-o allow_other` and **bold** and *it*":       `\fB\-o allow_other\fR and \fBbold\fR and \fIit\fR`,
		"see [design](design.md#cluster-mode)":         "see design.md",
		"[operations.md](operations.md#live-status)":   "operations.md",
		"[the unit](../contrib/safefs.service)":        "the unit (contrib/safefs.service)",
		"[go-fuse](https://github.com/hanwen/go-fuse)": "go-fuse <https://github.com/hanwen/go-fuse>",
		`a \ b, ` + "`x-*`, `X-*`":                     `a \e b, \fBx\-*\fR, \fBX\-*\fR`,
		"`mkdir`, `symlink`":                           `\fBmkdir\fR, \fBsymlink\fR`,
	} {
		assert.Equal(t, want, inline(in), in)
	}
	assert.Equal(t, `\&.safefs is hidden`, lineStart(".safefs is hidden"))
}

var (
	wordRe     = regexp.MustCompile(`[a-z0-9_]+`)
	linkTarget = regexp.MustCompile(`\]\([^)]*\)`)
)

// markdownText is the manual without its title, its list of sections,
// its tables' header rows and its links' targets: the text the page
// must hold.
func markdownText(md string) string {
	var b strings.Builder
	lines := strings.Split(md, "\n")
	for i, line := range lines {
		heads := strings.HasPrefix(line, "|") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "|---")
		if heads || strings.HasPrefix(line, "# ") || regexp.MustCompile(`^- \[.*\]\(#.*\)\s*$`).MatchString(line) {
			continue // a table's header row, the title, the list of sections
		}
		line = strings.NewReplacer("`", "", "*", "").Replace(line) // "`GLOB`s" is GLOBs
		b.WriteString(linkTarget.ReplaceAllString(line, "]") + "\n")
	}
	return b.String()
}

func words(s string) []string {
	return wordRe.FindAllString(strings.ToLower(s), -1)
}
