//go:build race

package fs

// maxWrite under the race detector (tests only): go-fuse reads each
// request into a buffer of maxWrite from a sync.Pool, and under -race
// sync.Pool drops one Put in four on purpose, so a fresh zeroed buffer
// is made every few requests. At 1 MiB that was a fifth of the CPU of
// the race-built test daemons (TestDBMConcurrent's profile); 128 KiB
// (go-fuse's default) keeps the same code paths, with large writes
// split into more requests.
const maxWrite = 128 << 10
