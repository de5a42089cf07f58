package journal

// Summary says what a recovery did.
type Summary struct {
	Records    int // journal records read
	Completed  int // cut-off commits found already complete (replayed forward)
	RolledBack int // cut-off commits undone
	Orphans    int // staging or undo files removed
	Refused    int // records ignored: torn, bad checksum, unsafe target
}
