package main

// What a mount needs beyond /dev/fuse, and the errors of the programs
// go-fuse runs (fusermount3), said in one line with the way out.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/safefs/safefs/fs"
)

// findFusermount returns the helper that go-fuse runs to mount and unmount
// for a user other than root, looked up as go-fuse does: fusermount3, else
// fuse 2's fusermount, each in PATH, then in /bin. "" if none is there.
func findFusermount(look func(string) (string, error)) string {
	for _, name := range []string{"fusermount3", "fusermount"} {
		for _, p := range []string{name, path.Join("/bin", name)} {
			if found, err := look(p); err == nil {
				return found
			}
		}
	}
	return ""
}

// checkFusermount refuses a mount by a user other than root on a machine
// without fusermount3: go-fuse would fail naming fuse 2's /bin/fusermount.
func checkFusermount(euid int, look func(string) (string, error)) error {
	if euid == 0 || findFusermount(look) != "" {
		return nil
	}
	return failf(exitNoFuse, "mounting as a user other than root needs fusermount3, which is not installed: "+
		"install the fuse3 package (apt-get install fuse3), or run safefs as root")
}

// fuseConf is fusermount3's configuration: a user other than root may ask
// for allow_other only where it holds a user_allow_other line.
const fuseConf = "/etc/fuse.conf"

// checkUserAllowOther refuses allow_other for a user other than root
// where fusermount3 would refuse it: said here, the reason is not lost in
// the fstab form, whose daemon's stderr goes nowhere without log_file.
func checkUserAllowOther(euid int, allowOther bool, conf string) error {
	if euid == 0 || !allowOther {
		return nil
	}
	data, err := os.ReadFile(conf)
	if err == nil && fuseConfAllowsOther(string(data)) {
		return nil
	}
	return failf(exitMount, "allow_other as a user other than root needs a user_allow_other line in %s, "+
		"which fusermount3 reads: add it, or run safefs as root", conf)
}

// fuseConfAllowsOther reports whether an /etc/fuse.conf text holds
// user_allow_other on a line of its own, as fusermount3 parses it.
func fuseConfAllowsOther(text string) bool {
	for line := range strings.Lines(text) {
		line, _, _ = strings.Cut(line, "#")
		if strings.TrimSpace(line) == "user_allow_other" {
			return true
		}
	}
	return false
}

// fusermountExit is go-fuse's error for a fusermount that failed; the
// number is a wait status.
var fusermountExit = regexp.MustCompile(`fusermount exited with code (\d+)`)

// mountFailure turns go-fuse's mount errors into one line that names
// fusermount3 and the way out.
func mountFailure(err error) string {
	msg := oneLine(err.Error())
	if m := fusermountExit.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("fusermount3 refused the mount (%s); its own message, just before this one "+
			"(in the fstab form: in log_file), says why. As a user other than root, MOUNTPOINT must be that user's "+
			"and allow_other needs user_allow_other in /etc/fuse.conf; or run safefs as root", waitStatus(m[1]))
	}
	if strings.Contains(msg, "fusermount") && isNotFound(err) {
		return "mounting as a user other than root needs fusermount3, which is not installed: " +
			"install the fuse3 package (apt-get install fuse3), or run safefs as root"
	}
	return msg
}

// unmountFailure says in one line why an unmount failed and what to do.
// go-fuse's text is fusermount3's stderr and "(code exit status N)", with
// newlines in between; as root a failed umount2 falls back to fusermount3,
// so without fuse3 the kernel's reason is lost and only "not found" is left.
func unmountFailure(err error, mnt string) string {
	msg := oneLine(err.Error())
	msg = strings.ReplaceAll(msg, "(code exit status", "(exit status")
	busy := fmt.Sprintf("%s is busy: a process has its working directory or a file open in it "+
		"(fuser -vm %s lists them)", mnt, mnt)
	switch {
	case strings.Contains(strings.ToLower(msg), "busy"):
		return busy + ": " + msg
	case strings.Contains(msg, "fusermount") && isNotFound(err):
		return "the kernel refused the unmount, most likely because " + busy
	}
	return msg
}

// isNotFound reports a program that could not be found or run.
func isNotFound(err error) bool {
	return errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission)
}

// oneLine joins the lines of a message, so that no log line or status
// holds a newline.
func oneLine(s string) string {
	var parts []string
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, " ")
}

// waitStatus says what a wait status means: "exit status 1".
func waitStatus(s string) string {
	n, err := strconv.Atoi(s)
	if err != nil {
		return "status " + s
	}
	ws := syscall.WaitStatus(n)
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "killed by " + ws.Signal().String()
	}
	return "status " + s
}

// allowOtherWarning is said once at a mount without allow_other over a
// BACKING whose files belong to another user than the mounter (www-data's
// CGI data). The kernel refuses every other user such a mount, before any
// request reaches the daemon: safefs cannot see those refusals, so it says
// so up front. It looks at BACKING and the first entries of its top.
func allowOtherWarning(backing string, euid int, allowOther bool) string {
	if allowOther {
		return ""
	}
	uid, ok := otherOwner(backing, uint32(euid))
	if !ok {
		return ""
	}
	who := "uid " + strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		who += " (" + u.Username + ")"
	}
	return fmt.Sprintf("files in %s belong to %s, but without -o allow_other only uid %d may use the mount: "+
		"the kernel refuses every other user with EACCES (Permission denied) before a request reaches safefs, "+
		"so nothing of it is logged; mount with -o allow_other", backing, who, euid)
}

// otherOwner returns the owner of BACKING or of one of its first 256
// entries that is not uid.
func otherOwner(backing string, uid uint32) (uint32, bool) {
	owner := func(p string) (uint32, bool) {
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil || st.Uid == uid {
			return 0, false
		}
		return st.Uid, true
	}
	if o, ok := owner(backing); ok {
		return o, true
	}
	d, err := os.Open(backing)
	if err != nil {
		return 0, false
	}
	defer d.Close()
	names, _ := d.Readdirnames(256)
	for _, n := range names {
		if n == fs.InternalDir {
			continue
		}
		if o, ok := owner(path.Join(backing, n)); ok {
			return o, true
		}
	}
	return 0, false
}
