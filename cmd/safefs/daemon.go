package main

import (
	"bufio"
	"fmt"
	"io"
	"log/syslog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// readyFdEnv marks the background daemon, a re-exec of safefs (Go cannot
// fork): it names the descriptor of the pipe on which the daemon tells
// the waiting foreground process "ready" or "error CODE MESSAGE".
const readyFdEnv = "SAFEFS_READY_FD"

// startDaemon is the foreground half of the fstab form: it checks what it
// can, starts the daemon in a session of its own, and returns when the
// daemon reports the mount ready (nil) or failed (its exit code).
func startDaemon(args []string, a mountArgs, stderr io.Writer) error {
	// Refuse plain mistakes here, without a daemon; the daemon checks again.
	backing, _, err := preflightMount(a.backing, a.mountpoint, a.cfg.fs.AllowOther)
	if err != nil {
		return err
	}
	logf, err := openLogFile(a.cfg.logFile)
	if err != nil {
		return err
	}
	if logf != nil {
		defer logf.Close()
	}
	exe, err := os.Executable()
	if err != nil {
		return failf(exitMount, "cannot find the safefs binary to start the daemon: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return failf(exitMount, "pipe to the daemon: %v", err)
	}
	defer r.Close()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), readyFdEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	if logf != nil {
		cmd.Stderr = logf // where the Go runtime reports a crash
	}
	// Its own session: no terminal hangup or Ctrl-C reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return failf(exitMount, "start the daemon: %v", err)
	}
	line, _ := bufio.NewReader(r).ReadString('\n')
	err = daemonResult(line, cmd)
	if err != nil {
		return err
	}
	// Said after success only: a refusal stays one line.
	if logf == nil && !isSocket("/dev/log") {
		fmt.Fprintln(stderr, "safefs: warning: no log_file and no syslog (/dev/log): the daemon's log is discarded")
	}
	// The daemon logs it too, but an operator who ran mount(8) by hand
	// reads this terminal, not the log.
	if w := allowOtherWarning(backing, os.Geteuid(), a.cfg.fs.AllowOther); w != "" {
		fmt.Fprintln(stderr, "safefs: warning: "+w)
	}
	return nil
}

// daemonResult turns the daemon's report into the foreground's result.
// Without a report the daemon died before it could say why.
func daemonResult(line string, cmd *exec.Cmd) error {
	if line == "ready\n" {
		_ = cmd.Process.Release() // it goes on without us
		return nil
	}
	werr := cmd.Wait()
	if code, msg, ok := parseErrorLine(line); ok {
		return failf(code, "%s", msg)
	}
	return failf(exitMount, "the daemon exited before the mount was ready (%v); see its log", werr)
}

func parseErrorLine(line string) (int, string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "error ")
	if !ok {
		return 0, "", false
	}
	num, msg, ok := strings.Cut(rest, " ")
	code, err := strconv.Atoi(num)
	if !ok || err != nil || code <= 0 || code > 255 {
		return 0, "", false
	}
	return code, msg, true
}

func formatErrorLine(err error) string {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	return fmt.Sprintf("error %d %s\n", exitCode(err), msg)
}

// readyPipeFromEnv returns the pipe if this process is the daemon. The
// variable is removed so that no process the daemon starts sees it.
func readyPipeFromEnv() (*os.File, bool, error) {
	v, ok := os.LookupEnv(readyFdEnv)
	if !ok {
		return nil, false, nil
	}
	os.Unsetenv(readyFdEnv)
	fd, err := strconv.Atoi(v)
	var st syscall.Stat_t
	if err != nil || fd < 3 || syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil, false, failf(exitUsage, "%s=%s is not a pipe from a safefs that started this daemon", readyFdEnv, v)
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "ready-pipe"), true, nil
}

// runDaemon is the background half: it serves, and reports on the pipe
// once, "ready" when mounted or the error that ended it before.
func runDaemon(a mountArgs, pipe *os.File, stderr io.Writer) error {
	report := func(s string) {
		if pipe != nil {
			_, _ = pipe.WriteString(s)
			pipe.Close()
			pipe = nil
		}
	}
	err := mountAndServe(a, stderr, func() { report("ready\n") })
	if err != nil {
		report(formatErrorLine(err))
	}
	return err
}

// logOutput is where the log goes: log_file if given, else stderr in the
// foreground, syslog in the background (discarded without syslog).
func logOutput(cfg mountConfig, background bool, stderr io.Writer) (io.Writer, func(), error) {
	f, err := openLogFile(cfg.logFile)
	switch {
	case err != nil:
		return nil, nil, err
	case f != nil:
		return f, func() { f.Close() }, nil
	case !background:
		return stderr, func() {}, nil
	}
	if w, err := syslog.New(syslog.LOG_INFO|syslog.LOG_DAEMON, "safefs"); err == nil {
		return w, func() { w.Close() }, nil
	}
	return io.Discard, func() {}, nil
}

func openLogFile(path string) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, failf(exitUsage, "bad value for option log_file: %v", err)
	}
	return f, nil
}

func isSocket(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&os.ModeSocket != 0
}
