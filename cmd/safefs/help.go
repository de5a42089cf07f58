package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at build time by the package build (packaging/deb), for example:
//
//	go build -ldflags "-X main.version=0.1.0 -X main.commit=5330e34e12ab -X main.date=2026-12-07T04:43:00Z" ./cmd/safefs
//
// Left empty (a plain go build), `safefs version` says devel, or the
// module's version for go install ...@VERSION.
var (
	version = ""
	commit  = ""
	date    = ""
)

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// versionLine is what `safefs version` prints: one line, the version
// first, so that scripts can take the second word.
func versionLine() string {
	var details []string
	if commit != "" {
		details = append(details, "commit "+commit)
	}
	if date != "" {
		details = append(details, "date "+date)
	}
	details = append(details, runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
	return fmt.Sprintf("safefs %s (%s)", versionString(), strings.Join(details, ", "))
}

func runVersion(args []string, stdout io.Writer) error {
	if len(args) == 1 && isHelpFlag(args[0]) {
		printVersionUsage(stdout)
		return nil
	}
	if len(args) != 0 {
		return failf(exitUsage, "version takes no arguments")
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}

// commandUsage is each command's `safefs help NAME`; `safefs NAME --help`
// prints the same. TestHelpEveryCommand checks that every command of
// dispatch has one.
var commandUsage = map[string]func(io.Writer){
	"mount":   printMountUsage,
	"recover": printRecoverUsage,
	"status":  printStatusUsage,
	"version": printVersionUsage,
	"help":    printHelpUsage,
}

func runHelp(args []string, stdout io.Writer) error {
	switch {
	case len(args) == 0:
		printUsage(stdout)
		return nil
	case len(args) == 1 && isHelpFlag(args[0]):
		printHelpUsage(stdout)
		return nil
	case len(args) == 1:
		if usage, ok := commandUsage[args[0]]; ok {
			usage(stdout)
			return nil
		}
	}
	return failf(exitUsage, "no command %q: safefs help takes one of mount, recover, status, version, help", strings.Join(args, " "))
}

func isHelpFlag(s string) bool { return s == "-h" || s == "--help" }

func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  safefs mount [-o OPT[,OPT...]] BACKING MOUNTPOINT
        serve BACKING on MOUNTPOINT, in the foreground, with atomic writes
  safefs BACKING MOUNTPOINT [-f] [-o OPT[,OPT...]]
        the same, as mount -t fuse.safefs and fstab run it (via mount.fuse3):
        returns once mounted (0) or failed (exit code), the daemon goes on
        in the background; -f or -o foreground keeps it in the foreground
  safefs recover BACKING
        finish or undo commits cut off by a crash, without mounting
  safefs status MOUNTPOINT|BACKING [--json]
        what a running mount is doing: held commit locks and their waiters,
        open writers, rejected/, counters (root only)
  safefs version
        print the version, commit and build date
  safefs help [COMMAND]
        show this help, or a command's: mount, recover, status, version, help

The manual: man 8 safefs.

Exit codes:
`)
	for _, e := range exitCodeHelp {
		fmt.Fprintf(w, "  %d  %s\n", e.code, e.meaning)
	}
}

func printMountUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: safefs mount [-o OPT[,OPT...]] BACKING MOUNTPOINT

Mounts safefs on MOUNTPOINT, serving the files of BACKING, and stays in the
foreground until SIGINT or SIGTERM, or until MOUNTPOINT is unmounted.
SIGUSR1 logs the counters (commits, rejected, killed writers) and goes on.
-o may be given several times, before or after BACKING and MOUNTPOINT;
a later option overrides an earlier one. Options of mount(8), fstab and
mount.fuse3 that mean nothing here are ignored (defaults, auto, noauto,
nofail, _netdev, dev, suid, exec, atime variants, x-*, X-*, comment=);
noexec, sync, dirsync and mand are refused. Under systemd (NOTIFY_SOCKET)
it sends READY=1 once mounted and STOPPING=1 when it unmounts. A user other
than root needs fusermount3 (package fuse3) to mount.

Options:
`)
	def := defaultMountConfig()
	for _, o := range mountOptions {
		fmt.Fprintf(w, "  %-32s %s (default: %s)\n", optionSyntax(o), o.help, o.show(def))
	}
}

func optionSyntax(o mountOption) string {
	if o.value == "" {
		return o.name
	}
	return o.name + "=" + o.value
}

func printRecoverUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: safefs recover BACKING

Finishes or undoes commits cut off in BACKING by a crash, without mounting,
and prints what it did. Refuses (exit 6) while a safefs serves BACKING.
`)
}

func printStatusUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: safefs status MOUNTPOINT|BACKING [--json]

Asks the daemon serving MOUNTPOINT (or BACKING) what it is doing now: the
files whose commit lock is held, by whom and who waits, the descriptors open
for writing with their pending bytes, what .safefs/rejected/ holds, and the
counters. It answers while commits are blocked and never looks inside the
mount. --json prints the same as one JSON object. Root only (exit 12);
exit 11 when no safefs daemon answers for that directory.
`)
}

func printVersionUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: safefs version

Prints one line: safefs, the version, then in parentheses the commit and
date it was built from and the Go toolchain, for example
  safefs 0.1.0 (commit 5330e34e12ab, date 2026-12-07T04:43:00Z, go1.26.8 linux/amd64)
A binary built with plain go build says devel for the version.
`)
}

func printHelpUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: safefs help [COMMAND]

Without COMMAND, lists the commands and the exit codes. With one of mount,
recover, status, version or help, prints that command's usage, as
safefs COMMAND --help does. The manual: man 8 safefs.
`)
}
