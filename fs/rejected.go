package fs

import (
	"os"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/journal"
)

// reportRejected tells the operator at mount about bytes kept in
// rejected/ by earlier commits that could not be made: safefs never
// deletes them, the operator decides what to do with them.
func (r *root) reportRejected() {
	fd, err := unix.Openat(r.rejectedfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(fd), journal.RejectedDir)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil || len(names) == 0 {
		return
	}
	var bytes int64
	for _, nm := range names {
		if st, err := statAt(r.rejectedfd, nm); err == nil {
			bytes += st.Size
		}
	}
	r.log.Warn("rejected commits are kept for the operator; remove them when dealt with",
		zap.String("dir", r.internalPath+"/"+journal.RejectedDir), zap.Int("files", len(names)), zap.Int64("bytes", bytes))
}
