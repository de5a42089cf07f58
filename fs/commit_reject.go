package fs

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/safefs/safefs/internal/backing"
	"github.com/safefs/safefs/internal/limits"
	"github.com/safefs/safefs/internal/staging"
	"github.com/safefs/safefs/journal"
)

// Bytes of commits that could not be made are kept in rejected/ for the
// operator, but a flood of failures (by one user above all) must not fill
// the disk: rejected/ is bounded per writing uid and in all, and beyond
// that a failed commit's bytes are dropped (counted, logged).

// Defaults of Options.RejectedMax and RejectedUserMax.
const (
	DefaultRejectedMax     = 1 << 30
	DefaultRejectedUserMax = 256 << 20
	minKeptCost            = 4096 // an empty file still costs an inode
)

func keptName(uid uint32, stage string) string { return fmt.Sprintf("u%d-%s", uid, stage) }

// keptUID reads the writer's uid back from a kept file's name.
func keptUID(nm string) (uint32, bool) {
	rest, ok := strings.CutPrefix(nm, "u")
	if !ok {
		return 0, false
	}
	id, _, ok := strings.Cut(rest, "-")
	n, err := strconv.ParseUint(id, 10, 32)
	return uint32(n), ok && err == nil
}

func keptCost(st *unix.Stat_t) int64 { return max(st.Blocks*512, minKeptCost) }

// reject keeps the pending bytes of a commit that could not be made in
// rejected/ (within its bounds, see keep), and maps the reason to the
// documented errno. A commit that failed after its rename has nothing
// left to keep. One line is logged, at most a few per interval.
func (h *handle) reject(why error) error {
	r := h.n.r
	if !h.p.holds() {
		// Failed after its rename: the new version is in place, but
		// its directory's fsync failed: it may not survive a crash.
		r.log.Error("commit made but not durable", zap.String("path", logPath(h.n.path())), zap.Error(why))
		return lockErrno(why)
	}
	r.count.rejected.Add(1)
	kept := h.keep()
	h.obsRejected(why, kept)
	if ok, skipped := r.rejectLog.Allow(); ok {
		r.log.Warn("commit rejected, previous version kept", zap.String("path", logPath(h.n.path())), zap.Error(why),
			zap.String("kept_in", keptWhere(kept)), zap.Uint32("uid", h.uid), zap.Int("not_logged_before", skipped))
	}
	return lockErrno(why)
}

func keptWhere(nm string) string {
	if nm == "" {
		return "(dropped: rejected/ is full)"
	}
	return journal.RejectedDir + "/" + nm
}

// keep moves the pending version of a failed commit to rejected/ if the
// bounds allow; else it is dropped. It returns where it was kept ("" if
// dropped).
func (h *handle) keep() string {
	r := h.n.r
	if err := h.spill(); err != nil {
		r.count.dropped.Add(1)
		h.p.discard(h.n.r)
		return ""
	}
	st, err := backing.Fstat(int(h.p.stage.Fd()))
	if err != nil || !r.kept.Take(h.uid, keptCost(&st)) {
		r.count.dropped.Add(1)
		h.p.discard(h.n.r)
		return ""
	}
	nm := keptName(h.uid, cmp.Or(h.p.stageNm, staging.TempName()))
	if err := h.moveToRejected(nm); err != nil {
		r.log.Error("could not keep rejected bytes", zap.String("path", logPath(h.n.path())), zap.Error(err))
		r.kept.Take(h.uid, -keptCost(&st))
		r.count.dropped.Add(1)
		h.p.discard(h.n.r)
		return ""
	}
	r.kept.Kept()
	h.p.stage.Close()
	h.p.taken()
	return nm
}

// moveToRejected gives the pending version the name nm in rejected/.
// A nameless one (a pending append) is linked there from its descriptor,
// or copied where the daemon may not link descriptors.
func (h *handle) moveToRejected(nm string) error {
	r := h.n.r
	if h.p.stageNm != "" {
		return backing.RenameAt(r.stagingfd, h.p.stageNm, r.rejectedfd, nm, unix.RENAME_NOREPLACE)
	}
	if unix.Linkat(int(h.p.stage.Fd()), "", r.rejectedfd, nm, unix.AT_EMPTY_PATH) == nil {
		return nil
	}
	named, tmp, err := staging.NewTemp(r.stagingfd)
	if err != nil {
		return err
	}
	if err := staging.CopyData(named, h.p.stage); err != nil {
		r.dropTemp(r.stagingfd, named, tmp)
		return err
	}
	h.p.stage.Close()
	h.p.stage, h.p.stageNm = named, tmp
	return backing.RenameAt(r.stagingfd, tmp, r.rejectedfd, nm, unix.RENAME_NOREPLACE)
}

// loadKept counts what rejected/ holds at mount, and tells the operator:
// safefs never deletes it, the operator decides what to do with it.
func (r *root) loadKept() {
	all, perUID := r.opts.RejectedMax, r.opts.RejectedUserMax
	if all <= 0 {
		all = DefaultRejectedMax
	}
	if perUID <= 0 {
		perUID = DefaultRejectedUserMax
	}
	r.kept = limits.NewKept(all, perUID)
	names, err := backing.ReadDirNames(r.rejectedfd)
	if err != nil || len(names) == 0 {
		return
	}
	var bytes int64
	for _, nm := range names {
		st, err := backing.StatAt(r.rejectedfd, nm)
		if err != nil {
			continue
		}
		uid, ok := keptUID(nm)
		if !ok {
			uid = ^uint32(0) // unknown writer: counts in all only
		}
		r.kept.Found(uid, keptCost(&st))
		bytes += st.Size
	}
	r.log.Warn("rejected commits are kept for the operator; remove them when dealt with",
		zap.String("dir", r.internalPath+"/"+journal.RejectedDir), zap.Int("files", len(names)), zap.Int64("bytes", bytes))
}
