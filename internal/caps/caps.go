// Package caps changes the calling thread's effective capabilities:
// the kernel acts with the credentials of the thread that registers a
// FUSE passthrough backing file, and a user's writes through it must
// not use root's reserved blocks (CAP_SYS_RESOURCE). The caller locks
// its goroutine to the thread (runtime.LockOSThread) around the change.
package caps

import "golang.org/x/sys/unix"

// DropEffective takes capability c out of the calling thread's
// effective set (capset acts on one thread); restore puts the set back.
func DropEffective(c uint) (restore func() error, err error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, err
	}
	old := data
	data[c/32].Effective &^= 1 << (c % 32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return nil, err
	}
	return func() error { return unix.Capset(&hdr, &old[0]) }, nil
}
