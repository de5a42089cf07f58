//go:build !race

package fs

// maxWrite is the largest WRITE request the kernel sends: 1 MiB, so a
// large write costs few round trips.
const maxWrite = 1 << 20
