package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// listenNotify is a fake systemd: a unixgram socket whose datagrams
// arrive on the returned channel.
func listenNotify(t *testing.T, addr string) <-chan string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	msgs := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return msgs
}

func nextNotify(t *testing.T, msgs <-chan string) string {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(mountLimit):
		t.Fatalf("no sd_notify message after %v", mountLimit)
		return ""
	}
}

// TestSystemdNotify: the real daemon sends READY=1 once the mount is
// there and STOPPING=1 when it unmounts, to a path or abstract socket.
func TestSystemdNotify(t *testing.T) {
	requireFuse(t)
	addrs := map[string]func(t *testing.T) string{
		"path":     func(t *testing.T) string { return filepath.Join(t.TempDir(), "notify") },
		"abstract": func(*testing.T) string { return fmt.Sprintf("@safefs-test-notify-%d", os.Getpid()) },
	}
	stops := map[string]func(t *testing.T, p *mountProc, mnt string){
		"SIGTERM": func(t *testing.T, p *mountProc, _ string) { require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM)) },
		"umount":  func(t *testing.T, _ *mountProc, mnt string) { umountFromOutside(t, mnt) },
	}
	for aname, addrOf := range addrs {
		for sname, stop := range stops {
			t.Run(aname+"/"+sname, func(t *testing.T) {
				addr := addrOf(t)
				msgs := listenNotify(t, addr)
				backing, mnt := tempDir(t), tempDir(t)
				cmd := exec.Command(safefsBin, "mount", backing, mnt)
				cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+addr)
				p := launchMount(t, cmd, mnt)

				ready := nextNotify(t, msgs)
				assert.Contains(t, ready, "READY=1\n")
				_, ok := mountType(t, mnt)
				assert.True(t, ok, "READY=1 sent before %s was mounted", mnt)

				stop(t, p, mnt)
				assert.Contains(t, nextNotify(t, msgs), "STOPPING=1\n")
				assert.Equal(t, exitOK, p.exitCode(t), "stderr:\n%s", p.out)
				assert.NotContains(t, p.out.String(), "sd_notify failed")
			})
		}
	}
}

// TestSystemdNotifyUnreachable: a NOTIFY_SOCKET nobody listens on is
// logged and the mount goes on.
func TestSystemdNotifyUnreachable(t *testing.T) {
	requireFuse(t)
	backing, mnt := tempDir(t), tempDir(t)
	cmd := exec.Command(safefsBin, "mount", backing, mnt)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+filepath.Join(t.TempDir(), "nobody"))
	p := launchMount(t, cmd, mnt)
	p.waitMounted(t)
	waitOutput(t, p.proc, "sd_notify failed")
	stopMount(t, p)
}
