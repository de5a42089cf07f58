package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// version is set at build time:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/safefs
//
// Left empty, the module version from the build info is used.
var version = ""

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func runVersion(args []string, stdout io.Writer) error {
	if len(args) != 0 {
		return failf(exitUsage, "version takes no arguments")
	}
	fmt.Fprintf(stdout, "safefs %s\n", versionString())
	return nil
}

func runHelp(args []string, stdout io.Writer) error {
	switch {
	case len(args) == 0:
		printUsage(stdout)
	case len(args) == 1 && args[0] == "mount":
		printMountUsage(stdout)
	case len(args) == 1 && args[0] == "recover":
		printRecoverUsage(stdout)
	default:
		return failf(exitUsage, "no help for %q (see safefs --help)", strings.Join(args, " "))
	}
	return nil
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
        print the version
  safefs help [mount|recover]
        show this help, or the help of a command

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
it sends READY=1 once mounted and STOPPING=1 when it unmounts.

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
