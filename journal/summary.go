package journal

// Summary says what a recovery did.
type Summary struct {
	Records    int // valid commit records read (end lines not counted)
	Completed  int // cut-off commits found already complete (replayed forward)
	RolledBack int // cut-off commits undone
	Orphans    int // staging or undo files removed
	Refused    int // lines or commits not acted on: bad checksum, unsafe or changed target, bad undo
	// Torn: a last line cut short, the normal trace of a crash during
	// a journal write (its commit had not begun); not refused.
	Torn int
}

// Add counts o in s: recoveries of several journals (cluster nodes).
func (s *Summary) Add(o Summary) {
	s.Records += o.Records
	s.Completed += o.Completed
	s.RolledBack += o.RolledBack
	s.Orphans += o.Orphans
	s.Refused += o.Refused
	s.Torn += o.Torn
}
