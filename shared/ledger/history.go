package ledger

const (
	// MaxInlineHistory is the most transition records an instance item
	// holds before its writer spills the oldest.
	MaxInlineHistory = 8
)

// historyMatches reports whether inst's inline records end where its
// snapshot is. The write of a transition replaces the inline list with
// the held one plus the new record, so a copy whose snapshot was moved on
// without its history must never be written from.
func historyMatches(inst Instance) bool {
	n := len(inst.History)
	return n == 0 || inst.History[n-1].Seq == inst.Snapshot.Seq
}
