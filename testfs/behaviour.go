package testfs

// The behaviour suite: what legacy programs expect of a POSIX file
// system, as small named cases that each get a fresh directory. Every
// case in BehaviourCases passes on a plain local directory and must pass
// through safefs too; running it on both proves the suite. SafefsCases
// check what safefs does on purpose differently (snapshot reads, appends
// placed at close, the hidden internal directory): mount only.
//
// With the in-process daemon of testfs.New, a case must not start a
// process while the test itself holds a file open with unsaved writes:
// that hangs (see ForkExecWithOpenWriter). Run such work in a child.

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/safefs/safefs/fs"
	"github.com/safefs/safefs/journal"
)

// Case is one behaviour check, run in an empty directory.
type Case struct {
	Name string
	Run  func(t *testing.T, dir string)
}

// RunCases runs each case as a subtest in a directory made by newDir.
func RunCases(t *testing.T, cases []Case, newDir func(t *testing.T) string) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.Name] {
			t.Fatalf("two cases named %q", c.Name)
		}
		seen[c.Name] = true
		t.Run(c.Name, func(t *testing.T) { c.Run(t, newDir(t)) })
	}
}

// PlainDir is an empty local directory that other users can reach.
func PlainDir(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{root, filepath.Dir(root)} {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	return root
}

// MountDir is the top of a fresh safefs mount. Before the unmount it
// checks that no staging or undo file was left behind.
func MountDir(t *testing.T) string {
	t.Helper()
	m := New(t)
	t.Cleanup(func() { NoPendingStaging(t, m) })
	return m.Dir
}

// NoPendingStaging fails when staging/ or undo/ still hold files once
// every handle is released (releases reach the daemon asynchronously
// after close, so it waits a little).
func NoPendingStaging(t testing.TB, m *Mount) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(3 * time.Second); ; {
		left = left[:0]
		for _, d := range []string{journal.StagingDir, journal.UndoDir} {
			ents, err := os.ReadDir(m.BackingPath(fs.InternalDir, d))
			if err != nil {
				t.Errorf("read %s: %v", d, err)
				return
			}
			for _, e := range ents {
				left = append(left, d+"/"+e.Name())
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("left in %s after every file was closed: %v", fs.InternalDir, left)
	}
}

// BehaviourCases pass on any local POSIX file system (run as root).
var BehaviourCases = []Case{
	{"CreateWriteReadClose", caseCreateWriteReadClose},
	{"OpenTrunc", caseOpenTrunc},
	{"AppendSequentialFds", caseAppendSequentialFds},
	{"AppendTwoOpenFds", caseAppendTwoOpenFds},
	{"CreateExclExisting", caseCreateExclExisting},
	{"MkdirRmdir", caseMkdirRmdir},
	{"Unlink", caseUnlink},
	{"RenamePlain", caseRenamePlain},
	{"RenameOverExisting", caseRenameOverExisting},
	{"RenameNoReplace", caseRenameNoReplace},
	{"RenameExchange", caseRenameExchange},
	{"RenameDirWithFiles", caseRenameDirWithFiles},
	{"RenameWhileWriterOpen", caseRenameWhileWriterOpen},
	{"RenameParentWhileWriterOpen", caseRenameParentWhileWriterOpen},
	{"RenameOverOpenWriter", caseRenameOverOpenWriter},
	{"HardLink", caseHardLink},
	{"SymlinkReadlinkLstat", caseSymlink},
	{"Chmod", caseChmod},
	{"Chown", caseChown},
	{"MetadataSurvivesRewrite", caseMetadataSurvivesRewrite},
	{"InodeStableAcrossRewrite", caseInodeStableAcrossRewrite},
	{"ChtimesExact", caseChtimes},
	{"FutimensBeforeClose", caseFutimensBeforeClose},
	{"CpPreserve", caseCpPreserve},
	{"TruncatePath", caseTruncatePath},
	{"Ftruncate", caseFtruncate},
	{"Fallocate", caseFallocate},
	{"LseekEndData", caseLseek},
	{"Fsync", caseFsync},
	{"FsyncDir", caseFsyncDir},
	{"Xattrs", caseXattrs},
	{"Statfs", caseStatfs},
	{"ReaddirExact", caseReaddirExact},
	{"Access", caseAccess},
	{"AccessOtherUser", caseAccessOtherUser},
	{"ModeZero", caseModeZero},
	{"CreateAsOtherUser", caseCreateAsOtherUser},
	{"FlockExclusion", caseFlock},
	{"FcntlLockTwoProcesses", caseFcntlLockTwoProcesses},
	{"ReadYourWrites", caseReadYourWrites},
	{"ReadBeforeWriteSeesCurrent", caseReadBeforeWrite},
	{"ReaderOpenedBeforeWriterClose", caseReaderOpenedBeforeWriterClose},
	{"ReadWhileWriting", caseReadWhileWriting},
	{"StatSizeAfterClose", caseStatSizeAfterClose},
	{"HoleAtLargeOffset", caseHole},
	{"NameMax", caseNameMax},
	{"OddNames", caseOddNames},
	{"Mkfifo", caseMkfifo},
	{"UnlinkOpenFile", caseUnlinkOpenFile},
	{"UnlinkOpenFileFsync", caseUnlinkOpenFileFsync},
	{"UnlinkOpenReader", caseUnlinkOpenReader},
	{"UnlinkRecreateWhileWriterOpen", caseUnlinkRecreateWhileWriterOpen},
	{"OpenDuringAtomicReplace", caseOpenDuringAtomicReplace},
	{"ForkExecWithOpenWriter", caseForkExecWithOpenWriter},
	{"StatMatchesReadWhileWriterOpen", caseStatMatchesRead},
}

// SafefsCases check what safefs does on purpose differently from a
// plain file system. Run them against the top of a mount only.
var SafefsCases = []Case{
	{"SnapshotReaderKeepsOldVersion", caseSnapshotReader},
	{"SnapshotReaderFstat", caseSnapshotReaderFstat},
	{"UncommittedWritesInvisible", caseUncommittedInvisible},
	{"AppendsPlacedAtClose", caseAppendsAtClose},
	{"InternalDirHidden", caseInternalDirHidden},
}
