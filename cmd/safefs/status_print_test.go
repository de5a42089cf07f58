package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/safefs/safefs/fs"
)

// TestStatusTextEscapes: paths and command lines come from www-data (a
// file name, a CGI's argv): the text form escapes what could end a line,
// forge one or reach the terminal as a control sequence.
func TestStatusTextEscapes(t *testing.T) {
	forged := "x\n  B\n    holder\tpid 1 uid 0\theld 0.0s\tinit"
	st := &fs.Status{
		Node: "n1\x1b]0;title\x07", Mountpoint: "/mnt/\x1b[2J",
		Locks: []fs.LockStatus{{Path: forged, Holder: fs.Party{PID: 7, Cmdline: "perl\rc.pl \x1b[31mred"},
			Waiters: []fs.Party{{PID: 8, Cmdline: "sh -c \u202eevil"}}}},
		Writers:  []fs.WriterStatus{{Path: "\x9b2J\xff\u009b", PID: 9, Cmdline: `a "b" \n`}},
		Rejected: []fs.KeptFile{{Name: "k\x00"}},
	}
	var out bytes.Buffer
	printStatus(&out, st)
	text := out.String()
	for _, c := range text {
		assert.False(t, c < 0x20 && c != '\n' || c == 0x7f || c >= 0x80 && c < 0xa0 || c == '\u202e' || c == '\ufffd',
			"a control character %U reached the output:\n%s", c, text)
	}
	assert.Equal(t, 12, strings.Count(text, "\n"), "a name made lines of its own:\n%s", text)
	for _, want := range []string{
		`cluster node "n1\x1b]0;title\a", mounted at "/mnt/\x1b[2J"`,
		`"x\n  B\n    holder\tpid 1 uid 0\theld 0.0s\tinit"`,
		`"perl\rc.pl \x1b[31mred"`, `"sh -c \u202eevil"`, `"\x9b2J\xff\u009b"`, `"a \"b\" \\n"`, `"k\x00"`,
	} {
		assert.Contains(t, text, want)
	}

	// Printable names, non-ASCII ones too, stay as they are.
	out.Reset()
	printStatus(&out, &fs.Status{Writers: []fs.WriterStatus{{Path: "掲示板/ログ.txt", Cmdline: "perl count.cgi"}}})
	assert.Contains(t, out.String(), "  掲示板/ログ.txt  pid 0 uid 0  pending 0 bytes  perl count.cgi\n")
}
