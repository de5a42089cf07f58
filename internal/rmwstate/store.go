package rmwstate

import (
	"errors"
	"io"
	"os"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/loglimit"
	"github.com/safefs/safefs/rmw"
)

// LearnedName is the file in the internal directory where rmw=auto
// keeps what it learned, across remounts. fs checks it at mount like
// the journal; it is written whole by rename.
const LearnedName = "rmw-learned"

// Load reads the learned pairs from directory dir and logs each. A file
// that does not parse is logged and set aside: learning starts again.
func Load(dir int, log *zap.Logger) *rmw.Learned {
	fd, err := backing.OpenAt(dir, LearnedName, unix.O_RDONLY, 0)
	if errors.Is(err, unix.ENOENT) {
		return rmw.NewLearned()
	}
	if err != nil {
		log.Warn("rmw: learned file unreadable: learning starts again", zap.Error(err))
		return rmw.NewLearned()
	}
	f := os.NewFile(uintptr(fd), LearnedName)
	defer f.Close()
	l, err := rmw.Decode(io.LimitReader(f, rmw.MaxBytes))
	if err != nil {
		log.Warn("rmw: learned file does not parse: learning starts again", zap.Error(err))
		return l
	}
	for _, p := range l.List() {
		log.Info("rmw: learned", zap.String("path", loglimit.Path(p.Path)), zap.String("program", p.Cmd), zap.Uint32("uid", p.UID))
	}
	return l
}

// save writes the learned pairs: a temporary file, fsync'd, then
// renamed over the old one, so a crash leaves one whole version.
func (x *State) save() {
	x.saveMu.Lock()
	defer x.saveMu.Unlock()
	if err := backing.WriteWhole(x.cfg.Dir, LearnedName, x.learned.Encode()); err != nil {
		x.cfg.Log.Warn("rmw: could not save what was learned (kept until unmount)", zap.Error(err))
	}
}
