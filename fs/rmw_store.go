package fs

import (
	"errors"
	"io"
	"os"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/rmw"
)

// learnedName is the file in the internal directory where rmw=auto
// keeps what it learned, across remounts. It is checked at mount like
// the journal (internalFiles) and written whole by rename.
const learnedName = "rmw-learned"

// loadLearned reads the learned pairs and logs each. A file that does
// not parse is logged and set aside: learning starts again.
func (r *root) loadLearned() *rmw.Learned {
	dir := int(r.internal.Fd())
	fd, err := backing.OpenAt(dir, learnedName, unix.O_RDONLY, 0)
	if errors.Is(err, unix.ENOENT) {
		return rmw.NewLearned()
	}
	if err != nil {
		r.log.Warn("rmw: learned file unreadable: learning starts again", zap.Error(err))
		return rmw.NewLearned()
	}
	f := os.NewFile(uintptr(fd), learnedName)
	defer f.Close()
	l, err := rmw.Decode(io.LimitReader(f, rmw.MaxBytes))
	if err != nil {
		r.log.Warn("rmw: learned file does not parse: learning starts again", zap.Error(err))
		return l
	}
	for _, p := range l.List() {
		r.log.Info("rmw: learned", zap.String("path", logPath(p.Path)), zap.String("program", p.Cmd), zap.Uint32("uid", p.UID))
	}
	return l
}

// saveLearned writes the learned pairs: a temporary file, fsync'd, then
// renamed over the old one, so a crash leaves one whole version.
func (r *root) saveLearned(x *rmwState) {
	x.saveMu.Lock()
	defer x.saveMu.Unlock()
	if err := backing.WriteWhole(int(r.internal.Fd()), learnedName, x.learned.Encode()); err != nil {
		r.log.Warn("rmw: could not save what was learned (kept until unmount)", zap.Error(err))
	}
}
