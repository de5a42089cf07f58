package testfs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// PerlScript returns the path of a script in testfs/perl/, found from
// this source file, so tests work from any working directory.
func PerlScript(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "perl", name)
}

// Perl is one run of a workload script: Perl, or PHP, Python or sh (Lang).
type Perl struct {
	Lang   string        // "" (perl), "php", "python" or "sh"
	Script string        // name in testfs/perl/ (testfs/php/, testfs/python/, testfs/sh/)
	Args   []string      // arguments after the script
	As     *Cred         // run as this user; nil: as the test
	Dir    string        // working directory; "": the test's
	Stdin  string        // fed to the script's standard input
	Env    []string      // added to the test's environment
	Limit  time.Duration // kill after this long (a hang); 0: hangLimit
}

// Command builds the command under ctx (which kills it when done).
func (p Perl) Command(ctx context.Context) *exec.Cmd {
	interp, script := p.interpreter()
	cmd := exec.CommandContext(ctx, interp, append([]string{script}, p.Args...)...)
	cmd.Dir = p.Dir
	cmd.WaitDelay = 5 * time.Second
	if p.Stdin != "" {
		cmd.Stdin = strings.NewReader(p.Stdin)
	}
	if p.Env != nil {
		cmd.Env = append(os.Environ(), p.Env...)
	}
	if p.As != nil {
		AsUser(cmd, *p.As)
	}
	return cmd
}

// interpreter returns the program that runs p and the script's path.
func (p Perl) interpreter() (string, string) {
	testfs := filepath.Dir(PerlScript("")) // PerlScript("") is testfs/perl
	switch p.Lang {
	case "php":
		return "php", filepath.Join(testfs, "php", p.Script)
	case "sh":
		return "/bin/sh", filepath.Join(testfs, "sh", p.Script)
	case "python":
		// Debian's, not a user's own (pyenv): www-data runs it too.
		return "/usr/bin/python3", filepath.Join(testfs, "python", p.Script)
	}
	return "perl", PerlScript(p.Script)
}

// hangLimit guards against a hang only: a workload that takes a minute
// on a quiet machine may take many on a loaded one, and slowness is not
// what a contract test judges.
const hangLimit = 10 * time.Minute

// Run runs the script to its end and returns its combined output. A
// non-zero exit or the time limit is an error holding the output.
func (p Perl) Run() (string, error) {
	limit := p.Limit
	if limit == 0 {
		limit = hangLimit
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := p.Command(ctx)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%v: no end within %v, taken for a hang (the counts so far say nothing about lost data)", err, limit)
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", p.Script, shortArgs(p.Args), err, out.String())
	}
	return out.String(), nil
}

// shortArgs joins args for messages, each cut to 80 bytes.
func shortArgs(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if len(a) > 80 {
			a = fmt.Sprintf("%s...(%d bytes)", a[:80], len(a))
		}
		b.WriteString(a)
	}
	return b.String()
}

// RunPerl runs a script to its end as c (nil: as the test) and fails the
// test on error. It returns the combined output.
func RunPerl(t testing.TB, c *Cred, script string, args ...string) string {
	t.Helper()
	out, err := Perl{Script: script, Args: args, As: c}.Run()
	if err != nil {
		t.Fatal(err)
	}
	return out
}
