package main

import (
	"net"
	"os"

	"go.uber.org/zap"
)

// notifier speaks systemd's sd_notify protocol: datagrams of
// "KEY=VALUE\n" lines to the unix socket named in $NOTIFY_SOCKET (a name
// starting with @ is in the abstract namespace, which Go's net package
// maps itself). Without the variable it does nothing.
type notifier struct {
	addr string
	log  *zap.Logger
}

// notifierFromEnv takes $NOTIFY_SOCKET out of the environment, so that
// processes the daemon starts (the kill-check self-test) do not inherit it.
func notifierFromEnv(log *zap.Logger) *notifier {
	addr := os.Getenv("NOTIFY_SOCKET")
	os.Unsetenv("NOTIFY_SOCKET")
	return &notifier{addr: addr, log: log}
}

// send delivers one state message. A failure is logged, not returned:
// the mount itself is fine, only the supervisor is not told.
func (n *notifier) send(state string) {
	if n.addr == "" {
		return
	}
	if err := sdNotify(n.addr, state); err != nil {
		n.log.Warn("sd_notify failed", zap.String("socket", n.addr), zap.String("state", state), zap.Error(err))
	}
}

func sdNotify(addr, state string) error {
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
