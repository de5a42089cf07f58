// Package manpage makes the man page safefs(8) from docs/manual.md, so
// that the two cannot say different things: the manual's sections become
// the page's, its tables become tagged paragraphs. It knows the Markdown
// that the manual uses (headings, paragraphs, numbered and bulleted lists
// one level deep, fenced code, tables, `code`, **bold**, *italics* and
// links), and fails on a heading level it does not.
package manpage

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Name is the page's NAME line, what whatis(1) and apropos(1) show.
const Name = `safefs \- FUSE file system that makes every write to a directory atomic`

// SeeAlso ends the page: the other manuals and where the rest of the
// documentation is installed.
var SeeAlso = []string{
	`\fBmount.fuse3\fR(8), \fBfusermount3\fR(1), \fBfstab\fR(5), \fBmount\fR(8), \fBsystemd.mount\fR(5)`,
	`The rest of the documentation is in \fI/usr/share/doc/safefs/\fR: \fBoperations.md\fR (install, ` +
		`protecting a CGI data directory with Apache or nginx, fstab, systemd, status, metrics, recovery), ` +
		`\fBdesign.md\fR, \fBthreat-model.md\fR, \fBtesting.md\fR, \fBbenchmarks.md\fR.`,
}

// Render returns the roff source of safefs(8) for manual, the text of
// docs/manual.md.
func Render(manual []byte, version string, date time.Time) ([]byte, error) {
	intro, sections, err := split(string(manual))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, ".\\\" Made from docs/manual.md by packaging/manpage: edit that file, not this one.\n")
	fmt.Fprintf(&b, ".TH SAFEFS 8 %s %q \"System Administration\"\n", date.UTC().Format("2006-01-02"), "safefs "+version)
	b.WriteString(".nh\n.ad l\n") // no hyphenation: the text stays greppable
	b.WriteString(".SH NAME\n" + Name + "\n")
	if syn := synopsis(sections); syn != "" {
		b.WriteString(".SH SYNOPSIS\n.nf\n" + syn + ".fi\n")
	}
	b.WriteString(".SH DESCRIPTION\n")
	if err := blocks(&b, intro); err != nil {
		return nil, err
	}
	for _, s := range sections {
		fmt.Fprintf(&b, ".SH %s\n", escape(strings.ToUpper(s.title)))
		if err := blocks(&b, s.body); err != nil {
			return nil, fmt.Errorf("section %s: %w", s.title, err)
		}
	}
	b.WriteString(".SH SEE ALSO\n")
	for i, p := range SeeAlso {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		b.WriteString(p + "\n")
	}
	return b.Bytes(), nil
}

type section struct{ title, body string }

// split cuts the manual at its "## " headings; the intro is what comes
// between the title and the first of them, less the list of sections.
func split(text string) (string, []section, error) {
	var intro strings.Builder
	var sections []section
	inFence := false
	for line := range strings.Lines(text) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			inFence = !inFence
		}
		switch {
		case !inFence && strings.HasPrefix(line, "# "):
			continue // the title: the page has its own
		case !inFence && strings.HasPrefix(line, "## "):
			sections = append(sections, section{title: strings.TrimSpace(line[3:])})
			continue
		case !inFence && tocItem.MatchString(line) && len(sections) == 0:
			continue
		}
		if len(sections) == 0 {
			intro.WriteString(line)
		} else {
			sections[len(sections)-1].body += line
		}
	}
	if len(sections) == 0 {
		return "", nil, fmt.Errorf("no ## sections in the manual")
	}
	return intro.String(), sections, nil
}

// tocItem is an item of the list of the manual's own sections.
var tocItem = regexp.MustCompile(`^- \[[^]]*\]\(#[^)]*\)\s*$`)

// synopsis is the first code block of the Commands section, one command
// a line, the command words in bold.
func synopsis(sections []section) string {
	for _, s := range sections {
		if s.title != "Commands" {
			continue
		}
		_, code, ok := strings.Cut(s.body, "```\n")
		if !ok {
			return ""
		}
		code, _, _ = strings.Cut(code, "```")
		var b strings.Builder
		for line := range strings.Lines(code) {
			if line = strings.TrimSpace(line); line != "" {
				b.WriteString(`\fB` + escapeCode(line) + "\\fR\n")
			}
		}
		return b.String()
	}
	return ""
}

var (
	ordered = regexp.MustCompile(`^(\s*)(\d+)\. (.*)$`)
	bullet  = regexp.MustCompile(`^(\s*)- (.*)$`)
)

// writer turns Markdown blocks into roff as they end.
type writer struct {
	b      *bytes.Buffer
	kind   string // "", "p", "item"
	mark   string // the item's mark: "1." or "\(bu"
	text   []string
	nested bool // inside .RS for an indented list
}

func (w *writer) flush() {
	if w.kind == "" {
		return
	}
	text := inline(strings.Join(w.text, " "))
	switch w.kind {
	case "p":
		w.b.WriteString(".PP\n" + lineStart(text) + "\n")
	case "item":
		width := 4
		if w.mark == `\(bu` {
			width = 2
		}
		fmt.Fprintf(w.b, ".IP %s %d\n%s\n", w.mark, width, lineStart(text))
	}
	w.kind, w.text = "", nil
}

// level opens or closes the indentation of a nested list.
func (w *writer) level(nested bool) {
	if nested == w.nested {
		return
	}
	w.flush()
	if nested {
		w.b.WriteString(".RS 4\n")
	} else {
		w.b.WriteString(".RE\n")
	}
	w.nested = nested
}

func blocks(b *bytes.Buffer, text string) error {
	w := &writer{b: b}
	var table []string
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var fence []string
	inFence := false
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if inFence {
			if strings.HasPrefix(trimmed, "```") {
				inFence = false
				code(b, fence)
				fence = nil
				continue
			}
			fence = append(fence, line)
			continue
		}
		if len(table) > 0 && !strings.HasPrefix(trimmed, "|") {
			if err := tableOut(b, table); err != nil {
				return err
			}
			table = nil
		}
		switch {
		case strings.HasPrefix(trimmed, "```"):
			w.flush()
			inFence = true
		case trimmed == "":
			w.flush()
		case strings.HasPrefix(line, "#"):
			if !strings.HasPrefix(line, "### ") {
				return fmt.Errorf("heading %q: only ## and ### are made into the page", line)
			}
			w.level(false)
			w.flush()
			b.WriteString(".SS " + escape(strings.TrimSpace(line[4:])) + "\n")
		case strings.HasPrefix(trimmed, "|"):
			w.level(false)
			w.flush()
			table = append(table, trimmed)
		case ordered.MatchString(line):
			m := ordered.FindStringSubmatch(line)
			w.level(m[1] != "")
			w.flush()
			w.kind, w.mark, w.text = "item", m[2]+".", []string{m[3]}
		case bullet.MatchString(line):
			m := bullet.FindStringSubmatch(line)
			w.level(m[1] != "")
			w.flush()
			w.kind, w.mark, w.text = "item", `\(bu`, []string{m[2]}
		default:
			if w.kind == "" {
				w.level(false)
				w.kind = "p"
			}
			w.text = append(w.text, trimmed)
		}
	}
	if inFence {
		return fmt.Errorf("a code block is not closed")
	}
	if len(table) > 0 {
		if err := tableOut(b, table); err != nil {
			return err
		}
	}
	w.level(false)
	w.flush()
	return sc.Err()
}

func code(b *bytes.Buffer, lines []string) {
	b.WriteString(".PP\n.RS 4\n.nf\n")
	for _, l := range lines {
		b.WriteString(lineStart(escapeCode(l)) + "\n")
	}
	b.WriteString(".fi\n.RE\n")
}

// tableOut writes a table as tagged paragraphs: the first column is the
// tag, the last the text, which the columns between precede as
// "(header: value)" (the options' defaults).
func tableOut(b *bytes.Buffer, rows []string) error {
	if len(rows) < 2 || !strings.Contains(rows[1], "---") {
		return fmt.Errorf("table without a header row: %q", rows[0])
	}
	header := cells(rows[0])
	for _, r := range rows[2:] {
		c := cells(r)
		if len(c) != len(header) {
			return fmt.Errorf("table row %q has %d cells, the header %d", r, len(c), len(header))
		}
		text := inline(c[len(c)-1])
		for i := len(c) - 2; i > 0; i-- {
			text = "(" + escape(header[i]) + ": " + inline(c[i]) + ") " + text
		}
		b.WriteString(".TP\n" + lineStart(inline(c[0])) + "\n" + lineStart(text) + "\n")
	}
	return nil
}

// cells splits a table row at its unescaped pipes; `\|` is a pipe in a
// cell.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	row = strings.TrimSuffix(row, "|")
	var out []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case row[i] == '|':
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(out, strings.TrimSpace(cur.String()))
}

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	link     = regexp.MustCompile(`\[([^]]+)\]\(([^)]+)\)`)
	bold     = regexp.MustCompile(`\*\*([^*]+)\*\*`)
	italic   = regexp.MustCompile(`\*([^*\s][^*]*)\*`)
)

// inline turns one block's Markdown text into roff: code spans and
// **bold** in bold, *italics* in italics, a link into its text (and the
// file it names, or its address).
func inline(s string) string {
	// Code spans first, kept aside so that nothing inside them is
	// taken for Markdown.
	var spans []string
	s = codeSpan.ReplaceAllStringFunc(s, func(m string) string {
		spans = append(spans, `\fB`+escapeCode(m[1:len(m)-1])+`\fR`)
		return fmt.Sprintf("\x00%d\x00", len(spans)-1)
	})
	s = link.ReplaceAllStringFunc(s, func(m string) string {
		p := link.FindStringSubmatch(m)
		text, target := p[1], p[2]
		file, _, _ := strings.Cut(target, "#")
		file = strings.TrimPrefix(file, "../")
		switch {
		case file == "" || strings.Contains(text, file) || strings.Contains(text, "\x00"):
			return text
		case strings.Contains(file, "://"):
			return text + " <" + file + ">"
		case !strings.Contains(text, " ") && strings.HasPrefix(file, text):
			return file // [design](design.md#x): design.md
		}
		return text + " (" + file + ")"
	})
	s = escape(s)
	s = bold.ReplaceAllString(s, `\fB$1\fR`)
	s = italic.ReplaceAllString(s, `\fI$1\fR`)
	for i, span := range spans {
		s = strings.Replace(s, fmt.Sprintf("\x00%d\x00", i), span, 1)
	}
	return s
}

// escape makes plain text safe in roff.
func escape(s string) string {
	return strings.ReplaceAll(s, `\`, `\e`)
}

// escapeCode is escape for code, whose hyphens are ASCII minus signs
// (options and commands that a reader copies).
func escapeCode(s string) string {
	return strings.ReplaceAll(escape(s), "-", `\-`)
}

// lineStart keeps a line that starts with a dot or a quote from being
// read as a request.
func lineStart(s string) string {
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		return `\&` + s
	}
	return s
}
