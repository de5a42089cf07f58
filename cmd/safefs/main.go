// Command safefs mounts a FUSE file system over a backing directory that
// makes every write atomic. See `safefs --help`.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the process exit code.
// Every refusal is reported as a single "safefs: ..." line on stderr.
func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout, stderr)
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		fmt.Fprintf(stderr, "safefs: %s\n", msg)
	}
	return exitCode(err)
}

func dispatch(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return failf(exitUsage, "missing command (see safefs --help)")
	}
	switch args[0] {
	case "mount":
		return runMount(args[1:], stdout, stderr)
	case "recover":
		return runRecover(args[1:], stdout, stderr)
	case "status":
		return runStatus(args[1:], stdout)
	case "version":
		return runVersion(args[1:], stdout)
	case "help", "-h", "--help":
		return runHelp(args[1:], stdout)
	}
	if isFstabForm(args) {
		return runFstab(args, stdout, stderr)
	}
	return failf(exitUsage, "unknown command %q (see safefs --help)", args[0])
}
